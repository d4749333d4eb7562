//! Conversations and their users: routing a message to the frame on top (or a new main frame),
//! the inbox of messages that arrive while a turn runs, pushing and popping frames, sending text,
//! and the cancel word that unwinds a whole stack (DESIGN §3 item 7).

use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::watchdog::{CancelScope, Cause};
use crate::model::ids::FrameId;
use crate::model::messages;
use crate::protocol::{Effect, Event, FrameInfo, PopReason};
use crate::runtime::planted::PlantedBug;

use super::turn_context::TurnInput;
use super::Runtime;

impl Runtime {
    pub(super) fn is_cancel(&self, text: &str) -> bool {
        self.config.is_cancel_word(text)
    }

    pub(super) fn on_user(&mut self, slot: usize, text: Arc<str>) {
        let entry = self.stacks.entry(slot);
        let top_busy = self.stacks.busy(slot);
        if !entry.stack.is_empty() && self.is_cancel(&text) {
            let top_only = self
                .config
                .interruptions
                .is_some_and(|ic| ic.cancel == CancelScope::TopFrame);
            if top_busy && top_only {
                self.interrupt_top(slot, Cause::UserCancel, Some(&text));
                self.pump(slot);
            } else {
                self.unwind(slot, text);
            }
            return;
        }
        let busy = !entry.inbox.is_empty() || top_busy;
        if busy {
            let entry = self.stacks.entry_mut(slot);
            entry.inbox.push_back(text.clone());
            if self.config.record_events {
                let key = entry.key.clone();
                self.events.push(Event::Queued { key, text });
            }
            return;
        }
        self.route(slot, text);
        self.pump(slot);
    }

    /// Delivers queued messages while the conversation waits for the user.
    pub(super) fn pump(&mut self, slot: usize) {
        loop {
            if self.stacks.busy(slot) {
                return;
            }
            let entry = self.stacks.entry_mut(slot);
            let Some(text) = entry.inbox.pop_front() else {
                return;
            };
            if !entry.stack.is_empty() && self.is_cancel(&text) {
                self.unwind(slot, text);
                continue;
            }
            self.route(slot, text);
        }
    }

    /// Routes a user message by stack state: empty → a new main frame, otherwise the top frame.
    pub(super) fn route(&mut self, slot: usize, text: Arc<str>) {
        let record = self.config.record_events;
        let entry = self.stacks.entry_mut(slot);
        if entry.stack.is_empty() {
            let session = std::mem::take(&mut entry.main_session);
            // A triggered session's agent runs as its main agent.
            let agent = match &entry.session {
                Some(s) => s.agent.clone(),
                None => self.catalog.main.clone(),
            };
            let turn_start = session.messages.len();
            let main_session_id = entry.main_session_id;
            let frame_id = self.ids.next_uuid();
            let parent = self.stacks.top_id(slot);
            let task = text.clone();
            let id = self.stacks.push_with(slot, || {
                StackFrame::with_task(frame_id, agent, session, main_session_id, None, 0, task)
            });
            // Set in place, and only then recorded.
            let frame = self
                .stacks
                .frame_mut(id)
                .expect("a frame just pushed is live");
            frame.turn_start = turn_start;
            frame.phase = Phase::AwaitUser;
            self.pushed(id, parent);
        }
        let depth = self.stacks.entry(slot).stack.depth();
        if self.config.has_bug(PlantedBug::RouteBelowTop) && depth >= 2 {
            let below = self.stacks.entry(slot).stack.ids()[depth - 2];
            let (frame, entry) = self
                .stacks
                .frame_and_entry_mut(below)
                .expect("a stack lists live frames");
            frame.session.add_user_message(text.clone());
            if self.config.persist {
                let line = crate::persist::ContextEntry::User {
                    agent_session_id: frame.agent_session_id,
                    text: text.clone(),
                }
                .line();
                self.effects.push_back(Effect::AppendContext { line });
            }
            if record {
                self.events.push(Event::UserMessage {
                    key: entry.key.clone(),
                    frame: frame.agent.frame_name.clone(),
                    frame_id: frame.frame_id,
                    text,
                });
            }
            return;
        }
        // The top frame, or the fork it waits on that asked the user.
        let id = self
            .stacks
            .asker(slot)
            .or_else(|| self.stacks.top_id(slot))
            .expect("a frame was just ensured");
        let top = self.stacks.frame(id).expect("a live frame");
        let waited = top.node.status == crate::agents::tree::Status::AwaitingUser;
        if record {
            self.events.push(Event::UserMessage {
                key: self.stacks.entry(slot).key.clone(),
                frame: top.agent.frame_name.clone(),
                frame_id: top.frame_id,
                text: text.clone(),
            });
        }
        if waited {
            self.set_status(id, crate::agents::tree::Status::Running);
        }
        self.drive(id, TurnInput::User(text));
    }

    /// Pushes the frame `make` builds on `slot`'s stack, built in its place in the arena, and
    /// records it.
    #[inline(always)]
    pub(super) fn push(&mut self, slot: usize, make: impl FnOnce() -> StackFrame) -> FrameId {
        let parent = self.stacks.top_id(slot);
        // The frame is built in the arena and read there: every change or read on the way
        // would cost a copy of the whole frame.
        let id = self.stacks.push_with(slot, make);
        self.pushed(id, parent);
        id
    }

    /// Records frame `id`, just pushed on top of `parent` (if any), and starts its node.
    #[inline(always)]
    fn pushed(&mut self, id: FrameId, parent: Option<FrameId>) {
        let (frame, entry) = self
            .stacks
            .frame_and_entry(id)
            .expect("a frame just pushed is live");
        let depth = entry.stack.depth();
        tracing::debug!(key = %entry.key, frame = %frame.agent.frame_name, depth, "push");
        if self.config.record_events {
            self.events.push(Event::Push {
                key: entry.key.clone(),
                frame: FrameInfo::of(frame),
                depth,
                frame_ref: id,
            });
        }
        self.node_started(id, parent, true);
    }

    /// Pops the frame on top of `slot`'s stack and records why.
    #[inline(always)]
    pub(super) fn pop(&mut self, slot: usize, reason: PopReason, result: &Arc<str>) -> StackFrame {
        self.end_top(slot, reason, result);
        self.stacks
            .pop(slot)
            .expect("the orchestration loop pops only a frame it ran")
    }

    /// Pops the child on top of `slot`'s stack, ended in place and dropped where it lies, and
    /// returns what its parent needs of it.
    #[inline(always)]
    pub(super) fn pop_left(&mut self, slot: usize, reason: PopReason, result: &Arc<str>) -> Left {
        self.end_top(slot, reason, result);
        let top = self.stacks.top_mut(slot).expect("the frame just ended");
        let left = Left {
            agent_session_id: top.agent_session_id,
            parent: top.parent,
            parent_tool_use_id: top.parent_tool_use_id.take(),
        };
        self.stacks.discard_top(slot);
        left
    }

    /// Ends the frame on top of `slot`'s stack for `reason` with `result`, in its place in the
    /// arena (a frame is large: each move out of it is a copy), and records its pop: its forks
    /// are cancelled and its node ends. The caller then takes it off the stack.
    #[inline(always)]
    pub(super) fn end_top(&mut self, slot: usize, reason: PopReason, result: &Arc<str>) {
        let id = self
            .stacks
            .top_id(slot)
            .expect("the orchestration loop pops only a frame it ran");
        let frame = self.stacks.frame(id).expect("a stack lists live frames");
        if frame.node.more().forks.iter().any(|r| r.frame.is_some()) {
            self.cancel_forks_of(id);
        }
        let (frame, entry) = self
            .stacks
            .frame_and_entry_mut(id)
            .expect("a stack lists live frames");
        let ending = super::tree::Ending {
            effects: &mut self.effects,
            events: &mut self.events,
            config: &self.config,
            ended: &mut self.ended,
        };
        ending.end(&entry.key, frame, reason.ended_as(), result, true);
        let depth = entry.stack.depth() - 1;
        tracing::debug!(key = %entry.key, frame = %frame.agent.frame_name, depth, ?reason, "pop");
        if self.config.record_events {
            self.events.push(Event::Pop {
                key: entry.key.clone(),
                frame: FrameInfo::of(frame),
                depth,
                reason,
                iterations: frame.iteration,
                from: frame.node.status,
            });
        }
    }

    pub(super) fn send(&mut self, slot: usize, frame: Arc<str>, text: Arc<str>) {
        let key = self.stacks.entry(slot).key.clone();
        if text.is_empty() {
            if self.config.record_events {
                self.events.push(Event::EmptyReply { key, frame });
            }
            return;
        }
        if self.config.record_events {
            self.events.push(Event::Sent {
                key: key.clone(),
                frame,
                text: text.clone(),
            });
        }
        self.effects.push_back(Effect::Send { key, text });
    }

    /// A cancel word: every pending `tool_use` on the way down gets "Cancelled by user.", the
    /// stack is cleared, queued messages are dropped and the user gets "Cancelled.".
    pub(super) fn unwind(&mut self, slot: usize, text: Arc<str>) {
        let frames = self.stacks.entry(slot).stack.depth();
        let keep = usize::from(self.config.has_bug(PlantedBug::CancelLeavesFrame));
        while self.stacks.entry(slot).stack.depth() > keep {
            if let Some(top) = self.stacks.top_id(slot) {
                self.withdraw_question(top);
            }
            self.with_top(slot, |frame, cx| {
                cx.stop(frame, Some(messages::CANCELLED_BY_USER), Phase::AwaitUser)
            });
            let frame = self.pop(
                slot,
                PopReason::Cancelled,
                &messages::CANCELLED_BY_USER.into(),
            );
            if !frame.is_main() {
                self.journal(|| crate::persist::ContextEntry::AgentSessionComplete {
                    agent_session_id: frame.agent_session_id,
                    result: messages::CANCELLED_BY_USER.into(),
                    is_error: true,
                });
            }
            if frame.is_main() {
                let entry = self.stacks.entry_mut(slot);
                entry.main_session = frame.session;
            }
        }
        let entry = self.stacks.entry_mut(slot);
        let dropped = entry.inbox.len();
        entry.inbox.clear();
        let key = entry.key.clone();
        if self.config.record_events {
            self.events.push(Event::Cancelled {
                key,
                text,
                frames,
                dropped,
            });
        }
        self.send(slot, "main".into(), messages::USER_CANCELLED.into());
    }
}

/// What a popped child leaves for its parent (see [`Runtime::pop_left`]).
pub(super) struct Left {
    /// Its session's id, for the journal.
    pub(super) agent_session_id: uuid::Uuid,
    /// Its parent frame (`None` for a main frame).
    pub(super) parent: Option<FrameId>,
    /// The parent's `tool_use` it answers (`None` for a main frame).
    pub(super) parent_tool_use_id: Option<Arc<str>>,
}
