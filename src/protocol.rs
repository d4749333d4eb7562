//! The contract between the runtime and the drivers that run it: [`Input`], [`Effect`], [`Event`]
//! and the [`StreamEvent`]s a conversation publishes.
//!
//! A driver owns a [`crate::runtime::Runtime`] and loops: feed one [`Input`] with
//! [`crate::runtime::Runtime::handle`], then take every [`Effect`] with
//! [`crate::runtime::Runtime::poll_effect`] and carry it out. The runtime never waits; a driver may
//! carry out effects at once (the simulator) or concurrently (the tokio driver). The rules a second
//! driver must keep:
//!
//! - **Calls are named, not copied.** [`Effect::CallLlm`] and [`Effect::RunTool`] name a
//!   [`CallId`] only. The driver borrows what to send with `Runtime::request(call)` or
//!   `Runtime::tool_run(call)`. The borrow is valid until the next `handle`: a driver that sends
//!   the request later (over HTTP, say) serialises or copies it before it feeds the next input.
//!   Either answers `None` when the call is already *stale*.
//! - **Stale calls.** A call is stale once nobody waits for it: its frame was cancelled, deleted,
//!   interrupted or timed out, or a restart replaced the runtime that issued it. A driver may
//!   drop a stale call, or feed its answer anyway: the runtime records [`Event::Stale`] and
//!   changes nothing. Answers are matched by [`CallId`], never by position or time.
//! - **Timers.** [`Effect::SetTimer`] asks for [`Input::Timer`] after a delay on the driver's clock;
//!   [`Effect::CancelTimer`] withdraws it (a late firing is stale, as above). Before each input the
//!   driver tells the runtime the time with `Runtime::set_now`; the runtime reads no clock.
//! - **Persistence.** With persistence on, [`Effect::AppendContext`] carries journal lines in the
//!   order of the session operations they record, and [`Effect::WriteState`] the whole state at a
//!   consistent point. A driver must make each append durable before it writes a later state
//!   (the state never names an entry the journal lacks), write the state atomically, and apply
//!   both in the order they were emitted. Restoring from the last state and the journal gives a
//!   runtime that continues the same run; calls that were in flight are issued again.
//! - **User-facing output.** [`Effect::Send`] and [`Effect::Stream`] go to the user or the stream
//!   subscribers of a conversation; they never feed back into the runtime.
//!
//! [`Event`]s are the runtime's record of what happened, for observers and transcripts; a driver
//! needs none of them to run the runtime.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::agents::frame::StackFrame;
use crate::agents::tools::{ToolError, ToolOutput};
use crate::agents::tree::{Intervention, InterventionOutcome, Status};
use crate::model::agent::{AgentDef, AgentKind, AgentResponse};
use crate::model::ids::{CallId, FrameId};
use crate::model::llm::{Chunk, LlmError, LlmErrorKind, LlmReply, Usage};
use crate::model::transcript::Content;

/// What the driver feeds the runtime.
#[derive(Clone, Debug)]
pub enum Input {
    /// A user message for the conversation `key`.
    User {
        /// Session key.
        key: Arc<str>,
        /// The text.
        text: Arc<str>,
    },
    /// A complete model reply.
    LlmReply {
        /// The call it answers.
        call: CallId,
        /// The reply.
        reply: LlmReply,
    },
    /// One chunk of a streamed reply.
    LlmChunk {
        /// The call it belongs to.
        call: CallId,
        /// The chunk.
        chunk: Chunk,
    },
    /// The end of a streamed reply.
    LlmEnd {
        /// The call.
        call: CallId,
        /// Token usage.
        usage: Usage,
    },
    /// A failed model call.
    LlmError {
        /// The call.
        call: CallId,
        /// What went wrong.
        error: LlmError,
    },
    /// An external tool finished: its output, or the error it failed with (which the runtime turns
    /// into `Tool execution failed: <message>`).
    ToolDone {
        /// The run.
        call: CallId,
        /// Its outcome.
        result: Result<ToolOutput, ToolError>,
    },
    /// A timer fired.
    Timer {
        /// The timer.
        timer: CallId,
    },
    /// A user intervenes on a live agent (seed 001's `userIntervention`); the runtime records
    /// its answer as [`Event::Intervention`] ([`crate::runtime::Runtime::intervene`] returns it).
    Intervene {
        /// The agent.
        agent_id: Uuid,
        /// What the user asks.
        intervention: Intervention,
    },
    /// The user answers an open question by its id (seed 001); the runtime records an
    /// [`Event::Answer`] ([`crate::runtime::Runtime::answer`] returns whether it was taken).
    Answer {
        /// The question's id.
        question_id: Uuid,
        /// The answer.
        text: Arc<str>,
    },
    /// A trigger starts a session of `agent` with `payload` (seed 003's webhook; see
    /// [`crate::runtime::Runtime::trigger`], which also returns the session's id).
    Trigger {
        /// The agent to run.
        agent: Arc<str>,
        /// The webhook's payload.
        payload: serde_json::Value,
    },
}

/// What the store of async sessions must record (seed 003, DESIGN §9), in the order it happened.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionOp {
    /// A trigger started a `running` session.
    Started {
        /// The session (its conversation's key).
        session: Uuid,
        /// Its agent.
        agent: Arc<str>,
        /// The webhook envelope, as JSON text (`original_payload`).
        payload: Arc<str>,
    },
    /// Its agent asked: a question opens and the session waits (`pending_input`).
    Asked {
        /// The session.
        session: Uuid,
        /// The question's id.
        question: Uuid,
        /// The question.
        text: Arc<str>,
        /// Its options and other context, as JSON text.
        context: Option<Arc<str>>,
        /// The agent that asks (the name it was triggered by).
        agent: Arc<str>,
        /// Where its callback goes, if anywhere (B20, B21): the driver posts it.
        callback: Option<Arc<str>>,
    },
    /// A question timed out: with `answer`, that default is its answer and the session runs on;
    /// without, the session fails.
    TimedOut {
        /// The session.
        session: Uuid,
        /// The question.
        question: Uuid,
        /// The default answer, under the `default_answer` policy.
        answer: Option<Arc<str>>,
    },
    /// The agent waiting for the question's answer left (deleted or cancelled): the session
    /// fails.
    Withdrawn {
        /// The session.
        session: Uuid,
        /// The question nobody will take an answer to.
        question: Uuid,
    },
    /// The session ended: `completed` with its agent's final text, or failed with the reason.
    Ended {
        /// The session.
        session: Uuid,
        /// Whether it completed.
        completed: bool,
        /// The final text, or why it failed.
        result: Arc<str>,
    },
}

/// What the runtime asks its driver to do.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Call the model; read the request (agent, system prompt, messages) with
    /// [`crate::runtime::Runtime::request`]. Effects name their call only, so that emitting one copies nothing.
    CallLlm {
        /// Id to answer with.
        call: CallId,
    },
    /// Run an external tool; read what to run with [`crate::runtime::Runtime::tool_run`].
    RunTool {
        /// Id to answer with.
        call: CallId,
    },
    /// Send text to the user.
    Send {
        /// Session key.
        key: Arc<str>,
        /// The text.
        text: Arc<str>,
    },
    /// Feed [`Input::Timer`] after `after_ms`.
    SetTimer {
        /// Timer id.
        timer: CallId,
        /// Delay in milliseconds.
        after_ms: u64,
    },
    /// Forget a timer.
    CancelTimer {
        /// Timer id.
        timer: CallId,
    },
    /// Publish a stream event.
    Stream {
        /// Session key.
        key: Arc<str>,
        /// The event.
        event: StreamEvent,
    },
    /// Append these lines to `context.jsonl`.
    AppendContext {
        /// One JSON entry per line, newline-terminated.
        line: String,
    },
    /// Replace `state.json` (atomically) with this.
    WriteState {
        /// The whole file.
        json: String,
    },
    /// Record this in the store of async sessions (seed 003).
    Session(Box<SessionOp>),
}

/// A borrowed view of one pending external tool run (see [`crate::runtime::Runtime::tool_run`]).
#[derive(Clone, Copy, Debug)]
pub struct ToolRun<'a> {
    /// Session key of the conversation.
    pub key: &'a Arc<str>,
    /// The calling agent.
    pub agent: &'a Arc<AgentDef>,
    /// The calling frame's agent id.
    pub frame_id: Uuid,
    /// The `tool_use` id it answers.
    pub tool_use_id: &'a Arc<str>,
    /// Tool name (`skill:<name>` for a passthrough skill).
    pub name: &'a Arc<str>,
    /// JSON input.
    pub input: &'a Arc<Value>,
}

/// A frame as events describe it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrameInfo {
    /// Frame id.
    pub frame_id: Uuid,
    /// `main`, `skill:<name>`, `agent:<name>`.
    pub name: Arc<str>,
    /// Its kind.
    pub kind: AgentKind,
    /// The parent's `tool_use` it answers.
    pub parent_tool_use_id: Option<Arc<str>>,
    /// Its session's id.
    pub session_id: Uuid,
}

/// Why a frame left the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PopReason {
    /// The main agent answered the user.
    Answered,
    /// The child called `complete`.
    Completed,
    /// The frame hit its iteration limit.
    MaxIterations,
    /// The frame's model call failed.
    Error,
    /// The user cancelled.
    Cancelled,
    /// The user deleted it (or a frame below it) with an intervention.
    Deleted,
}

impl PopReason {
    /// The status a frame popped for this reason ends with.
    pub fn ended_as(self) -> Status {
        match self {
            PopReason::Answered | PopReason::Completed => Status::Completed,
            PopReason::MaxIterations | PopReason::Error | PopReason::Cancelled => Status::Error,
            PopReason::Deleted => Status::Deleted,
        }
    }
}

/// What happened, for observers and the transcript. Recorded in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A user message was routed to a frame.
    UserMessage {
        /// Session key.
        key: Arc<str>,
        /// The frame it went to.
        frame: Arc<str>,
        /// That frame's id.
        frame_id: Uuid,
        /// The text.
        text: Arc<str>,
    },
    /// An empty user message was ignored: no model API accepts an empty text block, and there is
    /// nothing in it to deliver.
    EmptyUserMessage {
        /// Session key.
        key: Arc<str>,
    },
    /// A user message arrived while a turn was in progress and waits for the top frame.
    Queued {
        /// Session key.
        key: Arc<str>,
        /// The text.
        text: Arc<str>,
    },
    /// A frame was pushed: its agent started, running. (The `agent-state` event of that start
    /// is recorded only with the detailed events, marked `implied`.)
    Push {
        /// Session key.
        key: Arc<str>,
        /// The frame.
        frame: FrameInfo,
        /// Depth after the push.
        depth: usize,
        /// Its frame in the runtime ([`crate::runtime::Runtime::frame`]; not part of the record).
        #[serde(skip)]
        frame_ref: FrameId,
    },
    /// A frame was popped: its agent ended, with the status its reason gives
    /// ([`PopReason::ended_as`]). (The `agent-state` event of that end is recorded only with the
    /// detailed events, marked `implied`.)
    Pop {
        /// Session key.
        key: Arc<str>,
        /// The frame.
        frame: FrameInfo,
        /// Depth after the pop.
        depth: usize,
        /// Why.
        reason: PopReason,
        /// Iterations it used.
        iterations: u32,
        /// The status its agent ended from (not part of the record).
        #[serde(skip)]
        from: Status,
    },
    /// A model call was made.
    LlmRequest {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The frame's session.
        session_id: Uuid,
        /// Call id.
        call: CallId,
        /// Iteration of the frame this call belongs to.
        iteration: u32,
        /// The frame's limit.
        max_iterations: u32,
        /// Messages in the request.
        messages: usize,
    },
    /// A model reply arrived.
    LlmReply {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The content.
        content: Content,
        /// Token usage.
        usage: Usage,
    },
    /// A model call failed.
    LlmError {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The category.
        kind: LlmErrorKind,
        /// The message.
        message: Arc<str>,
    },
    /// An input arrived for a call nobody waits for any more (after a cancel or a timeout).
    Stale {
        /// The call or timer.
        call: CallId,
        /// What it was.
        what: &'static str,
    },
    /// A restored runtime issued again a call its frame waited for when the state was written.
    Reissued {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The new call.
        call: CallId,
        /// `model call` or `tool run`.
        what: &'static str,
    },
    /// A tool use is being handled.
    ToolCall {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The `tool_use` id.
        tool_use_id: Arc<str>,
        /// Tool name.
        name: Arc<str>,
        /// JSON input.
        input: Arc<Value>,
    },
    /// One tool of a parallel batch finished; its result joins the session when the whole batch
    /// is in, in the reply's order.
    ToolFinished {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The `tool_use` it answers.
        tool_use_id: Arc<str>,
        /// Whether it failed.
        is_error: bool,
    },
    /// A `tool_result` was appended to a session.
    ToolResult {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// Frame id.
        frame_id: Uuid,
        /// The session it went into.
        session_id: Uuid,
        /// The `tool_use` it answers.
        tool_use_id: Arc<str>,
        /// Content.
        content: Arc<str>,
        /// Whether it is an error.
        is_error: bool,
    },
    /// Text was sent to the user.
    Sent {
        /// Session key.
        key: Arc<str>,
        /// The frame that produced it.
        frame: Arc<str>,
        /// The text.
        text: Arc<str>,
    },
    /// A frame's reply was empty: nothing was sent.
    EmptyReply {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
    },
    /// A stream event was published.
    Stream {
        /// Session key.
        key: Arc<str>,
        /// Frame name.
        frame: Arc<str>,
        /// The event.
        event: StreamEvent,
    },
    /// The main agent finished a user turn (seed 002's `AgentResponse`).
    Response {
        /// Session key.
        key: Arc<str>,
        /// The response.
        response: AgentResponse,
    },
    /// A batch delegation talked to its child: the child's answer, or the second send asking
    /// for a summary.
    Delegation {
        /// Session key.
        key: Arc<str>,
        /// The batch child.
        frame: Arc<str>,
        /// `answer` (the child's final text) or `summary request`.
        what: &'static str,
        /// The text.
        text: Arc<str>,
    },
    /// The watchdog or the interruption model did something.
    Watchdog {
        /// Session key.
        key: Arc<str>,
        /// The frame.
        frame: Arc<str>,
        /// What happened.
        what: String,
    },
    /// An agent's status changed (the same change is published as a
    /// [`StreamEvent::AgentState`]).
    AgentState {
        /// Session key.
        key: Arc<str>,
        /// The agent.
        agent_id: Uuid,
        /// Its frame in the runtime while it lives ([`crate::runtime::Runtime::frame`]), so that
        /// a reader finds it without a search (not part of the event's record).
        #[serde(skip)]
        frame_ref: FrameId,
        /// Its frame name.
        frame: Arc<str>,
        /// The agent that started it (`None` for a main frame).
        parent_id: Option<Uuid>,
        /// The status it left (`None` when it just started).
        from: Option<Status>,
        /// Its new status.
        status: Status,
        /// Its result, when it ended.
        result: Option<Arc<str>>,
        /// A stacked frame's start or end, which its push or pop already stands for: recorded
        /// only with the detailed events, for the transcript (not part of the record).
        #[serde(skip)]
        implied: bool,
    },
    /// A user intervened on an agent.
    Intervention {
        /// Session key of the agent's conversation (`None` when no live agent has the id).
        key: Option<Arc<str>>,
        /// The agent.
        agent_id: Uuid,
        /// Its frame name, when it lives.
        frame: Option<Arc<str>>,
        /// The comment given, if any.
        user_comment: Option<Arc<str>>,
        /// The new content given, if any.
        user_content: Option<Arc<str>>,
        /// The status asked for, if any.
        status: Option<Status>,
        /// The answer.
        outcome: InterventionOutcome,
    },
    /// A frame started a fork (seed 001's `fork`).
    ForkStarted {
        /// Session key.
        key: Arc<str>,
        /// The caller's frame name.
        caller: Arc<str>,
        /// The caller's agent id.
        caller_id: Uuid,
        /// The handle the caller got.
        handle: u32,
        /// The fork.
        frame: FrameInfo,
    },
    /// A frame asked the user a question with `ask_user` (seed 001: every question has an id, and
    /// several agents may have one open at once).
    Question {
        /// Session key.
        key: Arc<str>,
        /// The asking agent.
        agent_id: Uuid,
        /// Its frame name.
        frame: Arc<str>,
        /// The question's id.
        question_id: Uuid,
        /// The `ask_user` tool use it answers (`None` for a workflow's question).
        tool_use_id: Option<Arc<str>>,
        /// The question as shown (with its options).
        text: Arc<str>,
    },
    /// A trigger started a session (seed 003), or named an agent the catalog lacks.
    Triggered {
        /// The session's key (`None` when refused).
        key: Option<Arc<str>>,
        /// The agent.
        agent: Arc<str>,
        /// Whether it started.
        started: bool,
    },
    /// An async session's question changed: it timed out (with the default answer, or failing
    /// the session).
    QuestionTimedOut {
        /// Session key.
        key: Arc<str>,
        /// The question.
        question_id: Uuid,
        /// The default answer it got, if any.
        answer: Option<Arc<str>>,
        /// Whether its session expired (B26) rather than the question timing out: the session
        /// fails whatever the agent's timeout policy.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        expired: bool,
    },
    /// The agent waiting for an async question's answer left (deleted or cancelled): the
    /// session failed.
    QuestionWithdrawn {
        /// Session key.
        key: Arc<str>,
        /// The question.
        question_id: Uuid,
    },
    /// An async session ended.
    SessionEnded {
        /// Session key.
        key: Arc<str>,
        /// Whether it completed (else it failed).
        completed: bool,
        /// Its result or the failure.
        result: Arc<str>,
    },
    /// A workflow agent entered a step of seed 001's six-step workflow (its prompt follows in
    /// its session).
    WorkflowStep {
        /// Session key.
        key: Arc<str>,
        /// Its frame name.
        frame: Arc<str>,
        /// Its agent id.
        frame_id: Uuid,
        /// The step.
        step: crate::agents::workflow::Step,
    },
    /// A workflow agent's summary ended its workflow: the summary is its result (a child pops
    /// with it as a success, a main frame sends it, a fork ends with it).
    WorkflowDone {
        /// Session key.
        key: Arc<str>,
        /// Its frame name.
        frame: Arc<str>,
        /// Its agent id.
        frame_id: Uuid,
        /// The summary.
        result: Arc<str>,
    },
    /// A workflow agent started (`waiting`) or stopped waiting for every child it spawned
    /// (seed 001's six-step workflow).
    WaitSubagents {
        /// Session key.
        key: Arc<str>,
        /// Its frame name.
        frame: Arc<str>,
        /// Its agent id.
        frame_id: Uuid,
        /// Whether it now waits.
        waiting: bool,
    },
    /// An answer given by question id (seed 001).
    Answer {
        /// Session key of the asking agent's conversation (`None` when no question has the id).
        key: Option<Arc<str>>,
        /// The question's id.
        question_id: Uuid,
        /// The asking agent, when it asks.
        agent_id: Option<Uuid>,
        /// The asking agent's frame name, when it asks.
        frame: Option<Arc<str>>,
        /// The answer's text.
        text: Arc<str>,
        /// Whether a question open with that id took it.
        accepted: bool,
    },
    /// A frame called `wait` (seed 001); its answer is the `tool_result` of `tool_use_id`, now
    /// or when the fork ends.
    Wait {
        /// Session key.
        key: Arc<str>,
        /// The caller's frame name.
        frame: Arc<str>,
        /// The caller's agent id.
        frame_id: Uuid,
        /// The `wait` tool use.
        tool_use_id: Arc<str>,
        /// The handle it names, if it names one a fork could have.
        handle: Option<u32>,
    },
    /// A fork ended.
    ForkEnded {
        /// Session key.
        key: Arc<str>,
        /// The fork.
        frame: FrameInfo,
        /// How it ended: completed, error or deleted.
        status: Status,
        /// Its final text or failure.
        result: Arc<str>,
        /// Iterations it used.
        iterations: u32,
    },
    /// A modification reached its agent before its model call, as a user text.
    TaskChanged {
        /// Session key.
        key: Arc<str>,
        /// The agent's frame name.
        frame: Arc<str>,
        /// The agent.
        agent_id: Uuid,
        /// The text added to its session.
        text: Arc<str>,
    },
    /// A cancel word unwound the stack.
    Cancelled {
        /// Session key.
        key: Arc<str>,
        /// The cancel word, as the user typed it.
        text: Arc<str>,
        /// Frames removed.
        frames: usize,
        /// Queued messages dropped with them.
        dropped: usize,
    },
}

impl FrameInfo {
    /// Describes a frame for events.
    pub fn of(frame: &StackFrame) -> FrameInfo {
        FrameInfo {
            frame_id: frame.frame_id,
            name: frame.agent.frame_name.clone(),
            kind: frame.agent.kind,
            parent_tool_use_id: frame.parent_tool_use_id.clone(),
            session_id: frame.agent_session_id,
        }
    }
}

/// A stream event of seed 002's `process_message_streaming`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Text as it arrives.
    TextDelta {
        /// The delta.
        text: Arc<str>,
    },
    /// A tool starts.
    ToolStart {
        /// Tool name.
        name: Arc<str>,
        /// The `tool_use` id.
        id: Arc<str>,
    },
    /// A tool finished.
    ToolFinish {
        /// Tool name.
        name: Arc<str>,
        /// The `tool_use` id.
        id: Arc<str>,
        /// Whether it failed.
        is_error: bool,
    },
    /// An agent's status changed (seed 001's `agent-state`; never with messages).
    AgentState {
        /// The agent.
        agent_id: Uuid,
        /// The agent that started it.
        parent_id: Option<Uuid>,
        /// Its frame name.
        name: Arc<str>,
        /// Its new status.
        status: Status,
        /// Its result, when it ended.
        result: Option<Arc<str>>,
    },
}
