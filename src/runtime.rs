//! The reference runtime: a pure, sans-IO state machine.
//!
//! It is fed [`Input`]s (a user message, a model reply or error or stream chunk, a tool outcome, a
//! timer) and answers with [`Effect`]s as data (call the model, run a tool, send text to the user,
//! set or cancel a timer, publish a stream event). It never awaits, sleeps, reads a clock, draws
//! randomness or does IO; ids come from an [`IdSource`] seeded by the driver. Observers read the
//! [`Event`]s it records (when [`RuntimeConfig::record_events`] is on) and may inspect its state
//! between inputs.
//!
//! The orchestration loop is seed 000's provider loop: it runs the top frame's turn
//! ([`crate::turn::execute_turn`]) and acts on the [`TurnAction`] it ends with, until a frame
//! waits for the driver or for the user. Every iteration either returns or cascades; there is no
//! recursion.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::agent::{AgentDef, AgentKind, AgentResponse, Catalog, EmptyAnswer, ToolCallRecord};
use crate::ids::IdSource;
use crate::llm::{Chunk, LlmError, LlmErrorKind, LlmReply, LlmRequest, Usage};
use crate::messages;
use crate::planted::PlantedBug;
use crate::stack::{AgentStackManager, CallId, Phase, StackFrame, TurnAction, TurnResult};
use crate::tools::{ToolError, ToolOutput};
use crate::transcript::{Block, Content, Session};
use crate::turn::{execute_turn, frame_info, StreamEvent, TurnCx, TurnInput, CALL_SEQ_BITS};
use crate::watchdog::{
    CancelScope, Cause, ContinueFlag, InterruptedReturn, InterruptionConfig, ParentResume,
    PauseTarget, Recognition,
};

/// The words that cancel an active stack (DESIGN §3 item 7).
pub const DEFAULT_CANCEL_WORDS: [&str; 6] =
    ["cancel", "stop", "abort", "nevermind", "never mind", "quit"];

/// Settings of one external tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolSpec {
    /// Virtual-time timeout (DESIGN §3 item 10).
    pub timeout_ms: Option<u64>,
}

/// Runtime settings.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// External tools by name; a `tool_use` of any other non-built-in name is "not found".
    pub tools: BTreeMap<String, ToolSpec>,
    /// Messages that unwind an active stack, compared trimmed and case-insensitively.
    pub cancel_words: Vec<String>,
    /// Record [`Event`]s for observers and transcripts.
    pub record_events: bool,
    /// Also record the events only a transcript reads (reply contents, tool calls, stream events,
    /// the response's tool-call history). Observers need only the lean ones.
    pub detailed_events: bool,
    /// Seed of the id source.
    pub seed: u64,
    /// A planted bug to exhibit (none in normal use; see [`crate::planted`]).
    pub planted: Option<PlantedBug>,
    /// Emit persistence effects: a `context.jsonl` line per session operation, and `state.json`
    /// whenever every conversation is quiet.
    pub persist: bool,
    /// Model seed 004's activity watchdog and interruptions (off: `None`).
    pub interruptions: Option<InterruptionConfig>,
}

impl RuntimeConfig {
    /// Whether the runtime was told to exhibit `bug`.
    #[inline]
    pub fn has_bug(&self, bug: PlantedBug) -> bool {
        self.planted == Some(bug)
    }
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            tools: BTreeMap::new(),
            cancel_words: DEFAULT_CANCEL_WORDS.iter().map(|w| w.to_string()).collect(),
            record_events: true,
            detailed_events: true,
            seed: 0,
            planted: None,
            persist: false,
            interruptions: None,
        }
    }
}

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
}

/// What the runtime asks its driver to do.
#[derive(Clone, Debug)]
pub enum Effect {
    /// Call the model; read the request (agent, system prompt, messages) with
    /// [`Runtime::request`]. Effects name their call only, so that emitting one copies nothing.
    CallLlm {
        /// Id to answer with.
        call: CallId,
    },
    /// Run an external tool; read what to run with [`Runtime::tool_run`].
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
}

/// A borrowed view of one pending external tool run (see [`Runtime::tool_run`]).
#[derive(Clone, Copy, Debug)]
pub struct ToolRun<'a> {
    /// Session key of the conversation.
    pub key: &'a Arc<str>,
    /// The calling agent.
    pub agent: &'a Arc<AgentDef>,
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
    /// A user message arrived while a turn was in progress and waits for the top frame.
    Queued {
        /// Session key.
        key: Arc<str>,
        /// The text.
        text: Arc<str>,
    },
    /// A frame was pushed.
    Push {
        /// Session key.
        key: Arc<str>,
        /// The frame.
        frame: FrameInfo,
        /// Depth after the push.
        depth: usize,
    },
    /// A frame was popped.
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
    /// A cancel word unwound the stack.
    Cancelled {
        /// Session key.
        key: Arc<str>,
        /// Frames removed.
        frames: usize,
        /// Queued messages dropped with them.
        dropped: usize,
    },
}

/// The reference runtime.
#[derive(Clone, Debug)]
pub struct Runtime {
    config: RuntimeConfig,
    catalog: Arc<Catalog>,
    stacks: AgentStackManager,
    ids: IdSource,
    seq: u64,
    effects: VecDeque<Effect>,
    events: Vec<Event>,
    /// Virtual time as the driver last set it (only the watchdog reads it).
    now: u64,
    /// Watchdog check timers: which frame each one belongs to.
    watch_timers: BTreeMap<CallId, (usize, Uuid)>,
}

impl Runtime {
    /// A runtime for these agents and settings.
    pub fn new(catalog: Arc<Catalog>, config: RuntimeConfig) -> Runtime {
        Runtime {
            ids: IdSource::new(config.seed),
            config,
            catalog,
            stacks: AgentStackManager::default(),
            seq: 0,
            effects: VecDeque::new(),
            events: Vec::new(),
            now: 0,
            watch_timers: BTreeMap::new(),
        }
    }

    /// Tells the runtime what time it is (milliseconds on the driver's clock). Only the watchdog
    /// reads it; the runtime never reads a clock itself.
    pub fn set_now(&mut self, now_ms: u64) {
        self.now = now_ms;
    }

    /// The settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The declared agents.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The declared agents, shared.
    pub fn catalog_arc(&self) -> Arc<Catalog> {
        self.catalog.clone()
    }

    /// The stacks, by session key.
    pub fn stacks(&self) -> &AgentStackManager {
        &self.stacks
    }

    /// The next effect for the driver.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Takes the events recorded since the last call, in order.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, Event> {
        self.events.drain(..)
    }

    /// The events recorded since they were last taken or cleared.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Drops the recorded events (keeping the buffer).
    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    /// Whether no conversation has a turn in progress or a queued message: every stack is empty or
    /// its top frame waits for the user.
    pub fn is_idle(&self) -> bool {
        self.stacks
            .entries()
            .iter()
            .all(|e| e.inbox.is_empty() && e.stack.top().is_none_or(|f| f.awaits_user()))
    }

    /// The request behind a pending [`Effect::CallLlm`], borrowed from the frame's session.
    pub fn request(&self, call: CallId) -> Option<LlmRequest<'_>> {
        let (key, frame) = self.waiting_frame(call)?;
        match &frame.phase {
            Phase::AwaitLlm { call: c, .. } if *c == call => Some(LlmRequest {
                key,
                agent: &frame.agent,
                system: &frame.system_prompt,
                messages: frame.session.get_messages_for_llm(),
                model: frame.agent.model.as_deref(),
            }),
            _ => None,
        }
    }

    /// The tool run behind a pending [`Effect::RunTool`], borrowed from the frame (`None` once
    /// the run was answered, timed out or cancelled).
    pub fn tool_run(&self, call: CallId) -> Option<ToolRun<'_>> {
        let (key, frame) = self.waiting_frame(call)?;
        let (at, name) = match &frame.phase {
            Phase::AwaitTool {
                call: c, at, name, ..
            } if *c == call => (*at, name.as_ref()),
            Phase::AwaitTools { batch } => batch
                .iter()
                .find(|i| i.call == call && i.output.is_none())
                .map(|i| (i.at, None))?,
            _ => return None,
        };
        let tool_use = frame.session.tool_use_at(at)?;
        Some(ToolRun {
            key,
            agent: &frame.agent,
            tool_use_id: tool_use.id,
            name: name.unwrap_or(tool_use.name),
            input: tool_use.input,
        })
    }

    fn waiting_frame(&self, call: CallId) -> Option<(&Arc<str>, &StackFrame)> {
        let slot = (call >> CALL_SEQ_BITS) as usize;
        let entry = self.stacks.entries().get(slot)?;
        Some((&entry.key, entry.stack.top()?))
    }

    /// Feeds one input and runs until every frame it woke waits again.
    pub fn handle(&mut self, input: Input) {
        self.handle_input(input);
        if self.config.interruptions.is_some() {
            self.sync_watchdogs();
        }
        if self.config.persist && self.is_idle() {
            let json = serde_json::to_string(&self.state()).expect("state serialises");
            self.effects.push_back(Effect::WriteState { json });
        }
    }

    fn handle_input(&mut self, input: Input) {
        match input {
            Input::User { key, text } => {
                let slot = self.slot(&key);
                self.on_user(slot, text);
            }
            Input::LlmReply { call, reply } => {
                self.resume(
                    call,
                    "llm reply",
                    |p| matches!(p, Phase::AwaitLlm { call: c, .. } if *c == call),
                    TurnInput::LlmReply(reply),
                );
            }
            Input::LlmError { call, error } => {
                self.resume(
                    call,
                    "llm error",
                    |p| matches!(p, Phase::AwaitLlm { call: c, .. } if *c == call),
                    TurnInput::LlmError(error),
                );
            }
            Input::LlmChunk { call, chunk } => self.on_chunk(call, chunk),
            Input::LlmEnd { call, usage } => {
                let slot = (call >> CALL_SEQ_BITS) as usize;
                let partial = match self.top_phase_mut(slot) {
                    Some(Phase::AwaitLlm { call: c, partial }) if *c == call => {
                        std::mem::take(partial)
                    }
                    _ => return self.stale(call, "llm end"),
                };
                let reply = LlmReply {
                    content: partial,
                    usage,
                };
                self.drive(slot, TurnInput::LlmStreamEnd(reply));
                self.pump(slot);
            }
            Input::ToolDone { call, result } => {
                let output =
                    result.unwrap_or_else(|e| ToolOutput::error(messages::tool_failed(&e.0)));
                let waits = |p: &Phase| match p {
                    Phase::AwaitTool { call: c, .. } => *c == call,
                    Phase::AwaitTools { batch } => {
                        batch.iter().any(|i| i.call == call && i.output.is_none())
                    }
                    _ => false,
                };
                self.resume(
                    call,
                    "tool result",
                    waits,
                    TurnInput::ToolDone { call, output },
                );
            }
            Input::Timer { timer } if self.watch_timers.contains_key(&timer) => {
                self.on_watch_timer(timer);
            }
            Input::Timer { timer } => {
                let waits = |p: &Phase| match p {
                    Phase::AwaitTool { timer: t, .. } => *t == Some(timer),
                    Phase::AwaitTools { batch } => batch
                        .iter()
                        .any(|i| i.timer == Some(timer) && i.output.is_none()),
                    _ => false,
                };
                self.resume(timer, "timer", waits, TurnInput::ToolTimeout { timer });
            }
        }
    }

    /// The persisted form of every conversation (meaningful when the runtime is idle).
    pub fn state(&self) -> crate::persist::State {
        use crate::persist::{ConversationState, FrameMeta, State, Waiting, STATE_VERSION};
        let conversations = self
            .stacks
            .entries()
            .iter()
            .map(|e| ConversationState {
                key: e.key.to_string(),
                main_session_id: e.main_session_id,
                usage: e.usage,
                inbox: e.inbox.iter().map(|t| t.to_string()).collect(),
                active_stack: e
                    .stack
                    .frames()
                    .iter()
                    .map(|f| FrameMeta {
                        frame_id: f.frame_id,
                        agent_session_id: f.agent_session_id,
                        agent_name: f.agent.name.clone(),
                        agent_type: f.agent.kind,
                        model: f.agent.model.clone(),
                        iteration: f.iteration,
                        max_iterations: f.max_iterations,
                        parent_tool_use_id: f.parent_tool_use_id.clone(),
                        effective_tools: f.agent.tools.clone().unwrap_or_default(),
                        is_skill_agent: f.agent.kind == AgentKind::Skill,
                        environment: BTreeMap::new(),
                        waiting: match &f.phase {
                            Phase::AwaitAnswer { tool_use_id } => Waiting::Answer {
                                tool_use_id: tool_use_id.clone(),
                            },
                            Phase::AwaitChild => Waiting::Child,
                            _ => Waiting::User,
                        },
                        turn_start: f.turn_start,
                        usage: f.usage,
                        batch_sends: f.batch_sends,
                    })
                    .collect(),
            })
            .collect();
        State {
            version: STATE_VERSION,
            ids: self.ids.counter(),
            seq: self.seq,
            conversations,
        }
    }

    /// Rebuilds a runtime from `state.json` and `context.jsonl` (see [`crate::persist`]). The
    /// restored runtime continues exactly where the persisted one was when it last went quiet.
    pub fn restore(
        catalog: Arc<Catalog>,
        config: RuntimeConfig,
        state: &str,
        context: &str,
    ) -> Result<Runtime, crate::persist::RestoreError> {
        use crate::persist::{parse_state, replay_context, RestoreError, Waiting};
        let state = parse_state(state)?;
        let skip = config.has_bug(PlantedBug::RestoreForgetsFirstMessage);
        let mut sessions = replay_context(context, skip)?.sessions;
        let mut rt = Runtime::new(catalog, config);
        rt.ids = IdSource::at(rt.config.seed, state.ids);
        rt.seq = state.seq;
        for conv in state.conversations {
            let main_id = conv.main_session_id;
            let slot = rt.stacks.get_or_create(&conv.key, || main_id);
            let mut frames = Vec::new();
            for meta in conv.active_stack {
                let agent = match meta.agent_type {
                    AgentKind::Main => Some(rt.catalog.main.clone()),
                    AgentKind::Skill => rt.catalog.skills.get(&meta.agent_name).cloned(),
                    AgentKind::Agent => rt.catalog.agents.get(&meta.agent_name).cloned(),
                }
                .ok_or_else(|| RestoreError::MissingAgent(meta.agent_name.clone()))?;
                let session = match (meta.agent_type, sessions.remove(&meta.agent_session_id)) {
                    (_, Some(s)) => s,
                    (AgentKind::Main, None) => Session::with_id(main_id),
                    (_, None) => return Err(RestoreError::MissingSession(meta.agent_session_id)),
                };
                let phase = match meta.waiting {
                    Waiting::User => Phase::AwaitUser,
                    Waiting::Answer { tool_use_id } => Phase::AwaitAnswer { tool_use_id },
                    Waiting::Child => Phase::AwaitChild,
                };
                frames.push(StackFrame {
                    frame_id: meta.frame_id,
                    system_prompt: agent.system_prompt.clone(),
                    agent,
                    session,
                    iteration: meta.iteration,
                    max_iterations: meta.max_iterations,
                    parent_tool_use_id: meta.parent_tool_use_id,
                    agent_session_id: meta.agent_session_id,
                    usage: meta.usage,
                    phase,
                    turn_start: meta.turn_start,
                    resumed_from_child: false,
                    batch_sends: meta.batch_sends,
                    watch: Default::default(),
                });
            }
            let entry = rt.stacks.entry_mut(slot);
            entry.usage = conv.usage;
            entry.inbox = conv.inbox.into_iter().map(Into::into).collect();
            entry.main_session = sessions
                .remove(&main_id)
                .unwrap_or_else(|| Session::with_id(main_id));
            for frame in frames {
                entry.stack.push(frame);
            }
        }
        Ok(rt)
    }

    fn journal(&mut self, entry: impl FnOnce() -> crate::persist::ContextEntry) {
        if self.config.persist {
            let line = entry().line();
            self.effects.push_back(Effect::AppendContext { line });
        }
    }

    fn slot(&mut self, key: &str) -> usize {
        let ids = &mut self.ids;
        self.stacks.get_or_create(key, || ids.next_uuid())
    }

    fn top_phase_mut(&mut self, slot: usize) -> Option<&mut Phase> {
        if slot >= self.stacks.entries().len() {
            return None;
        }
        self.stacks
            .entry_mut(slot)
            .stack
            .top_mut()
            .map(|f| &mut f.phase)
    }

    fn stale(&mut self, call: CallId, what: &'static str) {
        if self.config.record_events {
            self.events.push(Event::Stale { call, what });
        }
    }

    /// Feeds `input` to the top frame of the call's slot if that frame waits for it.
    fn resume(
        &mut self,
        call: CallId,
        what: &'static str,
        waits: impl Fn(&Phase) -> bool,
        input: TurnInput,
    ) {
        let slot = (call >> CALL_SEQ_BITS) as usize;
        match self.top_phase_mut(slot) {
            Some(phase) if waits(phase) => {
                self.drive(slot, input);
                self.pump(slot);
            }
            _ => self.stale(call, what),
        }
    }

    fn on_chunk(&mut self, call: CallId, chunk: Chunk) {
        let slot = (call >> CALL_SEQ_BITS) as usize;
        let record = self.config.record_events;
        if slot >= self.stacks.entries().len() {
            return self.stale(call, "llm chunk");
        }
        let entry = self.stacks.entry_mut(slot);
        let key = entry.key.clone();
        let Some(frame) = entry.stack.top_mut() else {
            return self.stale(call, "llm chunk");
        };
        let Phase::AwaitLlm { call: c, partial } = &mut frame.phase else {
            return self.stale(call, "llm chunk");
        };
        if *c != call {
            return self.stale(call, "llm chunk");
        }
        let delta = match chunk {
            Chunk::Text(text) => {
                match partial.last_mut() {
                    Some(Block::Text { text: acc }) => {
                        let mut joined = String::with_capacity(acc.len() + text.len());
                        joined.push_str(acc);
                        joined.push_str(&text);
                        *acc = joined.into();
                    }
                    _ => partial.push(Block::Text { text: text.clone() }),
                }
                Some(text)
            }
            Chunk::ToolUse(block) => {
                partial.push(block);
                None
            }
        };
        let delta = delta.filter(|t| !t.is_empty());
        if let (Some(text), true) = (delta, frame.agent.stream) {
            let frame_name = frame.agent.frame_name.clone();
            let event = StreamEvent::TextDelta { text };
            if record && self.config.detailed_events {
                self.events.push(Event::Stream {
                    key: key.clone(),
                    frame: frame_name,
                    event: event.clone(),
                });
            }
            self.effects.push_back(Effect::Stream { key, event });
        }
    }

    fn is_cancel(&self, text: &str) -> bool {
        let t = text.trim();
        self.config
            .cancel_words
            .iter()
            .any(|w| w.eq_ignore_ascii_case(t))
    }

    fn on_user(&mut self, slot: usize, text: Arc<str>) {
        let entry = self.stacks.entry(slot);
        if !entry.stack.is_empty() && self.is_cancel(&text) {
            let top_busy = entry.stack.top().is_some_and(|f| !f.awaits_user());
            let top_only = self
                .config
                .interruptions
                .is_some_and(|ic| ic.cancel == CancelScope::TopFrame);
            if top_busy && top_only {
                self.interrupt_top(slot, Cause::UserCancel);
                self.pump(slot);
            } else {
                self.unwind(slot);
            }
            return;
        }
        let busy = !entry.inbox.is_empty() || entry.stack.top().is_some_and(|f| !f.awaits_user());
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
    fn pump(&mut self, slot: usize) {
        loop {
            let entry = self.stacks.entry_mut(slot);
            if entry.stack.top().is_some_and(|f| !f.awaits_user()) {
                return;
            }
            let Some(text) = entry.inbox.pop_front() else {
                return;
            };
            if !entry.stack.is_empty() && self.is_cancel(&text) {
                self.unwind(slot);
                continue;
            }
            self.route(slot, text);
        }
    }

    /// Routes a user message by stack state: empty → a new main frame, otherwise the top frame.
    fn route(&mut self, slot: usize, text: Arc<str>) {
        let record = self.config.record_events;
        let entry = self.stacks.entry_mut(slot);
        if entry.stack.is_empty() {
            let session = std::mem::take(&mut entry.main_session);
            let agent = self.catalog.main.clone();
            let frame = StackFrame {
                frame_id: self.ids.next_uuid(),
                agent_session_id: entry.main_session_id,
                turn_start: session.messages.len(),
                session,
                system_prompt: agent.system_prompt.clone(),
                iteration: 0,
                max_iterations: agent.max_iterations,
                agent,
                parent_tool_use_id: None,
                usage: Usage::default(),
                phase: Phase::AwaitUser,
                resumed_from_child: false,
                batch_sends: 0,
                watch: Default::default(),
            };
            self.push(slot, frame);
        }
        let entry = self.stacks.entry_mut(slot);
        if self.config.has_bug(PlantedBug::RouteBelowTop) && entry.stack.depth() >= 2 {
            let below = entry.stack.depth() - 2;
            let frame = &mut entry.stack.frames_mut()[below];
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
        let top = entry.stack.top().expect("a frame was just ensured");
        if record {
            self.events.push(Event::UserMessage {
                key: entry.key.clone(),
                frame: top.agent.frame_name.clone(),
                frame_id: top.frame_id,
                text: text.clone(),
            });
        }
        self.drive(slot, TurnInput::User(text));
    }

    fn push(&mut self, slot: usize, frame: StackFrame) {
        let entry = self.stacks.entry_mut(slot);
        let depth = entry.stack.depth() + 1;
        tracing::debug!(key = %entry.key, frame = %frame.agent.frame_name, depth, "push");
        if self.config.record_events {
            self.events.push(Event::Push {
                key: entry.key.clone(),
                frame: frame_info(&frame),
                depth,
            });
        }
        entry.stack.push(frame);
    }

    fn pop(&mut self, slot: usize, reason: PopReason) -> StackFrame {
        let entry = self.stacks.entry_mut(slot);
        let frame = entry
            .stack
            .pop()
            .expect("the orchestration loop pops only a frame it ran");
        let depth = entry.stack.depth();
        tracing::debug!(key = %entry.key, frame = %frame.agent.frame_name, depth, ?reason, "pop");
        if self.config.record_events {
            self.events.push(Event::Pop {
                key: entry.key.clone(),
                frame: frame_info(&frame),
                depth,
                reason,
                iterations: frame.iteration,
            });
        }
        frame
    }

    fn send(&mut self, slot: usize, frame: Arc<str>, text: Arc<str>) {
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

    /// Runs `f` on the top frame of `slot` with a turn context made of the runtime's other parts;
    /// `None` if the stack is empty.
    fn with_top<R>(
        &mut self,
        slot: usize,
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
            ..
        } = self;
        let crate::stack::StackEntry {
            key, stack, usage, ..
        } = stacks.entry_mut(slot);
        let frame = stack.top_mut()?;
        let mut cx = TurnCx {
            key,
            slot,
            catalog,
            config,
            effects,
            events,
            ids,
            seq,
            usage,
            now: *now,
        };
        Some(f(frame, &mut cx))
    }

    /// The orchestration loop (seed 000's provider loop) for one conversation.
    fn drive(&mut self, slot: usize, mut input: TurnInput) {
        loop {
            // An interrupted frame that waited for its child decides once the child's result is
            // in: continue, or end its send interrupted.
            let interrupted = self
                .stacks
                .entry(slot)
                .stack
                .top()
                .is_some_and(|f| f.watch.interrupted.is_some());
            if interrupted {
                if let TurnInput::ChildResult {
                    tool_use_id,
                    content,
                    is_error,
                } = input
                {
                    self.add_result_to_top(slot, tool_use_id, content, is_error);
                    match self.decide(slot) {
                        Ok(prompt) => input = prompt,
                        Err(result) => match self.act(slot, result) {
                            Some(next) => input = next,
                            None => return,
                        },
                    }
                    continue;
                }
            }
            let result = match self.with_top(slot, |frame, cx| execute_turn(frame, input, cx)) {
                None => {
                    tracing::warn!(slot, "stack empty unexpectedly");
                    return;
                }
                Some(None) => return,
                Some(Some(result)) => result,
            };
            match self.act(slot, result) {
                Some(next) => input = next,
                None => return,
            }
        }
    }

    /// Acts on how a turn of the top frame ended (seed 000's orchestration `match`): `Some(input)`
    /// cascades to the next frame, `None` means the conversation now waits.
    fn act(&mut self, slot: usize, result: TurnResult) -> Option<TurnInput> {
        if result.action != TurnAction::ChildActivated {
            self.end_send(slot);
        }
        let top = self
            .stacks
            .entry(slot)
            .stack
            .top()
            .expect("the turn ran on it");
        let name = top.agent.frame_name.clone();
        let is_main = top.is_main();
        let top_batch = top.agent.batch;
        let next = match result.action {
            TurnAction::Interrupted => match top_batch {
                Some(policy) => self.batch_interrupted(slot, result.text, policy)?,
                None => {
                    // An interactive frame: the user sees the display text; the frame waits.
                    self.send(slot, name, messages::INTERRUPTED_SENTINEL.into());
                    if is_main {
                        self.finish_main(
                            slot,
                            PopReason::Error,
                            messages::INTERRUPTED_SENTINEL.into(),
                        );
                    }
                    return None;
                }
            },
            TurnAction::SendText if top_batch.is_some() => {
                match self.batch_answer(slot, result.text, top_batch.expect("guarded")) {
                    Some(input) => input,
                    None => TurnInput::User(messages::SUMMARY_PROMPT.into()),
                }
            }
            TurnAction::SendText => {
                self.send(slot, name, result.text.clone());
                if is_main {
                    self.finish_main(slot, PopReason::Answered, result.text);
                }
                return None;
            }
            TurnAction::Interrupt => {
                self.send(slot, name, result.text);
                return None;
            }
            TurnAction::ChildActivated => {
                let child = result
                    .child_frame
                    .expect("ChildActivated carries the child");
                self.push(slot, *child);
                TurnInput::Start
            }
            TurnAction::Complete => {
                // `complete` is never dispatched for the main frame, so there is a parent
                // (unless the main-complete-accepted bug is planted).
                let child = self.pop(slot, PopReason::Completed);
                self.journal(|| crate::persist::ContextEntry::AgentSessionComplete {
                    agent_session_id: child.agent_session_id,
                    result: result.text.clone(),
                    is_error: false,
                });
                let Some(tool_use_id) = child.parent_tool_use_id else {
                    self.stacks.entry_mut(slot).stack.clear();
                    return None;
                };
                if self.config.has_bug(PlantedBug::DropCascadeResult) {
                    TurnInput::Start
                } else {
                    if self.config.has_bug(PlantedBug::DoubleDelivery) {
                        self.deliver_extra(slot, &tool_use_id, &result.text);
                    }
                    TurnInput::ChildResult {
                        tool_use_id,
                        content: result.text,
                        is_error: false,
                    }
                }
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
                let banner: Arc<str> =
                    format!("{}{}", messages::USER_ERROR_PREFIX, result.text).into();
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
                self.pop_child(slot, PopReason::Error, content, true)
            }
        };
        Some(next)
    }

    /// Pops the child on top, journals its completion, and returns its result for its parent.
    fn pop_child(
        &mut self,
        slot: usize,
        reason: PopReason,
        content: Arc<str>,
        is_error: bool,
    ) -> TurnInput {
        let child = self.pop(slot, reason);
        self.journal(|| crate::persist::ContextEntry::AgentSessionComplete {
            agent_session_id: child.agent_session_id,
            result: content.clone(),
            is_error,
        });
        TurnInput::ChildResult {
            tool_use_id: child
                .parent_tool_use_id
                .expect("a child frame names its parent's tool_use"),
            content,
            is_error,
        }
    }

    /// A batch child's send ended with `text`. Applies the empty-answer policy: either the child
    /// is popped and its answer goes to the parent (`Some(input for the parent)`), or it gets a
    /// second send asking for a summary (`None`: the caller feeds it the summary prompt).
    fn batch_answer(
        &mut self,
        slot: usize,
        text: Arc<str>,
        policy: EmptyAnswer,
    ) -> Option<TurnInput> {
        let record = self.config.record_events;
        let entry = self.stacks.entry_mut(slot);
        let key = entry.key.clone();
        let frame = entry.stack.top_mut().expect("the batch child ran");
        let frame_name = frame.agent.frame_name.clone();
        let mut answer = text;
        if answer.trim().is_empty() && policy != EmptyAnswer::AcceptEmpty {
            let extracted = frame
                .session
                .messages
                .iter()
                .rev()
                .filter(|m| m.role == crate::transcript::Role::Assistant)
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

    // ---- Seed 004's watchdog and interruption model (only with `config.interruptions`). ----

    fn interruption_config(&self) -> InterruptionConfig {
        self.config
            .interruptions
            .expect("the watchdog runs only with interruptions modelled")
    }

    fn watch_event(&mut self, slot: usize, frame: Arc<str>, what: String) {
        if self.config.record_events {
            let key = self.stacks.entry(slot).key.clone();
            self.events.push(Event::Watchdog { key, frame, what });
        }
    }

    fn next_timer(&mut self, slot: usize) -> CallId {
        self.seq += 1;
        ((slot as u64) << CALL_SEQ_BITS) | (self.seq & ((1 << CALL_SEQ_BITS) - 1))
    }

    /// Schedules the next check of frame `idx`.
    fn arm_check(&mut self, slot: usize, idx: usize) {
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
    fn sync_watchdogs(&mut self) {
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
    fn on_watch_timer(&mut self, timer: CallId) {
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
    fn interrupt_top(&mut self, slot: usize, cause: Cause) {
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
    fn abort_and_resolve(&mut self, slot: usize) {
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
    fn decide(&mut self, slot: usize) -> Result<TurnInput, TurnResult> {
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
    fn end_send(&mut self, slot: usize) {
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
    fn batch_interrupted(
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

    /// Appends a result to the top frame's session (outside a turn).
    fn add_result_to_top(
        &mut self,
        slot: usize,
        tool_use_id: Arc<str>,
        content: Arc<str>,
        is_error: bool,
    ) {
        self.with_top(slot, |frame, cx| {
            cx.add_result(frame, tool_use_id, content, is_error)
        });
    }

    /// The double-delivery bug: a second copy of a child's result in the parent's session.
    fn deliver_extra(&mut self, slot: usize, tool_use_id: &Arc<str>, content: &Arc<str>) {
        let record = self.config.record_events;
        let entry = self.stacks.entry_mut(slot);
        let Some(parent) = entry.stack.top_mut() else {
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
    fn finish_main(&mut self, slot: usize, reason: PopReason, text: Arc<str>) {
        let main = self.pop(slot, reason);
        if self.config.record_events {
            let tool_calls = if self.config.detailed_events {
                tool_calls_since(&main.session, main.turn_start)
            } else {
                Vec::new()
            };
            let response = AgentResponse {
                text,
                tool_calls,
                iterations: main.iteration,
            };
            let key = self.stacks.entry(slot).key.clone();
            self.events.push(Event::Response { key, response });
        }
        let entry = self.stacks.entry_mut(slot);
        entry.main_session = main.session;
        entry.stack.clear();
    }

    /// A cancel word: every pending `tool_use` on the way down gets "Cancelled by user.", the
    /// stack is cleared, queued messages are dropped and the user gets "Cancelled.".
    fn unwind(&mut self, slot: usize) {
        let frames = self.stacks.entry(slot).stack.depth();
        let keep = usize::from(self.config.has_bug(PlantedBug::CancelLeavesFrame));
        while self.stacks.entry(slot).stack.depth() > keep {
            self.with_top(slot, |frame, cx| {
                for timer in frame_timers(&frame.phase) {
                    cx.effects.push_back(Effect::CancelTimer { timer });
                }
                cx.resolve_all(frame, messages::CANCELLED_BY_USER);
                frame.phase = Phase::AwaitUser;
            });
            let frame = self.pop(slot, PopReason::Cancelled);
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
                frames,
                dropped,
            });
        }
        self.send(slot, "main".into(), messages::USER_CANCELLED.into());
    }
}

fn frame_timers(phase: &Phase) -> Vec<CallId> {
    match phase {
        Phase::AwaitTool { timer: Some(t), .. } => vec![*t],
        Phase::AwaitTools { batch } => batch.iter().filter_map(|i| i.timer).collect(),
        _ => Vec::new(),
    }
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
