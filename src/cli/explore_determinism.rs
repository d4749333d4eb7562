//! `explore --runtime CMD --determinism`: each seed run a second time, with the same faults, and
//! compared with its first run ([`agentsim::explore::outside_determinism`]); a difference is the
//! finding `determinism`, reported with the seed and the first difference, and not shrunk.

use agentsim::explore::outside::{self, OutsideSettings, SeedRun, Verdict};
use agentsim::explore::outside_determinism::{difference, DETERMINISM};
use agentsim::outside_run::{join_command, Failure, FailureKind, NotRun, Options};
use agentsim::scenario::Scenario;
use regex::Regex;

/// What `--determinism` and `--nondeterministic` asked.
pub(crate) struct Determinism {
    /// The patterns of known nondeterminism, compiled.
    pub patterns: Vec<Regex>,
    /// As given on the command line, for rerun commands.
    pub given: Vec<String>,
    /// As the config file's `runtime.nondeterministic` gives them (a rerun reads them again).
    pub from_config: Vec<String>,
}

impl Determinism {
    /// The flags that repeat the check in a rerun command, each with a leading space.
    pub(crate) fn flags(&self) -> String {
        let mut flags = " --determinism".to_owned();
        for p in &self.given {
            flags.push_str(&format!(
                " --nondeterministic {}",
                join_command(std::slice::from_ref(p))
            ));
        }
        flags
    }
}

/// Runs the seed of `run` again and, when the two runs differ, makes `run` the finding
/// `determinism` naming the first difference. A run that already failed is left as it is (its
/// finding is reported; comparing it says nothing more).
pub(crate) fn check(
    rt: &tokio::runtime::Runtime,
    run: &mut SeedRun,
    explored: &Scenario,
    options: &Options,
    settings: OutsideSettings,
    asked: &Determinism,
) -> Result<(), NotRun> {
    if matches!(run.verdict(), Verdict::Found(_)) {
        return Ok(());
    }
    let again = rt.block_on(outside::run_seed(explored, run.seed, options, settings))?;
    if let Some(diff) = difference(&run.outcome, &again.outcome, &asked.patterns) {
        let timed = if run.turns.lines().is_empty() {
            ""
        } else {
            "; some of this seed's faults land at a time into a turn, so timing may be the cause: --no-fault user-message --no-fault cancel --no-fault restart-mid-turn leave them out"
        };
        run.outcome.failure = Some(Failure {
            kind: FailureKind::Check(DETERMINISM.to_owned()),
            step: None,
            location: (0, 0),
            message: format!(
                "the runtime is not deterministic: seed {} run twice with the same faults, {diff} (declare known nondeterminism with --nondeterministic PATTERN{timed})",
                run.seed
            ),
        });
    }
    Ok(())
}
