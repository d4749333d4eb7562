//! The runtime's side of seed 004's activity watchdog and interruption model (only with
//! [`crate::runtime::RuntimeConfig::interruptions`]): arming and pausing each frame's watchdog,
//! checks that come due, interrupting, and the continue-or-end decision.

use std::sync::Arc;

use crate::agents::frame::Phase;
use crate::agents::watchdog::{
    Cause, ContinueFlag, InterruptedReturn, InterruptionConfig, ParentResume, PauseTarget,
    Recognition,
};
use crate::model::agent::EmptyAnswer;
use crate::model::ids::CallId;
use crate::model::messages;
use crate::protocol::{Effect, Event, PopReason};

use super::turn::{TurnAction, TurnInput, TurnResult, CALL_SEQ_BITS};
use super::{frame_timers, Runtime};

impl Runtime {
    pub(super) fn interruption_config(&self) -> InterruptionConfig {
        self.config
            .interruptions
            .expect("the watchdog runs only with interruptions modelled")
    }

    pub(super) fn watch_event(&mut self, slot: usize, frame: Arc<str>, what: String) {
        if self.config.record_events {
            let key = self.stacks.entry(slot).key.clone();
            self.events.push(Event::Watchdog { key, frame, what });
        }
    }

    pub(super) fn next_timer(&mut self, slot: usize) -> CallId {
        self.seq += 1;
        ((slot as u64) << CALL_SEQ_BITS) | (self.seq & ((1 << CALL_SEQ_BITS) - 1))
    }

    /// Schedules the next check of frame `idx`.
    pub(super) fn arm_check(&mut self, slot: usize, idx: usize) {
        let ic = self.interruption_config();
        let timer = self.next_timer(slot);
        let frame = &mut self.stacks.entry_mut(slot).stack.frames_mut()[idx];
        frame.watch.timer = Some(timer);
        self.watch_timers.insert(timer, (slot, frame.frame_id));
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
            let depth = self.stacks.entry(slot).stack.depth();
            let mut paused_by_child = vec![false; depth];
            for (j, f) in self
                .stacks
                .entry(slot)
                .stack
                .frames()
                .iter()
                .enumerate()
                .skip(1)
            {
                if ic.pause_for_child && !f.watch.pause_released {
                    let target = match ic.child_pauses {
                        PauseTarget::Parent => j - 1,
                        PauseTarget::Main => 0,
                    };
                    paused_by_child[target] = true;
                }
            }
            for (idx, by_child) in paused_by_child.iter().copied().enumerate() {
                let frame = &mut self.stacks.entry_mut(slot).stack.frames_mut()[idx];
                let running = !frame.awaits_user();
                let own = ic.pause_for_own_tools
                    && matches!(
                        frame.phase,
                        Phase::AwaitTool { .. } | Phase::AwaitTools { .. }
                    );
                if own != frame.watch.own_tool_pause {
                    frame.watch.own_tool_pause = own;
                    if !own {
                        frame.watch.last_activity = now;
                    }
                }
                if by_child != frame.watch.child_pause {
                    frame.watch.child_pause = by_child;
                    if !by_child && ic.parent_resume == ParentResume::Delegation {
                        frame.watch.last_activity = now;
                    }
                }
                if running && !frame.watch.armed {
                    frame.watch.armed = true;
                    frame.watch.last_activity = now;
                    self.arm_check(slot, idx);
                } else if !running && frame.watch.armed {
                    frame.watch.armed = false;
                    if let Some(timer) = frame.watch.timer.take() {
                        self.watch_timers.remove(&timer);
                        self.effects.push_back(Effect::CancelTimer { timer });
                    }
                }
            }
        }
    }

    /// A watchdog check came due.
    pub(super) fn on_watch_timer(&mut self, timer: CallId) {
        let Some((slot, frame_id)) = self.watch_timers.remove(&timer) else {
            return;
        };
        let ic = self.interruption_config();
        let now = self.now;
        let stack = &mut self.stacks.entry_mut(slot).stack;
        let Some(idx) = stack.frames().iter().position(|f| f.frame_id == frame_id) else {
            return;
        };
        let frame = &mut stack.frames_mut()[idx];
        frame.watch.timer = None;
        if !frame.watch.armed {
            return;
        }
        let idle = now.saturating_sub(frame.watch.last_activity);
        if frame.watch.paused() || idle < ic.timeout_ms {
            self.arm_check(slot, idx);
            return;
        }
        // The seed's handleActivityTimeout: set the context with the continue flag, interrupt.
        frame.watch.flag = true;
        frame.watch.interrupted = Some(Cause::ActivityTimeout);
        frame.watch.last_activity = now;
        let name = frame.agent.frame_name.clone();
        self.watch_event(
            slot,
            name,
            format!("activity timeout: no activity for {}s", idle / 1000),
        );
        self.arm_check(slot, idx);
        let top = self.stacks.entry(slot).stack.depth() - 1;
        if idx != top && ic.shared_client {
            let frame = &mut self.stacks.entry_mut(slot).stack.frames_mut()[top];
            if matches!(frame.phase, Phase::AwaitLlm { .. }) && frame.watch.interrupted.is_none() {
                frame.watch.interrupted = Some(Cause::OtherAgentAbort);
                let name = frame.agent.frame_name.clone();
                self.watch_event(
                    slot,
                    name,
                    "model call aborted through the shared client".into(),
                );
            }
        }
        let top_frame = &self.stacks.entry(slot).stack.frames()[top];
        let in_flight = matches!(
            top_frame.phase,
            Phase::AwaitLlm { .. } | Phase::AwaitTool { .. } | Phase::AwaitTools { .. }
        );
        if top_frame.watch.interrupted.is_some() && in_flight {
            self.abort_and_resolve(slot);
        }
        self.pump(slot);
    }

    /// Interrupts the frame on top with `cause` (a cancel that stops only the top frame).
    pub(super) fn interrupt_top(&mut self, slot: usize, cause: Cause) {
        let frame = self
            .stacks
            .entry_mut(slot)
            .stack
            .top_mut()
            .expect("a busy top");
        frame.watch.interrupted = Some(cause);
        let name = frame.agent.frame_name.clone();
        self.watch_event(slot, name, format!("interrupted: {}", cause.describe()));
        let in_flight = matches!(
            self.stacks.entry(slot).stack.top().map(|f| &f.phase),
            Some(Phase::AwaitLlm { .. } | Phase::AwaitTool { .. } | Phase::AwaitTools { .. })
        );
        if in_flight {
            self.abort_and_resolve(slot);
        }
    }

    /// Aborts the top frame's in-flight model call or tools, then lets it decide.
    pub(super) fn abort_and_resolve(&mut self, slot: usize) {
        self.with_top(slot, |frame, cx| {
            for timer in frame_timers(&frame.phase) {
                cx.effects.push_back(Effect::CancelTimer { timer });
            }
            // The aborted call's reply or the tools' results arrive later as stale inputs.
            cx.resolve_all(frame, messages::TOOL_INTERRUPTED);
            frame.phase = Phase::Loop;
        });
        match self.decide(slot) {
            Ok(prompt) => self.drive(slot, prompt),
            Err(result) => {
                if let Some(next) = self.act(slot, result) {
                    self.drive(slot, next);
                }
            }
        }
    }

    /// The interrupted top frame's decision: `Ok(continuation prompt)` to continue, or
    /// `Err(result)` ending its send interrupted.
    pub(super) fn decide(&mut self, slot: usize) -> Result<TurnInput, TurnResult> {
        let ic = self.interruption_config();
        let now = self.now;
        let frame = self
            .stacks
            .entry_mut(slot)
            .stack
            .top_mut()
            .expect("a top frame");
        let cause = frame
            .watch
            .interrupted
            .take()
            .expect("an interrupted frame");
        let can_continue = match ic.continue_flag {
            ContinueFlag::ClearedPerSend => frame.watch.flag,
            ContinueFlag::TypedCause => cause == Cause::ActivityTimeout,
        };
        let name = frame.agent.frame_name.clone();
        if can_continue && frame.watch.recoveries < ic.recovery_limit {
            frame.watch.recoveries += 1;
            frame.watch.last_activity = now;
            let n = frame.watch.recoveries;
            self.watch_event(
                slot,
                name,
                format!(
                    "continues after {} (recovery {n} of {})",
                    cause.describe(),
                    ic.recovery_limit
                ),
            );
            return Ok(TurnInput::User(messages::CONTINUATION_PROMPT.into()));
        }
        let text: Arc<str> = match ic.interrupted_returns {
            InterruptedReturn::Sentinel => messages::INTERRUPTED_SENTINEL.into(),
            InterruptedReturn::TypedError => messages::agent_interrupted(cause.describe()).into(),
        };
        self.watch_event(
            slot,
            name,
            format!(
                "send ends interrupted ({}), returning {text:?}",
                cause.describe()
            ),
        );
        Err(TurnResult::new(TurnAction::Interrupted, text))
    }

    /// The cleanup at the end of a send (the seed's `cleanupRequestState`).
    pub(super) fn end_send(&mut self, slot: usize) {
        let Some(ic) = self.config.interruptions else {
            return;
        };
        let Some(frame) = self.stacks.entry_mut(slot).stack.top_mut() else {
            return;
        };
        if ic.continue_flag == ContinueFlag::ClearedPerSend {
            frame.watch.flag = false;
        }
        frame.watch.interrupted = None;
        frame.watch.recoveries = 0;
        if ic.parent_resume == ParentResume::EachSend && frame.parent_tool_use_id.is_some() {
            frame.watch.pause_released = true;
        }
    }

    /// A batch child's send ended interrupted: the delegating tool recognises it (a failed tool
    /// result) or, recognising only "[Request interrupted", passes the text on as the answer.
    pub(super) fn batch_interrupted(
        &mut self,
        slot: usize,
        text: Arc<str>,
        policy: EmptyAnswer,
    ) -> Option<TurnInput> {
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
