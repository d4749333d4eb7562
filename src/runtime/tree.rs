//! Seed 001's agent tree in the runtime (DESIGN §8): nodes as frames start and end, statuses and
//! their `agent-state` events, reading the tree, and the user's interventions.
//!
//! Every agent is waiting between two inputs (for its model, a tool, a child, the user), so an
//! intervention acts at once: a deletion ends the agent and every frame stacked above it there and
//! then (a model call or tool run in flight becomes stale), and a modification waits in the frame
//! until its next model call, where it becomes a user text.

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::tree::{self, Intervention, InterventionOutcome, Node, Question, Status};
use crate::model::ids::FrameId;
use crate::model::messages;
use crate::persist::ContextEntry;
use crate::protocol::{Effect, Event, PopReason, StreamEvent};
use crate::runtime::planted::PlantedBug;

use super::turn_context::{TurnCx, TurnInput};
use super::Runtime;

impl TurnCx<'_> {
    /// Moves `frame` to status `to` and publishes the change (an `agent-state` stream event and
    /// its [`Event::AgentState`]). A move to the status it has is no change and publishes
    /// nothing.
    pub(crate) fn set_status(&mut self, frame: &mut StackFrame, to: Status) {
        let from = frame.node.status;
        if from == to {
            return;
        }
        debug_assert!(
            from.can_become(to) || self.config.planted.is_some(),
            "{} moved from {from} to {to}",
            frame.agent.frame_name
        );
        frame.node.status = to;
        publish(
            self.key,
            frame,
            Some(from),
            to,
            None,
            false,
            self.effects,
            self.events,
            self.config,
        );
    }
}

/// Publishes `frame`'s move from `from` to `status`: an [`Event::AgentState`] when events are
/// recorded, an `agent-state` stream effect when they are streamed. A stacked frame's start or
/// end (`implied`) is recorded as such only with the detailed events: its push or pop stands for
/// it. (The test is inlined, so that a runtime that does neither pays no call.)
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn publish(
    key: &Arc<str>,
    frame: &StackFrame,
    from: Option<Status>,
    status: Status,
    result: Option<&Arc<str>>,
    implied: bool,
    effects: &mut std::collections::VecDeque<Effect>,
    events: &mut Vec<Event>,
    config: &super::RuntimeConfig,
) {
    let record = config.record_events && (config.detailed_events || !implied);
    if record || config.stream_agent_states {
        let state = State {
            from,
            status,
            result,
            implied,
        };
        publish_state(key, frame, state, record, effects, events, config);
    }
}

/// A status change to publish.
struct State<'a> {
    from: Option<Status>,
    status: Status,
    result: Option<&'a Arc<str>>,
    implied: bool,
}

#[inline(never)]
fn publish_state(
    key: &Arc<str>,
    frame: &StackFrame,
    state: State<'_>,
    record: bool,
    effects: &mut std::collections::VecDeque<Effect>,
    events: &mut Vec<Event>,
    config: &super::RuntimeConfig,
) {
    let State {
        from,
        status,
        result,
        implied,
    } = state;
    if record {
        events.push(Event::AgentState {
            key: key.clone(),
            agent_id: frame.frame_id,
            frame_ref: frame.id,
            frame: frame.agent.frame_name.clone(),
            parent_id: frame.node.parent_agent,
            from,
            status,
            result: result.cloned(),
            implied,
        });
    }
    if !config.stream_agent_states {
        return;
    }
    effects.push_back(Effect::Stream {
        key: key.clone(),
        event: StreamEvent::AgentState {
            agent_id: frame.frame_id,
            parent_id: frame.node.parent_agent,
            name: frame.agent.frame_name.clone(),
            status,
            result: result.cloned(),
        },
    });
}

/// The nodes of the agents that ended: a ring, which once full takes each new one in the place
/// of the oldest.
#[derive(Clone, Debug, Default)]
pub(super) struct EndedNodes {
    /// The nodes; once full, the oldest at `head`, the newest just before it.
    nodes: Vec<Node>,
    head: usize,
}

impl EndedNodes {
    /// Once it holds `capacity` nodes, the oldest, to be overwritten by the newest (it becomes
    /// the newest); `None` while there is room.
    fn oldest_if_full(&mut self, capacity: usize) -> Option<&mut Node> {
        if self.nodes.len() < capacity {
            return None;
        }
        let oldest = self.head;
        self.head = (oldest + 1) % self.nodes.len();
        self.nodes.get_mut(oldest)
    }

    /// Oldest first.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = &Node> + '_ {
        let (newer, older) = self.nodes.split_at(self.head);
        older.iter().chain(newer)
    }
}

/// The parts of the runtime a node's end writes to (see [`Runtime::ending`]).
pub(super) struct Ending<'a> {
    pub(super) effects: &'a mut std::collections::VecDeque<Effect>,
    pub(super) events: &'a mut Vec<Event>,
    pub(super) config: &'a super::RuntimeConfig,
    pub(super) ended: &'a mut EndedNodes,
}

impl Ending<'_> {
    /// `frame` of conversation `key` ends with `status` and `result`: its end is published (as
    /// implied by its pop when `popped`), and its node (its lists moved out) joins the ended
    /// nodes.
    pub(super) fn end(
        self,
        key: &Arc<str>,
        frame: &mut StackFrame,
        status: Status,
        result: &Arc<str>,
        popped: bool,
    ) {
        let from = frame.node.status;
        debug_assert!(
            from.can_become(status) || self.config.planted.is_some(),
            "{} ended from {from} as {status}",
            frame.agent.frame_name
        );
        publish(
            key,
            frame,
            Some(from),
            status,
            Some(result),
            popped,
            self.effects,
            self.events,
            self.config,
        );
        if self.config.ended_nodes == 0 {
            return;
        }
        let metadata = frame
            .node
            .more
            .as_mut()
            .map(|m| std::mem::take(&mut m.metadata));
        // Once full, the oldest node is forgotten, and its place (its lists' room included)
        // takes this one, without moving a node.
        let Some(node) = self.ended.oldest_if_full(self.config.ended_nodes) else {
            let subagents = std::mem::take(&mut frame.node.subagents);
            let mut node = node_with(key, frame, subagents, metadata.unwrap_or_default());
            node.status = status;
            node.result = Some(result.clone());
            self.ended.nodes.push(node);
            return;
        };
        node.agent_id = frame.frame_id;
        node.parent_id = frame.node.parent_agent;
        // The texts the forgotten node shares with this one (often its conversation, its name
        // and the lack of a comment) are kept, not cloned over; the frame, which ends, hands
        // over its task and its list of subagents, taking the forgotten node's to drop.
        set_shared(&mut node.key, key);
        set_shared(&mut node.name, &frame.agent.frame_name);
        node.status = status;
        match &frame.node.more().user_comment {
            Some(comment) => set_shared(&mut node.user_comment, comment),
            None if tree::is_unchanged(&node.user_comment) => {}
            None => node.user_comment = tree::unchanged(),
        }
        std::mem::swap(&mut node.user_content, &mut frame.node.user_content);
        std::mem::swap(&mut node.subagents, &mut frame.node.subagents);
        node.result = Some(result.clone());
        match metadata {
            Some(metadata) => node.metadata = metadata,
            None if !node.metadata.is_empty() => node.metadata.clear(),
            None => {}
        }
        node.created_at = frame.node.created_at;
        node.messages = None;
    }
}

impl Runtime {
    /// The live agents, in the order they started, without their messages (seed 001's
    /// `getAgentTree`).
    pub fn tree(&self) -> Vec<Node> {
        let mut frames: Vec<&StackFrame> = self.stacks.live_frames().collect();
        frames.sort_by_key(|f| f.node.order);
        frames.into_iter().map(|f| self.node_of(f, false)).collect()
    }

    /// One agent (seed 001's `getAgent`): a live one with its messages, or one that ended (kept
    /// without its messages); `None` for an id never seen or ended too long ago (see
    /// [`super::RuntimeConfig::ended_nodes`]).
    pub fn agent(&self, agent_id: Uuid) -> Option<Node> {
        match self.find_agent(agent_id) {
            Some(id) => self.stacks.frame(id).map(|f| self.node_of(f, true)),
            None => self
                .ended
                .iter()
                .rev()
                .find(|n| n.agent_id == agent_id)
                .cloned(),
        }
    }

    /// The agents that ended, oldest first (at most [`super::RuntimeConfig::ended_nodes`]).
    pub fn ended_agents(&self) -> impl DoubleEndedIterator<Item = &Node> + '_ {
        self.ended.iter()
    }

    /// The live frame of an agent, found among the live frames. (Only interventions, the tree's
    /// readers and the observer's rarer checks look agents up by id, so no index is kept: one
    /// would cost every frame an insertion and a removal. The events that name an agent to a
    /// reader that must find it at every step, `agent-state`, carry its [`FrameId`].)
    pub(crate) fn find_agent(&self, agent_id: Uuid) -> Option<FrameId> {
        self.stacks
            .live_frames()
            .find(|f| f.frame_id == agent_id)
            .map(|f| f.id)
    }

    fn node_of(&self, f: &StackFrame, messages: bool) -> Node {
        let key = &self.stacks.entry(f.conversation as usize).key;
        let mut node = node_of_detached(key, f);
        node.messages = messages.then(|| f.session.messages.clone());
        node
    }

    /// A frame was just placed in the arena: it becomes a running node, listed among its
    /// parent's subagents, and its start is published (as implied by its push when `pushed`).
    pub(super) fn node_started(&mut self, id: FrameId, parent: Option<FrameId>, pushed: bool) {
        self.order += 1;
        let (order, now) = (self.order, self.now);
        let parent_agent = parent.and_then(|p| {
            let parent = self.stacks.frame_mut(p)?;
            Some(parent.frame_id)
        });
        let Some((frame, entry)) = self.stacks.frame_and_entry_mut(id) else {
            return;
        };
        frame.node.order = order;
        frame.node.created_at = now;
        frame.node.status = Status::Running;
        frame.node.parent_agent = parent_agent;
        let agent_id = frame.frame_id;
        publish(
            &entry.key,
            frame,
            None,
            Status::Running,
            None,
            pushed,
            &mut self.effects,
            &mut self.events,
            &self.config,
        );
        if let Some(parent) = parent.and_then(|p| self.stacks.frame_mut(p)) {
            parent.node.subagents.push(agent_id);
        }
    }

    /// Frame `frame` of conversation `slot`, out of the arena, ends with `status` and
    /// `result`: its node's lists move into the ended node (see [`Ending::end`]).
    pub(super) fn node_ended_as(
        &mut self,
        slot: usize,
        frame: &mut StackFrame,
        status: Status,
        result: &Arc<str>,
    ) {
        let key = self.stacks.entry(slot).key.clone();
        self.ending().end(&key, frame, status, result, false);
    }

    /// What a node's end writes to: every part of the runtime but its frames, so that a frame
    /// still in the arena can end in place.
    pub(super) fn ending(&mut self) -> Ending<'_> {
        Ending {
            effects: &mut self.effects,
            events: &mut self.events,
            config: &self.config,
            ended: &mut self.ended,
        }
    }

    /// Moves frame `id` to status `to` (see [`TurnCx::set_status`]).
    pub(super) fn set_status(&mut self, id: FrameId, to: Status) {
        self.with_frame(id, |frame, cx| cx.set_status(frame, to));
    }

    /// A user intervenes on agent `agent_id` (seed 001's `userIntervention`, DESIGN §8): the
    /// answer says whether it was applied. Like [`Runtime::handle`], it ends with the state
    /// written when the runtime persists.
    pub fn intervene(&mut self, agent_id: Uuid, intervention: Intervention) -> InterventionOutcome {
        let outcome = self.apply_intervention(agent_id, intervention);
        self.end_input();
        outcome
    }

    pub(super) fn apply_intervention(
        &mut self,
        agent_id: Uuid,
        iv: Intervention,
    ) -> InterventionOutcome {
        let found = self.find_agent(agent_id);
        let (key, frame_name, outcome) = match found.and_then(|id| self.stacks.frame(id)) {
            None => (None, None, InterventionOutcome::NotFound),
            Some(f) => {
                let key = self.stacks.entry(f.conversation as usize).key.clone();
                let outcome = match iv.check(f.node.status) {
                    Ok(()) => InterventionOutcome::Accepted,
                    Err(reason) => InterventionOutcome::Refused { reason },
                };
                (Some(key), Some(f.agent.frame_name.clone()), outcome)
            }
        };
        if self.config.record_events {
            self.events.push(Event::Intervention {
                key,
                agent_id,
                frame: frame_name,
                user_comment: iv.user_comment.clone(),
                user_content: iv.user_content.clone(),
                status: iv.status,
                outcome: outcome.clone(),
            });
        }
        let (InterventionOutcome::Accepted, Some(id)) = (&outcome, found) else {
            return outcome;
        };
        let deletes = iv.deletes();
        let modifies = iv.modifies();
        if let Some(frame) = self.stacks.frame_mut(id) {
            if let Some(comment) = iv.user_comment {
                frame.node.more_mut().user_comment = Some(comment);
            }
            if let Some(content) = iv.user_content.clone() {
                frame.node.user_content = content;
            }
            if modifies {
                frame.node.more_mut().pending_modify = Some(
                    iv.user_content
                        .unwrap_or_else(|| frame.node.user_content.clone()),
                );
            }
        }
        if deletes {
            self.delete(id);
        } else if modifies {
            self.set_status(id, Status::Modified);
        }
        outcome
    }

    /// The questions open now (seed 001), in the order their agents started: interactive frames
    /// waiting for an answer and forks that asked.
    pub fn questions(&self) -> Vec<Question> {
        let mut frames: Vec<&StackFrame> = self
            .stacks
            .live_frames()
            .filter(|f| matches!(f.phase, Phase::AwaitAnswer { .. }))
            .collect();
        frames.sort_by_key(|f| f.node.order);
        frames
            .into_iter()
            .filter_map(|f| {
                let Phase::AwaitAnswer {
                    tool_use_id,
                    question,
                    ..
                } = &f.phase
                else {
                    return None;
                };
                let text = match tool_use_id {
                    Some(id) => f
                        .session
                        .tool_use_by_id(id)
                        .and_then(|at| f.session.tool_use_at(at))
                        .map(|u| tree::question_text(u.input))
                        .unwrap_or_default(),
                    // A workflow's question is the text of the decision that asked it.
                    None => crate::agents::workflow::question_of(&f.session),
                };
                Some(Question {
                    id: *question,
                    agent_id: f.frame_id,
                    key: self.stacks.entry(f.conversation as usize).key.clone(),
                    frame: f.agent.frame_name.clone(),
                    tool_use_id: tool_use_id.clone(),
                    text: text.into(),
                })
            })
            .collect()
    }

    /// The user answers question `question_id` (seed 001): the asking agent resumes with `text`
    /// as its `ask_user` result. `false` when no open question has that id (never asked,
    /// answered already, or its agent ended). Like [`Runtime::handle`], it ends with the state
    /// written when the runtime persists.
    pub fn answer(&mut self, question_id: Uuid, text: impl Into<Arc<str>>) -> bool {
        let taken = self.apply_answer(question_id, text.into());
        self.end_input();
        taken
    }

    pub(super) fn apply_answer(&mut self, question_id: Uuid, text: Arc<str>) -> bool {
        let asking = self
            .stacks
            .live_frames()
            .find(|f| matches!(&f.phase, Phase::AwaitAnswer { question, .. } if *question == question_id))
            .map(|f| (f.id, f.conversation as usize, f.agent.frame_name.clone(), f.node.status));
        if self.config.record_events {
            self.events.push(Event::Answer {
                key: asking
                    .as_ref()
                    .map(|(_, slot, _, _)| self.stacks.entry(*slot).key.clone()),
                question_id,
                agent_id: asking
                    .as_ref()
                    .and_then(|(id, ..)| Some(self.stacks.frame(*id)?.frame_id)),
                frame: asking.as_ref().map(|(_, _, name, _)| name.clone()),
                text: text.clone(),
                accepted: asking.is_some(),
            });
        }
        let Some((id, slot, _, status)) = asking else {
            return false;
        };
        if status == Status::AwaitingUser {
            self.set_status(id, Status::Running);
        }
        self.drive(id, TurnInput::User(text));
        self.pump(slot);
        true
    }

    /// Ends frame `id` as deleted (DESIGN §8): with every frame stacked above it, each leaving
    /// its open tool uses answered with `Agent deleted by user.`; its parent resumes with that
    /// text as the error result of the spawning tool use; a deleted main frame ends its turn.
    pub(super) fn delete(&mut self, id: FrameId) {
        let Some(frame) = self.stacks.frame(id) else {
            return;
        };
        let slot = frame.conversation as usize;
        let text: Arc<str> = messages::AGENT_DELETED.into();
        if frame.is_fork() {
            self.end_fork(id, Status::Deleted, text, true, true);
            return;
        }
        let Some(depth) = self
            .stacks
            .entry(slot)
            .stack
            .ids()
            .iter()
            .position(|&f| f == id)
        else {
            return;
        };
        if self.config.has_bug(PlantedBug::DeletedThenEnded) {
            self.set_status(id, Status::Deleted);
        }
        let leave_open = self.config.has_bug(PlantedBug::DeleteLeavesToolUses);
        let mut parent = None;
        while self.stacks.entry(slot).stack.depth() > depth {
            let top = self
                .stacks
                .top_id(slot)
                .expect("deeper than the deleted frame");
            self.cancel_forks_of(top);
            let skip = (!leave_open).then_some(messages::AGENT_DELETED);
            self.withdraw_question(top);
            self.with_frame(top, |frame, cx| cx.stop(frame, skip, Phase::AwaitUser));
            let popped = self.pop(slot, PopReason::Deleted, &text);
            if !popped.is_main() {
                self.journal(|| ContextEntry::AgentSessionComplete {
                    agent_session_id: popped.agent_session_id,
                    result: text.clone(),
                    is_error: true,
                });
            }
            if top == id {
                parent = popped.parent.zip(popped.parent_tool_use_id.clone());
                if popped.is_main() {
                    let notice: Arc<str> = messages::USER_AGENT_DELETED.into();
                    self.send(slot, popped.agent.frame_name.clone(), notice.clone());
                    let ended = super::orchestrate::MainEnded {
                        turn_start: popped.turn_start,
                        iterations: popped.iteration,
                    };
                    self.stacks.entry_mut(slot).main_session = popped.session;
                    self.end_main_turn(slot, ended, notice, false);
                }
            }
        }
        if let Some((parent, tool_use_id)) = parent {
            let input = TurnInput::ChildResult {
                tool_use_id,
                content: text,
                is_error: true,
            };
            self.drive(parent, input);
        }
        self.pump(slot);
    }
}

/// Makes `to` the text `from`, unless it is that one already (no count moves then).
#[inline]
fn set_shared(to: &mut Arc<str>, from: &Arc<str>) {
    if !Arc::ptr_eq(to, from) {
        *to = from.clone();
    }
}

/// Frame `f` of conversation `key` as a node, without its messages.
fn node_of_detached(key: &Arc<str>, f: &StackFrame) -> Node {
    node_with(
        key,
        f,
        f.node.subagents.clone(),
        f.node.more().metadata.clone(),
    )
}

/// Frame `f` of conversation `key` as a node with the lists given. (Built whole: a struct
/// update from a node with empty lists would drop them, and dropping even an empty `BTreeMap`
/// costs a turn about a hundred instructions.)
fn node_with(
    key: &Arc<str>,
    f: &StackFrame,
    subagents: Vec<Uuid>,
    metadata: std::collections::BTreeMap<String, serde_json::Value>,
) -> Node {
    Node {
        agent_id: f.frame_id,
        parent_id: f.node.parent_agent,
        key: key.clone(),
        name: f.agent.frame_name.clone(),
        status: f.node.status,
        user_comment: f
            .node
            .more()
            .user_comment
            .clone()
            .unwrap_or_else(tree::unchanged),
        user_content: f.node.user_content.clone(),
        subagents,
        result: None,
        metadata,
        created_at: f.node.created_at,
        messages: None,
    }
}
