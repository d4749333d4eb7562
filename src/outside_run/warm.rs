//! One runtime process kept across runs (capability `reset`): instead of starting a process per
//! run, a run that ends cleanly hands its process back ([`Reuse`]), and the next run of the same
//! job writes `reset` and a new `hello` to it, on a mock server started at the same address (the
//! runtime read that address once, from its environment).
//!
//! What is kept, and when it is given up:
//! - a process is handed back only after a run whose runtime was idle at the end, and whose steps
//!   all passed or stopped at a broken check or expectation (a run that ended in a protocol
//!   error, a timeout or an exit stops its process as without reuse);
//! - a process that does not answer the `hello` after `reset` with `ready` within the ready
//!   timeout, or that exits or breaks the protocol meanwhile, is killed and a fresh process is
//!   started for the run, which then goes on as any other: the failed reset is recorded
//!   ([`ResetFailure`], with the runtime's last stderr lines) for the caller to report;
//! - a kill and restart inside a run (a `restart` step, a restart fault) starts a new process on
//!   the run's state directory as always; that process is the one handed back;
//! - the protocol's sequence checks ([`crate::outside::Session`]) go on with the process: a call
//!   id stays used across a `reset` ("unique within this process's life").

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::mock_llm::server;
use crate::outside::Session;
use crate::scenario::Scenario;

use super::process::{Process, StderrTail};

/// A process between two runs.
pub(super) struct Warm {
    /// The process, idle.
    pub(super) proc: Process,
    /// Its sequence checker (the call ids it used).
    pub(super) session: Session,
    /// Its stderr tail.
    pub(super) stderr: Arc<Mutex<StderrTail>>,
    /// The lines it wrote so far.
    pub(super) line_no: u64,
    /// The mock server address it was started with.
    pub(super) addr: SocketAddr,
}

/// A `reset` the runtime did not come back from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetFailure {
    /// What happened (no `ready` in time, an exit, a protocol error), as a run's failure says it.
    pub message: String,
    /// The runtime's last stderr lines.
    pub stderr: Vec<String>,
}

#[derive(Default)]
struct Slot {
    warm: Option<Warm>,
    /// Runs that began with a `reset` of a kept process, successful or not.
    resets: u64,
    failures: Vec<ResetFailure>,
}

/// Where one job keeps its runtime process between runs. Give each job (each thread of runs
/// that follow one another) its own, in [`super::Options::reuse`], inside one async runtime: the
/// process belongs to the async runtime that started it. A clone shares the slot.
#[derive(Clone, Default)]
pub struct Reuse {
    slot: Arc<Mutex<Slot>>,
}

impl std::fmt::Debug for Reuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slot = self.lock();
        f.debug_struct("Reuse")
            .field("kept", &slot.warm.is_some())
            .field("resets", &slot.resets)
            .field("failures", &slot.failures.len())
            .finish()
    }
}

impl Reuse {
    /// An empty slot.
    pub fn new() -> Reuse {
        Reuse::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn take(&self) -> Option<Warm> {
        self.lock().warm.take()
    }

    pub(super) fn put(&self, warm: Warm) {
        // A process already kept (two runs of one job at once, which a caller should not do)
        // is dropped, and killed with it.
        self.lock().warm = Some(warm);
    }

    pub(super) fn reset_done(&self) {
        self.lock().resets += 1;
    }

    pub(super) fn reset_failed(&self, failure: ResetFailure) {
        self.lock().failures.push(failure);
    }

    /// How many runs began with a `reset` of a kept process instead of a new process.
    pub fn resets(&self) -> u64 {
        self.lock().resets
    }

    /// The resets the runtime did not come back from, in order.
    pub fn failures(&self) -> Vec<ResetFailure> {
        self.lock().failures.clone()
    }

    /// Stops the kept process, if any: `shutdown`, its exit within `grace`, else `SIGTERM` and
    /// `SIGKILL`. Call it from the async runtime the runs used.
    pub async fn close(&self, grace: Duration) {
        let Some(mut warm) = self.take() else {
            return;
        };
        let line = crate::outside::encode_line(&crate::outside::ToRuntime::Shutdown)
            .expect("shutdown encodes");
        let _ = warm.proc.write(&line).await;
        warm.proc.close_stdin();
        if warm.proc.exit_status(grace).await.is_none() {
            warm.proc.terminate(Duration::from_secs(1)).await;
        }
    }
}

/// Starts the mock server for `scenario` at `addr`, the address a kept process was started with:
/// the previous run's server may still be letting go of it, so a busy address is tried again for
/// up to a second.
pub(super) async fn start_server_at(
    scenario: &Scenario,
    options: server::Options,
    addr: SocketAddr,
) -> std::io::Result<server::Running> {
    let mut tries = 0;
    loop {
        let mut at = options.clone();
        at.addr = addr;
        match server::start(scenario, at).await {
            Ok(running) => return Ok(running),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 200 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
