//! The orchestration loop (seed 000's provider loop): run the top frame's turn, then act on how it
//! ended (send, push a child, pop with a result for the parent, cascade an error or a limit), until
//! the conversation waits. Every iteration returns or cascades; there is no recursion.

use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::tree::Status;
use crate::model::agent::{AgentResponse, EmptyAnswer, ToolCallRecord};
use crate::model::ids::FrameId;
use crate::model::messages;
use crate::model::transcript::{Block, Session};
use crate::protocol::{Effect, Event, PopReason};
use crate::runtime::planted::PlantedBug;

use super::turn::execute_turn;
use super::turn_context::{TurnAction, TurnCx, TurnInput, TurnResult};
use super::Runtime;

impl Runtime {
    /// Runs `f` on frame `id` with a turn context made of the runtime's other parts; `None` if
    /// the frame no longer lives.
    pub(super) fn with_frame<R>(
        &mut self,
        id: FrameId,
        f: impl FnOnce(&mut StackFrame, &mut TurnCx<'_>) -> R,
    ) -> Option<R> {
        let Runtime {
            stacks,
            catalog,
            config,
            effects,
            events,
            ids,
            seq,
            now,
            new_forks,
            ..
        } = self;
        let (frame, entry) = stacks.frame_and_entry_mut(id)?;
        let session = entry
            .session
            .as_ref()
            .map(|s| (s.id, s.failed, s.expires_at));
        let mut cx = TurnCx {
            key: &entry.key,
            frame: id.index(),
            catalog,
            config,
            effects,
            events,
            ids,
            seq,
            usage: &mut entry.usage,
            now: *now,
            forks: new_forks,
            session,
        };
        Some(f(frame, &mut cx))
    }

    /// Runs `f` on the frame on top of `slot`'s stack (see [`Runtime::with_frame`]).
    pub(super) fn with_top<R>(
        &mut self,
        slot: usize,
        f: impl FnOnce(&mut StackFrame, &mut TurnCx<'_>) -> R,
    ) -> Option<R> {
        let id = self.stacks.top_id(slot)?;
        self.with_frame(id, f)
    }

    /// The orchestration loop (seed 000's provider loop), starting with frame `id` and following
    /// the cascade from frame to frame: a pushed child runs next, a popped child's parent resumes
    /// with its result.
    pub(super) fn drive(&mut self, mut id: FrameId, mut input: TurnInput) {
        loop {
            // Opaque to the optimizer at each pass, so that the addresses of the runtime's parts
            // are worked out where a pass needs them, not all of them ahead of the loop.
            let this = std::hint::black_box(&mut *self);
            // An interrupted frame that waited for its child decides once the child's result is
            // in: continue, or end its send interrupted.
            let interrupted = this.config.interruptions.is_some()
                && this
                    .stacks
                    .frame(id)
                    .is_some_and(|f| f.watch.interrupted().is_some());
            if interrupted {
                if let TurnInput::ChildResult {
                    tool_use_id,
                    content,
                    is_error,
                } = input
                {
                    this.with_frame(id, |frame, cx| {
                        cx.add_result(frame, tool_use_id, content, is_error)
                    });
                    match this.decide(id) {
                        Ok(prompt) => input = prompt,
                        Err(result) => match this.act(id, result) {
                            Some((next, next_input)) => (id, input) = (next, next_input),
                            None => return,
                        },
                    }
                    continue;
                }
            }
            let result = this.with_frame(id, |frame, cx| {
                (execute_turn(frame, input, cx), frame.is_fork())
            });
            if !this.new_forks.is_empty() {
                // Forks start once the turn that forked them has stepped.
                this.start_new_forks();
            }
            let (result, fork) = match result {
                None => {
                    tracing::warn!(?id, "the frame to run is gone");
                    return;
                }
                Some((None, _)) => return,
                Some((Some(result), fork)) => (result, fork),
            };
            if fork {
                this.act_fork(id, result);
                return;
            }
            match this.act(id, result) {
                Some((next, next_input)) => (id, input) = (next, next_input),
                None => return,
            }
        }
    }

    /// Acts on how a turn of frame `id` ended (seed 000's orchestration `match`): `Some((frame,
    /// input))` cascades to that frame, `None` means the conversation now waits.
    pub(super) fn act(&mut self, id: FrameId, result: TurnResult) -> Option<(FrameId, TurnInput)> {
        if result.action != TurnAction::ChildActivated {
            self.end_send(id);
        }
        let top = self.stacks.frame(id).expect("the turn ran on it");
        let slot = top.conversation as usize;
        // An interactive conversation runs only the frame on top of its stack.
        debug_assert_eq!(self.stacks.top_id(slot), Some(id));
        let name = top.agent.frame_name.clone();
        let is_main = top.is_main();
        let top_batch = top.agent.batch;
        let next = match result.action {
            TurnAction::Interrupted => match top_batch {
                Some(policy) => return self.batch_interrupted(slot, result.text, policy),
                None => {
                    // An interactive frame: the user sees the display text; the frame waits.
                    self.send(slot, name, messages::INTERRUPTED_SENTINEL.into());
                    if is_main {
                        self.finish_main(
                            slot,
                            PopReason::Error,
                            messages::INTERRUPTED_SENTINEL.into(),
                        );
                    } else {
                        self.set_status(id, Status::AwaitingUser);
                    }
                    return None;
                }
            },
            TurnAction::SendText if top_batch.is_some() => {
                match self.batch_answer(slot, result.text, top_batch.expect("guarded")) {
                    Some(next) => return Some(next),
                    None => (id, TurnInput::User(messages::SUMMARY_PROMPT.into())),
                }
            }
            TurnAction::SendText => {
                self.send(slot, name, result.text.clone());
                if is_main {
                    self.finish_main(slot, PopReason::Answered, result.text);
                } else {
                    self.set_status(id, Status::AwaitingUser);
                }
                return None;
            }
            TurnAction::Interrupt => {
                self.send(slot, name, result.text);
                self.set_status(id, Status::AwaitingUser);
                return None;
            }
            TurnAction::ChildActivated => {
                let child = result.child.expect("ChildActivated carries the child");
                let child = self.push(slot, || child.frame());
                let frame = self.stacks.frame_mut(id).expect("the parent lives");
                match &mut frame.phase {
                    Phase::AwaitChildren { children } => children.push(child),
                    other => debug_assert!(false, "a spawning frame waits for children: {other:?}"),
                }
                (child, TurnInput::Start)
            }
            TurnAction::Complete => {
                // `complete` is never dispatched for the main frame, so there is a parent
                // (unless the main-complete-accepted bug is planted).
                let child = self.pop_left(slot, PopReason::Completed, &result.text);
                self.journal(|| crate::persist::ContextEntry::AgentSessionComplete {
                    agent_session_id: child.agent_session_id,
                    result: result.text.clone(),
                    is_error: false,
                });
                let (Some(tool_use_id), Some(parent)) = (child.parent_tool_use_id, child.parent)
                else {
                    self.stacks.clear(slot);
                    return None;
                };
                if self.config.has_bug(PlantedBug::DropCascadeResult) {
                    (parent, TurnInput::Start)
                } else {
                    if self.config.has_bug(PlantedBug::DoubleDelivery) {
                        self.deliver_extra(parent, &tool_use_id, &result.text);
                    }
                    let input = TurnInput::ChildResult {
                        tool_use_id,
                        content: result.text,
                        is_error: false,
                    };
                    (parent, input)
                }
            }
            TurnAction::MaxIterations
                if is_main && self.config.has_bug(PlantedBug::MainLimitSilent) =>
            {
                self.finish_main(slot, PopReason::Answered, "".into());
                return None;
            }
            TurnAction::MaxIterations if is_main => {
                self.send(slot, name, messages::USER_MAX_STEPS.into());
                self.finish_main(
                    slot,
                    PopReason::MaxIterations,
                    messages::USER_MAX_STEPS.into(),
                );
                return None;
            }
            TurnAction::Error if is_main => {
                let banner: Arc<str> = messages::llm_error(&result.text).into();
                self.send(slot, name, banner.clone());
                self.finish_main(slot, PopReason::Error, banner);
                return None;
            }
            TurnAction::MaxIterations => {
                let content = if self.config.has_bug(PlantedBug::DisplayLeak) {
                    messages::USER_MAX_STEPS
                } else {
                    messages::CHILD_MAX_ITERATIONS
                };
                self.pop_child(slot, PopReason::MaxIterations, content.into(), true)
            }
            TurnAction::Error => {
                let content: Arc<str> = messages::llm_error(&result.text).into();
                let is_error = !self.config.has_bug(PlantedBug::ChildErrorAsSuccess);
                self.pop_child(slot, PopReason::Error, content, is_error)
            }
        };
        Some(next)
    }

    /// Pops the child on top, journals its completion, and returns its result for its parent.
    pub(super) fn pop_child(
        &mut self,
        slot: usize,
        reason: PopReason,
        content: Arc<str>,
        is_error: bool,
    ) -> (FrameId, TurnInput) {
        let child = self.pop_left(slot, reason, &content);
        self.journal(|| crate::persist::ContextEntry::AgentSessionComplete {
            agent_session_id: child.agent_session_id,
            result: content.clone(),
            is_error,
        });
        let parent = child.parent.expect("a child frame names its parent");
        let input = TurnInput::ChildResult {
            tool_use_id: child
                .parent_tool_use_id
                .expect("a child frame names its parent's tool_use"),
            content,
            is_error,
        };
        (parent, input)
    }

    /// A batch child's send ended with `text`. Applies the empty-answer policy: either the child
    /// is popped and its answer goes to the parent (`Some(input for the parent)`), or it gets a
    /// second send asking for a summary (`None`: the caller feeds it the summary prompt).
    pub(super) fn batch_answer(
        &mut self,
        slot: usize,
        text: Arc<str>,
        policy: EmptyAnswer,
    ) -> Option<(FrameId, TurnInput)> {
        let record = self.config.record_events;
        let key = self.stacks.entry(slot).key.clone();
        let frame = self.stacks.top_mut(slot).expect("the batch child ran");
        let frame_name = frame.agent.frame_name.clone();
        let mut answer = text;
        if answer.trim().is_empty() && policy != EmptyAnswer::AcceptEmpty {
            let any_role = self.config.has_bug(PlantedBug::BatchExtractsUserText);
            let extracted = frame
                .session
                .messages
                .iter()
                .rev()
                .filter(|m| m.role == crate::model::transcript::Role::Assistant || any_role)
                .map(|m| m.text())
                .find(|t| !t.trim().is_empty());
            match extracted {
                Some(t) => answer = t.into(),
                None if policy == EmptyAnswer::AskForSummary && frame.batch_sends < 2 => {
                    frame.batch_sends += 1;
                    if record {
                        self.events.push(Event::Delegation {
                            key,
                            frame: frame_name,
                            what: "summary request",
                            text: messages::SUMMARY_PROMPT.into(),
                        });
                    }
                    return None;
                }
                None => {}
            }
        }
        if record {
            self.events.push(Event::Delegation {
                key,
                frame: frame_name,
                what: "answer",
                text: answer.clone(),
            });
        }
        Some(self.pop_child(slot, PopReason::Completed, answer, false))
    }

    /// The double-delivery bug: a second copy of a child's result in the parent's session.
    pub(super) fn deliver_extra(
        &mut self,
        parent: FrameId,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
    ) {
        let record = self.config.record_events;
        let Some((parent, entry)) = self.stacks.frame_and_entry_mut(parent) else {
            return;
        };
        if record {
            self.events.push(Event::ToolResult {
                key: entry.key.clone(),
                frame: parent.agent.frame_name.clone(),
                frame_id: parent.frame_id,
                session_id: parent.agent_session_id,
                tool_use_id: tool_use_id.clone(),
                content: content.clone(),
                is_error: false,
            });
        }
        parent
            .session
            .add_tool_result(tool_use_id.clone(), content.clone(), false);
        if self.config.persist {
            let line = crate::persist::ContextEntry::ToolResult {
                agent_session_id: parent.agent_session_id,
                tool_use_id: tool_use_id.clone(),
                content: content.clone(),
                is_error: false,
            }
            .line();
            self.effects.push_back(Effect::AppendContext { line });
        }
    }

    /// Pops the main frame after it answered (or failed), keeps its session for the next turn and
    /// clears the stack (seed 000: "pop main frame, ..., clear stack").
    pub(super) fn finish_main(&mut self, slot: usize, reason: PopReason, text: Arc<str>) {
        self.end_top(slot, reason, &text);
        // What the turn's end needs is taken out, and the frame dropped where it lies.
        // Its session is kept for the next turn, swapped with the empty one its start left.
        let id = self.stacks.top_id(slot).expect("the main frame just ended");
        let (main, entry) = self
            .stacks
            .frame_and_entry_mut(id)
            .expect("a stack lists live frames");
        std::mem::swap(&mut main.session, &mut entry.main_session);
        let ended = MainEnded {
            turn_start: main.turn_start,
            iterations: main.iteration,
        };
        self.stacks.discard_top(slot);
        self.end_main_turn(slot, ended, text, reason == PopReason::Answered);
    }

    /// The main frame left the stack with `text` for the user, its session already back in
    /// its conversation's entry: its turn's response is recorded, the stack cleared.
    pub(super) fn end_main_turn(
        &mut self,
        slot: usize,
        main: MainEnded,
        text: Arc<str>,
        answered: bool,
    ) {
        if self.stacks.entry(slot).session.is_some() {
            self.session_ended(slot, answered, &text);
        }
        if self.config.record_events {
            let tool_calls = if self.config.detailed_events {
                tool_calls_since(&self.stacks.entry(slot).main_session, main.turn_start)
            } else {
                Vec::new()
            };
            let response = AgentResponse {
                text,
                tool_calls,
                iterations: main.iterations,
            };
            let key = self.stacks.entry(slot).key.clone();
            self.events.push(Event::Response { key, response });
        }
        self.stacks.clear(slot);
        if self.config.has_bug(PlantedBug::InboxClearedWithTurn) {
            self.stacks.entry_mut(slot).inbox.clear();
        }
    }
}

/// What the end of a main frame's turn reads of it.
pub(super) struct MainEnded {
    /// Where the turn began in it.
    pub(super) turn_start: usize,
    /// The iterations it used.
    pub(super) iterations: u32,
}

/// The tool calls of the main agent's current turn, with their results.
fn tool_calls_since(session: &Session, start: usize) -> Vec<ToolCallRecord> {
    let messages = &session.messages[start.min(session.messages.len())..];
    let mut out = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        for u in message.tool_uses() {
            let (result, is_error) = messages[i + 1..]
                .iter()
                .flat_map(|m| m.content.iter())
                .find_map(|b| match b {
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } if tool_use_id == u.id => Some((content.clone(), *is_error)),
                    _ => None,
                })
                .unwrap_or_else(|| ("".into(), false));
            out.push(ToolCallRecord {
                id: u.id.clone(),
                name: u.name.clone(),
                input: u.input.clone(),
                result,
                is_error,
            });
        }
    }
    out
}
