//! `agentsim explore`: runs a scenario or generated scenarios under many seeds with faults, and
//! summarizes, shrinks and writes what broke.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::ValueEnum;

use agentsim::explore;
use agentsim::explore::generate::GenConfig;
use agentsim::observe::coverage::Coverage;
use agentsim::report;
use agentsim::scenario;

use super::shared::{write_new, Written};

#[derive(clap::Args)]
pub(crate) struct ExploreArgs {
    /// The scenario to explore around (or use --generated).
    #[arg(required_unless_present = "generated", conflicts_with = "generated")]
    file: Option<PathBuf>,
    /// Explore freshly generated scenarios, one per seed.
    #[arg(long)]
    generated: bool,
    /// Number of runs (seeds SEED, SEED+1, ...).
    #[arg(long, default_value_t = 1000)]
    runs: u64,
    /// First seed.
    #[arg(long, env = "AGENTSIM_SEED", default_value_t = 0)]
    seed: u64,
    /// Parallel workers, 1 to 256 (default: the machine's cores; 1 with --runtime).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Do not inject faults (vary only the seed).
    #[arg(long)]
    no_faults: bool,
    /// Leave out one kind of fault (repeatable): llm-error, llm-stall, llm-latency,
    /// tool-error, tool-latency, user-message, cancel, restart, restart-mid-turn, intervene.
    /// The other kinds keep the rates each seed draws. With --runtime, tool-latency also covers
    /// the hangs of tools with a `timeout`, and intervene is not injected.
    #[arg(long, value_name = "KIND", value_parser = parse_fault_kind, conflicts_with = "no_faults")]
    no_fault: Vec<agentsim::drive::faults::FaultKind>,
    /// Stop starting runs after this many seconds (runs in flight finish; what was found is
    /// summarized, shrunk and written).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    time: Option<f64>,
    /// Explore part I of N of the seeds (a CI matrix of N machines: disjoint ranges of the
    /// --runs seeds, whose summaries add up), e.g. --partition 2/4.
    #[arg(long, value_name = "I/N", value_parser = parse_partition)]
    partition: Option<(u64, u64)>,
    /// With --generated: draw every scenario from the default configuration instead of
    /// steering toward rarely reached behaviour.
    #[arg(long, requires = "generated")]
    no_steer: bool,
    /// With --generated: draw every scenario from this swarm configuration (default, deep,
    /// failing, limits, cancels, batch, questions, tree, workflow, sessions, odd-tools); replay commands name it.
    #[arg(
        long,
        value_name = "NAME",
        requires = "generated",
        conflicts_with = "no_steer"
    )]
    swarm: Option<String>,
    /// Print how many runs reached each coverage feature (the summary always names the rarest
    /// and those never reached).
    #[arg(long)]
    coverage: bool,
    /// Run the runtime with a planted bug, to see the harness find it: drop-cascade-result,
    /// double-delivery, iteration-off-by-one, route-below-top, skip-unresolved-after-child,
    /// main-complete-accepted, display-leak, cancel-leaves-frame, completion-order-results,
    /// empty-reply-recorded, restore-forgets-first-message (structural); child-error-as-success,
    /// main-limit-silent, tools-skipped-on-last-iteration, inbox-cleared-with-turn,
    /// tool-pass-uncounted, restore-resets-iterations, main-messages-unjournaled,
    /// answer-counts-an-iteration, tool-run-never-issued (semantic); wait-returns-early,
    /// wait-resumed-by-any-fork, delete-leaves-tool-uses, deleted-then-ended (the agent tree),
    /// batch-timeout-ignored (tool runs), batch-extracts-user-text (batch delegation).
    #[arg(long, value_name = "NAME")]
    bug: Option<agentsim::runtime::planted::PlantedBug>,
    /// Model seed 004's watchdog and interruptions around this preset, with timings and some
    /// knobs drawn per seed.
    #[arg(long, value_enum, value_name = "PRESET")]
    interruptions: Option<Preset>,
    /// Where to write shrunk failures.
    #[arg(long, default_value = "scenarios/regressions")]
    out: PathBuf,
    /// Report failures without shrinking or writing files.
    #[arg(long)]
    no_write: bool,
    /// Candidate runs the shrinker may try per failure.
    #[arg(long, default_value_t = 3000)]
    shrink_budget: usize,
    /// With --runtime: runs of the runtime the shrinker may make per finding.
    #[arg(long, value_name = "N", default_value_t = 60, requires = "runtime")]
    shrink_runs: usize,
    /// With --runtime: seconds the shrinker may take per finding (no run starts after).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = parse_seconds, requires = "runtime")]
    shrink_time: f64,
    /// With --runtime: start a new process for every run even when the runtime offers `reset`
    /// (by default one process per job is kept and reset between runs).
    #[arg(long, requires = "runtime")]
    no_reset: bool,
    /// With --runtime: run every seed a second time, with the same faults, and report a runtime
    /// whose model requests, sent texts or tool calls differ as the finding `determinism`.
    #[arg(long, requires = "runtime")]
    determinism: bool,
    /// With --determinism: known nondeterminism, a regular expression whose matches in any
    /// compared string (request body, sent text, tool input) are ignored (repeatable).
    #[arg(long, value_name = "PATTERN", requires = "determinism")]
    nondeterministic: Vec<String>,
    #[command(flatten)]
    runtime: super::runtime_args::RuntimeArgs,
}

impl ExploreArgs {
    /// Whether `--runtime` was given.
    pub(crate) fn runtime_given(&self) -> bool {
        self.runtime.runtime.is_some()
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Preset {
    /// Seed 004's runtime.
    Legacy,
    /// Its fix.
    Fixed,
}

fn parse_fault_kind(s: &str) -> Result<agentsim::drive::faults::FaultKind, String> {
    agentsim::drive::faults::FaultKind::parse(s).ok_or_else(|| {
        let known: Vec<&str> = agentsim::drive::faults::FaultKind::ALL
            .iter()
            .map(|k| k.name())
            .collect();
        format!("unknown fault kind `{s}` (known: {})", known.join(", "))
    })
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() && x < 1e9 => Ok(x),
        _ => Err(format!("`{s}` is not a number of seconds above 0")),
    }
}

fn parse_partition(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{s}`: expected I/N with 1 <= I <= N, e.g. 2/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

/// Runs `agentsim explore` with its flags.
pub(crate) fn command(args: ExploreArgs) -> ExitCode {
    let ExploreArgs {
        file,
        generated,
        runs,
        seed,
        jobs,
        no_faults,
        no_fault,
        time,
        partition,
        no_steer,
        swarm,
        coverage,
        bug,
        interruptions,
        out,
        no_write,
        shrink_budget,
        shrink_runs,
        shrink_time,
        no_reset,
        determinism,
        nondeterministic,
        runtime,
    } = args;
    if runtime.runtime.is_some() {
        let refused = [
            (bug.is_some(), "--bug"),
            (interruptions.is_some(), "--interruptions"),
            (swarm.is_some(), "--swarm"),
            (no_steer, "--no-steer"),
            (coverage, "--coverage"),
            (partition.is_some(), "--partition"),
        ];
        if let Some((_, flag)) = refused.iter().find(|(on, _)| *on) {
            eprintln!(
                "error: {flag} is for agentsim's own runtime; explore --runtime runs a scenario file or generated scenarios against yours"
            );
            return ExitCode::from(2);
        }
        use agentsim::drive::faults::FaultKind;
        if let Some(k) = no_fault.iter().find(|k| {
            !matches!(
                k,
                FaultKind::LlmError
                    | FaultKind::LlmStall
                    | FaultKind::LlmLatency
                    | FaultKind::Restart
                    | FaultKind::RestartMidTurn
                    | FaultKind::ToolError
                    | FaultKind::ToolLatency
                    | FaultKind::UserMessage
                    | FaultKind::Cancel
            )
        }) {
            eprintln!(
                "error: --no-fault {}: against a runtime, the faults are llm-error (model errors), llm-stall (a model call with no answer for seconds, then a dropped connection), llm-latency (a model reply served late), restart (kill -9 and restart), restart-mid-turn (a kill in the middle of a turn), tool-error, tool-latency (also a tool with a `timeout` that never answers), user-message (user interjections) and cancel (cancel words)",
                k.name()
            );
            return ExitCode::from(2);
        }
        let options = match runtime.options(None) {
            Ok(Some(o)) => o,
            Ok(None) => unreachable!("--runtime was given"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let determinism = if determinism {
            // The config file's `runtime.nondeterministic` patterns, and the flags'.
            let from_config = match super::runtime_config::config_path(runtime.config.as_deref()) {
                Some(path) => match super::runtime_config::load(&path) {
                    Ok(c) => c.map(|c| c.nondeterministic).unwrap_or_default(),
                    Err(e) => {
                        eprintln!("error: {}", report::terminal(&e));
                        return ExitCode::from(2);
                    }
                },
                None => Vec::new(),
            };
            let all: Vec<String> = from_config
                .iter()
                .chain(&nondeterministic)
                .cloned()
                .collect();
            match agentsim::explore::outside_determinism::patterns(&all) {
                Ok(patterns) => Some(super::explore_determinism::Determinism {
                    patterns,
                    given: nondeterministic,
                    from_config,
                }),
                Err(e) => {
                    eprintln!("error: {}", report::terminal(&e));
                    return ExitCode::from(2);
                }
            }
        } else {
            None
        };
        // With --generated, the subject is named by the flag in the summary and rerun commands.
        let file = file.unwrap_or_else(|| PathBuf::from("--generated"));
        let subject = if generated {
            super::explore_runtime::Subject::Generated
        } else {
            match scenario::load(&file).and_then(|s| s.runnable().map(|()| s)) {
                Ok(s) => super::explore_runtime::Subject::File(Box::new(s)),
                Err(e) => {
                    eprintln!("error: {}", report::terminal(&e.to_string()));
                    return ExitCode::from(2);
                }
            }
        };
        if !no_write && out.exists() && !out.is_dir() {
            eprintln!(
                "error: --out {}: not a directory; shrunk failures are written into a directory (created if missing)",
                out.display()
            );
            return ExitCode::from(2);
        }
        return super::explore_runtime::command(
            subject,
            options,
            super::explore_runtime::Asked {
                file: &file,
                first: seed,
                runs,
                jobs: jobs.map_or(1, |j| j as usize),
                faults: !no_faults,
                no_model_faults: no_fault.contains(&FaultKind::LlmError),
                no_model_stalls: no_fault.contains(&FaultKind::LlmStall),
                no_model_latency: no_fault.contains(&FaultKind::LlmLatency),
                no_restarts: no_fault.contains(&FaultKind::Restart),
                no_tool_errors: no_fault.contains(&FaultKind::ToolError),
                no_tool_latency: no_fault.contains(&FaultKind::ToolLatency),
                no_turns: super::explore_turns::NoTurnFaults {
                    user_messages: no_fault.contains(&FaultKind::UserMessage),
                    cancels: no_fault.contains(&FaultKind::Cancel),
                    kills_mid_turn: no_fault.contains(&FaultKind::RestartMidTurn),
                },
                time: time.map(std::time::Duration::from_secs_f64),
                out: (!no_write).then_some(out.as_path()),
                shrink_runs,
                shrink_time: std::time::Duration::from_secs_f64(shrink_time),
                reset: !no_reset,
                determinism,
            },
        );
    }
    let configurations = agentsim::explore::steer::configurations();
    let steering = match swarm {
        Some(name) => match configurations.iter().position(|(n, _)| *n == name) {
            Some(i) => Steering::Fixed(i),
            None => {
                let known: Vec<&str> = configurations.iter().map(|(n, _)| *n).collect();
                eprintln!(
                    "error: --swarm {name}: no such configuration (known: {})",
                    known.join(", ")
                );
                return ExitCode::from(2);
            }
        },
        None if no_steer || !generated => Steering::Fixed(0),
        None => Steering::Adaptive,
    };
    let source = if generated {
        explore::Source::Generated(GenConfig::default())
    } else {
        let file = file.expect("clap requires FILE without --generated");
        match scenario::load(&file).and_then(|s| s.runnable().map(|()| s)) {
            Ok(s) => explore::Source::Scenario(Box::new(s)),
            Err(e) => {
                eprintln!("error: {}", report::terminal(&e.to_string()));
                return ExitCode::from(2);
            }
        }
    };
    let settings = explore::Settings {
        faults: !no_faults,
        without: no_fault.iter().fold(
            Default::default(),
            |set: agentsim::drive::faults::FaultKinds, k| set.with(*k),
        ),
        planted: bug,
        // Replaying one seed shows its transcript, faults and all.
        record: runs == 1,
        interruptions: interruptions.map(|p| match p {
            Preset::Legacy => agentsim::agents::watchdog::InterruptionConfig::legacy(),
            Preset::Fixed => agentsim::agents::watchdog::InterruptionConfig::fixed(),
        }),
    };
    let jobs = jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    );
    if !no_write && out.exists() && !out.is_dir() {
        eprintln!(
            "error: --out {}: not a directory; shrunk failures are written into a directory (created if missing)",
            out.display()
        );
        return ExitCode::from(2);
    }
    let write = (!no_write).then_some((out.as_path(), shrink_budget));
    // Part I of N: the I-th of N contiguous ranges of the seeds (the first ranges one
    // seed longer when N does not divide --runs).
    let (first, runs) = match partition {
        Some((i, n)) => {
            let (base, extra) = (runs / n, runs % n);
            let start = (i - 1) * base + (i - 1).min(extra);
            let count = base + u64::from(i <= extra);
            println!(
                "partition {i}/{n}: seeds {} to {} ({count} of {runs} runs)",
                seed.wrapping_add(start),
                seed.wrapping_add(start + count).wrapping_sub(1)
            );
            (seed.wrapping_add(start), count)
        }
        None => (seed, runs),
    };
    if runs == 0 {
        println!("no runs in this partition");
        return ExitCode::SUCCESS;
    }
    explore_cmd(
        &source,
        (first, runs),
        jobs,
        settings,
        (steering, coverage),
        write,
        time.map(std::time::Duration::from_secs_f64),
    )
}

/// How generated scenarios are drawn.
#[derive(Clone, Copy, Debug)]
enum Steering {
    /// Every run from this swarm configuration.
    Fixed(usize),
    /// Configurations weighted by the rare behaviour they reach.
    Adaptive,
}

/// The replay command for one exploration seed.
fn replay_command(
    source: &explore::Source,
    seed: u64,
    settings: explore::Settings,
    swarm: usize,
) -> String {
    let what = match source {
        explore::Source::Generated(_) => "--generated".to_owned(),
        explore::Source::Scenario(s) => s.path.display().to_string(),
    };
    let mut cmd = format!("agentsim explore {what} --seed {seed} --runs 1");
    if !settings.faults {
        cmd.push_str(" --no-faults");
    }
    for kind in settings.without.iter() {
        cmd.push_str(&format!(" --no-fault {}", kind.name()));
    }
    if let Some(bug) = settings.planted {
        cmd.push_str(&format!(" --bug {bug}"));
    }
    if let Some(ic) = settings.interruptions {
        let preset = if ic == agentsim::agents::watchdog::InterruptionConfig::legacy() {
            "legacy"
        } else {
            "fixed"
        };
        cmd.push_str(&format!(" --interruptions {preset}"));
    }
    if let (explore::Source::Generated(_), Some((name, _))) = (
        source,
        agentsim::explore::steer::configurations().get(swarm),
    ) {
        cmd.push_str(&format!(" --swarm {name}"));
    }
    cmd
}

fn explore_cmd(
    source: &explore::Source,
    (first, runs): (u64, u64),
    jobs: usize,
    settings: explore::Settings,
    (steering, show_coverage): (Steering, bool),
    write: Option<(&Path, usize)>,
    budget: Option<std::time::Duration>,
) -> ExitCode {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    let started = Instant::now();
    // Ctrl-C stops the runs in flight at their next step; what was found is then summarized,
    // shrunk and written. A second Ctrl-C quits at once.
    let watch = std::sync::Arc::new(explore::Watch::default());
    {
        let watch = std::sync::Arc::clone(&watch);
        let handler = move || {
            if watch.stopping() {
                eprintln!("\ninterrupted again: quitting");
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupted: stopping the runs in flight; what was found is still summarized, shrunk and written (Ctrl-C again quits at once)"
            );
            watch.stop();
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            eprintln!("warning: cannot catch Ctrl-C ({e}); it will quit without a summary");
        }
    }
    let watch = &*watch;
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    // Per invariant: how many runs broke it, and the lowest failing seed with its replay.
    type Found = BTreeMap<&'static str, (u64, u64, String, agentsim::scenario::Scenario, usize)>;
    let steer = agentsim::explore::steer::Steer::new(first);
    let knobs = agentsim::explore::steer::configurations();
    let found: Mutex<Found> = Mutex::new(BTreeMap::new());
    let limits: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
    let faults = AtomicU64::new(0);
    let coverage: Mutex<Coverage> = Mutex::new(Coverage::default());
    let per_swarm: Mutex<Vec<u64>> = Mutex::new(vec![0; knobs.len()]);
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let out_of_time = std::sync::atomic::AtomicBool::new(false);
    let work = || loop {
        if watch.stopping() {
            break;
        }
        // A time budget stops new runs; those in flight finish.
        if budget.is_some_and(|b| started.elapsed() >= b) {
            out_of_time.store(true, Ordering::Relaxed);
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= runs {
            break;
        }
        let seed = first.wrapping_add(i);
        let (swarm, base) = match (source, steering) {
            (explore::Source::Generated(cfg), steering) => {
                let chosen = match steering {
                    Steering::Fixed(c) => Some((c, knobs[c].1)),
                    Steering::Adaptive => steer.choose(i, || watch.stopping()),
                };
                let Some((c, k)) = chosen else {
                    break;
                };
                let cfg = GenConfig { knobs: k, ..*cfg };
                (c, agentsim::explore::generate::generate(seed, &cfg))
            }
            (explore::Source::Scenario(_), _) => (0, source.scenario(seed)),
        };
        let Some((report, replay)) = explore::run_watched(&base, seed, settings, watch) else {
            // Interrupted in the middle: the run is dropped, not counted.
            break;
        };
        if settings.record {
            print!("{}", report::records_text(&report.records));
        }
        faults.fetch_add(report.faults, Ordering::Relaxed);
        coverage
            .lock()
            .expect("no worker panics")
            .add(report.coverage);
        if matches!(steering, Steering::Adaptive) {
            steer.record(i, swarm, report.coverage);
        }
        per_swarm.lock().expect("no worker panics")[swarm] += 1;
        match (&report.error, replay) {
            (Some(e), Some(replay)) => {
                let v = e.violation().expect("a replay comes with a violation");
                let mut found = found.lock().expect("no worker panics");
                let entry = found.entry(v.invariant).or_insert((
                    0,
                    seed,
                    v.message.clone(),
                    replay.clone(),
                    swarm,
                ));
                entry.0 += 1;
                if seed < entry.1 {
                    entry.1 = seed;
                    entry.2 = v.message.clone();
                    entry.3 = replay;
                    entry.4 = swarm;
                }
            }
            (Some(e), None) => {
                let kind = match e {
                    agentsim::sim::RunError::ScriptExhausted { .. } => "script exhausted",
                    agentsim::sim::RunError::ToolScriptExhausted { .. } => "tool script exhausted",
                    agentsim::sim::RunError::Stuck { .. } => "stuck (stalled model or hung tool)",
                    agentsim::sim::RunError::StepLimit { .. } => "step limit",
                    agentsim::sim::RunError::DepthLimit { .. } => "depth limit",
                    agentsim::sim::RunError::LlmCallLimit { .. } => "model-call limit",
                    agentsim::sim::RunError::Violation { .. } => "violation",
                    agentsim::sim::RunError::Restore(_) => "restore failed",
                    agentsim::sim::RunError::Persist(_) => "persisting failed",
                    agentsim::sim::RunError::Store(_) => "session store refused",
                };
                *limits
                    .lock()
                    .expect("no worker panics")
                    .entry(kind)
                    .or_insert(0) += 1;
            }
            _ => {}
        }
        done.fetch_add(1, Ordering::Relaxed);
    };
    // Steps per run, when known: progress then moves within long runs too.
    let steps_per_run = match source {
        explore::Source::Scenario(s) => s.steps.len() as u64,
        explore::Source::Generated(_) => 0,
    };
    let (finished, ticks) = std::sync::mpsc::channel::<()>();
    // The bar counts runs, or steps when a file's step count is known (then it moves within
    // long runs too).
    let unit = steps_per_run.max(1);
    let bar = if progress {
        indicatif::ProgressBar::with_draw_target(
            Some(runs.saturating_mul(unit)),
            indicatif::ProgressDrawTarget::stderr(),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("[{bar:30}] {msg} ({elapsed})")
            .expect("a valid template")
            .progress_chars("#> "),
    );
    let draw = || {
        let n = done.load(Ordering::Relaxed);
        let steps = watch.steps();
        let position = if steps_per_run > 0 {
            (n * unit).max(steps).min(runs * unit)
        } else {
            n
        };
        bar.set_position(position);
        bar.set_message(format!("{n}/{runs} runs, {steps} steps"));
    };
    let mut started_jobs = 0;
    std::thread::scope(|scope| {
        // Progress is drawn only on a terminal (in a CI log it would be noise), a few times a
        // second, so that one long run shows it is moving.
        if progress {
            let draw = &draw;
            scope.spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    ticks.recv_timeout(std::time::Duration::from_millis(200))
                {
                    if !watch.stopping() {
                        draw();
                    }
                }
            });
        }
        let mut workers = Vec::with_capacity(jobs);
        for _ in 0..jobs {
            match std::thread::Builder::new().spawn_scoped(scope, work) {
                Ok(worker) => workers.push(worker),
                Err(e) if workers.is_empty() => {
                    eprintln!(
                        "warning: cannot start worker threads ({e}); exploring on the main thread"
                    );
                    break;
                }
                Err(e) => {
                    eprintln!(
                        "warning: started {} of {jobs} workers ({e}); going on with those",
                        workers.len()
                    );
                    break;
                }
            }
        }
        started_jobs = workers.len();
        if workers.is_empty() {
            // Not even one thread: work on this one.
            work();
        }
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        // Every worker is done: stop the progress ticker.
        drop(finished);
    });
    let jobs = started_jobs.max(1);
    let interrupted = watch.stopping();
    if progress && !interrupted {
        draw();
        bar.finish();
    } else {
        bar.abandon();
    }
    let runs_done = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let what = match source {
        explore::Source::Generated(_) => "generated scenarios".to_owned(),
        explore::Source::Scenario(s) => s.path.display().to_string(),
    };
    let budget_hit = out_of_time.load(Ordering::Relaxed) && runs_done < runs;
    let ran = if interrupted {
        format!("interrupted after {runs_done} of {runs} runs")
    } else if budget_hit {
        format!(
            "{runs_done} of {runs} runs in the time budget of {}s",
            budget.unwrap_or_default().as_secs_f64()
        )
    } else {
        format!("{runs} runs")
    };
    let without: Vec<&str> = settings.without.iter().map(|k| k.name()).collect();
    println!(
        "explored {what}: {ran} from seed {first}, {jobs} jobs, faults {}{}{}",
        if settings.faults { "on" } else { "off" },
        if without.is_empty() {
            String::new()
        } else {
            format!(" (without {})", without.join(", "))
        },
        settings
            .planted
            .map_or(String::new(), |b| format!(", planted bug {b}"))
    );
    println!(
        "  {:.2}s, {:.0} runs/s, {} faults injected",
        elapsed,
        runs_done as f64 / elapsed.max(1e-9),
        faults.load(Ordering::Relaxed)
    );
    let limits = limits.into_inner().expect("no worker panics");
    if !limits.is_empty() {
        let share = |n: u64| 100.0 * n as f64 / runs_done.max(1) as f64;
        let list: Vec<String> = limits
            .iter()
            .map(|(k, n)| format!("{k} {n} ({:.1}%)", share(*n)))
            .collect();
        println!("  stopped early at a clean limit: {}", list.join(", "));
    }
    let coverage = coverage.into_inner().expect("no worker panics");
    if let (explore::Source::Generated(_), Steering::Adaptive) = (source, steering) {
        let per_swarm = per_swarm.into_inner().expect("no worker panics");
        let list: Vec<String> = knobs
            .iter()
            .zip(per_swarm)
            .map(|((name, _), n)| format!("{name} {n}"))
            .collect();
        println!(
            "  steered toward rare behaviour, runs per configuration: {}",
            list.join(", ")
        );
    }
    print_coverage(&coverage, runs_done, show_coverage);
    let found = found.into_inner().expect("no worker panics");
    if found.is_empty() {
        println!("  violations: none");
        // Interrupted is not a pass: the runs asked for did not all happen.
        return if interrupted {
            ExitCode::from(130)
        } else {
            ExitCode::SUCCESS
        };
    }
    println!("  violations by invariant:");
    for (invariant, (count, seed, _, _, _)) in &found {
        println!("    {invariant}: {count} runs (first at seed {seed})");
    }
    for (invariant, (_, seed, message, replay, swarm)) in found {
        println!(
            "FAIL seed {seed}: invariant {invariant} broken: {}",
            report::terminal(&message)
        );
        println!(
            "  replay: {}",
            replay_command(source, seed, settings, swarm)
        );
        let Some((dir, budget)) = write else {
            continue;
        };
        let shrunk = agentsim::explore::shrink::shrink(replay, invariant, budget);
        let yaml = agentsim::scenario::write::to_yaml(&shrunk.scenario);
        match write_new(dir, &format!("{invariant}-{seed}"), &yaml) {
            Ok(Written::Known(path)) => {
                println!(
                    "  shrunk to {} steps ({} candidate runs): known, {} holds exactly this file (not written again)",
                    shrunk.scenario.steps.len(),
                    shrunk.attempts,
                    path.display()
                );
                println!("  run it: agentsim run {}", path.display());
            }
            Ok(Written::New(path, taken)) => {
                if let Some(taken) = taken {
                    println!(
                        "  {} exists and is kept (it may be a regression you edited); writing a new file",
                        taken.display()
                    );
                }
                println!(
                    "  shrunk to {} steps ({} candidate runs): {}",
                    shrunk.scenario.steps.len(),
                    shrunk.attempts,
                    path.display()
                );
                println!("  run it: agentsim run {}", path.display());
            }
            Err(e) => println!("  could not write into {}: {e}", dir.display()),
        }
    }
    ExitCode::FAILURE
}

/// The coverage lines of explore's summary: features reached, the rarest, and those never reached.
fn print_coverage(coverage: &Coverage, runs: u64, every: bool) {
    use agentsim::observe::coverage::{feature_name, FEATURES};
    println!(
        "  coverage: {} of {FEATURES} features reached",
        coverage.reached()
    );
    if every {
        for i in 0..FEATURES {
            println!("    {:>9} runs  {}", coverage.runs[i], feature_name(i));
        }
    }
    let mut rare: Vec<(u64, usize)> = (0..FEATURES)
        .filter(|&i| coverage.runs[i] > 0)
        .map(|i| (coverage.runs[i], i))
        .collect();
    rare.sort_unstable();
    let list: Vec<String> = rare
        .iter()
        .take(5)
        .map(|&(n, i)| {
            format!(
                "{} ({n} runs, {:.2}%)",
                feature_name(i),
                100.0 * n as f64 / runs.max(1) as f64
            )
        })
        .collect();
    if !list.is_empty() {
        println!("    rarest: {}", list.join("; "));
    }
    let never = coverage.never();
    if !never.is_empty() {
        println!("    never reached: {}", never.join("; "));
    }
}
