//! The interactive stack of seed 000: the [`AgentStack`] of one conversation and the
//! per-session-key [`AgentStackManager`].
//!
//! The main agent is the bottom frame. It is pushed when a user message reaches an empty stack and
//! popped when it answers, so a stack is empty exactly when no turn is in progress; a child pushed
//! by `use_skill` makes the depth 2, as in seed 000's stack diagram.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use uuid::Uuid;

use crate::agents::frame::StackFrame;
use crate::model::llm::Usage;
use crate::model::transcript::Session;

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
