//! The interactive stack of seed 000: the [`AgentStack`] of one conversation, the per-session-key
//! [`AgentStackManager`], and the arena that holds every live frame by [`FrameId`].
//!
//! The main agent is the bottom frame. It is pushed when a user message reaches an empty stack and
//! popped when it answers, so a stack is empty exactly when no turn is in progress; a child pushed
//! by `use_skill` makes the depth 2, as in seed 000's stack diagram.
//!
//! Frames live in one arena and a stack lists their ids, bottom first. A model call, a tool run or
//! a timer names the frame that issued it, never a position in a stack, so several frames of one
//! conversation can wait at once (forks and workflow children) and a frame can wait for several
//! children.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;

use uuid::Uuid;

use crate::agents::frame::{Phase, StackFrame};
use crate::model::ids::FrameId;
use crate::model::llm::Usage;
use crate::model::transcript::Session;

/// The frames of one conversation, by id, main at the bottom.
#[derive(Clone, Debug, Default)]
pub struct AgentStack {
    frames: Vec<FrameId>,
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
    pub fn top(&self) -> Option<FrameId> {
        self.frames.last().copied()
    }

    /// The frames, bottom first.
    pub fn ids(&self) -> &[FrameId] {
        &self.frames
    }
}

/// One place of the arena.
#[derive(Clone, Debug)]
struct Place {
    generation: u32,
    frame: Option<StackFrame>,
}

/// Every live frame, by [`FrameId`]. A place freed by a popped frame is reused with the next
/// generation, so an old id never names a new frame. A new frame takes the lowest free place, so
/// where frames go depends only on which places are taken, never on the order they were freed
/// in: a restored runtime that puts each frame back in its place (see
/// [`AgentStackManager::place_next_at`]) goes on placing frames, and numbering calls, exactly as
/// the runtime that stopped.
#[derive(Clone, Debug, Default)]
struct Arena {
    places: Vec<Place>,
    free: BinaryHeap<Reverse<u32>>,
    /// The place the next frame must take (a restore puts frames back where they were).
    want: Option<u32>,
    /// Live frames.
    live: usize,
}

impl Arena {
    /// Stores `frame` in a free place and gives it its id, conversation and parent there. The
    /// frame is moved once, untouched, into its place, and fixed up in place: a 500-byte frame
    /// changed on its way in is copied again at every step.
    #[inline(always)]
    fn insert(
        &mut self,
        make: impl FnOnce() -> StackFrame,
        conversation: u32,
        parent: Option<FrameId>,
    ) -> FrameId {
        let reuse = match self.want.take() {
            Some(index) => self.claim(index),
            None => self.free.pop().map(|Reverse(index)| index),
        };
        let id = match reuse {
            Some(index) => {
                let place = &mut self.places[index as usize];
                place.generation += 1;
                FrameId::new(index, place.generation)
            }
            None => {
                let room = self.places.capacity();
                if room == self.places.len() {
                    // Room for main and one child at first: frames are large (a session each),
                    // and the default first growth to four would take a block too big for the
                    // allocator's fast path. Then four times the room at each growth: every
                    // growth copies every frame, so a deep chain copies a third of what
                    // doubling would.
                    self.places
                        .reserve_exact(if room == 0 { 2 } else { 3 * room });
                }
                let index = u32::try_from(self.places.len()).expect("fewer than 2^32 live frames");
                self.places.push(Place {
                    generation: 0,
                    frame: None,
                });
                FrameId::new(index, 0)
            }
        };
        let stored = self.places[id.index() as usize].frame.insert(make());
        stored.id = id;
        stored.conversation = conversation;
        stored.parent = parent;
        self.live += 1;
        id
    }

    /// Takes free place `index` (growing the arena to it), or, when it is taken, the lowest free
    /// place.
    #[cold]
    fn claim(&mut self, index: u32) -> Option<u32> {
        while self.places.len() <= index as usize {
            let i = u32::try_from(self.places.len()).expect("fewer than 2^32 live frames");
            self.places.push(Place {
                generation: 0,
                frame: None,
            });
            self.free.push(Reverse(i));
        }
        if self.places[index as usize].frame.is_some() {
            return self.free.pop().map(|Reverse(i)| i);
        }
        self.free.retain(|Reverse(i)| *i != index);
        Some(index)
    }

    /// Frees the place of live frame `id`, whose frame the caller then takes out or drops
    /// there.
    #[inline(always)]
    fn vacate(&mut self, id: FrameId) -> Option<&mut Option<StackFrame>> {
        let place = self.places.get_mut(id.index() as usize)?;
        if place.generation != id.generation() || place.frame.is_none() {
            return None;
        }
        self.live -= 1;
        self.free.push(Reverse(id.index()));
        Some(&mut place.frame)
    }

    #[inline(always)]
    fn remove(&mut self, id: FrameId) -> Option<StackFrame> {
        self.vacate(id)?.take()
    }

    /// Drops frame `id` where it lies (taking it out first would copy it).
    #[inline(always)]
    fn discard(&mut self, id: FrameId) -> bool {
        self.vacate(id).map(|frame| *frame = None).is_some()
    }

    #[inline]
    fn get(&self, id: FrameId) -> Option<&StackFrame> {
        let place = self.places.get(id.index() as usize)?;
        (place.generation == id.generation())
            .then_some(place.frame.as_ref())
            .flatten()
    }

    #[inline]
    fn get_mut(&mut self, id: FrameId) -> Option<&mut StackFrame> {
        let place = self.places.get_mut(id.index() as usize)?;
        (place.generation == id.generation())
            .then_some(place.frame.as_mut())
            .flatten()
    }

    #[inline]
    fn at(&self, index: u32) -> Option<&StackFrame> {
        self.places.get(index as usize)?.frame.as_ref()
    }

    #[inline]
    fn at_mut(&mut self, index: u32) -> Option<&mut StackFrame> {
        self.places.get_mut(index as usize)?.frame.as_mut()
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
    /// A session a trigger started (seed 003): its agent runs as the conversation's main agent,
    /// no user talks to it, and its questions are persisted. `None` for a user's conversation.
    pub session: Option<Box<crate::agents::session::AsyncSession>>,
}

/// Stacks keyed by the provider's session key (seed 000's `AgentStackManager`), and the arena of
/// their frames.
#[derive(Clone, Debug, Default)]
pub struct AgentStackManager {
    entries: Vec<StackEntry>,
    /// The slot of each key, once there are two conversations or more.
    by_key: BTreeMap<Arc<str>, usize>,
    frames: Arena,
    /// Frames that live in the arena on no stack (forks), counted.
    detached: usize,
}

impl AgentStackManager {
    /// The slot of `key`, creating an empty stack for it if needed. `main_session_id` names the
    /// main conversation when it is created.
    #[inline]
    pub(crate) fn get_or_create(
        &mut self,
        key: &str,
        main_session_id: impl FnOnce() -> Uuid,
    ) -> usize {
        if let Some(slot) = self.slot(key) {
            return slot;
        }
        let key: Arc<str> = key.into();
        let slot = self.entries.len();
        if self.entries.capacity() == 0 {
            // Most runs hold one conversation; the default first growth makes room for four.
            self.entries.reserve_exact(1);
        }
        let main_session_id = main_session_id();
        // A lone conversation is found without the map (see `slot`): the map is filled when a
        // second one comes.
        if slot == 1 {
            self.by_key.insert(self.entries[0].key.clone(), 0);
        }
        if slot >= 1 {
            self.by_key.insert(key.clone(), slot);
        }
        self.entries.push(StackEntry {
            key,
            stack: AgentStack::default(),
            main_session: Session::with_id(main_session_id),
            main_session_id,
            inbox: VecDeque::new(),
            usage: Usage::default(),
            session: None,
        });
        slot
    }

    /// The slot of an existing key.
    #[inline]
    pub fn slot(&self, key: &str) -> Option<usize> {
        // Most runs hold one conversation: its key is compared without searching the map.
        if let [only] = &self.entries[..] {
            return (*only.key == *key).then_some(0);
        }
        self.by_key.get(key).copied()
    }

    /// The entry in `slot`.
    pub fn entry(&self, slot: usize) -> &StackEntry {
        &self.entries[slot]
    }

    /// The entry in `slot`, mutably.
    pub(crate) fn entry_mut(&mut self, slot: usize) -> &mut StackEntry {
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

    /// The stack of `key` with its frames.
    pub fn view(&self, key: &str) -> Option<StackView<'_>> {
        self.slot(key).map(|s| self.view_slot(s))
    }

    /// Whether no conversation has a turn in progress or a queued message: every stack is empty or
    /// its top frame waits for the user (itself, or through the fork it waits on, which asked), and
    /// every fork waits for the user that way too.
    #[inline]
    pub fn is_idle(&self) -> bool {
        if self.detached == 0 {
            // No fork: a frame waits for the user itself or not at all.
            return self.entries.iter().all(|e| {
                e.inbox.is_empty()
                    && e.stack
                        .top()
                        .is_none_or(|id| self.frames.get(id).is_some_and(StackFrame::awaits_user))
            });
        }
        self.is_idle_with_forks()
    }

    #[cold]
    fn is_idle_with_forks(&self) -> bool {
        self.entries.iter().all(|e| {
            e.inbox.is_empty() && e.stack.top().is_none_or(|id| self.asker_from(id).is_some())
        }) && self
            .live_frames()
            .filter(|f| f.is_fork())
            .all(|f| self.asker_from(f.id).is_some())
    }

    /// Whether conversation `slot` has a turn running that does not wait for the user (a message
    /// arriving now waits in its inbox).
    #[inline]
    pub fn busy(&self, slot: usize) -> bool {
        !self.entries[slot].stack.is_empty() && self.asker(slot).is_none()
    }

    /// The frame a user's next message for conversation `slot` goes to: the top frame when it
    /// waits for the user, or the fork it waits on that asked a question (following forks that
    /// wait on forks). `None` when the conversation is busy (or has no frame).
    #[inline(always)]
    pub fn asker(&self, slot: usize) -> Option<FrameId> {
        self.asker_from(self.top_id(slot)?)
    }

    /// The frame that waits for the user on behalf of frame `id`: itself if it does, else,
    /// while it waits for a fork, the frame that fork waits for the user on behalf of.
    #[inline]
    pub(crate) fn asker_from(&self, mut id: FrameId) -> Option<FrameId> {
        loop {
            let frame = self.frames.get(id)?;
            match &frame.phase {
                Phase::AwaitUser | Phase::AwaitAnswer { .. } => return Some(id),
                Phase::AwaitFork { handle, .. } => {
                    id = frame
                        .node
                        .more()
                        .forks
                        .iter()
                        .find(|r| r.handle == *handle)?
                        .frame?;
                }
                Phase::AwaitSubagents => return self.asker_among_children(frame),
                _ => return None,
            }
        }
    }

    /// A workflow agent waiting for its children: the frame that waits for the user on behalf
    /// of the least (by agent id) running child that has one.
    #[cold]
    fn asker_among_children(&self, frame: &StackFrame) -> Option<FrameId> {
        frame
            .node
            .more()
            .forks
            .iter()
            .filter_map(|r| {
                let asker = self.asker_from(r.frame?)?;
                Some((r.agent_id, asker))
            })
            .min_by_key(|(agent, _)| *agent)
            .map(|(_, asker)| asker)
    }

    /// The stack in `slot` with its frames.
    pub(crate) fn view_slot(&self, slot: usize) -> StackView<'_> {
        StackView {
            entry: &self.entries[slot],
            frames: &self.frames,
        }
    }

    /// Every conversation's stack, in creation order.
    pub fn views(&self) -> impl Iterator<Item = StackView<'_>> {
        (0..self.entries.len()).map(|s| self.view_slot(s))
    }

    /// A live frame.
    #[inline]
    pub fn frame(&self, id: FrameId) -> Option<&StackFrame> {
        self.frames.get(id)
    }

    /// A live frame, mutably.
    #[inline]
    pub(crate) fn frame_mut(&mut self, id: FrameId) -> Option<&mut StackFrame> {
        self.frames.get_mut(id)
    }

    /// The live frame at arena place `index` (the place a call id names), whatever its generation.
    #[inline]
    pub(crate) fn frame_at(&self, index: u32) -> Option<&StackFrame> {
        self.frames.at(index)
    }

    /// The live frame at arena place `index`, mutably.
    #[inline]
    pub(crate) fn frame_at_mut(&mut self, index: u32) -> Option<&mut StackFrame> {
        self.frames.at_mut(index)
    }

    /// A live frame and the entry of its conversation.
    #[inline]
    pub(crate) fn frame_and_entry(&self, id: FrameId) -> Option<(&StackFrame, &StackEntry)> {
        let frame = self.frames.get(id)?;
        Some((frame, &self.entries[frame.conversation as usize]))
    }

    /// A live frame and the entry of its conversation, both mutably.
    #[inline]
    pub(crate) fn frame_and_entry_mut(
        &mut self,
        id: FrameId,
    ) -> Option<(&mut StackFrame, &mut StackEntry)> {
        let frame = self.frames.get_mut(id)?;
        let entry = &mut self.entries[frame.conversation as usize];
        Some((frame, entry))
    }

    /// The id of the frame on top of `slot`'s stack.
    #[inline]
    pub(crate) fn top_id(&self, slot: usize) -> Option<FrameId> {
        self.entries[slot].stack.top()
    }

    /// The frame on top of `slot`'s stack.
    #[inline]
    pub fn top(&self, slot: usize) -> Option<&StackFrame> {
        self.frames.get(self.top_id(slot)?)
    }

    /// The frame on top of `slot`'s stack, mutably.
    #[inline]
    pub(crate) fn top_mut(&mut self, slot: usize) -> Option<&mut StackFrame> {
        let id = self.top_id(slot)?;
        self.frames.get_mut(id)
    }

    /// Pushes `frame` on `slot`'s stack; its parent is the frame that was on top.
    #[inline(always)]
    pub fn push(&mut self, slot: usize, frame: StackFrame) -> FrameId {
        self.push_with(slot, || frame)
    }

    /// Pushes the frame `make` builds on `slot`'s stack, built in its place in the arena.
    #[inline(always)]
    pub(crate) fn push_with(&mut self, slot: usize, make: impl FnOnce() -> StackFrame) -> FrameId {
        let conversation = u32::try_from(slot).expect("fewer than 2^32 conversations");
        let parent = self.top_id(slot);
        let id = self.frames.insert(make, conversation, parent);
        let stack = &mut self.entries[slot].stack.frames;
        if stack.capacity() == 0 {
            stack.reserve_exact(2);
        }
        stack.push(id);
        id
    }

    /// Pops the frame on top of `slot`'s stack out of the arena.
    #[inline(always)]
    pub fn pop(&mut self, slot: usize) -> Option<StackFrame> {
        let id = self.entries[slot].stack.frames.pop()?;
        self.frames.remove(id)
    }

    /// Drops the frame on top of `slot`'s stack where it lies; `false` when the stack is empty.
    #[inline(always)]
    pub(crate) fn discard_top(&mut self, slot: usize) -> bool {
        match self.entries[slot].stack.frames.pop() {
            Some(id) => self.frames.discard(id),
            None => false,
        }
    }

    /// Drops every frame of `slot`'s stack.
    pub fn clear(&mut self, slot: usize) {
        while self.discard_top(slot) {}
    }

    /// Makes the next frame placed (pushed or detached) take arena place `index`, where it was
    /// when the state was written (a restore); if that place is taken, the next frame takes the
    /// lowest free one as usual.
    pub(crate) fn place_next_at(&mut self, index: u32) {
        self.frames.want = Some(index);
    }

    /// Places `frame` in the arena for conversation `slot` on no stack (a fork), started by
    /// `parent`.
    pub(crate) fn insert_detached(
        &mut self,
        slot: usize,
        frame: StackFrame,
        parent: FrameId,
    ) -> FrameId {
        let conversation = u32::try_from(slot).expect("fewer than 2^32 conversations");
        self.detached += 1;
        self.frames.insert(|| frame, conversation, Some(parent))
    }

    /// Takes a frame placed with [`AgentStackManager::insert_detached`] out of the arena.
    pub(crate) fn remove_detached(&mut self, id: FrameId) -> Option<StackFrame> {
        let frame = self.frames.remove(id)?;
        self.detached -= 1;
        Some(frame)
    }

    /// How many frames live on no stack (forks).
    pub fn detached(&self) -> usize {
        self.detached
    }

    /// The forks running in conversation `slot`, in the order they started (a fork's caller
    /// before it).
    pub fn forks(&self, slot: usize) -> Vec<&StackFrame> {
        if self.detached == 0 {
            return Vec::new();
        }
        let mut forks: Vec<&StackFrame> = self
            .live_frames()
            .filter(|f| f.is_fork() && f.conversation as usize == slot)
            .collect();
        forks.sort_by_key(|f| f.node.order);
        forks
    }

    /// Removes conversation `slot`, which must hold no frame (stacked or forked): what a
    /// driver does with an ended session's conversation once its store keeps the session, so
    /// that the runtime's cost does not grow with the sessions it ever ran. The conversations
    /// after it move down one slot (their frames follow), so the order of the rest is kept.
    /// `false`, changing nothing, when the slot does not exist or still holds frames.
    pub fn remove(&mut self, slot: usize) -> bool {
        let Some(entry) = self.entries.get(slot) else {
            return false;
        };
        if !entry.stack.is_empty()
            || (self.detached > 0 && self.live_frames().any(|f| f.conversation as usize == slot))
        {
            return false;
        }
        let entry = self.entries.remove(slot);
        self.by_key.remove(&entry.key);
        if slot < self.entries.len() {
            for (i, e) in self.entries.iter().enumerate().skip(slot) {
                if let Some(at) = self.by_key.get_mut(&e.key) {
                    *at = i;
                }
            }
            for place in &mut self.frames.places {
                if let Some(f) = place.frame.as_mut() {
                    if f.conversation as usize > slot {
                        f.conversation -= 1;
                    }
                }
            }
        }
        if self.entries.len() <= 1 {
            // A lone conversation is found without the map (see `slot`).
            self.by_key.clear();
        }
        true
    }

    /// How many frames live, stacked or not.
    #[inline]
    pub(crate) fn live_count(&self) -> usize {
        self.frames.live
    }

    /// Every live frame, stacked or not, in arena order.
    pub(crate) fn live_frames(&self) -> impl Iterator<Item = &StackFrame> + '_ {
        self.frames.places.iter().filter_map(|p| p.frame.as_ref())
    }
}

/// A conversation's stack with its frames, for reading.
#[derive(Clone, Copy, Debug)]
pub struct StackView<'a> {
    entry: &'a StackEntry,
    frames: &'a Arena,
}

impl<'a> StackView<'a> {
    /// The conversation.
    pub fn entry(&self) -> &'a StackEntry {
        self.entry
    }

    /// Its session key.
    pub fn key(&self) -> &'a Arc<str> {
        &self.entry.key
    }

    /// Whether no frame is active.
    pub fn is_empty(&self) -> bool {
        self.entry.stack.is_empty()
    }

    /// Number of frames.
    pub fn depth(&self) -> usize {
        self.entry.stack.depth()
    }

    /// The frame on top.
    pub fn top(&self) -> Option<&'a StackFrame> {
        self.frames.get(self.entry.stack.top()?)
    }

    /// The frame at `index` (0 is the bottom).
    pub fn get(&self, index: usize) -> Option<&'a StackFrame> {
        self.frames.get(*self.entry.stack.frames.get(index)?)
    }

    /// The frames, bottom first.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &'a StackFrame> + ExactSizeIterator {
        let frames = self.frames;
        self.entry
            .stack
            .frames
            .iter()
            .map(move |&id| frames.get(id).expect("a stack lists live frames only"))
    }

    /// `[main, skill:research]`, for error messages.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.frames().map(|f| &*f.agent.frame_name).collect();
        format!("[{}]", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::agent::{AgentDef, AgentKind};

    fn frame(name: &str, kind: AgentKind) -> StackFrame {
        let agent = Arc::new(AgentDef::new(name, kind));
        StackFrame::new(Uuid::nil(), agent, Session::default(), Uuid::nil(), None)
    }

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
        assert!(m.view("telegram_1").unwrap().is_empty());
        assert!(m.view("unknown").is_none());
        assert_eq!(m.slot("telegram_2"), Some(b));
        assert_eq!(m.view("telegram_2").unwrap().describe(), "[]");
        m.push(a, frame("main", AgentKind::Main));
        assert!(!m.view("telegram_1").unwrap().is_empty());
        m.clear(a);
        assert!(m.view("telegram_1").unwrap().is_empty());
    }

    #[test]
    fn every_key_finds_its_slot_alone_and_once_others_join() {
        let mut m = AgentStackManager::default();
        assert_eq!(m.slot("a"), None);
        let a = m.get_or_create("a", Uuid::nil);
        assert_eq!((m.slot("a"), m.slot("b")), (Some(a), None));
        let b = m.get_or_create("b", Uuid::nil);
        let c = m.get_or_create("c", Uuid::nil);
        assert_eq!((a, b, c), (0, 1, 2));
        for (key, slot) in [("a", a), ("b", b), ("c", c)] {
            assert_eq!(m.slot(key), Some(slot), "{key}");
            assert_eq!(m.get_or_create(key, || unreachable!("{key} exists")), slot);
            assert_eq!(&*m.entry(slot).key, key);
        }
        assert_eq!(m.slot("d"), None);
    }

    #[test]
    fn frames_are_addressed_by_id_and_a_stale_id_never_names_a_new_frame() {
        let mut m = AgentStackManager::default();
        let slot = m.get_or_create("k", Uuid::nil);
        let main = m.push(slot, frame("main", AgentKind::Main));
        let child = m.push(slot, frame("research", AgentKind::Skill));
        assert_eq!(m.frame(child).unwrap().parent(), Some(main));
        assert_eq!(m.frame(main).unwrap().parent(), None);
        assert_eq!(m.view_slot(slot).describe(), "[main, skill:research]");
        assert_eq!(m.top_id(slot), Some(child));
        let popped = m.pop(slot).unwrap();
        assert_eq!(popped.id(), child);
        assert!(
            m.frame(child).is_none(),
            "a popped frame's id names nothing"
        );
        // The freed place is reused with a new generation: the old id still names nothing.
        let again = m.push(slot, frame("other", AgentKind::Agent));
        assert_eq!(again.index(), child.index());
        assert_ne!(again, child);
        assert!(m.frame(child).is_none());
        assert_eq!(m.frame(again).unwrap().agent_name().as_ref(), "agent:other");
        assert_eq!(m.frame_at(again.index()).unwrap().id(), again);
        let (f, entry) = m.frame_and_entry_mut(again).unwrap();
        assert_eq!((f.conversation, entry.key.as_ref()), (0, "k"));
    }
}
