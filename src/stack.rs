//! The interactive stack of seed 000: [`StackFrame`], [`AgentStack`] and the per-session-key
//! [`AgentStackManager`], plus the [`TurnAction`] / [`TurnResult`] that one turn of a frame ends
//! with.
//!
//! The main agent is the bottom frame. It is pushed when a user message reaches an empty stack and
//! popped when it answers, so a stack is empty exactly when no turn is in progress; a child pushed
//! by `use_skill` makes the depth 2, as in seed 000's stack diagram.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use uuid::Uuid;

use crate::agent::{AgentDef, AgentKind};
use crate::llm::Usage;
use crate::transcript::{BlockAt, Content, Session};

/// Identifies one model call or tool run handed to the driver. The slot of the session key sits in
/// the high 32 bits, so an input finds its stack without a lookup.
pub type CallId = u64;

/// One tool of a parallel batch (DESIGN §3 item 9).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchItem {
    /// The run's id.
    pub call: CallId,
    /// The `tool_use` it answers.
    pub at: BlockAt,
    /// The outcome, once the tool finished.
    pub output: Option<(Arc<str>, bool)>,
    /// Whether its result is already in the session (only the planted completion-order bug
    /// appends results before the whole batch finished).
    pub appended: bool,
    /// The timeout timer, if the tool has one.
    pub timer: Option<CallId>,
}

/// Where a frame is in its turn: what it waits for, if anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Phase {
    /// At the head of the iteration loop: the next step checks the limit and calls the model or
    /// runs unresolved tool uses.
    #[default]
    Loop,
    /// Running the unresolved tool uses of the last reply, in order.
    RunTools,
    /// Waiting for a model reply; `partial` collects a streamed reply.
    AwaitLlm {
        /// The call.
        call: CallId,
        /// Blocks streamed so far.
        partial: Content,
    },
    /// Waiting for one external tool.
    AwaitTool {
        /// The run.
        call: CallId,
        /// The `tool_use` it answers.
        at: BlockAt,
        /// The name it runs under when it is not the tool use's own (a passthrough skill).
        name: Option<Arc<str>>,
        /// The timeout timer, if any.
        timer: Option<CallId>,
    },
    /// Waiting for a parallel batch of external tools.
    AwaitTools {
        /// The batch, in reply order.
        batch: Vec<BatchItem>,
    },
    /// A child frame is above this one.
    AwaitChild,
    /// The frame sent text and waits for the user's next message.
    AwaitUser,
    /// The frame asked the user a question with `ask_user`; the answer becomes the tool's result.
    AwaitAnswer {
        /// The `ask_user` tool use.
        tool_use_id: Arc<str>,
    },
}

/// Everything needed to pause and resume one agent (seed 000's `StackFrame`).
#[derive(Clone, Debug)]
pub struct StackFrame {
    /// Unique id.
    pub frame_id: Uuid,
    /// The agent's definition (name, kind, prompt, limits, whitelist).
    pub agent: Arc<AgentDef>,
    /// The frame's conversation.
    pub session: Session,
    /// Cached system prompt.
    pub system_prompt: Arc<str>,
    /// Iterations used over the frame's whole life.
    pub iteration: u32,
    /// The frame's iteration limit.
    pub max_iterations: u32,
    /// The parent's `tool_use` this frame answers when it completes; `None` for the main frame.
    pub parent_tool_use_id: Option<Arc<str>>,
    /// Tags this frame's entries in `context.jsonl`.
    pub agent_session_id: Uuid,
    /// Token usage of this frame's model calls.
    pub usage: Usage,
    /// Where the frame is in its turn.
    pub phase: Phase,
    /// Index in `session.messages` where the current user turn began (for [`crate::agent::AgentResponse`]).
    pub turn_start: usize,
    /// The frame resumes after a child's result (only the skip-unresolved-after-child planted bug
    /// reads it).
    pub resumed_from_child: bool,
    /// Sends made to a batch child so far (0 for interactive frames).
    pub batch_sends: u32,
    /// Watchdog and interruption state (used only when interruptions are modelled).
    pub watch: crate::watchdog::Watch,
}

impl StackFrame {
    /// `main`, `skill:<name>` or `agent:<name>`.
    pub fn agent_name(&self) -> &Arc<str> {
        &self.agent.frame_name
    }

    /// `main`, `skill` or `agent`.
    pub fn agent_type(&self) -> AgentKind {
        self.agent.kind
    }

    /// Whether this is the main agent's frame.
    pub fn is_main(&self) -> bool {
        self.agent.kind == AgentKind::Main
    }

    /// Whether the frame waits for the user (after sending text or asking a question).
    pub fn awaits_user(&self) -> bool {
        matches!(self.phase, Phase::AwaitUser | Phase::AwaitAnswer { .. })
    }
}

/// The frames of one conversation, main at the bottom.
#[derive(Clone, Debug, Default)]
pub struct AgentStack {
    frames: Vec<StackFrame>,
}

impl AgentStack {
    /// Whether no frame is active.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Number of frames.
    pub fn depth(&self) -> usize {
        self.frames.len()
    }

    /// The frame on top.
    pub fn top(&self) -> Option<&StackFrame> {
        self.frames.last()
    }

    /// The frame on top, mutably.
    pub fn top_mut(&mut self) -> Option<&mut StackFrame> {
        self.frames.last_mut()
    }

    /// Pushes a frame.
    pub fn push(&mut self, frame: StackFrame) {
        if self.frames.capacity() == 0 {
            // Room for main and one child: frames are large (a session each), and the default
            // first growth to four would take a block too big for the allocator's fast path.
            self.frames.reserve_exact(2);
        }
        self.frames.push(frame);
    }

    /// Pops the top frame.
    pub fn pop(&mut self) -> Option<StackFrame> {
        self.frames.pop()
    }

    /// The frames, bottom first.
    pub fn frames(&self) -> &[StackFrame] {
        &self.frames
    }

    /// The frames, mutably.
    pub fn frames_mut(&mut self) -> &mut [StackFrame] {
        &mut self.frames
    }

    /// Removes every frame.
    pub fn clear(&mut self) {
        self.frames.clear();
    }

    /// `[main, skill:research]`, for error messages.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.frames.iter().map(|f| &*f.agent.frame_name).collect();
        format!("[{}]", names.join(", "))
    }
}

/// One conversation: its stack, the main agent's persistent session, and messages that arrived
/// while a turn was in progress.
#[derive(Clone, Debug)]
pub struct StackEntry {
    /// The provider's session key, e.g. `telegram_123_456`.
    pub key: Arc<str>,
    /// The active frames.
    pub stack: AgentStack,
    /// The main agent's conversation between turns (moved into the main frame during a turn).
    pub main_session: Session,
    /// Its id (the session names it as text; this saves parsing it back).
    pub main_session_id: Uuid,
    /// User messages that arrived while the top frame was busy, delivered in order when it waits.
    pub inbox: VecDeque<Arc<str>>,
    /// Token usage of the whole conversation.
    pub usage: Usage,
}

/// Stacks keyed by the provider's session key (seed 000's `AgentStackManager`).
#[derive(Clone, Debug, Default)]
pub struct AgentStackManager {
    entries: Vec<StackEntry>,
    by_key: BTreeMap<Arc<str>, usize>,
}

impl AgentStackManager {
    /// The slot of `key`, creating an empty stack for it if needed. `main_session_id` names the
    /// main conversation when it is created.
    pub fn get_or_create(&mut self, key: &str, main_session_id: impl FnOnce() -> Uuid) -> usize {
        if let Some(&slot) = self.by_key.get(key) {
            return slot;
        }
        let key: Arc<str> = key.into();
        let slot = self.entries.len();
        if self.entries.capacity() == 0 {
            // Most runs hold one conversation; the default first growth makes room for four.
            self.entries.reserve_exact(1);
        }
        let main_session_id = main_session_id();
        self.entries.push(StackEntry {
            key: key.clone(),
            stack: AgentStack::default(),
            main_session: Session::with_id(main_session_id),
            main_session_id,
            inbox: VecDeque::new(),
            usage: Usage::default(),
        });
        self.by_key.insert(key, slot);
        slot
    }

    /// The slot of an existing key.
    pub fn slot(&self, key: &str) -> Option<usize> {
        self.by_key.get(key).copied()
    }

    /// Whether `key` has an active (non-empty) stack.
    pub fn has_active(&self, key: &str) -> bool {
        self.slot(key)
            .is_some_and(|s| !self.entries[s].stack.is_empty())
    }

    /// Drops every frame of `key`.
    pub fn clear(&mut self, key: &str) {
        if let Some(s) = self.slot(key) {
            self.entries[s].stack.clear();
        }
    }

    /// The entry in `slot`.
    pub fn entry(&self, slot: usize) -> &StackEntry {
        &self.entries[slot]
    }

    /// The entry in `slot`, mutably.
    pub fn entry_mut(&mut self, slot: usize) -> &mut StackEntry {
        &mut self.entries[slot]
    }

    /// Every entry, in creation order.
    pub fn entries(&self) -> &[StackEntry] {
        &self.entries
    }

    /// The entry of `key`.
    pub fn get(&self, key: &str) -> Option<&StackEntry> {
        self.slot(key).map(|s| &self.entries[s])
    }
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
    pub child_frame: Option<Box<StackFrame>>,
}

impl TurnResult {
    /// A result with text and no child.
    pub fn new(action: TurnAction, text: impl Into<Arc<str>>) -> TurnResult {
        TurnResult {
            action,
            text: text.into(),
            child_frame: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_keeps_one_stack_per_session_key() {
        let mut m = AgentStackManager::default();
        let (id_a, id_b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
        let a = m.get_or_create("telegram_1", || id_a);
        let b = m.get_or_create("telegram_2", || id_b);
        assert_ne!(a, b);
        assert_eq!(m.get_or_create("telegram_1", || unreachable!("exists")), a);
        assert_eq!(m.entry(a).main_session_id, id_a);
        assert_eq!(m.entry(a).main_session.session_id, id_a.to_string());
        assert_eq!(m.entry(b).main_session.session_id, id_b.to_string());
        assert!(!m.has_active("telegram_1"));
        assert!(!m.has_active("unknown"));
        assert_eq!(m.slot("telegram_2"), Some(b));
        assert_eq!(m.get("telegram_2").unwrap().stack.describe(), "[]");
        m.clear("telegram_1");
        assert!(m.get("telegram_1").unwrap().stack.is_empty());
    }
}
