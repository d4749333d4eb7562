//! Running a scenario against your own runtime from a Rust test: the command of a process that
//! speaks the runtime protocol (docs/runtime-protocol.md), as `agentsim run FILE --runtime CMD`
//! does.

use std::path::Path;

use crate::outside_run::{self, NotRun, Options, Outcome};
use crate::scenario;

/// A finished run of a scenario against an outside runtime.
#[derive(Debug)]
pub struct OutsideRun {
    outcome: Outcome,
}

impl OutsideRun {
    /// Whether every step, expectation and check held (or the expected check broke).
    pub fn passed(&self) -> bool {
        self.outcome.passed()
    }

    /// Panics, with the failure, the command that reruns it, the runtime's last stderr lines and
    /// the transcript, unless the run passed.
    #[track_caller]
    pub fn assert_passed(&self) -> &OutsideRun {
        if let Some(failure) = &self.outcome.failure {
            panic!(
                "scenario `{}` failed against `{}`: {}\nrerun: {}\n\n{}",
                self.outcome.name,
                self.outcome.command,
                failure.message,
                self.outcome.rerun_command(),
                self.outcome.text()
            );
        }
        self
    }

    /// Why the run failed, if it did.
    pub fn failure(&self) -> Option<&outside_run::Failure> {
        self.outcome.failure.as_ref()
    }

    /// The texts the runtime sent to the user of conversation `key`, in order.
    pub fn sent_to(&self, key: &str) -> Vec<&str> {
        self.outcome
            .sent
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, text)| text.as_str())
            .collect()
    }

    /// The whole report, as `agentsim run --runtime` prints it.
    pub fn text(&self) -> String {
        self.outcome.text()
    }

    /// The outcome: the transcript's entries, the model exchanges, the mock server's report, the
    /// runtime's stderr.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }
}

/// Runs the scenario file at `path` against the runtime started by `command` (split into words
/// as a shell splits them; run by no shell), with the defaults of `agentsim run --runtime`. For
/// an environment allow-list, timeouts or a time scale, build [`Options`] and use
/// [`run_file_against_with`].
///
/// It runs its own async runtime: call it from a plain `#[test]`, not from inside a tokio
/// runtime (there, `agentsim::outside_run::run(..).await`).
///
/// ```no_run
/// let run = agentsim::harness::run_file_against(
///     "tests/scenarios/skill-asks-then-completes.yaml",
///     "python my_agent.py",
/// ).unwrap();
/// run.assert_passed();
/// ```
pub fn run_file_against(path: impl AsRef<Path>, command: &str) -> Result<OutsideRun, String> {
    let words = outside_run::split_command(command).map_err(|e| format!("the command: {e}"))?;
    run_file_against_with(path, &Options::new(words))
}

/// [`run_file_against`] with options.
pub fn run_file_against_with(
    path: impl AsRef<Path>,
    options: &Options,
) -> Result<OutsideRun, String> {
    let scenario = scenario::load(path.as_ref()).map_err(|e| e.to_string())?;
    scenario.runnable().map_err(|e| e.to_string())?;
    match outside_run::run_blocking(&scenario, options) {
        Ok(outcome) => Ok(OutsideRun { outcome }),
        Err(NotRun::Unrunnable(e)) => Err(e.to_string()),
        Err(NotRun::Setup(e)) => Err(e),
    }
}
