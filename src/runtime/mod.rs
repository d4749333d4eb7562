//! The reference runtime: a pure, sans-IO state machine.
//!
//! It is fed [`Input`]s (a user message, a model reply or error or stream chunk, a tool outcome, a
//! timer) and answers with [`Effect`]s as data (call the model, run a tool, send text to the user,
//! set or cancel a timer, publish a stream event). It never awaits, sleeps, reads a clock, draws
//! randomness or does IO; ids come from an [`IdSource`] seeded by the driver. Observers read the
//! [`Event`]s it records (when [`RuntimeConfig::record_events`] is on) and may inspect its state
//! between inputs.
//!
//! The orchestration loop is seed 000's provider loop: it runs a frame's turn (`turn.rs`, seed
//! 000's `execute_turn` as a resumable state machine, its loop in `turn_loop.rs`, what it takes
//! and gives in `turn_context.rs`, with tool dispatch in `dispatch.rs`) and
//! acts on how it ended (`orchestrate.rs`), following the cascade from frame to frame by
//! [`FrameId`] until the conversation waits for the driver or for the user. Every iteration either
//! returns or cascades; there is no recursion. Routing, the inbox and cancellation are in
//! `routing.rs`, seed 004's interruptions in `interruptions.rs`, persistence in `restore.rs`.
//!
//! The driver contract (inputs, effects, events) is [`crate::protocol`].

mod config;
mod dispatch;
mod fork;
mod interruptions;
mod orchestrate;
pub mod planted;
mod restore;
mod routing;
mod sessions;
mod tree;
mod turn;
mod turn_context;
mod turn_loop;
mod workflow;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::stack::{AgentStackManager, StackView};
use crate::agents::tools::ToolOutput;
use crate::model::agent::Catalog;
use crate::model::ids::{call_frame, CallId, FrameId, IdSource};
use crate::model::llm::{Chunk, LlmReply, LlmRequest};
use crate::model::messages;
use crate::model::transcript::Block;
use crate::protocol::{Effect, Event, Input, StreamEvent, ToolRun};

pub use config::{QueryUser, RuntimeConfig, ToolSpec, DEFAULT_CANCEL_WORDS};
pub use fork::fork_name;
use turn_context::TurnInput;

/// The reference runtime.
#[derive(Clone, Debug)]
pub struct Runtime {
    config: RuntimeConfig,
    catalog: Arc<Catalog>,
    stacks: AgentStackManager,
    ids: IdSource,
    seq: u64,
    effects: Roomy<VecDeque<Effect>>,
    events: Roomy<Vec<Event>>,
    /// Virtual time as the driver last set it (only the watchdog reads it).
    now: u64,
    /// Watchdog check timers: which frame each one belongs to.
    watch_timers: BTreeMap<CallId, FrameId>,
    /// Agents that ended, oldest first (at most `config.ended_nodes`).
    ended: tree::EndedNodes,
    /// Agents started so far (the order of the tree).
    order: u64,
    /// Forks started by the turn that just ran, placed and started once it is over.
    new_forks: Vec<StackFrame>,
}

/// A list of the runtime's (its effects not taken yet, its events not read yet) that starts
/// with room for a wide batch's items, fresh or cloned: the default growth (to 4, 8, 16, …)
/// would copy every item listed at each growth, in every fresh runtime (an explored run, a
/// benchmark's run, a driver's copy).
#[derive(Debug)]
struct Roomy<L>(L);

impl<L> Roomy<L> {
    const ROOM: usize = 32;
}

impl<T> Default for Roomy<VecDeque<T>> {
    fn default() -> Self {
        Roomy(VecDeque::with_capacity(Self::ROOM))
    }
}

impl<T: Clone> Clone for Roomy<VecDeque<T>> {
    fn clone(&self) -> Self {
        let mut list = VecDeque::with_capacity(self.0.len().max(Self::ROOM));
        list.extend(self.0.iter().cloned());
        Roomy(list)
    }
}

impl<T> Default for Roomy<Vec<T>> {
    fn default() -> Self {
        Roomy(Vec::with_capacity(Self::ROOM))
    }
}

impl<T: Clone> Clone for Roomy<Vec<T>> {
    fn clone(&self) -> Self {
        let mut list = Vec::with_capacity(self.0.len().max(Self::ROOM));
        list.extend(self.0.iter().cloned());
        Roomy(list)
    }
}

impl<L> std::ops::Deref for Roomy<L> {
    type Target = L;
    fn deref(&self) -> &L {
        &self.0
    }
}

impl<L> std::ops::DerefMut for Roomy<L> {
    fn deref_mut(&mut self) -> &mut L {
        &mut self.0
    }
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
            effects: Roomy::default(),
            events: Roomy::default(),
            now: 0,
            watch_timers: BTreeMap::new(),
            ended: tree::EndedNodes::default(),
            order: 0,
            new_forks: Vec::new(),
        }
    }

    /// The driver's time as it last told it (milliseconds on its clock).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Tells the runtime what time it is (milliseconds on the driver's clock), before each
    /// input: the watchdog and async questions' deadlines read it; the runtime never reads a
    /// clock itself.
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

    /// The stacks, by session key, and their frames.
    pub fn stacks(&self) -> &AgentStackManager {
        &self.stacks
    }

    /// The stack of conversation `key` with its frames (`None` for a key never seen).
    pub fn stack(&self, key: &str) -> Option<StackView<'_>> {
        self.stacks.view(key)
    }

    /// A live frame.
    pub fn frame(&self, id: FrameId) -> Option<&StackFrame> {
        self.stacks.frame(id)
    }

    /// The next effect for the driver.
    #[inline]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The effects not yet taken with [`Runtime::poll_effect`], in order (an observer reads what
    /// a step asked of its driver before the driver carries it out).
    pub fn effects(&self) -> impl Iterator<Item = &Effect> + '_ {
        self.effects.iter()
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
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.stacks.is_idle()
    }

    /// The request behind a pending [`Effect::CallLlm`], borrowed from the frame's session.
    #[inline]
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
    #[inline]
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
            frame_id: frame.frame_id,
            tool_use_id: tool_use.id,
            name: name.unwrap_or(tool_use.name),
            input: tool_use.input,
        })
    }

    /// The frame that issued `call` (if it still lives) and its conversation's key. Whether it
    /// still waits for the call is for the caller to check.
    #[inline]
    fn waiting_frame(&self, call: CallId) -> Option<(&Arc<str>, &StackFrame)> {
        let frame = self.stacks.frame_at(call_frame(call))?;
        let key = &self.stacks.entry(frame.conversation as usize).key;
        Some((key, frame))
    }

    /// Feeds one input and runs until every frame it woke waits again.
    pub fn handle(&mut self, input: Input) {
        self.handle_input(input);
        self.end_input();
    }

    /// What ends every input: the watchdogs follow the frames, and the state is written.
    #[inline(always)]
    fn end_input(&mut self) {
        if self.config.interruptions.is_some() {
            self.sync_watchdogs();
        }
        // Every input leaves every frame waiting for something: a consistent point, whatever the
        // other conversations do. The state follows the journal lines of this input.
        if self.config.persist {
            let json = serde_json::to_string(&self.state()).expect("state serialises");
            self.effects.push_back(Effect::WriteState { json });
        }
    }

    fn handle_input(&mut self, input: Input) {
        match input {
            Input::User { key, text } => {
                if text.is_empty() {
                    if self.config.record_events {
                        self.events.push(Event::EmptyUserMessage { key });
                    }
                    return;
                }
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
                let Some(frame) = self.stacks.frame_at_mut(call_frame(call)) else {
                    return self.stale(call, "llm end");
                };
                let partial = match &mut frame.phase {
                    Phase::AwaitLlm { call: c, partial } if *c == call => std::mem::take(partial),
                    _ => return self.stale(call, "llm end"),
                };
                let (id, slot) = (frame.id, frame.conversation as usize);
                let reply = LlmReply {
                    content: partial,
                    usage,
                };
                self.drive(id, TurnInput::LlmStreamEnd(reply));
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
            Input::Intervene {
                agent_id,
                intervention,
            } => {
                self.apply_intervention(agent_id, intervention);
            }
            Input::Answer { question_id, text } => {
                self.apply_answer(question_id, text);
            }
            Input::Timer { timer } if self.watch_timers.contains_key(&timer) => {
                self.on_watch_timer(timer);
            }
            Input::Timer { timer } if self.on_question_timer(timer) => {}
            Input::Trigger { agent, payload } => {
                self.apply_trigger(&agent, payload);
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

    fn stale(&mut self, call: CallId, what: &'static str) {
        if self.config.record_events {
            self.events.push(Event::Stale { call, what });
        }
    }

    /// Feeds `input` to the frame that issued `call` if that frame still waits for it.
    fn resume(
        &mut self,
        call: CallId,
        what: &'static str,
        waits: impl Fn(&Phase) -> bool,
        input: TurnInput,
    ) {
        match self.stacks.frame_at(call_frame(call)) {
            Some(frame) if waits(&frame.phase) => {
                let (id, slot) = (frame.id, frame.conversation as usize);
                self.drive(id, input);
                self.pump(slot);
            }
            _ => self.stale(call, what),
        }
    }

    fn on_chunk(&mut self, call: CallId, chunk: Chunk) {
        let record = self.config.record_events;
        let Some(frame) = self.stacks.frame_at_mut(call_frame(call)) else {
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
            let slot = frame.conversation as usize;
            let key = self.stacks.entry(slot).key.clone();
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
}

/// The timers a frame's phase holds (tool timeouts).
fn frame_timers(phase: &Phase) -> Vec<CallId> {
    match phase {
        Phase::AwaitTool { timer: Some(t), .. } => vec![*t],
        Phase::AwaitTools { batch } => batch.iter().filter_map(|i| i.timer).collect(),
        Phase::AwaitAnswer {
            timer: Some((t, _)),
            ..
        } => vec![*t],
        _ => Vec::new(),
    }
}
