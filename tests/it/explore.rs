//! The explorer finds every planted bug from seed 0 within 10,000 generated runs, and shrinks each
//! failure to at most 10 steps into a scenario that replays it with no fault plan.

use agentsim::explore::generate::GenConfig;
use agentsim::explore::planted::caught_by;
use agentsim::explore::shrink::{reproduces, shrink};
use agentsim::explore::{run_one, Settings, Source};
use agentsim::runtime::planted::PlantedBug;
use agentsim::scenario::{self, write, RunOptions};

const MAX_RUNS: u64 = 10_000;
const MAX_SHRUNK_STEPS: usize = 10;

#[test]
fn every_planted_bug_is_found_from_seed_zero_and_shrunk_to_ten_steps_or_fewer() {
    let source = Source::Generated(GenConfig::default());
    let mut table = Vec::new();
    for bug in PlantedBug::ALL {
        let settings = Settings {
            faults: true,
            without: Default::default(),
            planted: Some(bug),
            record: false,
            interruptions: None,
        };
        let found = (0..MAX_RUNS).find_map(|seed| {
            let (report, replay) = run_one(&source.scenario(seed), seed, settings);
            let v = report.violation()?;
            (v.invariant == caught_by(bug))
                .then(|| (seed, replay.expect("a violation has a replay")))
        });
        let (seed, replay) = found.unwrap_or_else(|| panic!("{bug} not found in {MAX_RUNS} runs"));
        // The materialized scenario replays the failure without faults.
        assert!(
            reproduces(&replay, caught_by(bug)),
            "{bug}: the replay does not reproduce"
        );
        let shrunk = shrink(replay, caught_by(bug), 3_000).scenario;
        assert!(
            shrunk.steps.len() <= MAX_SHRUNK_STEPS,
            "{bug}: shrunk to {} steps",
            shrunk.steps.len()
        );
        // Written as a file and loaded back, it still breaks the same invariant.
        let yaml = write::to_yaml(&shrunk);
        let loaded = scenario::parse(&yaml, std::path::Path::new("regression.yaml")).unwrap();
        let outcome = scenario::run(&loaded, RunOptions::default());
        assert_eq!(
            outcome.reproduced.as_deref(),
            Some(caught_by(bug)),
            "{bug}\n{yaml}"
        );
        table.push(format!(
            "{bug}: found at seed {seed} (run {}), shrunk to {} steps",
            seed + 1,
            shrunk.steps.len()
        ));
    }
    println!("{}", table.join("\n"));
}

#[test]
fn without_a_planted_bug_a_sweep_breaks_nothing() {
    // Every swarm configuration in turn, so that deep stacks, failures, limits, cancels, batch
    // children, questions and odd tools are all in the sweep. `AGENTSIM_SWEEP_SEEDS` raises the
    // count: the mutation soak (README) uses this test as "exploration alone".
    let seeds: u64 = std::env::var("AGENTSIM_SWEEP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let configurations = agentsim::explore::steer::configurations();
    let mut steps = 0;
    for seed in 0..seeds {
        let knobs = configurations[seed as usize % configurations.len()].1;
        let source = Source::Generated(GenConfig {
            knobs,
            ..GenConfig::default()
        });
        // One seed in three with the watchdog and interruptions modelled (the fixed preset).
        let interruptions =
            (seed % 3 == 2).then(agentsim::agents::watchdog::InterruptionConfig::fixed);
        steps += run_clean(&source, seed, interruptions).1;
    }
    // The runs did their work: a sweep whose runs stop at once (a runtime that says it is idle
    // when it is not, say) breaks nothing and proves nothing. Generated runs take dozens of
    // simulator steps each.
    assert!(
        steps >= seeds * 20,
        "{steps} simulator steps in {seeds} runs: the runs stopped early"
    );
}

/// Runs `seed` of `source` with faults and asserts that no invariant broke; returns the faults
/// the run injected.
fn run_clean_with_faults(source: &Source, seed: u64) -> u64 {
    run_clean(source, seed, None).0
}

/// [`run_clean_with_faults`], with seed 004's interruption model around `interruptions` if given;
/// the faults injected and the simulator steps taken.
fn run_clean(
    source: &Source,
    seed: u64,
    interruptions: Option<agentsim::agents::watchdog::InterruptionConfig>,
) -> (u64, u64) {
    let settings = Settings {
        faults: true,
        interruptions,
        ..Settings::default()
    };
    let (report, _) = run_one(&source.scenario(seed), seed, settings);
    assert!(
        report.violation().is_none(),
        "seed {seed}: {:?}",
        report.error
    );
    // Only the clean limits may end a run early: a restart that cannot restore, or persistence
    // that fails, is a failure too.
    assert!(
        !matches!(
            report.error,
            Some(agentsim::sim::RunError::Restore(_) | agentsim::sim::RunError::Persist(_))
        ),
        "seed {seed}: {:?}",
        report.error
    );
    (report.faults, report.sim_steps)
}

#[test]
fn exploring_a_scenario_file_varies_faults_around_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/examples/stack-diagram.yaml");
    let base = scenario::load(&path).unwrap();
    let source = Source::Scenario(Box::new(base));
    let mut faults = 0;
    for seed in 0..200 {
        faults += run_clean_with_faults(&source, seed);
    }
    assert!(
        faults > 50,
        "the swarm plans should inject faults: {faults}"
    );
}

#[test]
fn exploring_under_the_legacy_interruption_preset_finds_the_seed_004_leak_and_fixed_does_not() {
    use agentsim::agents::watchdog::InterruptionConfig;
    let source = Source::Generated(GenConfig::default());
    let legacy = Settings {
        faults: true,
        without: Default::default(),
        planted: None,
        record: false,
        interruptions: Some(InterruptionConfig::legacy()),
    };
    let found = (0..2_000u64).find_map(|seed| {
        let (report, replay) = run_one(&source.scenario(seed), seed, legacy);
        let v = report.violation()?;
        (v.invariant == "no-display-leak").then(|| (seed, replay.expect("a replay")))
    });
    let (seed, replay) = found.expect("the legacy preset leaks the sentinel");
    println!(
        "legacy: no-display-leak found at seed {seed} (run {})",
        seed + 1
    );
    let shrunk = shrink(replay, "no-display-leak", 3_000).scenario;
    assert!(reproduces(&shrunk, "no-display-leak"));
    println!("legacy: shrunk to {} steps", shrunk.steps.len());
    let fixed = Settings {
        interruptions: Some(InterruptionConfig::fixed()),
        ..legacy
    };
    for seed in 0..1_000u64 {
        let (report, _) = run_one(&source.scenario(seed), seed, fixed);
        assert!(
            report.violation().is_none(),
            "fixed, seed {seed}: {:?}",
            report.error
        );
    }
}

/// A long scenario explored under a fault plan that restarts often is restarted at most
/// `MAX_RESTARTS` times: each restart replays the whole journal, so uncapped restarts made one
/// exploration run cost the square of the scenario's length.
#[test]
fn restarts_per_run_are_capped_so_exploration_stays_linear() {
    use agentsim::drive::faults::{FaultRates, MAX_RESTARTS};
    use agentsim::sim::{Entry, Note};
    let mut yaml = String::from("name: long\nllm:\n  main:\n");
    for i in 0..300 {
        yaml.push_str(&format!("    - \"reply {i}\"\n"));
    }
    yaml.push_str("steps:\n");
    for i in 0..300 {
        yaml.push_str(&format!("  - user: \"message {i}\"\n"));
    }
    let s = scenario::parse(&yaml, std::path::Path::new("long.yaml")).unwrap();
    let seed = (0..1000u64)
        .find(|&seed| FaultRates::swarm(seed).restart > 0.2)
        .expect("some seed restarts often");
    let (report, _) = run_one(
        &s,
        seed,
        Settings {
            faults: true,
            without: Default::default(),
            planted: None,
            record: true,
            interruptions: None,
        },
    );
    let restarts = report
        .records
        .iter()
        .filter(|r| matches!(r.entry, Entry::Sim(Note::Restart { .. })))
        .count();
    assert_eq!(restarts, MAX_RESTARTS as usize, "seed {seed}");
}

/// Shrinking removes chunks before single entries: a failure buried in thousands of steps it does
/// not need shrinks in a few dozen candidate runs (one at a time, it took thousands and minutes).
#[test]
fn a_long_failing_scenario_shrinks_in_few_candidates() {
    use agentsim::scenario::{Step, StepKind};
    let source = Source::Generated(GenConfig::default());
    let bug = PlantedBug::IterationOffByOne;
    let settings = Settings {
        faults: true,
        without: Default::default(),
        planted: Some(bug),
        record: false,
        interruptions: None,
    };
    let (seed, replay) = (0..MAX_RUNS)
        .find_map(|seed| {
            let (report, replay) = run_one(&source.scenario(seed), seed, settings);
            report.violation()?;
            replay.map(|r| (seed, r))
        })
        .expect("found");
    let shrunk = shrink(replay, caught_by(bug), 3_000).scenario;
    let mut padded = shrunk.clone();
    let filler = (0..3_000).map(|_| Step {
        line: 0,
        column: 0,
        kind: StepKind::Advance(1),
    });
    padded.steps.splice(0..0, filler);
    assert!(reproduces(&padded, caught_by(bug)), "seed {seed}");
    let again = shrink(padded, caught_by(bug), 3_000);
    assert!(
        again.scenario.steps.len() <= shrunk.steps.len(),
        "{} steps",
        again.scenario.steps.len()
    );
    assert!(again.attempts <= 100, "{} candidate runs", again.attempts);
}

/// Issue 14 item 2: generated scripts fit their conversations. At most 10% of generated runs end
/// at an exhausted script, and some still do (running out stays exercised).
#[test]
fn generated_scripts_rarely_run_out() {
    let source = Source::Generated(GenConfig::default());
    let settings = Settings {
        faults: true,
        without: Default::default(),
        planted: None,
        record: false,
        interruptions: None,
    };
    let runs = 2_000;
    let exhausted = (0..runs)
        .filter(|&seed| {
            let (report, _) = run_one(&source.scenario(seed), seed, settings);
            matches!(
                report.error,
                Some(agentsim::sim::RunError::ScriptExhausted { .. })
            )
        })
        .count() as u64;
    assert!(
        exhausted * 10 <= runs,
        "{exhausted} of {runs} runs ran out of script"
    );
    assert!(
        exhausted > 0,
        "no run ran out of script: that path is no longer exercised"
    );
}
