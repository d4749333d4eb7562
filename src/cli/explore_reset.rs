//! `explore --runtime` with a runtime that offers `reset`: one process per job, `reset` between
//! its runs, and what the summary says about it (how many runs reused a process, and every reset
//! the runtime did not come back from).

use std::sync::Mutex;
use std::time::Duration;

use agentsim::outside_run::{Options, ResetFailure, Reuse};
use agentsim::report;

/// Whether runs reuse processes, and what the jobs gave back.
pub(crate) struct Reusing {
    on: bool,
    /// Why not, when not.
    why_not: &'static str,
    resets: Mutex<u64>,
    failures: Mutex<Vec<ResetFailure>>,
}

impl Reusing {
    /// Reuse when asked (no `--no-reset`) and the runtime offers `reset`.
    pub(crate) fn new(asked: bool, capabilities: &[String]) -> Reusing {
        let offered = capabilities.iter().any(|c| c == "reset");
        Reusing {
            on: asked && offered,
            why_not: if !offered {
                "the runtime does not offer `reset`"
            } else {
                "--no-reset"
            },
            resets: Mutex::new(0),
            failures: Mutex::new(Vec::new()),
        }
    }

    /// The options of one job: with a slot of its own when processes are reused.
    pub(crate) fn job(&self, options: &Options) -> Options {
        let mut options = options.clone();
        options.reuse = self.on.then(Reuse::new);
        options
    }

    /// The end of a job: its kept process stopped, its counts added.
    pub(crate) fn finish(&self, rt: &tokio::runtime::Runtime, options: &Options) {
        let Some(reuse) = &options.reuse else {
            return;
        };
        rt.block_on(reuse.close(options.timeouts.shutdown.min(Duration::from_secs(5))));
        *self.resets.lock().unwrap_or_else(|e| e.into_inner()) += reuse.resets();
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(reuse.failures());
    }

    /// One line for the summary.
    pub(crate) fn summary(&self) -> String {
        if !self.on {
            return format!("a new process per run ({})", self.why_not);
        }
        let resets = *self.resets.lock().unwrap_or_else(|e| e.into_inner());
        format!("one process per job, `reset` between runs ({resets} runs began with a reset)")
    }

    /// Prints the resets the runtime did not come back from, as a finding; whether there was one.
    pub(crate) fn report_failures(&self) -> bool {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let Some(first) = failures.first() else {
            return false;
        };
        println!(
            "FAIL reset: {} time(s) the runtime did not come back from `reset` (each time it was killed and the run went on in a new process; --no-reset starts a process per run); the first: {}",
            failures.len(),
            report::terminal(&first.message)
        );
        for line in first.stderr.iter().rev().take(20).rev() {
            println!("  | {}", report::terminal(line));
        }
        true
    }
}
