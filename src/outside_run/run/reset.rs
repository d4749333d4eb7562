//! A run on a process kept from the job's previous run (capability `reset`, see
//! [`super::super::warm`]): taking it over, `reset` and the new `hello`, and handing it back.

use std::sync::Arc;

use crate::outside::{Hello, Session, ToRuntime};

use super::super::warm::{ResetFailure, Warm};
use super::{Bound, Run};

impl Run<'_> {
    /// Takes over a kept process: its lines, call ids and stderr go on; the stderr kept so far
    /// was the previous run's.
    pub(in crate::outside_run) fn adopt(&mut self, warm: Warm) {
        warm.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.proc = Some(warm.proc);
        self.session = warm.session;
        self.stderr = warm.stderr;
        self.line_no = warm.line_no;
    }

    /// The process, to keep for the job's next run: only if it offered `reset`, is idle, has no
    /// model request in flight, and its stdout is still open.
    pub(in crate::outside_run) fn release(&mut self) -> Option<Warm> {
        if !self.capabilities.iter().any(|c| c == "reset") || self.idle_seq < self.seq {
            return None;
        }
        // Every model request answered: one still in flight would reach the next run's server.
        self.read_journal();
        if self.model_side.lines.len() as u64 != self.server.exchanges() {
            return None;
        }
        let mut proc = self.proc.take()?;
        if !proc.drain() {
            self.proc = Some(proc);
            return None;
        }
        self.note("agentsim keeps the runtime's process for the next run (reset)".to_owned());
        Some(Warm {
            proc,
            session: std::mem::take(&mut self.session),
            stderr: Arc::clone(&self.stderr),
            line_no: self.line_no,
            addr: self.server.addr,
        })
    }

    /// Writes `reset` and `hello` to the kept process and waits for its `ready` (ready timeout).
    /// `false` if it did not come back: the failure is recorded in the job's slot, the process
    /// killed, and the caller starts a new one.
    pub(super) async fn reset_kept(&mut self, hello: &Hello) -> bool {
        let Some(reuse) = self.options.reuse.clone() else {
            return false;
        };
        self.note(format!(
            "agentsim reuses the process of `{}` (reset)",
            self.command
        ));
        let answered = async {
            self.write(ToRuntime::Reset).await?;
            self.write(ToRuntime::Hello(hello.clone())).await?;
            let ready_by = tokio::time::Instant::now() + self.options.timeouts.ready;
            self.pump(
                |r| r.session.is_ready(),
                Bound::Ready(ready_by),
                "ready after reset",
            )
            .await
        }
        .await;
        match answered {
            Ok(()) => {
                reuse.reset_done();
                true
            }
            Err(f) => {
                reuse.reset_failed(ResetFailure {
                    message: f.message,
                    stderr: self.stderr_lines(),
                });
                self.note(
                    "agentsim kills the runtime, which did not come back from `reset`, and starts a new process"
                        .to_owned(),
                );
                if let Some(mut p) = self.proc.take() {
                    p.kill().await;
                }
                self.session = Session::new();
                self.stderr = Arc::default();
                false
            }
        }
    }
}
