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
//!   (`Cancelled: parent ended.` for a fork's; whether a skip is right is `tool-execution`'s to
//!   judge); anything else, such as an output given to the wrong run, or a timeout before the
//!   deadline, breaks the invariant.
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

use super::{is_skip, names, same_text, violation, Violation};

/// One external tool run not answered yet.
#[derive(Clone, Debug)]
struct Run {
    frame_id: Uuid,
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
    /// When it was in: its output, or its deadline, whichever came first (kept as they change).
    in_at: Option<u64>,
}

impl Run {
    fn deadline(&self) -> Option<u64> {
        self.timeout.map(|t| self.started.saturating_add(t))
    }

    /// Sets [`Run::in_at`] from its output and deadline.
    fn update_in(&mut self) {
        self.in_at = match (self.output.as_ref().map(|o| o.2), self.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// The observer's model of the external tool runs in flight.
#[derive(Clone, Debug)]
pub(super) struct ToolRuns {
    /// Whether the definitions make anything to watch (read when the observer is made for its
    /// runtime, else at the first step).
    watch: Option<bool>,
    /// Whether some tool has a timeout (read with [`ToolRuns::watch`]).
    timeouts: bool,
    /// Runs not answered yet.
    open: Vec<Run>,
    /// When the earliest batch is due (`Some(None)`: none ever will be); `None` once a change
    /// makes it stale.
    due: Option<Option<u64>>,
    /// A restored runtime issued runs again in this step (they replace the ones it had).
    reissued: bool,
    /// At most the earliest time an open run was in (`u64::MAX` while none is): no batch can
    /// be due before it, so steps until then need no look at the batches.
    min_in: u64,
}

impl Default for ToolRuns {
    fn default() -> ToolRuns {
        ToolRuns {
            watch: None,
            timeouts: false,
            open: Vec::new(),
            due: None,
            reissued: false,
            min_in: u64::MAX,
        }
    }
}

impl ToolRuns {
    /// A restored runtime issued calls again: the runs among them replace the ones it had.
    pub(super) fn on_reissued(&mut self) {
        self.reissued = true;
    }

    /// Reads from the definitions whether there is anything to watch.
    pub(super) fn prepare(&mut self, rt: &Runtime) {
        self.watching(rt);
    }

    fn watching(&mut self, rt: &Runtime) -> bool {
        if let Some(watch) = self.watch {
            return watch;
        }
        let catalog = rt.catalog();
        self.timeouts = rt.config().tools.values().any(|t| t.timeout_ms.is_some());
        let watch = self.timeouts
            || catalog.main.parallel_tools
            || catalog.skills.values().any(|d| d.parallel_tools)
            || catalog.agents.values().any(|d| d.parallel_tools);
        self.watch = Some(watch);
        watch
    }

    /// The driver is about to feed a tool's output: it is the result its run must give.
    #[inline]
    pub(super) fn on_tool_done(
        &mut self,
        call: CallId,
        result: &Result<ToolOutput, ToolError>,
        now: u64,
    ) {
        if !self.open.is_empty() {
            self.record_output(call, result, now);
        }
    }

    #[inline(never)]
    fn record_output(&mut self, call: CallId, result: &Result<ToolOutput, ToolError>, now: u64) {
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
        run.update_in();
        self.min_in = self.min_in.min(run.in_at.unwrap_or(u64::MAX));
        self.due = None;
    }

    /// The runs the runtime asked for in this step (its effects, before the driver takes them).
    #[inline]
    pub(super) fn on_effects(&mut self, rt: &Runtime) {
        if self.watch != Some(false) {
            self.read_effects(rt);
        }
    }

    #[inline(never)]
    fn read_effects(&mut self, rt: &Runtime) {
        if !self.watching(rt) {
            return;
        }
        let reissued = std::mem::take(&mut self.reissued);
        for effect in rt.effects() {
            let Effect::RunTool { call } = effect else {
                continue;
            };
            let Some(run) = rt.tool_run(*call) else {
                continue;
            };
            let timeout = match self.timeouts {
                true => rt
                    .config()
                    .tools
                    .get(&**run.name)
                    .and_then(|t| t.timeout_ms),
                false => None,
            };
            let now = rt.now();
            self.due = None;
            let again = match reissued {
                true => self.open.iter_mut().find(|r| {
                    r.frame_id == run.frame_id && same_text(&r.tool_use_id, run.tool_use_id)
                }),
                false => None,
            };
            match again {
                // Issued again by a restored runtime: it starts afresh.
                Some(r) => {
                    r.call = *call;
                    r.started = now;
                    r.output = None;
                    r.update_in();
                    self.min_in = self.min_in.min(r.in_at.unwrap_or(u64::MAX));
                }
                None => {
                    if self.open.capacity() == 0 {
                        self.open.reserve(16);
                    }
                    let mut r = Run {
                        frame_id: run.frame_id,
                        tool_use_id: run.tool_use_id.clone(),
                        name: run.name.clone(),
                        call: *call,
                        started: now,
                        timeout,
                        output: None,
                        in_at: None,
                    };
                    r.update_in();
                    self.min_in = self.min_in.min(r.in_at.unwrap_or(u64::MAX));
                    self.open.push(r);
                }
            }
        }
    }

    /// A `tool_result` joined a session: if it answers a watched run, it must be the run's
    /// output, its timeout at or after its deadline, or a skip.
    #[inline]
    pub(super) fn on_result(
        &mut self,
        frame_id: Uuid,
        frame: &Arc<str>,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
        now: u64,
    ) -> Result<(), Violation> {
        if self.open.is_empty() {
            return Ok(());
        }
        // The result carries the session's own `Arc` of the id, as the run does.
        let at = |r: &Run| r.frame_id == frame_id;
        let Some(i) = self
            .open
            .iter()
            .position(|r| Arc::ptr_eq(&r.tool_use_id, tool_use_id) && at(r))
            .or_else(|| {
                self.open
                    .iter()
                    .position(|r| at(r) && r.tool_use_id == *tool_use_id)
            })
        else {
            return Ok(());
        };
        // Judged where it lies, then removed (the order of the runs is only the order violations
        // are looked for in).
        let verdict = Self::verdict(&self.open[i], frame, tool_use_id, content, is_error, now);
        self.open.swap_remove(i);
        if self.open.is_empty() {
            self.min_in = u64::MAX;
        }
        self.due = None;
        verdict
    }

    /// Whether `content` (`is_error`), which joined `frame`'s session at `now`, is what `run`
    /// must give.
    #[inline(always)]
    fn verdict(
        run: &Run,
        frame: &Arc<str>,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
        now: u64,
    ) -> Result<(), Violation> {
        if is_skip(content) || **content == *messages::FORK_CANCELLED {
            return Ok(());
        }
        let Run { name, output, .. } = run;
        let deadline = run.deadline();
        let timed_out = deadline.filter(|_| is_error).and_then(|d| {
            let text = messages::tool_timed_out(name, run.timeout.unwrap_or(0));
            (**content == *text).then_some(d)
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
            Some((want, want_error, _)) if !same_text(want, content) || *want_error != is_error => {
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
    #[inline]
    pub(super) fn on_ended(&mut self, agent_id: Uuid) {
        if !self.open.is_empty() {
            self.open.retain(|r| r.frame_id != agent_id);
            if self.open.is_empty() {
                self.min_in = u64::MAX;
            }
            self.due = None;
        }
    }

    /// At the end of a step at `now`: no batch that was in before `now` may still miss a
    /// result. `stuck`: the run has stopped with nothing scheduled, so a batch in at `now` is
    /// due too.
    #[inline]
    /// `name_of` names a run's frame for the message, by agent id.
    pub(super) fn check_due(
        &mut self,
        now: u64,
        stuck: bool,
        name_of: impl Fn(Uuid) -> Option<Arc<str>>,
    ) -> Result<(), Violation> {
        if now < self.min_in || (now == self.min_in && !stuck) {
            return Ok(()); // Nothing open was in before now: no batch can be overdue.
        }
        let due = match self.due {
            Some(due) => due,
            None => *self.due.insert(self.earliest_due()),
        };
        match due {
            Some(due) if due < now || (stuck && due <= now) => self.find_due(now, stuck, name_of),
            _ => Ok(()),
        }
    }

    /// When the earliest batch is due: the latest time one of its runs was in (a batch with a
    /// run never in is never due).
    fn earliest_due(&self) -> Option<u64> {
        let first = self.open.first()?.frame_id;
        if self.open.iter().all(|r| r.frame_id == first) {
            // One batch (the usual case): due once every run of it is in.
            return self
                .open
                .iter()
                .try_fold(0, |due, r| Some(due.max(r.in_at?)));
        }
        let mut batches: SmallVec<[(Uuid, Option<u64>); 2]> = SmallVec::new();
        for r in &self.open {
            let in_at = r.in_at;
            match batches.iter_mut().find(|(f, _)| *f == r.frame_id) {
                Some((_, due)) => {
                    *due = match (*due, in_at) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    }
                }
                None => batches.push((r.frame_id, in_at)),
            }
        }
        batches.iter().filter_map(|(_, due)| *due).min()
    }

    #[cold]
    pub(super) fn find_due(
        &self,
        now: u64,
        stuck: bool,
        name_of: impl Fn(Uuid) -> Option<Arc<str>>,
    ) -> Result<(), Violation> {
        for run in &self.open {
            // Its batch: every open run of its frame.
            let mut batch_in = Some(0u64);
            for r in self.open.iter().filter(|r| r.frame_id == run.frame_id) {
                batch_in = match (batch_in, r.in_at) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
            }
            let Some(due) = batch_in else {
                continue;
            };
            if due < now || (stuck && due <= now) {
                let Run {
                    name, tool_use_id, ..
                } = run;
                // Named by its agent-state events (a run keeps only its frame's id: a smaller
                // run is cheaper to move).
                let frame = name_of(run.frame_id)
                    .map_or_else(|| format!("agent {}", run.frame_id), |n| n.to_string());
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
        let mut r = Run {
            frame_id,
            tool_use_id: id.into(),
            name: "t1".into(),
            call: started + id.len() as u64,
            started,
            timeout,
            output: None,
            in_at: None,
        };
        r.update_in();
        r
    }

    fn no_name(_: Uuid) -> Option<Arc<str>> {
        None
    }

    fn model(runs: Vec<Run>) -> ToolRuns {
        let min_in = runs
            .iter()
            .filter_map(|r| r.in_at)
            .min()
            .unwrap_or(u64::MAX);
        ToolRuns {
            watch: Some(true),
            timeouts: true,
            open: runs,
            due: None,
            reissued: false,
            min_in,
        }
    }

    #[test]
    fn a_run_past_its_deadline_without_a_result_breaks_the_invariant() {
        let f = Uuid::from_u128(1);
        let mut m = model(vec![run(f, "tu1", 100, Some(1000))]);
        assert!(
            m.check_due(1100, false, no_name).is_ok(),
            "due, but the step at its deadline may answer it"
        );
        assert!(
            m.check_due(1100, true, no_name).is_err(),
            "stuck at its deadline: it was due"
        );
        let v = m.check_due(1101, false, no_name).unwrap_err();
        assert_eq!(v.invariant, names::TOOL_RUNS);
        assert!(v.message.contains("deadline of 1100ms"), "{v:?}");
        // A run with no timeout and no output is never due.
        assert!(model(vec![run(f, "tu1", 0, None)])
            .check_due(1_000_000, true, no_name)
            .is_ok());
    }

    #[test]
    fn a_batch_is_due_once_its_last_run_is_in() {
        let f = Uuid::from_u128(1);
        let mut done = run(f, "tu1", 0, None);
        done.output = Some(("ok".into(), false, 10));
        done.update_in();
        let slow = run(f, "tu2", 0, Some(1000));
        let mut m = model(vec![done.clone(), slow]);
        assert!(
            m.check_due(500, false, no_name).is_ok(),
            "tu2 is not in yet"
        );
        assert!(m.check_due(1001, false, no_name).is_err());
        // A batch with a run that never answers and has no timeout waits for good.
        let mut m = model(vec![done, run(f, "tu3", 0, None)]);
        assert!(m.check_due(1_000_000, true, no_name).is_ok());
    }

    #[test]
    fn a_result_must_be_its_runs_output_or_its_timeout_in_time() {
        let f = Uuid::from_u128(1);
        let timeout_text: Arc<str> = messages::tool_timed_out("t1", 1000).into();
        // Timed out before the deadline.
        let mut m = model(vec![run(f, "tu1", 0, Some(1000))]);
        let v = m
            .on_result(f, &"main".into(), &"tu1".into(), &timeout_text, true, 999)
            .unwrap_err();
        assert!(v.message.contains("before its deadline"), "{v:?}");
        // Timed out at the deadline: right.
        let mut m = model(vec![run(f, "tu1", 0, Some(1000))]);
        assert!(m
            .on_result(f, &"main".into(), &"tu1".into(), &timeout_text, true, 1000)
            .is_ok());
        assert!(m.open.is_empty());
        // A result with no output behind it.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        let v = m
            .on_result(f, &"main".into(), &"tu1".into(), &"ok".into(), false, 5)
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
            .on_result(f, &"main".into(), &"tu1".into(), &"two".into(), false, 3)
            .unwrap_err();
        assert!(v.message.contains("but its tool answered \"one\""), "{v:?}");
        // A failed run gives the failure text.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        m.on_tool_done(m.open[0].call, &Err(ToolError("disk full".into())), 3);
        let text: Arc<str> = messages::tool_failed("disk full").into();
        assert!(m
            .on_result(f, &"main".into(), &"tu1".into(), &text, true, 3)
            .is_ok());
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
            .on_result(
                f,
                &"main".into(),
                &"tu1".into(),
                &"late".into(),
                false,
                2000,
            )
            .unwrap_err();
        assert!(v.message.contains("after its deadline"), "{v:?}");
        // A skip text is tool-execution's to judge.
        let mut m = model(vec![run(f, "tu1", 0, None)]);
        let skip: Arc<str> = messages::CANCELLED_BY_USER.into();
        assert!(m
            .on_result(f, &"main".into(), &"tu1".into(), &skip, true, 1)
            .is_ok());
    }
}
