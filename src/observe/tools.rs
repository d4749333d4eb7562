//! `tool-runs`: the results of external tool runs, judged from the runs the runtime asked its
//! driver for ([`Effect::RunTool`]), the outputs the driver fed back ([`Input::ToolDone`]), the
//! tools' timeouts in the definitions and the driver's clock; never from the runtime's timers or
//! batch bookkeeping.
//!
//! A run is *in* once its output was fed, or once its deadline (its start plus its tool's
//! timeout) passed, whichever came first; a run with no timeout whose tool never answers is never
//! in. A frame's runs that are open at once form its batch (a sequential frame has one at a
//! time), and a batch's results join the session together once every run of it is in. So:
//!
//! - no step may end after a batch was in with a result of it still missing (a timer that never
//!   fires, an output dropped, a batch that forgets an item);
//! - a result is the output fed for its run (content and error flag; a failed run is
//!   `Tool execution failed: …`), or, once the deadline passed with no output before it, the
//!   timeout text `Tool '<name>' timed out after <N>s`, or one of the documented skip texts
//!   (`Cancelled: parent ended.` for a fork's; whether a skip is right is `tool-execution`'s to judge); anything else, such as an output
//!   given to the wrong run, or a timeout before the deadline, breaks the invariant.
//!
//! The runs are watched when some tool has a timeout or some agent runs its tools in parallel:
//! a sequential run with no timeout has nothing to time, and an output it never gets is the
//! `progress` invariant's (the runtime waits with nothing scheduled).

use std::sync::Arc;

use smallvec::SmallVec;
use uuid::Uuid;

use crate::agents::tools::{ToolError, ToolOutput};
use crate::model::ids::CallId;
use crate::model::messages;
use crate::protocol::Effect;
use crate::runtime::Runtime;

use super::{names, semantic, violation, Violation};

/// One external tool run not answered yet.
#[derive(Clone, Debug)]
struct Run {
    frame_id: Uuid,
    frame: Arc<str>,
    tool_use_id: Arc<str>,
    name: Arc<str>,
    /// The run's current call (a restored runtime issues it again under a new one).
    call: CallId,
    /// When the runtime asked for it (or asked again, after a restore).
    started: u64,
    /// Its tool's timeout, from the definitions.
    timeout: Option<u64>,
    /// The output fed for it and when: the result it must give, and its error flag.
    output: Option<(Arc<str>, bool, u64)>,
}

impl Run {
    fn deadline(&self) -> Option<u64> {
        self.timeout.map(|t| self.started.saturating_add(t))
    }

    /// When it was in: its output, or its deadline, whichever came first.
    fn in_at(&self) -> Option<u64> {
        match (self.output.as_ref().map(|o| o.2), self.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The observer's model of the external tool runs in flight.
#[derive(Clone, Debug, Default)]
pub(super) struct ToolRuns {
    /// Whether the definitions make anything to watch (computed at the first step).
    watch: Option<bool>,
    /// Runs not answered yet, in the order they started.
    open: SmallVec<[Run; 2]>,
}

impl ToolRuns {
    fn watching(&mut self, rt: &Runtime) -> bool {
        *self.watch.get_or_insert_with(|| {
            let catalog = rt.catalog();
            rt.config().tools.values().any(|t| t.timeout_ms.is_some())
                || catalog.main.parallel_tools
                || catalog.skills.values().any(|d| d.parallel_tools)
                || catalog.agents.values().any(|d| d.parallel_tools)
        })
    }

    /// The driver is about to feed a tool's output: it is the result its run must give.
    pub(super) fn on_tool_done(
        &mut self,
        call: CallId,
        result: &Result<ToolOutput, ToolError>,
        now: u64,
    ) {
        let Some(run) = self
            .open
            .iter_mut()
            .find(|r| r.call == call && r.output.is_none())
        else {
            return; // Stale, or not watched.
        };
        run.output = Some(match result {
            Ok(out) => (out.content.clone(), out.is_error, now),
            Err(e) => (messages::tool_failed(&e.0).into(), true, now),
        });
    }

    /// The runs the runtime asked for in this step (its effects, before the driver takes them).
    pub(super) fn on_effects(&mut self, rt: &Runtime) {
        if !self.watching(rt) {
            return;
        }
        for effect in rt.effects() {
            let Effect::RunTool { call } = effect else {
                continue;
            };
            let Some(run) = rt.tool_run(*call) else {
                continue;
            };
            let timeout = rt
                .config()
                .tools
                .get(&**run.name)
                .and_then(|t| t.timeout_ms);
            let now = rt.now();
            match self
                .open
                .iter_mut()
                .find(|r| r.frame_id == run.frame_id && r.tool_use_id == *run.tool_use_id)
            {
                // Issued again by a restored runtime: it starts afresh.
                Some(r) => {
                    r.call = *call;
                    r.started = now;
                    r.output = None;
                }
                None => self.open.push(Run {
                    frame_id: run.frame_id,
                    frame: run.agent.frame_name.clone(),
                    tool_use_id: run.tool_use_id.clone(),
                    name: run.name.clone(),
                    call: *call,
                    started: now,
                    timeout,
                    output: None,
                }),
            }
        }
    }

    /// A `tool_result` joined a session: if it answers a watched run, it must be the run's
    /// output, its timeout at or after its deadline, or a skip.
    pub(super) fn on_result(
        &mut self,
        frame_id: Uuid,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
        now: u64,
    ) -> Result<(), Violation> {
        if self.open.is_empty() {
            return Ok(());
        }
        let Some(i) = self
            .open
            .iter()
            .position(|r| r.frame_id == frame_id && r.tool_use_id == *tool_use_id)
        else {
            return Ok(());
        };
        let run = self.open.remove(i);
        if semantic::is_skip(content) || **content == *messages::FORK_CANCELLED {
            return Ok(());
        }
        let Run {
            frame,
            name,
            output,
            ..
        } = &run;
        let deadline = run.deadline();
        let timed_out = deadline.and_then(|d| {
            let text = messages::tool_timed_out(name, run.timeout.unwrap_or(0));
            (is_error && **content == *text).then_some(d)
        });
        if let Some(d) = timed_out {
            return match output {
                Some((_, _, at)) if *at < d => Err(violation(
                    names::TOOL_RUNS,
                    format!("{frame}'s {name} ({tool_use_id}) answered at {at}ms, before its deadline of {d}ms, but its result says it timed out"),
                )),
                _ if now < d => Err(violation(
                    names::TOOL_RUNS,
                    format!("{frame}'s {name} ({tool_use_id}) was reported timed out at {now}ms, before its deadline of {d}ms"),
                )),
                _ => Ok(()),
            };
        }
        match output {
            None => Err(violation(
                names::TOOL_RUNS,
                format!("{frame}'s {name} ({tool_use_id}) got the result {content:?} at {now}ms, but its tool had not answered"),
            )),
            Some((want, want_error, _)) if want != content || *want_error != is_error => {
                Err(violation(
                    names::TOOL_RUNS,
                    format!("{frame}'s {name} ({tool_use_id}) got the result {content:?} (error: {is_error}), but its tool answered {want:?} (error: {want_error})"),
                ))
            }
            Some((_, _, at)) => match deadline {
                Some(d) if *at > d => Err(violation(
                    names::TOOL_RUNS,
                    format!("{frame}'s {name} ({tool_use_id}) answered at {at}ms, after its deadline of {d}ms, yet its output was appended instead of its timeout"),
                )),
                _ => Ok(()),
            },
        }
    }

    /// An agent ended: its runs end with it (what answers them is `tool-execution`'s to judge).
    pub(super) fn on_ended(&mut self, agent_id: Uuid) {
        if !self.open.is_empty() {
            self.open.retain(|r| r.frame_id != agent_id);
        }
    }

    /// At the end of a step at `now`: no batch that was in before `now` may still miss a
    /// result. `stuck`: the run has stopped with nothing scheduled, so a batch in at `now` is
    /// due too.
    pub(super) fn check_due(&self, now: u64, stuck: bool) -> Result<(), Violation> {
        for run in &self.open {
            // Its batch: every open run of its frame.
            let mut batch_in = Some(0u64);
            for r in self.open.iter().filter(|r| r.frame_id == run.frame_id) {
                batch_in = match (batch_in, r.in_at()) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            let Some(due) = batch_in else {
                continue;
            };
            if due < now || (stuck && due <= now) {
                let Run {
                    frame,
                    name,
                    tool_use_id,
                    ..
                } = run;
                let why = match (&run.output, run.deadline()) {
                    (Some((_, _, at)), Some(d)) if d < *at => format!("its deadline of {d}ms"),
                    (Some((_, _, at)), _) => format!("its output at {at}ms"),
                    (None, Some(d)) => format!("its deadline of {d}ms"),
                    (None, None) => unreachable!("a run with neither is never in"),
                };
                return Err(violation(
                    names::TOOL_RUNS,
                    format!("{frame}'s {name} ({tool_use_id}) has no result at {now}ms, though it was in by {why} and its batch by {due}ms"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(frame_id: Uuid, id: &str, started: u64, timeout: Option<u64>) -> Run {
        Run {
            frame_id,
            frame: "main".into(),
            tool_use_id: id.into(),
            name: "t1".into(),
            call: started + id.len() as u64,
            started,
            timeout,
            output: None,
        }
    }

    fn model(runs: Vec<Run>) -> ToolRuns {
        ToolRuns {
            watch: Some(true),
            open: runs.into(),
        }
    }

    #[test]
    fn a_run_past_its_deadline_without_a_result_breaks_the_invariant() {
        let f = Uuid::from_u128(1);
        let m = model(vec![run(f, "tu1", 100, Some(1000))]);
        assert!(
            m.check_due(1100, false).is_ok(),
            "due, but the step at its deadline may answer it"
        );
        assert!(
            m.check_due(1100, true).is_err(),
            "stuck at its deadline: it was due"
        );
        let v = m.check_due(1101, false).unwrap_err();
        assert_eq!(v.invariant, names::TOOL_RUNS);
        assert!(v.message.contains("deadline of 1100ms"), "{v:?}");
        // A run with no timeout and no output is never due.
        assert!(model(vec![run(f, "tu1", 0, None)])
            .check_due(1_000_000, true)
            .is_ok());
    }

    #[test]
    fn a_batch_is_due_once_its_last_run_is_in() {
        let f = Uuid::from_u128(1);
        let mut done = run(f, "tu1", 0, None);
        done.output = Some(("ok".into(), false, 10));
        let slow = run(f, "tu2", 0, Some(1000));
        let m = model(vec![done.clone(), slow]);
        assert!(m.check_due(500, false).is_ok(), "tu2 is not in yet");
        assert!(m.check_due(1001, false).is_err());
        // A batch with a run that never answers and has no timeout waits for good.
        let m = model(vec![done, run(f, "tu3", 0, None)]);
        assert!(m.check_due(1_000_000, true).is_ok());
    }

    #[test]
    fn a_result_must_be_its_runs_output_or_its_timeout_in_time() {
        let f = Uuid::from_u128(1);
        let timeout_text: Arc<str> = messages::tool_timed_out("t1", 1000).into();
        // Timed out before the deadline.
        let mut m = model(vec![run(f, "tu1", 0, Some(1000))]);
        let v = m
            .on_result(f, &"tu1".into(), &timeout_text, true, 999)
            .unwrap_err();
        assert!(v.message.contains("before its deadline"), "{v:?}");
        // Timed out at the deadline: right.
        let mut m = model(vec![run(f, "tu1", 0, Some(1000))]);
        assert!(m
            .on_result(f, &"tu1".into(), &timeout_text, true, 1000)
            .is_ok());
        assert!(m.open.is_empty());
        // A result with no output behind it.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        let v = m
            .on_result(f, &"tu1".into(), &"ok".into(), false, 5)
            .unwrap_err();
        assert!(v.message.contains("had not answered"), "{v:?}");
        // Another run's output.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        m.on_tool_done(
            m.open[0].call,
            &Ok(ToolOutput {
                content: "one".into(),
                is_error: false,
            }),
            3,
        );
        let v = m
            .on_result(f, &"tu1".into(), &"two".into(), false, 3)
            .unwrap_err();
        assert!(v.message.contains("but its tool answered \"one\""), "{v:?}");
        // A failed run gives the failure text.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        m.on_tool_done(m.open[0].call, &Err(ToolError("disk full".into())), 3);
        let text: Arc<str> = messages::tool_failed("disk full").into();
        assert!(m.on_result(f, &"tu1".into(), &text, true, 3).is_ok());
        // An output after the deadline appended instead of the timeout.
        let mut m = model(vec![run(f, "tu1", 0, Some(1000))]);
        m.on_tool_done(
            m.open[0].call,
            &Ok(ToolOutput {
                content: "late".into(),
                is_error: false,
            }),
            2000,
        );
        let v = m
            .on_result(f, &"tu1".into(), &"late".into(), false, 2000)
            .unwrap_err();
        assert!(v.message.contains("after its deadline"), "{v:?}");
        // A skip text is tool-execution's to judge.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        let skip: Arc<str> = messages::CANCELLED_BY_USER.into();
        assert!(m.on_result(f, &"tu1".into(), &skip, true, 1).is_ok());
    }
}
