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

use serde::Serialize;

use crate::agent::Catalog;
use crate::ids::IdSource;
use crate::llm::{LlmError, LlmReply, Usage};
use crate::messages;
use crate::persist::ContextEntry;
use crate::planted::PlantedBug;
use crate::runtime::{Effect, Event, FrameInfo, RuntimeConfig};
use crate::stack::{BatchItem, CallId, Phase, StackFrame, TurnAction, TurnResult};
use crate::tools::{builtin, complete_result, SpawnRequest, Tool, ToolContext, ToolOutcome};
use crate::tools::{ToolOutput, UseAgent, UseSkill};
use crate::transcript::{Block, BlockAt, Content, Session};

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
}

/// What a turn may touch besides its frame: the effect and event queues, ids, the catalog.
pub struct TurnCx<'a> {
    /// Session key of the conversation.
    pub key: &'a Arc<str>,
    /// Its slot (the high bits of every call id it issues).
    pub slot: usize,
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
}

/// Bits of a [`CallId`] that hold the sequence number; the slot sits above them.
pub const CALL_SEQ_BITS: u32 = 40;

impl TurnCx<'_> {
    fn next_call(&mut self) -> CallId {
        *self.seq += 1;
        ((self.slot as u64) << CALL_SEQ_BITS) | (*self.seq & ((1 << CALL_SEQ_BITS) - 1))
    }

    fn record(&mut self, event: impl FnOnce() -> Event) {
        if self.config.record_events {
            self.events.push(event());
        }
    }

    /// Records activity for the frame's watchdog, if `kind` counts as activity.
    pub fn activity(&self, frame: &mut StackFrame, kind: fn(&crate::watchdog::Activity) -> bool) {
        if let Some(ic) = &self.config.interruptions {
            if kind(&ic.activity) {
                frame.watch.last_activity = self.now;
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
    fn detail(&mut self, event: impl FnOnce() -> Event) {
        if self.config.record_events && self.config.detailed_events {
            self.events.push(event());
        }
    }

    fn stream(&mut self, frame: &StackFrame, event: impl FnOnce() -> StreamEvent) {
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
    fn finish_tool(
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

/// How the runtime treats one `tool_use`.
enum Dispatch {
    /// An external tool, with its timeout (looked up once, here).
    External(Option<u64>),
    Builtin(Builtin),
}

/// A tool use the runtime answers itself.
enum Builtin {
    Complete,
    Spawner(&'static dyn Tool),
    AskUser,
    Refused(String),
}

fn classify(frame: &StackFrame, name: &str, config: &RuntimeConfig) -> Dispatch {
    match name {
        builtin::COMPLETE
            if frame.is_main() && !config.has_bug(PlantedBug::MainCompleteAccepted) =>
        {
            Dispatch::Builtin(Builtin::Refused(messages::tool_not_available(name)))
        }
        builtin::COMPLETE => Dispatch::Builtin(Builtin::Complete),
        builtin::USE_SKILL => Dispatch::Builtin(Builtin::Spawner(&UseSkill)),
        builtin::USE_AGENT => Dispatch::Builtin(Builtin::Spawner(&UseAgent)),
        builtin::ASK_USER if frame.agent.batch.is_some() => {
            Dispatch::Builtin(Builtin::Refused(messages::ASK_USER_IN_BATCH.to_owned()))
        }
        builtin::ASK_USER => Dispatch::Builtin(Builtin::AskUser),
        _ => match config.tools.get(name) {
            None => Dispatch::Builtin(Builtin::Refused(messages::tool_not_found(name))),
            Some(_) if !frame.agent.allows(name) => {
                Dispatch::Builtin(Builtin::Refused(messages::tool_not_available(name)))
            }
            Some(spec) => Dispatch::External(spec.timeout_ms),
        },
    }
}

/// Builds a child frame for a spawn (seed 000's `UseSkillTool.execute`, minus the exception).
fn child_frame(req: SpawnRequest, parent_tool_use_id: Arc<str>, ids: &mut IdSource) -> StackFrame {
    let req_batch = req.agent.batch.is_some();
    let agent_session_id = ids.next_uuid();
    let frame_id = ids.next_uuid();
    let mut session = Session::with_id(agent_session_id);
    session.add_user_message(req.message);
    StackFrame {
        frame_id,
        system_prompt: req.agent.system_prompt.clone(),
        max_iterations: req.agent.max_iterations,
        agent: req.agent,
        session,
        iteration: 0,
        parent_tool_use_id: Some(parent_tool_use_id),
        agent_session_id,
        usage: Usage::default(),
        phase: Phase::Loop,
        turn_start: 0,
        resumed_from_child: false,
        batch_sends: u32::from(req_batch),
        watch: Default::default(),
    }
}

/// Describes a frame for events.
pub fn frame_info(frame: &StackFrame) -> FrameInfo {
    FrameInfo {
        frame_id: frame.frame_id,
        name: frame.agent.frame_name.clone(),
        kind: frame.agent.kind,
        parent_tool_use_id: frame.parent_tool_use_id.clone(),
        session_id: frame.agent_session_id,
    }
}

/// Runs the frame until its turn ends (`Some`) or it waits for the driver (`None`).
///
/// The caller has checked that `input` is what the frame waits for (a reply to *its* call, a
/// result of *its* tool); stale inputs never get here.
pub fn execute_turn(
    frame: &mut StackFrame,
    input: TurnInput,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    match input {
        TurnInput::Start => frame.phase = Phase::Loop,
        TurnInput::User(text) => match std::mem::take(&mut frame.phase) {
            Phase::AwaitAnswer { tool_use_id } => {
                cx.add_result(frame, tool_use_id, text, false);
                frame.phase = Phase::RunTools;
            }
            _ => {
                cx.journal(|| ContextEntry::User {
                    agent_session_id: frame.agent_session_id,
                    text: text.clone(),
                });
                frame.session.add_user_message(text);
                frame.phase = Phase::Loop;
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
    }
    run(frame, cx)
}

/// The loop proper, from the frame's current phase.
fn run(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
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
                    frame.phase = Phase::RunTools;
                    continue;
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

/// Handles one unresolved tool use. `Some(r)` leaves the loop with `r`; `None` continues it.
fn run_next_tool(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<Option<TurnResult>> {
    let Some((at, next)) = frame.session.next_unresolved() else {
        frame.phase = Phase::Loop;
        return None;
    };
    cx.detail(|| Event::ToolCall {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        tool_use_id: next.id.clone(),
        name: next.name.clone(),
        input: next.input.clone(),
    });
    let builtin = match classify(frame, next.name, cx.config) {
        // An external tool's driver reads the id, name and input from the session
        // (`Runtime::tool_run`): nothing is copied for it.
        Dispatch::External(_) if frame.agent.parallel_tools => {
            start_batch(frame, cx);
            return Some(None);
        }
        Dispatch::External(timeout_ms) => {
            start_tool(frame, at, None, timeout_ms, cx);
            return Some(None);
        }
        Dispatch::Builtin(builtin) => builtin,
    };
    let (id, input) = (next.id.clone(), next.input.clone());
    match builtin {
        Builtin::Complete => {
            let result = complete_result(&input);
            cx.add_result(frame, id, result.clone(), false);
            cx.resolve_all(frame, messages::SKIPPED_AFTER_COMPLETE);
            Some(Some(TurnResult::new(TurnAction::Complete, result)))
        }
        Builtin::Refused(text) => {
            cx.finish_tool(frame, at, None, text.into(), true);
            None
        }
        Builtin::AskUser => {
            let Some(question) = input.get("question").and_then(|q| q.as_str()) else {
                let text = messages::missing_field("question").into();
                cx.finish_tool(frame, at, None, text, true);
                return None;
            };
            let mut text = question.to_owned();
            if let Some(options) = input.get("options").and_then(|o| o.as_array()) {
                for option in options {
                    text.push_str("\n- ");
                    match option.as_str() {
                        Some(s) => text.push_str(s),
                        None => text.push_str(&option.to_string()),
                    }
                }
            }
            frame.phase = Phase::AwaitAnswer { tool_use_id: id };
            Some(Some(TurnResult::new(TurnAction::Interrupt, text)))
        }
        Builtin::Spawner(tool) => {
            let ctx = ToolContext {
                catalog: cx.catalog,
                caller: &frame.agent,
                tool_use_id: &id,
            };
            match tool.call(&input, &ctx) {
                Ok(ToolOutcome::Output(out)) => {
                    cx.finish_tool(frame, at, None, out.content, out.is_error);
                    None
                }
                Err(e) => {
                    let text = messages::tool_failed(&e.0);
                    cx.finish_tool(frame, at, None, text.into(), true);
                    None
                }
                Ok(ToolOutcome::Spawn(req)) if req.agent.passthrough => {
                    // A passthrough skill is one external execution, under the skill's name: no
                    // frame is pushed.
                    let external: Arc<str> = req.agent.frame_name.clone();
                    start_tool(frame, at, Some(external), None, cx);
                    Some(None)
                }
                Ok(ToolOutcome::Spawn(req)) => {
                    let child = child_frame(req, id, cx.ids);
                    cx.journal(|| ContextEntry::AgentSession {
                        agent_session_id: child.agent_session_id,
                        agent_name: child.agent.name.clone(),
                        agent_type: child.agent.kind,
                        parent_tool_use_id: child
                            .parent_tool_use_id
                            .clone()
                            .expect("a child has a parent"),
                        message: child.session.messages[0].text().into(),
                    });
                    frame.phase = Phase::AwaitChild;
                    Some(Some(TurnResult {
                        action: TurnAction::ChildActivated,
                        text: "".into(),
                        child_frame: Some(Box::new(child)),
                    }))
                }
            }
        }
    }
}

/// Emits one external tool run for the tool use at `at` and waits for it. `name` overrides the
/// tool's name (a passthrough skill runs under its own).
fn start_tool(
    frame: &mut StackFrame,
    at: BlockAt,
    name: Option<Arc<str>>,
    timeout_ms: Option<u64>,
    cx: &mut TurnCx<'_>,
) {
    let (call, timer) = emit_run(frame, at, name.as_ref(), timeout_ms, cx);
    frame.phase = Phase::AwaitTool {
        call,
        at,
        name,
        timer,
    };
}

fn emit_run(
    frame: &mut StackFrame,
    at: BlockAt,
    name: Option<&Arc<str>>,
    timeout_ms: Option<u64>,
    cx: &mut TurnCx<'_>,
) -> (CallId, Option<CallId>) {
    if let Some(tool_use) = frame.session.tool_use_at(at) {
        let name = name.unwrap_or(tool_use.name);
        cx.stream(frame, || StreamEvent::ToolStart {
            name: name.clone(),
            id: tool_use.id.clone(),
        });
        tracing::debug!(frame = %frame.agent.frame_name, tool = %name, id = %tool_use.id, "tool call");
    }
    cx.activity(frame, |a| a.tool_start);
    let call = cx.next_call();
    cx.effects.push_back(Effect::RunTool { call });
    let timer = match timeout_ms {
        Some(after_ms) => {
            let timer = cx.next_call();
            cx.effects.push_back(Effect::SetTimer { timer, after_ms });
            Some(timer)
        }
        None => None,
    };
    (call, timer)
}

/// Emits the maximal run of consecutive external tool uses at once (DESIGN §3 item 9). The first
/// one is known to be external; the run stops at the first built-in or refused tool, which then
/// runs in order after the batch.
fn start_batch(frame: &mut StackFrame, cx: &mut TurnCx<'_>) {
    let uses: Vec<BlockAt> = frame.session.unresolved().map(|(at, _)| at).collect();
    let mut batch = Vec::with_capacity(uses.len());
    for (i, at) in uses.into_iter().enumerate() {
        let Some(tool_use) = frame.session.tool_use_at(at) else {
            break;
        };
        let Dispatch::External(timeout_ms) = classify(frame, tool_use.name, cx.config) else {
            break;
        };
        if i > 0 {
            // The first was recorded by the caller.
            cx.detail(|| Event::ToolCall {
                key: cx.key.clone(),
                frame: frame.agent.frame_name.clone(),
                frame_id: frame.frame_id,
                tool_use_id: tool_use.id.clone(),
                name: tool_use.name.clone(),
                input: tool_use.input.clone(),
            });
        }
        let (call, timer) = emit_run(frame, at, None, timeout_ms, cx);
        batch.push(BatchItem {
            call,
            at,
            output: None,
            appended: false,
            timer,
        });
    }
    frame.phase = Phase::AwaitTools { batch };
}

/// A tool finished or timed out. Returns whether the frame can continue its loop.
fn on_tool_outcome(
    frame: &mut StackFrame,
    call: CallId,
    content: Arc<str>,
    is_error: bool,
    cx: &mut TurnCx<'_>,
) -> bool {
    if !is_error {
        cx.activity(frame, |a| a.tool_success);
    }
    match std::mem::take(&mut frame.phase) {
        Phase::AwaitTool {
            at, name, timer, ..
        } => {
            if let Some(timer) = timer {
                cx.effects.push_back(Effect::CancelTimer { timer });
            }
            cx.finish_tool(frame, at, name.as_ref(), content, is_error);
            frame.phase = Phase::RunTools;
            true
        }
        Phase::AwaitTools { mut batch } => {
            for item in batch.iter_mut() {
                if item.call == call || item.timer == Some(call) {
                    if item.call == call {
                        if let Some(timer) = item.timer {
                            cx.effects.push_back(Effect::CancelTimer { timer });
                        }
                    }
                    if cx.config.has_bug(PlantedBug::CompletionOrderResults) {
                        cx.finish_tool(frame, item.at, None, content.clone(), is_error);
                        item.output = Some(("".into(), false));
                        item.appended = true;
                        continue;
                    }
                    item.output = Some((content.clone(), is_error));
                }
            }
            if batch.iter().any(|item| item.output.is_none()) {
                frame.phase = Phase::AwaitTools { batch };
                return false;
            }
            // Every tool finished: results go in in the reply's order, whatever order they
            // finished in.
            for item in batch {
                let Some((content, is_error)) = item.output else {
                    continue; // Checked above: every item has its output.
                };
                if item.appended {
                    continue; // Already appended by the completion-order bug.
                }
                cx.finish_tool(frame, item.at, None, content, is_error);
            }
            frame.phase = Phase::RunTools;
            true
        }
        other => {
            frame.phase = other;
            false
        }
    }
}

fn on_tool_timeout(frame: &mut StackFrame, timer: CallId, cx: &mut TurnCx<'_>) -> bool {
    let (at, name) = match &frame.phase {
        Phase::AwaitTool { at, name, .. } => (*at, name.as_ref()),
        Phase::AwaitTools { batch } => match batch.iter().find(|i| i.timer == Some(timer)) {
            Some(item) => (item.at, None),
            None => return false,
        },
        _ => return false,
    };
    let Some(name) = name.or(frame.session.tool_use_at(at).map(|u| u.name)) else {
        return false;
    };
    let timeout_ms = cx
        .config
        .tools
        .get(&**name)
        .and_then(|t| t.timeout_ms)
        .unwrap_or(0);
    let text: Arc<str> = messages::tool_timed_out(name, timeout_ms).into();
    on_tool_outcome(frame, timer, text, true, cx)
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
                    .any(|b| matches!(b, Block::ToolUse { id: other, .. } if other == id));
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
    if has_tool_use {
        // Text next to tool uses is recorded but not sent (DESIGN §3 item 5).
        frame.phase = Phase::RunTools;
        run(frame, cx)
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
        kind: crate::llm::LlmErrorKind::Other,
        message: message.as_str().into(),
    });
    frame.phase = Phase::Loop;
    Some(TurnResult::new(TurnAction::Error, message))
}
