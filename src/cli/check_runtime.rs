//! `agentsim check --runtime CMD`: each worker thread runs its scenarios on an async runtime of
//! its own and, when the runtime offers `reset`, on one process kept across them (`--no-reset`
//! starts a process per scenario). A `reset` the runtime does not come back from is a failed
//! case of its own, named after the scenario it was for: that scenario then ran in a new process.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use agentsim::outside_run::{self, NotRun, Options, ResetFailure, Reuse};
use agentsim::report::check::{Case, CaseResult};
use agentsim::scenario::Scenario;

use super::shared::write_atomic;

/// What the workers share: the runtime's options, whether processes are kept, and the resets the
/// runtime did not come back from, with the scenario each was for.
pub(crate) struct Shared {
    options: Options,
    reset: bool,
    resets: Mutex<u64>,
    /// Each failed reset with the scenarios the job ran before it and for it.
    failures: Mutex<Vec<(String, String, ResetFailure)>>,
}

/// One worker's async runtime and its slot for a kept process.
pub(crate) struct Worker<'a> {
    shared: &'a Shared,
    rt: tokio::runtime::Runtime,
    options: Options,
    /// The scenario this worker ran last.
    last: std::cell::RefCell<String>,
}

impl Shared {
    /// `reset`: keep a process across a worker's scenarios when the runtime offers it.
    pub(crate) fn new(options: Options, reset: bool) -> Shared {
        Shared {
            options,
            reset,
            resets: Mutex::new(0),
            failures: Mutex::new(Vec::new()),
        }
    }

    /// A worker: its own async runtime (a kept process belongs to the one that started it).
    pub(crate) fn worker(&self) -> Result<Worker<'_>, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the async runtime: {e}"))?;
        let mut options = self.options.clone();
        options.reuse = self.reset.then(Reuse::new);
        Ok(Worker {
            shared: self,
            rt,
            options,
            last: std::cell::RefCell::new(String::new()),
        })
    }

    /// How many scenarios began with a `reset` of a kept process.
    pub(crate) fn resets(&self) -> u64 {
        *self.resets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The resets the runtime did not come back from, each a failed case (in the order they
    /// happened).
    pub(crate) fn failed_resets(&self) -> Vec<Case> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures
            .iter()
            .map(|(before, path, f)| {
                let message = format!(
                    "the runtime did not come back from `reset` after {before} and before this scenario (it was killed and the scenario ran in a new process; --no-reset starts a process per scenario): {}",
                    f.message
                );
                let mut failure = serde_json::json!({"kind": "reset", "message": message});
                with_stderr(&mut failure, &f.stderr);
                Case {
                    path: format!("{path} (reset)"),
                    seconds: 0.0,
                    result: CaseResult::Failed {
                        name: "reset".to_owned(),
                        seed: 0,
                        failure,
                        location: None,
                        // The two scenarios in one job: the second begins with the reset.
                        rerun: format!(
                            "agentsim check {} --runtime {}{} --jobs 1",
                            outside_run::join_command(&[before.clone(), path.clone()]),
                            outside_run::join_command(&[self.options.display()]),
                            self.options.rerun_flags()
                        ),
                    },
                }
            })
            .collect()
    }
}

impl Worker<'_> {
    /// Runs `scenario` (read from `path`), writing its page to `page` when given.
    pub(crate) fn case(&self, path: &str, scenario: &Scenario, page: Option<&Path>) -> CaseResult {
        let failed_before = self
            .options
            .reuse
            .as_ref()
            .map_or(0, |r| r.failures().len());
        let ran = self.rt.block_on(outside_run::run(scenario, &self.options));
        if let Some(reuse) = &self.options.reuse {
            let failures = reuse.failures();
            if failures.len() > failed_before {
                let mut all = self
                    .shared
                    .failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let before = self.last.borrow().clone();
                all.extend(
                    failures[failed_before..]
                        .iter()
                        .map(|f| (before.clone(), path.to_owned(), f.clone())),
                );
            }
        }
        *self.last.borrow_mut() = path.to_owned();
        if let (Some(page), Ok(outcome)) = (page, &ran) {
            if let Err(e) = write_atomic(page, outcome.html().as_bytes()) {
                eprintln!("warning: cannot write {}: {e}", page.display());
            }
        }
        outside_case(ran)
    }

    /// The end of the worker: its kept process stopped, its resets counted.
    pub(crate) fn finish(self) {
        let Some(reuse) = &self.options.reuse else {
            return;
        };
        let grace = self.options.timeouts.shutdown.min(Duration::from_secs(5));
        self.rt.block_on(reuse.close(grace));
        *self.shared.resets.lock().unwrap_or_else(|e| e.into_inner()) += reuse.resets();
    }
}

/// The result of one scenario run against an outside runtime: a scenario the runtime cannot
/// express is skipped with the located reason (the capability it lacks), never passed.
fn outside_case(ran: Result<outside_run::Outcome, NotRun>) -> CaseResult {
    match ran {
        Err(NotRun::Unrunnable(e)) => CaseResult::Skipped {
            reason: e.to_string(),
        },
        Err(NotRun::Setup(e)) => CaseResult::Broken {
            message: e,
            location: None,
        },
        Ok(outcome) => match &outcome.failure {
            None => CaseResult::Passed {
                name: outcome.name.clone(),
                seed: outcome.seed,
                reproduced: outcome.reproduced.clone(),
            },
            Some(f) => {
                let mut failure = f.to_json();
                with_stderr(&mut failure, &outcome.stderr);
                CaseResult::Failed {
                    name: outcome.name.clone(),
                    seed: outcome.seed,
                    failure,
                    location: (f.location.0 > 0).then_some(f.location),
                    rerun: outcome.rerun_command(),
                }
            }
        },
    }
}

/// A failure's JSON with the runtime's stderr: its last 20 lines as `stderr`, and its last 3
/// after the `message`, the lines a person reads first.
fn with_stderr(failure: &mut serde_json::Value, stderr: &[String]) {
    if stderr.is_empty() {
        return;
    }
    let tail = &stderr[stderr.len().saturating_sub(20)..];
    let last = &tail[tail.len().saturating_sub(3)..];
    let message = format!(
        "{}\n  the runtime's last stderr lines:\n  | {}",
        failure["message"].as_str().unwrap_or_default(),
        last.join("\n  | ")
    );
    failure["message"] = message.into();
    failure["stderr"] = serde_json::json!(tail);
}
