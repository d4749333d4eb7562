//! One turn of one frame: seed 000's `execute_turn`, which is also seed 002's agent core loop
//! (LLM → tools → LLM until a text reply), written as a resumable state machine.
//!
//! The seed's version is an `async` function that awaits the model and each tool. A sans-IO runtime
//! cannot await, so the loop keeps its position in [`Phase`] and returns `None` whenever it needs
//! the driver (a model reply, a tool outcome, a timer); the driver feeds the answer back as a
//! [`TurnInput`] and the loop continues exactly where it stopped. The iteration accounting is the
//! seed's: every pass through the loop head counts one iteration, whether it calls the model or
//! only runs the tool uses left unresolved when a child completed.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::tools::ToolOutput;
use crate::agents::tree::Status;
use crate::model::agent::Catalog;
use crate::model::ids::{call_id, CallId, IdSource};
use crate::model::llm::{LlmError, LlmReply, Usage};
use crate::model::messages;
use crate::model::transcript::{Block, BlockAt, Content};
use crate::persist::ContextEntry;
use crate::protocol::{Effect, Event, StreamEvent};
use crate::runtime::planted::PlantedBug;
use crate::runtime::RuntimeConfig;

use super::dispatch::{on_tool_outcome, on_tool_timeout, run_next_tool};

/// What resumes a frame's turn.
#[derive(Clone, Debug)]
pub enum TurnInput {
    /// Start or resume at the loop head (a new child's first turn).
    Start,
    /// A user message routed to this frame.
    User(Arc<str>),
    /// A child finished; its result answers this frame's `tool_use`.
    ChildResult {
        /// The `tool_use` that spawned the child.
        tool_use_id: Arc<str>,
        /// The child's result or error text.
        content: Arc<str>,
        /// Whether the child failed.
        is_error: bool,
    },
    /// The model replied.
    LlmReply(LlmReply),
    /// A streamed reply ended; its text was already published chunk by chunk.
    LlmStreamEnd(LlmReply),
    /// The model call failed.
    LlmError(LlmError),
    /// An external tool finished.
    ToolDone {
        /// The run.
        call: CallId,
        /// Its output.
        output: ToolOutput,
    },
    /// A tool's timeout fired first.
    ToolTimeout {
        /// The timer.
        timer: CallId,
    },
    /// Every fork a workflow agent waited for ended.
    SubagentsDone,
    /// An async question timed out and its session failed: its `ask_user` gets this error.
    QuestionFailed(Arc<str>),
    /// The answer the frame waited for is already in its session (a restore found it in the
    /// journal, ahead of the state): it goes on from there.
    Answered,
    /// The fork a `wait` waited for ended.
    ForkDone {
        /// The `wait` tool use.
        at: BlockAt,
        /// The fork's final text (or failure).
        content: Arc<str>,
        /// Whether the fork failed.
        is_error: bool,
    },
}

/// What a turn may touch besides its frame: the effect and event queues, ids, the catalog.
pub struct TurnCx<'a> {
    /// Session key of the conversation.
    pub key: &'a Arc<str>,
    /// The arena index of the frame that runs (the high bits of every call id it issues).
    pub frame: u32,
    /// Declared agents.
    pub catalog: &'a Catalog,
    /// Runtime settings.
    pub config: &'a RuntimeConfig,
    /// Effects for the driver.
    pub effects: &'a mut VecDeque<Effect>,
    /// Events for observers; pushed only when `config.record_events`.
    pub events: &'a mut Vec<Event>,
    /// Id source for new frames.
    pub ids: &'a mut IdSource,
    /// Call counter.
    pub seq: &'a mut u64,
    /// The conversation's usage total.
    pub usage: &'a mut Usage,
    /// Virtual time now, as the driver last set it.
    pub now: u64,
    /// Forks started in this turn, placed and started by the runtime once the turn has stepped.
    pub forks: &'a mut Vec<StackFrame>,
    /// The triggered session the conversation is (seed 003), if it is one: its id, and whether
    /// it already failed, and when it expires.
    pub session: Option<(uuid::Uuid, bool, Option<u64>)>,
}

impl TurnCx<'_> {
    pub(super) fn next_call(&mut self) -> CallId {
        *self.seq += 1;
        call_id(self.frame, *self.seq)
    }

    pub(super) fn record(&mut self, event: impl FnOnce() -> Event) {
        if self.config.record_events {
            self.events.push(event());
        }
    }

    /// Records activity for the frame's watchdog, if `kind` counts as activity.
    pub fn activity(
        &self,
        frame: &mut StackFrame,
        kind: fn(&crate::agents::watchdog::Activity) -> bool,
    ) {
        if let Some(ic) = &self.config.interruptions {
            if kind(&ic.activity) {
                frame.watch.activity(self.now);
            }
        }
    }

    /// Journals a session operation to `context.jsonl` when persistence is on.
    pub fn journal(&mut self, entry: impl FnOnce() -> ContextEntry) {
        if self.config.persist {
            let line = entry().line();
            self.effects.push_back(Effect::AppendContext { line });
        }
    }

    /// Records an event that only a transcript reads.
    #[inline]
    pub(super) fn detail(&mut self, event: impl FnOnce() -> Event) {
        if self.config.record_events && self.config.detailed_events {
            self.events.push(event());
        }
    }

    #[inline]
    pub(super) fn stream(&mut self, frame: &StackFrame, event: impl FnOnce() -> StreamEvent) {
        if frame.agent.stream {
            let event = event();
            self.detail(|| Event::Stream {
                key: self.key.clone(),
                frame: frame.agent.frame_name.clone(),
                event: event.clone(),
            });
            self.effects.push_back(Effect::Stream {
                key: self.key.clone(),
                event,
            });
        }
    }

    /// Appends a `tool_result` to the frame's session and records it.
    pub fn add_result(
        &mut self,
        frame: &mut StackFrame,
        tool_use_id: Arc<str>,
        content: Arc<str>,
        is_error: bool,
    ) {
        self.record(|| Event::ToolResult {
            key: self.key.clone(),
            frame: frame.agent.frame_name.clone(),
            frame_id: frame.frame_id,
            session_id: frame.agent_session_id,
            tool_use_id: tool_use_id.clone(),
            content: content.clone(),
            is_error,
        });
        self.journal(|| ContextEntry::ToolResult {
            agent_session_id: frame.agent_session_id,
            tool_use_id: tool_use_id.clone(),
            content: content.clone(),
            is_error,
        });
        frame
            .session
            .add_tool_result(tool_use_id, content, is_error);
    }

    /// Appends the result of the tool use at `at`, which this frame dispatched, with its stream
    /// indicator. `name` overrides the tool's name in that indicator (a passthrough skill runs
    /// under its own name).
    pub(super) fn finish_tool(
        &mut self,
        frame: &mut StackFrame,
        at: BlockAt,
        name: Option<&Arc<str>>,
        content: Arc<str>,
        is_error: bool,
    ) {
        let Some(tool_use) = frame.session.tool_use_at(at) else {
            // Sessions only grow, so a waiting frame's tool use stays where it was; were it gone,
            // the observer would report the tool use left without a result.
            debug_assert!(false, "no tool_use at {at:?}");
            return;
        };
        let id = tool_use.id.clone();
        let name = name.unwrap_or(tool_use.name);
        self.stream(frame, || StreamEvent::ToolFinish {
            name: name.clone(),
            id: id.clone(),
            is_error,
        });
        self.add_result(frame, id, content, is_error);
    }

    /// Stops `frame` where it is: its timers are cancelled, its open tool uses answered with
    /// `skip` (when given; a call in flight becomes stale), and it is left in `then`.
    pub(super) fn stop(&mut self, frame: &mut StackFrame, skip: Option<&str>, then: Phase) {
        for timer in super::frame_timers(&frame.phase) {
            self.effects.push_back(Effect::CancelTimer { timer });
        }
        if let Some(skip) = skip {
            self.resolve_all(frame, skip);
        }
        frame.phase = then;
    }

    /// Opens a question of `frame` (seed 001): a new id, its `question` event, and the frame
    /// waiting for the answer (`tool_use_id`: the `ask_user` it answers, `None` for a
    /// workflow's; `timer`: an async question's timeout). The question's id.
    pub(super) fn open_question(
        &mut self,
        frame: &mut StackFrame,
        tool_use_id: Option<Arc<str>>,
        text: Arc<str>,
        timer: Option<(CallId, u64)>,
    ) -> uuid::Uuid {
        let question = self.ids.next_uuid();
        self.record(|| Event::Question {
            key: self.key.clone(),
            agent_id: frame.frame_id,
            frame: frame.agent.frame_name.clone(),
            question_id: question,
            tool_use_id: tool_use_id.clone(),
            text,
        });
        frame.phase = Phase::AwaitAnswer {
            tool_use_id,
            question,
            timer,
        };
        question
    }

    /// Answers every unresolved `tool_use` of the frame with the same error text.
    pub fn resolve_all(&mut self, frame: &mut StackFrame, content: &str) {
        let ids: Vec<Arc<str>> = frame
            .session
            .unresolved_tool_uses()
            .iter()
            .map(|u| u.id.clone())
            .collect();
        let content: Arc<str> = content.into();
        for id in ids {
            self.add_result(frame, id, content.clone(), true);
        }
    }
}

/// Runs the frame until its turn ends (`Some`) or it waits for the driver (`None`).
///
/// The caller has checked that `input` is what the frame waits for (a reply to *its* call, a
/// result of *its* tool); stale inputs never get here.
#[inline]
pub fn execute_turn(
    frame: &mut StackFrame,
    input: TurnInput,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    match input {
        TurnInput::Start => {
            frame.phase = Phase::Loop;
            if frame.agent.workflow.is_some() {
                super::workflow::begin(frame, cx);
            }
        }
        TurnInput::User(text) => match std::mem::take(&mut frame.phase) {
            Phase::AwaitAnswer {
                tool_use_id: None,
                timer,
                ..
            } => {
                if let Some((timer, _)) = timer {
                    cx.effects.push_back(Effect::CancelTimer { timer });
                }
                return super::workflow::answered(frame, text, cx);
            }
            Phase::AwaitAnswer {
                tool_use_id: Some(tool_use_id),
                timer,
                ..
            } => {
                if let Some((timer, _)) = timer {
                    cx.effects.push_back(Effect::CancelTimer { timer });
                }
                if cx.config.has_bug(PlantedBug::AnswerCountsAnIteration) {
                    frame.iteration += 1;
                }
                cx.add_result(frame, tool_use_id, text, false);
                frame.phase = Phase::RunTools;
            }
            _ => {
                if !(frame.is_main() && cx.config.has_bug(PlantedBug::MainMessagesUnjournaled)) {
                    cx.journal(|| ContextEntry::User {
                        agent_session_id: frame.agent_session_id,
                        text: text.clone(),
                    });
                }
                frame.session.add_user_message(text);
                frame.phase = Phase::Loop;
                if frame.agent.workflow.is_some() {
                    super::workflow::begin(frame, cx);
                }
            }
        },
        TurnInput::ChildResult {
            tool_use_id,
            content,
            is_error,
        } => {
            cx.add_result(frame, tool_use_id, content, is_error);
            frame.phase = Phase::Loop;
            frame.resumed_from_child = true;
        }
        TurnInput::LlmReply(reply) => return on_reply(frame, reply, false, cx),
        TurnInput::LlmStreamEnd(reply) => return on_reply(frame, reply, true, cx),
        TurnInput::LlmError(error) => {
            cx.record(|| Event::LlmError {
                key: cx.key.clone(),
                frame: frame.agent.frame_name.clone(),
                frame_id: frame.frame_id,
                kind: error.kind,
                message: error.message.as_str().into(),
            });
            frame.phase = Phase::Loop;
            return Some(TurnResult::new(TurnAction::Error, error.message));
        }
        TurnInput::ToolDone { call, output } => {
            if !on_tool_outcome(frame, call, output.content, output.is_error, cx) {
                return None;
            }
        }
        TurnInput::ToolTimeout { timer } => {
            if !on_tool_timeout(frame, timer, cx) {
                return None;
            }
        }
        TurnInput::QuestionFailed(text) => match std::mem::take(&mut frame.phase) {
            Phase::AwaitAnswer {
                tool_use_id: Some(tool_use_id),
                ..
            } => {
                cx.add_result(frame, tool_use_id, text, true);
                frame.phase = Phase::RunTools;
            }
            // A workflow's question: the failure is what it hears back.
            Phase::AwaitAnswer {
                tool_use_id: None, ..
            } => return super::workflow::answered(frame, text, cx),
            other => {
                frame.phase = other;
                return None;
            }
        },
        TurnInput::Answered => {
            if let Phase::AwaitAnswer {
                timer: Some((timer, _)),
                ..
            } = frame.phase
            {
                cx.effects.push_back(Effect::CancelTimer { timer });
            }
            frame.phase = Phase::RunTools;
        }
        TurnInput::SubagentsDone => {
            if !matches!(frame.phase, Phase::AwaitSubagents) {
                return None;
            }
            return super::workflow::children_done(frame, cx);
        }
        TurnInput::ForkDone {
            at,
            content,
            is_error,
        } => {
            if !matches!(frame.phase, Phase::AwaitFork { .. }) {
                return None;
            }
            cx.finish_tool(frame, at, None, content, is_error);
            frame.phase = Phase::RunTools;
        }
    }
    run(frame, cx)
}

/// The loop proper, from the frame's current phase.
pub(super) fn run(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    // Set when running tools just found none left, so the loop head need not look again.
    let mut all_resolved = false;
    loop {
        match frame.phase {
            Phase::Loop => {
                let limit = if cx.config.has_bug(PlantedBug::IterationOffByOne) {
                    frame.max_iterations + 1
                } else {
                    frame.max_iterations
                };
                if frame.iteration >= limit {
                    cx.resolve_all(frame, messages::SKIPPED_AFTER_LIMIT);
                    return Some(TurnResult::new(TurnAction::MaxIterations, ""));
                }
                frame.iteration += 1;
                let skip = cx.config.has_bug(PlantedBug::SkipUnresolvedAfterChild)
                    && frame.resumed_from_child;
                frame.resumed_from_child = false;
                if !skip && !all_resolved && frame.session.next_unresolved_tool_use().is_some() {
                    if cx.config.has_bug(PlantedBug::ToolPassUncounted) {
                        frame.iteration -= 1;
                    }
                    frame.phase = Phase::RunTools;
                    continue;
                }
                if frame.node.more().pending_modify.is_some()
                    || frame.node.status != Status::Running
                {
                    task_checkpoint(frame, cx);
                }
                let call = cx.next_call();
                tracing::debug!(frame = %frame.agent.frame_name, iteration = frame.iteration, "model call");
                cx.record(|| Event::LlmRequest {
                    key: cx.key.clone(),
                    frame: frame.agent.frame_name.clone(),
                    frame_id: frame.frame_id,
                    session_id: frame.agent_session_id,
                    call,
                    iteration: frame.iteration,
                    max_iterations: frame.max_iterations,
                    messages: frame.session.messages.len(),
                });
                cx.effects.push_back(Effect::CallLlm { call });
                frame.phase = Phase::AwaitLlm {
                    call,
                    partial: Content::new(),
                };
                return None;
            }
            Phase::RunTools => {
                if let Some(done) = run_next_tool(frame, cx) {
                    return done;
                }
                all_resolved = matches!(frame.phase, Phase::Loop);
            }
            _ => return None,
        }
    }
}

/// The checkpoint before a model call: a modification's new task reaches the agent as a user
/// text, and the agent runs again.
fn task_checkpoint(frame: &mut StackFrame, cx: &mut TurnCx<'_>) {
    if let Some(content) = frame
        .node
        .more
        .as_mut()
        .and_then(|m| m.pending_modify.take())
    {
        let text: Arc<str> = crate::agents::tree::task_changed(&content).into();
        cx.record(|| Event::TaskChanged {
            key: cx.key.clone(),
            frame: frame.agent.frame_name.clone(),
            agent_id: frame.frame_id,
            text: text.clone(),
        });
        cx.journal(|| ContextEntry::User {
            agent_session_id: frame.agent_session_id,
            text: text.clone(),
        });
        frame.session.add_user_message(text);
    }
    cx.set_status(frame, Status::Running);
}

fn on_reply(
    frame: &mut StackFrame,
    mut reply: LlmReply,
    streamed: bool,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    // Both APIs reject empty text blocks: a reply of nothing but empty text is an empty reply.
    let empty_text = |b: &Block| matches!(b, Block::Text { text } if text.is_empty());
    if reply.content.iter().any(empty_text) {
        reply.content.retain(|b| !empty_text(b));
    }
    frame.usage += reply.usage;
    *cx.usage += reply.usage;
    cx.activity(frame, |a| a.first_output);
    cx.detail(|| Event::LlmReply {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        content: reply.content.clone(),
        usage: reply.usage,
    });
    if reply.content.is_empty() {
        // An empty reply sends nothing; it is not added to the session either, since the APIs
        // reject an empty assistant message.
        if cx.config.has_bug(PlantedBug::EmptyReplyRecorded) {
            cx.journal(|| ContextEntry::Assistant {
                agent_session_id: frame.agent_session_id,
                content: Content::new(),
            });
            frame.session.add_assistant_message(Content::new());
        }
        frame.phase = Phase::AwaitUser;
        return Some(TurnResult::new(TurnAction::SendText, ""));
    }
    let mut has_tool_use = false;
    for (i, block) in reply.content.iter().enumerate() {
        match block {
            Block::Text { .. } => {}
            Block::ToolUse { id, .. } => {
                has_tool_use = true;
                // A reused id would make the next request invalid under both APIs: the reply is
                // rejected as a failed call instead of corrupting the session.
                let earlier = reply.content[..i]
                    .iter()
                    .any(|b| matches!(b, Block::ToolUse { id: other, .. } if crate::model::ids::same_id(other, id)));
                if earlier || frame.session.has_tool_use_id(id) {
                    let message = format!("invalid reply: duplicate tool_use id '{id}'");
                    return reject_reply(frame, message, cx);
                }
            }
            Block::ToolResult { .. } => {
                let message = "invalid reply: a model reply cannot hold a tool_result".to_owned();
                return reject_reply(frame, message, cx);
            }
        }
    }
    let text = reply_text(&reply.content);
    if let (false, Some(text)) = (streamed, &text) {
        cx.stream(frame, || StreamEvent::TextDelta { text: text.clone() });
    }
    cx.journal(|| ContextEntry::Assistant {
        agent_session_id: frame.agent_session_id,
        content: reply.content.clone(),
    });
    frame.session.add_assistant_message(reply.content);
    if has_tool_use
        && frame.iteration >= frame.max_iterations
        && cx.config.has_bug(PlantedBug::ToolsSkippedOnLastIteration)
    {
        cx.resolve_all(frame, messages::SKIPPED_AFTER_LIMIT);
        return Some(TurnResult::new(TurnAction::MaxIterations, ""));
    }
    if has_tool_use {
        // Text next to tool uses is recorded but not sent (DESIGN §3 item 5).
        frame.phase = Phase::RunTools;
        run(frame, cx)
    } else if frame.agent.workflow.is_some() && super::workflow::active(frame) {
        // A workflow agent's text is the decision of its step.
        super::workflow::on_text(frame, text.unwrap_or_else(|| "".into()), cx)
    } else {
        frame.phase = Phase::AwaitUser;
        Some(TurnResult::new(
            TurnAction::SendText,
            text.unwrap_or_else(|| "".into()),
        ))
    }
}

/// The reply's text: one block's text is shared as it is, several are joined.
fn reply_text(content: &[Block]) -> Option<Arc<str>> {
    let mut texts = content.iter().filter_map(|b| match b {
        Block::Text { text } => Some(text),
        _ => None,
    });
    let first = texts.next()?;
    let Some(second) = texts.next() else {
        return Some(first.clone());
    };
    let mut all = String::from(&**first);
    all.push_str(second);
    texts.for_each(|t| all.push_str(t));
    Some(all.into())
}

fn reject_reply(
    frame: &mut StackFrame,
    message: String,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    cx.record(|| Event::LlmError {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        kind: crate::model::llm::LlmErrorKind::Other,
        message: message.as_str().into(),
    });
    frame.phase = Phase::Loop;
    Some(TurnResult::new(TurnAction::Error, message))
}

/// How a turn of a frame ended (seed 000's `TurnAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnAction {
    /// The frame produced text for the user and waits for a reply.
    SendText,
    /// The frame called `complete`; pop it.
    Complete,
    /// A tool pushed a child frame.
    ChildActivated,
    /// The frame asked the user a question (`ask_user`, seed 000's INTERRUPT).
    Interrupt,
    /// The frame hit its iteration limit.
    MaxIterations,
    /// The frame's model call failed.
    Error,
    /// The frame's send ended interrupted (seed 004; only with interruptions modelled).
    Interrupted,
}

/// The end of one turn (seed 000's `TurnResult`).
#[derive(Clone, Debug)]
pub struct TurnResult {
    /// What happened.
    pub action: TurnAction,
    /// Text for the user, the completion result, or the error text.
    pub text: Arc<str>,
    /// The new child, for [`TurnAction::ChildActivated`].
    pub(super) child: Option<Box<super::dispatch::ChildSpec>>,
}

impl TurnResult {
    /// A result with text and no child.
    pub fn new(action: TurnAction, text: impl Into<Arc<str>>) -> TurnResult {
        TurnResult {
            action,
            text: text.into(),
            child: None,
        }
    }
}
