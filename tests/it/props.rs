//! Properties over generated scenarios. The number of cases is small by default so CI stays fast;
//! set `AGENTSIM_PROPTEST_CASES` to explore more (e.g. 100000 for a long soak).

use agentsim::explore::generate::{generate, GenConfig};
use agentsim::explore::{run_one, Settings};
use agentsim::report;
use agentsim::scenario::{self, RunOptions, Scenario};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("AGENTSIM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Whole scenarios with the seed that generated them (and drives their run). Shrinking happens at
/// the scenario level, in `agentsim::explore::shrink`, which knows what a smaller scenario is.
fn scenarios() -> impl Strategy<Value = (u64, Scenario)> {
    any::<u64>().prop_map(|seed| (seed, generate(seed, &GenConfig::default())))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Every generated scenario, under a seed-drawn fault plan, runs to quiescence or stops at a
    /// clean, reported limit (an exhausted script, a stalled model), never with a broken invariant,
    /// and never panics.
    #[test]
    fn generated_scenarios_keep_every_invariant_under_faults((seed, s) in scenarios()) {
        let (report, replay) = run_one(&s, seed, Settings {
                faults: true,
                ..Settings::default()
            });
        prop_assert!(report.violation().is_none(), "seed {seed}: {:?}\nreplay: agentsim explore --generated --seed {seed} --runs 1", report.error);
        prop_assert!(replay.is_none());
    }

    /// The same generated scenario and seed give byte-identical transcripts.
    #[test]
    fn generated_runs_are_deterministic((_seed, s) in scenarios()) {
        let a = scenario::run(&s, RunOptions::default());
        let b = scenario::run(&s, RunOptions::default());
        prop_assert_eq!(report::records_text(&a.records), report::records_text(&b.records));
    }
}
