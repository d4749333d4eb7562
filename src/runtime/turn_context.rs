//! What a turn takes and gives: the [`TurnInput`] that resumes a frame, the [`TurnCx`] it may
//! touch besides its frame (the effect and event queues, ids, the catalog), and the
//! [`TurnResult`] it ends with, which carries the [`ChildSpec`] of a child it spawns. Every part
//! of the turn machinery (the loop, tool dispatch, forks, workflows, async questions) speaks in
//! these; none of them is needed to define them.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::tools::{SpawnRequest, ToolOutput};
use crate::model::agent::Catalog;
use crate::model::ids::{call_id, CallId, IdSource};
use crate::model::llm::{LlmError, LlmReply, Usage};
use crate::model::transcript::{BlockAt, Session};
use crate::persist::ContextEntry;
use crate::protocol::{Effect, Event, StreamEvent};
use crate::runtime::RuntimeConfig;

/// What resumes a frame's turn.
#[derive(Clone, Debug)]
pub(crate) enum TurnInput {
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
pub(crate) struct TurnCx<'a> {
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
    pub(crate) fn add_result(
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
    pub(crate) fn resolve_all(&mut self, frame: &mut StackFrame, content: &str) {
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

/// How a turn of a frame ended (seed 000's `TurnAction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TurnAction {
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
pub(crate) struct TurnResult {
    /// What happened.
    pub action: TurnAction,
    /// Text for the user, the completion result, or the error text.
    pub text: Arc<str>,
    /// The new child, for [`TurnAction::ChildActivated`].
    pub(super) child: Option<Box<ChildSpec>>,
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

/// A child a spawn asks for (seed 000's `UseSkillTool.execute`, minus the exception), with its
/// ids drawn. The orchestration loop builds its frame in its place in the arena when it pushes
/// it: a frame built here and carried there would be copied at every step.
#[derive(Clone, Debug)]
pub(super) struct ChildSpec {
    /// What the spawn asked for.
    pub(super) req: SpawnRequest,
    /// The parent's `tool_use` the child answers.
    pub(super) parent_tool_use_id: Arc<str>,
    /// Its session's id.
    pub(super) agent_session_id: uuid::Uuid,
    /// Its agent id.
    pub(super) frame_id: uuid::Uuid,
}

impl ChildSpec {
    pub(super) fn new(
        req: SpawnRequest,
        parent_tool_use_id: Arc<str>,
        ids: &mut IdSource,
    ) -> ChildSpec {
        let agent_session_id = ids.next_uuid();
        let frame_id = ids.next_uuid();
        ChildSpec {
            req,
            parent_tool_use_id,
            agent_session_id,
            frame_id,
        }
    }

    /// The child's frame: its session holds the task as its first user message.
    #[inline(always)]
    pub(super) fn frame(self) -> StackFrame {
        let mut session = Session::with_id(self.agent_session_id);
        session.add_user_message(self.req.message.clone());
        let batch_sends = u32::from(self.req.agent.batch.is_some());
        StackFrame::with_task(
            self.frame_id,
            self.req.agent,
            session,
            self.agent_session_id,
            Some(self.parent_tool_use_id),
            batch_sends,
            self.req.message,
        )
    }
}
