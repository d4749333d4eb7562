//! The runtime's side of seed 004's activity watchdog and interruption model (only with
//! [`crate::runtime::RuntimeConfig::interruptions`]): it keeps each frame's [`Watch`] in step with
//! what the frame does, owns the check timers, and carries out what a watch decides (interrupt an
//! in-flight call, continue with a prompt, end the send). The decisions themselves are the
//! watch's, in [`crate::agents::watchdog`].
//!
//! [`Watch`]: crate::agents::watchdog::Watch

use std::sync::Arc;

use crate::agents::frame::Phase;
use crate::agents::watchdog::{
    Cause, Check, Decision, InterruptedReturn, InterruptionConfig, PauseTarget, Recognition, Sync,
};
use crate::model::agent::EmptyAnswer;
use crate::model::ids::{call_id, CallId, FrameId};
use crate::model::messages;
use crate::protocol::{Effect, Event, PopReason};

use super::turn_context::{TurnAction, TurnInput, TurnResult};
use super::Runtime;

impl Runtime {
    pub(super) fn interruption_config(&self) -> InterruptionConfig {
        self.config
            .interruptions
            .expect("the watchdog runs only with interruptions modelled")
    }

    fn watch_event(&mut self, id: FrameId, what: impl FnOnce() -> String) {
        if !self.config.record_events {
            return;
        }
        let Some(frame) = self.stacks.frame(id) else {
            return;
        };
        let name = frame.agent.frame_name.clone();
        let key = self.stacks.entry(frame.conversation as usize).key.clone();
        self.events.push(Event::Watchdog {
            key,
            frame: name,
            what: what(),
        });
    }

    /// Schedules the next check of frame `id`.
    fn arm_check(&mut self, id: FrameId) {
        let ic = self.interruption_config();
        self.seq += 1;
        let timer = call_id(id.index(), self.seq);
        let Some(frame) = self.stacks.frame_mut(id) else {
            return;
        };
        frame.watch.scheduled(timer);
        self.watch_timers.insert(timer, id);
        self.effects.push_back(Effect::SetTimer {
            timer,
            after_ms: ic.check_every_ms,
        });
    }

    /// Brings every frame's watchdog in line with what the frame is doing: armed while it runs a
    /// send, paused while its own tool or (per the policy) a child runs.
    pub(super) fn sync_watchdogs(&mut self) {
        let ic = self.interruption_config();
        let now = self.now;
        for slot in 0..self.stacks.entries().len() {
            let ids = self.stacks.entry(slot).stack.ids().to_vec();
            // Which frames a running child pauses: its parent's, or the main frame's.
            let mut paused_by_child = vec![false; ids.len()];
            for (j, &id) in ids.iter().enumerate().skip(1) {
                let child = self.stacks.frame(id).expect("a stack lists live frames");
                if ic.pause_for_child && child.watch.pauses_parent() {
                    let target = match ic.child_pauses {
                        PauseTarget::Parent => j - 1,
                        PauseTarget::Main => 0,
                    };
                    paused_by_child[target] = true;
                }
            }
            for (&id, by_child) in ids.iter().zip(paused_by_child) {
                let frame = self
                    .stacks
                    .frame_mut(id)
                    .expect("a stack lists live frames");
                let running = !frame.awaits_user();
                let own_tools = matches!(
                    frame.phase,
                    Phase::AwaitTool { .. } | Phase::AwaitTools { .. }
                );
                match frame.watch.sync(&ic, now, running, own_tools, by_child) {
                    Sync::Keep => {}
                    Sync::Arm => self.arm_check(id),
                    Sync::Disarm(timer) => {
                        if let Some(timer) = timer {
                            self.watch_timers.remove(&timer);
                            self.effects.push_back(Effect::CancelTimer { timer });
                        }
                    }
                }
            }
        }
    }

    /// A watchdog check came due.
    pub(super) fn on_watch_timer(&mut self, timer: CallId) {
        let Some(id) = self.watch_timers.remove(&timer) else {
            return;
        };
        let ic = self.interruption_config();
        let now = self.now;
        let Some(frame) = self.stacks.frame_mut(id) else {
            return;
        };
        let slot = frame.conversation as usize;
        let idle_ms = match frame.watch.check(&ic, now) {
            Check::Idle => return,
            Check::Again => return self.arm_check(id),
            Check::TimedOut { idle_ms } => idle_ms,
        };
        self.watch_event(id, || {
            format!("activity timeout: no activity for {}s", idle_ms / 1000)
        });
        self.arm_check(id);
        let top = self
            .stacks
            .top_id(slot)
            .expect("a timed-out frame is on its stack");
        if id != top && ic.shared_client {
            // The abort goes through the model client every agent shares: it hits the model
            // call in flight above the frame that timed out.
            let frame = self.stacks.frame_mut(top).expect("the top lives");
            if matches!(frame.phase, Phase::AwaitLlm { .. })
                && frame.watch.interrupt(Cause::OtherAgentAbort)
            {
                self.watch_event(top, || {
                    "model call aborted through the shared client".into()
                });
            }
        }
        let top_frame = self.stacks.frame(top).expect("the top lives");
        let in_flight = matches!(
            top_frame.phase,
            Phase::AwaitLlm { .. } | Phase::AwaitTool { .. } | Phase::AwaitTools { .. }
        );
        if top_frame.watch.interrupted().is_some() && in_flight {
            self.abort_and_resolve(top);
        }
        self.pump(slot);
    }

    /// Interrupts the frame on top of `slot` with `cause` (a cancel that stops only the top
    /// frame; `word` is the cancel word as typed).
    pub(super) fn interrupt_top(&mut self, slot: usize, cause: Cause, word: Option<&str>) {
        let id = self.stacks.top_id(slot).expect("a busy top");
        let frame = self.stacks.frame_mut(id).expect("the top lives");
        frame.watch.interrupt(cause);
        let in_flight = matches!(
            frame.phase,
            Phase::AwaitLlm { .. } | Phase::AwaitTool { .. } | Phase::AwaitTools { .. }
        );
        self.watch_event(id, || match word {
            Some(word) => format!("interrupted: {} ({word:?})", cause.describe()),
            None => format!("interrupted: {}", cause.describe()),
        });
        if in_flight {
            self.abort_and_resolve(id);
        }
    }

    /// Aborts frame `id`'s in-flight model call or tools, then lets it decide.
    fn abort_and_resolve(&mut self, id: FrameId) {
        // The aborted call's reply or the tools' results arrive later as stale inputs.
        self.with_frame(id, |frame, cx| {
            cx.stop(frame, Some(messages::TOOL_INTERRUPTED), Phase::Loop)
        });
        match self.decide(id) {
            Ok(prompt) => self.drive(id, prompt),
            Err(result) => {
                if let Some((next, input)) = self.act(id, result) {
                    self.drive(next, input);
                }
            }
        }
    }

    /// The interrupted frame's decision: `Ok(continuation prompt)` to continue, or
    /// `Err(result)` ending its send interrupted.
    pub(super) fn decide(&mut self, id: FrameId) -> Result<TurnInput, TurnResult> {
        let ic = self.interruption_config();
        let now = self.now;
        let frame = self
            .stacks
            .frame_mut(id)
            .expect("an interrupted frame lives");
        match frame.watch.decide(&ic, now) {
            Decision::Continue { cause, recovery } => {
                self.watch_event(id, || {
                    format!(
                        "continues after {} (recovery {recovery} of {})",
                        cause.describe(),
                        ic.recovery_limit
                    )
                });
                Ok(TurnInput::User(messages::CONTINUATION_PROMPT.into()))
            }
            Decision::End { cause } => {
                let text: Arc<str> = match ic.interrupted_returns {
                    InterruptedReturn::Sentinel => messages::INTERRUPTED_SENTINEL.into(),
                    InterruptedReturn::TypedError => {
                        messages::agent_interrupted(cause.describe()).into()
                    }
                };
                self.watch_event(id, || {
                    format!(
                        "send ends interrupted ({}), returning {text:?}",
                        cause.describe()
                    )
                });
                Err(TurnResult::new(TurnAction::Interrupted, text))
            }
        }
    }

    /// The cleanup at the end of frame `id`'s send (the seed's `cleanupRequestState`).
    pub(super) fn end_send(&mut self, id: FrameId) {
        let Some(ic) = self.config.interruptions else {
            return;
        };
        if let Some(frame) = self.stacks.frame_mut(id) {
            let is_child = frame.parent_tool_use_id.is_some();
            frame.watch.end_send(&ic, is_child);
        }
    }

    /// A batch child's send ended interrupted: the delegating tool recognises it (a failed tool
    /// result) or, recognising only "[Request interrupted", passes the text on as the answer.
    pub(super) fn batch_interrupted(
        &mut self,
        slot: usize,
        text: Arc<str>,
        policy: EmptyAnswer,
    ) -> Option<(FrameId, TurnInput)> {
        let ic = self.interruption_config();
        let recognised = ic.tool_recognises == Recognition::Typed
            || ic.interrupted_returns == InterruptedReturn::TypedError
            || text.contains("[Request interrupted");
        if !recognised {
            return self.batch_answer(slot, text, policy);
        }
        let content: Arc<str> = if text.starts_with("Agent interrupted") {
            text
        } else {
            messages::agent_interrupted("interrupted").into()
        };
        Some(self.pop_child(slot, PopReason::Error, content, true))
    }
}
