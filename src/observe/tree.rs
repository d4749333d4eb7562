//! The agent tree's invariants (DESIGN §8): `status-transitions` from the `agent-state` events
//! alone (a stacked frame's start and end from its push and pop, which stand for them), and
//! `tree-consistency` from the observer's own model of which agents live compared with the
//! runtime's frames at the end of a step that changed the tree. The model also holds the forks,
//! waits and questions that [`super::forks`] judges `fork-wait` and routing by.

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::tree::Status;
use smallvec::SmallVec;

use crate::model::hash::FxHashMap;
use crate::model::ids::FrameId;
use crate::runtime::Runtime;

use super::{names, violation, Violation};

/// A fork as the events showed it: its agent id, and its result (and whether it failed) once it
/// ended.
pub(super) type ForkSeen = (Uuid, Option<(Arc<str>, bool)>);

/// A `wait`'s answer that only the end of its step can judge.
#[derive(Clone, Debug)]
pub(super) enum Deferred {
    /// Answered with a skip text: its caller must end in the same step.
    Skipped {
        caller: Uuid,
        frame: Arc<str>,
        tool_use_id: Arc<str>,
        content: Arc<str>,
    },
    /// A `fork` answered with handle `handle`: fork `handle` of its caller must start in the
    /// step (once the turn that forked it has stepped), unless the caller ends in it.
    Promised {
        caller: Uuid,
        handle: u32,
        frame: Arc<str>,
        tool_use_id: Arc<str>,
    },
    /// A workflow agent left its subquestions step with `count` subquestions: as many children
    /// (its forks after handle `after`) must start in the step, unless it ends in it.
    Children {
        caller: Uuid,
        after: u32,
        count: usize,
        frame: Arc<str>,
    },
    /// Answered `No fork with handle <h>`: no fork `h` of its caller may start in the step (a
    /// fork starts once the turn that forked it has stepped).
    NoFork {
        caller: Uuid,
        handle: u32,
        frame: Arc<str>,
        tool_use_id: Arc<str>,
    },
}

/// An agent whose status changed in the step.
#[derive(Clone, Copy, Debug)]
struct Touched {
    agent: Uuid,
    status: Status,
    /// Its frame in the runtime, named by its latest event (`None` once it ended).
    frame: Option<FrameId>,
}

/// The `status-transitions` violation of a move of `agent` (`frame`) from `from` to `to` that
/// its known status (`None`: never started) does not allow.
#[cold]
#[inline(never)]
fn bad_move(
    agent: Uuid,
    frame: &Arc<str>,
    known: Option<Status>,
    from: Option<Status>,
    to: Status,
) -> Violation {
    let message = match (known, from) {
        (Some(had), _) if had.is_terminal() => {
            format!("{frame} ({agent}) moved to {to} after it had ended")
        }
        (None, None) => format!("{frame} ({agent}) started as {to}, not running"),
        (None, Some(from)) => {
            format!("{frame} ({agent}) moved from {from} to {to}, but it never started")
        }
        (Some(had), None) => {
            format!("{frame} ({agent}) started again as {to} while it was {had}")
        }
        (Some(had), Some(from)) if had != from => {
            format!("{frame} ({agent}) moved from {from} to {to}, but it was {had}")
        }
        (Some(_), Some(from)) => format!(
            "{frame} ({agent}) moved from {from} to {to}, which the status machine does not allow"
        ),
    };
    violation(names::STATUS_TRANSITIONS, message)
}

/// `frame` names `parent` as its parent, and that parent (the frame below on a stack, or a
/// fork's caller) is alive and lists it among its subagents. (A parent that ended by its events
/// and still has a frame breaks the count of live agents.)
pub(super) fn check_listed(
    rt: &Runtime,
    frame: &crate::agents::frame::StackFrame,
    parent: Uuid,
    name: &str,
) -> Result<(), Violation> {
    let id = frame.frame_id();
    let listed = frame.node().parent_agent == Some(parent)
        && frame
            .parent()
            .and_then(|p| rt.frame(p))
            .is_some_and(|p| p.frame_id() == parent && p.node().subagents.contains(&id));
    if listed {
        return Ok(());
    }
    let named = frame
        .node()
        .parent_agent
        .map_or("none".to_owned(), |p| p.to_string());
    Err(violation(
        names::TREE_CONSISTENCY,
        format!("{name} ({id}) names {named} as its parent, which does not list it among its live subagents"),
    ))
}

/// What the observer knows of the tree, from the events only.
#[derive(Clone, Debug)]
pub(super) struct TreeModel {
    /// Every agent the events told of and its status, ended ones included (an end is a terminal
    /// status). Looked up, never iterated into output.
    agents: FxHashMap<Uuid, (Status, Arc<str>)>,
    /// How many of them live.
    live: usize,
    /// Agents whose status changed in this step: each once, with the status it has now and,
    /// while it lives, its frame in the runtime.
    touched: SmallVec<[Touched; 4]>,
    /// Forks by caller and handle: the fork's agent id, and its result once it ended.
    pub(super) forks: FxHashMap<(Uuid, u32), ForkSeen>,
    /// Each running fork's caller and handle.
    pub(super) fork_of: FxHashMap<Uuid, (Uuid, u32)>,
    /// `wait` calls not answered yet, by caller and tool use: the handle named.
    pub(super) waits: FxHashMap<(Uuid, Arc<str>), Option<u32>>,
    /// Answers to judge at the end of the step.
    pub(super) deferred: SmallVec<[Deferred; 1]>,
    /// Agents with a question open, by the `ask_user` it answers (`None`: a workflow's question,
    /// which the answer itself closes).
    pub(super) asking: FxHashMap<Uuid, Option<Arc<str>>>,
    /// Workflow agents waiting for all their children.
    pub(super) waiting_all: SmallVec<[Uuid; 2]>,
    /// Workflow agents at their summary step.
    summarizing: SmallVec<[Uuid; 2]>,
    /// Workflow agents at their subquestions step.
    subquestions: SmallVec<[Uuid; 2]>,
    /// Agents a user message reached while they awaited the user, whose status has not moved
    /// since in this step (it must: the message sets them running).
    roused: SmallVec<[Uuid; 1]>,
    /// The question the current step's input answers by id, until its `answer` event.
    answer_fed: Option<Uuid>,
    /// A frame was pushed or popped in this step: the number of live agents is compared with
    /// the runtime's at its end.
    count_due: bool,
    /// Something of the five above is for the end of a step to look at: set with every
    /// addition, and recomputed after each look (so that a step that moved nothing in the tree
    /// costs one test).
    pub(super) pending: bool,
}

impl Default for TreeModel {
    fn default() -> TreeModel {
        TreeModel {
            // Room for a few stacks' worth of agents before the first growth.
            agents: FxHashMap::with_capacity_and_hasher(16, Default::default()),
            live: 0,
            touched: SmallVec::new(),
            forks: FxHashMap::default(),
            fork_of: FxHashMap::default(),
            waits: FxHashMap::default(),
            deferred: SmallVec::new(),
            asking: FxHashMap::default(),
            waiting_all: SmallVec::new(),
            summarizing: SmallVec::new(),
            subquestions: SmallVec::new(),
            roused: SmallVec::new(),
            answer_fed: None,
            count_due: false,
            pending: false,
        }
    }
}

impl TreeModel {
    /// An `agent-state` event: the move must start from the status the agent had, be one the
    /// machine allows, and never leave an end.
    pub(super) fn on_state(
        &mut self,
        agent_id: Uuid,
        frame_ref: FrameId,
        frame: &Arc<str>,
        from: Option<Status>,
        to: Status,
    ) -> Result<(), Violation> {
        match from {
            None => self.start(agent_id, frame, to)?,
            Some(from) => self.advance(agent_id, frame, from, to)?,
        }
        let now = Touched {
            agent: agent_id,
            status: to,
            frame: (!to.is_terminal()).then_some(frame_ref),
        };
        match self.touched.iter_mut().find(|t| t.agent == agent_id) {
            Some(t) => *t = now,
            None => self.touched.push(now),
        }
        self.pending = true;
        if !self.roused.is_empty() {
            self.roused.retain(|a| *a != agent_id);
        }
        Ok(())
    }

    /// A frame was pushed: its agent starts, running (the `agent-state` its push stands for).
    /// The runtime's frame is compared with it at the step's end by the check of each pushed
    /// frame's link ([`super::Observer`]'s `check_link`), which sees every frame pushed in the
    /// step; the number of live agents, here.
    #[inline]
    pub(super) fn on_pushed(&mut self, agent_id: Uuid, frame: &Arc<str>) -> Result<(), Violation> {
        self.start(agent_id, frame, Status::Running)?;
        self.count_due = true;
        self.pending = true;
        Ok(())
    }

    /// A frame was popped: its agent ends from `from` as `to` (the `agent-state` its pop stands
    /// for). Its forks must have ended before it.
    #[inline]
    pub(super) fn on_popped(
        &mut self,
        agent_id: Uuid,
        frame: &Arc<str>,
        from: Status,
        to: Status,
    ) -> Result<(), Violation> {
        self.advance(agent_id, frame, from, to)?;
        if !self.fork_of.is_empty() {
            self.check_orphans(agent_id, frame)?;
        }
        // A move of it earlier in the step is judged as this end.
        if let Some(t) = self.touched.iter_mut().find(|t| t.agent == agent_id) {
            t.status = to;
            t.frame = None;
        }
        if !self.roused.is_empty() {
            self.roused.retain(|a| *a != agent_id);
        }
        self.count_due = true;
        self.pending = true;
        Ok(())
    }

    /// `agent` starts as `to`: it must be new, and start running.
    #[inline(always)]
    fn start(&mut self, agent: Uuid, frame: &Arc<str>, to: Status) -> Result<(), Violation> {
        use std::collections::hash_map::Entry;
        match self.agents.entry(agent) {
            Entry::Vacant(e) if to == Status::Running => {
                e.insert((to, frame.clone()));
            }
            entry => {
                let known = match entry {
                    Entry::Occupied(e) => Some(e.get().0),
                    Entry::Vacant(_) => None,
                };
                return Err(bad_move(agent, frame, known, None, to));
            }
        }
        self.live += 1;
        Ok(())
    }

    /// `agent` moves from `from` to `to`: from the status it has, by a move the machine allows,
    /// never from an end.
    #[inline(always)]
    fn advance(
        &mut self,
        agent: Uuid,
        frame: &Arc<str>,
        from: Status,
        to: Status,
    ) -> Result<(), Violation> {
        match self.agents.get_mut(&agent) {
            Some(slot) if slot.0 == from && !from.is_terminal() && from.can_become(to) => {
                slot.0 = to;
            }
            other => {
                let known = other.map(|slot| slot.0);
                return Err(bad_move(agent, frame, known, Some(from), to));
            }
        }
        if to.is_terminal() {
            self.on_ended(agent);
        }
        Ok(())
    }

    /// `agent` (`name`) ended: no fork of it may run on.
    fn check_orphans(&self, agent: Uuid, name: &str) -> Result<(), Violation> {
        match self
            .fork_of
            .iter()
            .filter(|(_, (caller, _))| *caller == agent)
            .map(|(fork, _)| *fork)
            .min()
        {
            Some(fork) => Err(violation(
                names::TREE_CONSISTENCY,
                format!("{name} ({agent}) ended, but its fork {fork} runs on: an orphan"),
            )),
            None => Ok(()),
        }
    }

    /// Whether `agent` moved in this step by an `agent-state` event (its frame is then compared
    /// with the runtime's by the touched-agent check).
    pub(super) fn moved(&self, agent: Uuid) -> bool {
        self.touched.iter().any(|t| t.agent == agent)
    }

    /// `agent` ended: it no longer lives, asks, or waits at a workflow step.
    #[inline]
    fn on_ended(&mut self, agent: Uuid) {
        self.live -= 1;
        if !self.asking.is_empty() {
            self.asking.remove(&agent);
        }
        if !self.waiting_all.is_empty() {
            self.waiting_all.retain(|a| *a != agent);
        }
        if !self.summarizing.is_empty() {
            self.summarizing.retain(|a| *a != agent);
        }
        if !self.subquestions.is_empty() {
            self.subquestions.retain(|a| *a != agent);
        }
    }

    /// A user message reached `agent`: one that awaited the user must move (to running) in the
    /// step.
    #[inline]
    pub(super) fn on_user_message(&mut self, agent: Uuid) {
        // Its status is the one the step's moves left it in, or else the one the map holds.
        let status = match self.touched.iter().find(|t| t.agent == agent) {
            Some(t) => Some(t.status),
            None => self.agents.get(&agent).map(|(s, _)| *s),
        };
        if status == Some(Status::AwaitingUser) {
            self.roused.push(agent);
            self.pending = true;
        }
    }

    /// At the end of a step that changed the tree: the runtime has as many live frames as the
    /// events left agents alive, and each agent the step touched agrees with the runtime: a live
    /// one has its frame, with the status the events told, under a live parent that lists it; an
    /// ended one has no frame and leaves no fork running.
    #[inline]
    pub(super) fn end_of_step(&mut self, rt: &Runtime) -> Result<(), Violation> {
        debug_assert!(
            self.pending || self.is_clear(),
            "a tree fact without `pending`"
        );
        if !self.pending {
            return Ok(()); // Nothing moved in the tree in this step.
        }
        let checked = self.check_end(rt);
        self.pending = !self.is_clear();
        checked
    }

    /// Nothing is left for the end of a step to look at.
    fn is_clear(&self) -> bool {
        self.deferred.is_empty()
            && self.answer_fed.is_none()
            && self.roused.is_empty()
            && self.touched.is_empty()
            && !self.count_due
    }

    #[inline]
    fn check_end(&mut self, rt: &Runtime) -> Result<(), Violation> {
        if !self.deferred.is_empty() {
            self.check_deferred()?;
        }
        if let Some(question) = self.answer_fed.take() {
            return Err(violation(
                names::ROUTING,
                format!(
                    "the answer to question {question} was neither taken nor refused in its step"
                ),
            ));
        }
        if let Some(agent) = self.roused.pop() {
            let (status, frame) = &self.agents[&agent];
            self.roused.clear();
            return Err(violation(
                names::STATUS_TRANSITIONS,
                format!("a user message reached {frame} ({agent}), which awaited the user, but it is still {status} at the step's end"),
            ));
        }
        if !self.touched.is_empty() {
            return self.check_touched(rt);
        }
        if std::mem::take(&mut self.count_due) {
            return self.check_count(rt);
        }
        Ok(())
    }

    /// Forgets the step's touched agents and count unchecked (for tests that feed events
    /// without a runtime).
    #[cfg(test)]
    pub(super) fn forget_touched(&mut self) {
        self.touched.clear();
        self.count_due = false;
        self.pending = !self.is_clear();
    }

    fn check_touched(&mut self, rt: &Runtime) -> Result<(), Violation> {
        let checked = self
            .check_touched_agents(rt)
            .and_then(|()| self.check_count(rt));
        self.touched.clear();
        self.count_due = false;
        checked
    }

    /// The runtime has as many live frames as the events left agents alive.
    fn check_count(&self, rt: &Runtime) -> Result<(), Violation> {
        let count = rt.stacks().live_count();
        if count != self.live {
            return Err(self.count_differs(rt, count));
        }
        Ok(())
    }

    fn check_touched_agents(&self, rt: &Runtime) -> Result<(), Violation> {
        for &Touched {
            agent: id,
            status,
            frame: frame_ref,
        } in &self.touched
        {
            let name = || self.name_of(id).unwrap_or_default();
            let Some(frame_ref) = frame_ref else {
                // Its frame must be gone: the count tells if it is not. Its forks must have
                // ended before it.
                if !self.fork_of.is_empty() {
                    self.check_orphans(id, &name())?;
                }
                continue;
            };
            // Found by the place its event named (no search), and checked to be its frame.
            let frame = rt.frame(frame_ref).filter(|f| f.frame_id() == id);
            match frame {
                None => {
                    return Err(violation(
                        names::TREE_CONSISTENCY,
                        format!("{} ({id}) lives by its agent-state events, but the runtime has no frame for it (gone without ending)", name()),
                    ));
                }
                Some(frame) => {
                    if status != frame.status() {
                        return Err(violation(
                            names::TREE_CONSISTENCY,
                            format!(
                                "{} ({id}) is {}, but its agent-state events left it {status}",
                                name(),
                                frame.status()
                            ),
                        ));
                    }
                    if let Some(parent) = frame.node().parent_agent {
                        check_listed(rt, frame, parent, &name())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The violation when the runtime's live frames and the live agents differ in number, naming
    /// one that differs (the least name, whatever order the maps hold them in).
    #[cold]
    fn count_differs(&self, rt: &Runtime, count: usize) -> Violation {
        let missing = self
            .agents
            .iter()
            .filter(|(id, (s, _))| !s.is_terminal() && rt.find_agent(**id).is_none())
            .map(|(_, (_, name))| format!("gone without ending: {name}"))
            .min();
        let extra = rt
            .stacks()
            .live_frames()
            .filter_map(|f| match self.agents.get(&f.frame_id()) {
                None => Some(format!("living without a start: {}", f.agent_name())),
                Some((s, _)) if s.is_terminal() => Some(format!(
                    "ended, but its frame still lives: {}",
                    f.agent_name()
                )),
                Some(_) => None,
            })
            .min();
        violation(
            names::TREE_CONSISTENCY,
            format!(
                "{} agents live by their agent-state events, but the runtime has {count} frames ({})",
                self.live,
                missing.or(extra).unwrap_or_default()
            ),
        )
    }

    /// The frame name `agent`'s events gave it, if it has any.
    pub(super) fn name_of(&self, agent: Uuid) -> Option<Arc<str>> {
        self.agents.get(&agent).map(|(_, name)| name.clone())
    }

    /// Whether `agent` ended, by its events.
    pub(super) fn has_ended(&self, agent: Uuid) -> bool {
        self.agents
            .get(&agent)
            .is_some_and(|(s, _)| s.is_terminal())
    }

    /// Whether workflow agent `agent` was at its subquestions step.
    pub(super) fn at_subquestions(&self, agent: Uuid) -> bool {
        self.subquestions.contains(&agent)
    }

    /// Agent `agent` asked the user (its `ask_user` is `tool_use_id`; `None` for a workflow's
    /// question).
    pub(super) fn on_question(&mut self, agent: Uuid, tool_use_id: &Option<Arc<str>>) {
        self.asking.insert(agent, tool_use_id.clone());
    }

    /// Agent `agent` got a user's message or an answer: a workflow's question it had open is
    /// closed (an `ask_user` closes with its result).
    pub(super) fn on_answered(&mut self, agent: Uuid) {
        if !self.asking.is_empty() && self.asking.get(&agent).is_some_and(Option::is_none) {
            self.asking.remove(&agent);
        }
    }

    /// The step's input answers question `question` by its id.
    pub(super) fn on_answer_input(&mut self, question: Uuid) {
        self.answer_fed = Some(question);
        self.pending = true;
    }

    /// The runtime's `answer` event: an answer by id is taken or refused in its step, and taken
    /// only by an agent with a question open.
    #[cold]
    pub(super) fn on_answer_event(
        &mut self,
        question: Uuid,
        agent: Option<Uuid>,
        frame: &Option<Arc<str>>,
        accepted: bool,
    ) -> Result<(), Violation> {
        if self.answer_fed == Some(question) {
            self.answer_fed = None;
        }
        match (accepted, agent) {
            (true, Some(agent)) if !self.asking.contains_key(&agent) => Err(violation(
                names::ROUTING,
                format!(
                    "question {question} was answered by {} ({agent}), which has no question open",
                    frame.as_deref().unwrap_or("an agent")
                ),
            )),
            (true, None) => Err(violation(
                names::ROUTING,
                format!("question {question}'s answer was taken by no agent"),
            )),
            _ => Ok(()),
        }
    }

    /// A workflow agent entered `step`.
    pub(super) fn on_workflow_step(&mut self, agent: Uuid, step: crate::agents::workflow::Step) {
        use crate::agents::workflow::Step;
        self.summarizing.retain(|a| *a != agent);
        self.subquestions.retain(|a| *a != agent);
        match step {
            Step::Summary => self.summarizing.push(agent),
            Step::Subquestions => self.subquestions.push(agent),
            _ => {}
        }
    }

    /// A workflow agent's workflow ended: only a summary ends it.
    pub(super) fn on_workflow_done(&mut self, agent: Uuid, frame: &str) -> Result<(), Violation> {
        let before = self.summarizing.len();
        self.summarizing.retain(|a| *a != agent);
        if self.summarizing.len() == before {
            return Err(violation(
                names::ERROR_PROPAGATION,
                format!("{frame} ({agent}) ended its workflow with a result, but it never reached its summary step"),
            ));
        }
        Ok(())
    }

    /// A workflow agent waits for its children (`true`) or stopped waiting.
    pub(super) fn on_wait_all(&mut self, agent: Uuid, waiting: bool) {
        self.waiting_all.retain(|a| *a != agent);
        if waiting {
            self.waiting_all.push(agent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A place no frame holds: the model's own checks never look at it.
    const NO_FRAME: FrameId = FrameId::new(u32::MAX, 0);

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn a_status_changed_after_an_end_breaks_status_transitions() {
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), NO_FRAME, &f, None, Status::Running)
            .unwrap();
        m.on_state(
            id(1),
            NO_FRAME,
            &f,
            Some(Status::Running),
            Status::Completed,
        )
        .unwrap();
        let v = m
            .on_state(
                id(1),
                NO_FRAME,
                &f,
                Some(Status::Completed),
                Status::Running,
            )
            .unwrap_err();
        assert_eq!(v.invariant, names::STATUS_TRANSITIONS);
        assert!(v.message.contains("after it had ended"), "{v}");
    }

    #[test]
    fn a_move_the_machine_forbids_or_from_a_wrong_status_breaks_status_transitions() {
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), NO_FRAME, &f, None, Status::Running)
            .unwrap();
        m.on_state(
            id(1),
            NO_FRAME,
            &f,
            Some(Status::Running),
            Status::AwaitingUser,
        )
        .unwrap();
        let v = m
            .on_state(
                id(1),
                NO_FRAME,
                &f,
                Some(Status::AwaitingUser),
                Status::Completed,
            )
            .unwrap_err();
        assert!(v.message.contains("does not allow"), "{v}");
        let v = m
            .on_state(id(1), NO_FRAME, &f, Some(Status::Running), Status::Error)
            .unwrap_err();
        assert!(v.message.contains("but it was awaiting_user"), "{v}");
        let v = m
            .on_state(id(2), NO_FRAME, &f, None, Status::AwaitingUser)
            .unwrap_err();
        assert!(v.message.contains("started as awaiting_user"), "{v}");
        let v = m
            .on_state(id(3), NO_FRAME, &f, Some(Status::Running), Status::Error)
            .unwrap_err();
        assert!(v.message.contains("never started"), "{v}");
    }

    #[test]
    fn an_agent_a_user_message_reaches_while_it_awaits_the_user_must_move() {
        use crate::model::agent::Catalog;
        use crate::runtime::{Runtime, RuntimeConfig};
        let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), NO_FRAME, &f, None, Status::Running)
            .unwrap();
        // A message to a running agent (a queued one, routed as it starts) moves nothing.
        m.on_user_message(id(1));
        m.on_state(
            id(1),
            NO_FRAME,
            &f,
            Some(Status::Running),
            Status::AwaitingUser,
        )
        .unwrap();
        m.touched.clear();
        m.end_of_step(&rt).unwrap();
        // Awaiting the user, it gets a message and runs: sound.
        m.on_user_message(id(1));
        m.on_state(
            id(1),
            NO_FRAME,
            &f,
            Some(Status::AwaitingUser),
            Status::Running,
        )
        .unwrap();
        m.touched.clear();
        m.end_of_step(&rt).unwrap();
        m.on_state(
            id(1),
            NO_FRAME,
            &f,
            Some(Status::Running),
            Status::AwaitingUser,
        )
        .unwrap();
        m.touched.clear();
        // It gets one and its status stays.
        m.on_user_message(id(1));
        let v = m.end_of_step(&rt).unwrap_err();
        assert_eq!(v.invariant, names::STATUS_TRANSITIONS);
        assert!(v.message.contains("still awaiting_user"), "{v}");
        m.end_of_step(&rt).unwrap();
    }

    #[test]
    fn an_answer_by_id_is_taken_or_refused_in_its_step_and_taken_only_by_an_asker() {
        use crate::model::agent::Catalog;
        use crate::runtime::{Runtime, RuntimeConfig};
        let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
        let f: Option<Arc<str>> = Some("fork:main#1".into());
        let (q, asker) = (id(50), id(2));
        let mut m = TreeModel::default();
        m.on_question(asker, &Some("toolu_01".into()));
        // Taken by the agent that asked: sound.
        m.on_answer_input(q);
        m.on_answer_event(q, Some(asker), &f, true).unwrap();
        m.end_of_step(&rt).unwrap();
        // Refused (no question has the id): sound.
        m.on_answer_input(id(51));
        m.on_answer_event(id(51), None, &None, false).unwrap();
        m.end_of_step(&rt).unwrap();
        // Taken by an agent that asked nothing, or by nobody.
        let v = m.on_answer_event(q, Some(id(3)), &f, true).unwrap_err();
        assert_eq!(v.invariant, names::ROUTING);
        assert!(m.on_answer_event(q, None, &None, true).is_err());
        // Neither taken nor refused by the step's end.
        m.on_answer_input(q);
        let v = m.end_of_step(&rt).unwrap_err();
        assert!(v.message.contains("neither taken nor refused"), "{v}");
    }

    #[test]
    fn a_workflow_ends_only_from_its_summary_step() {
        use crate::agents::workflow::Step;
        let mut m = TreeModel::default();
        let (a, name) = (id(1), "agent:w");
        m.on_workflow_step(a, Step::Main);
        let v = m.on_workflow_done(a, name).unwrap_err();
        assert_eq!(v.invariant, names::ERROR_PROPAGATION);
        m.on_workflow_step(a, Step::Summary);
        m.on_workflow_done(a, name).unwrap();
        assert!(
            m.on_workflow_done(a, name).is_err(),
            "once ended, not again"
        );
    }

    /// A popped agent's forks must have ended before it: one running on is an orphan, found at
    /// the pop, and so is one started after it.
    #[test]
    fn a_pop_with_a_fork_running_on_breaks_tree_consistency() {
        let mut m = TreeModel::default();
        let (main, fork) = (id(1), id(2));
        let name: Arc<str> = "main".into();
        m.on_pushed(main, &name).unwrap();
        m.on_fork_started(main, "main", Some("main"), 1, fork, "fork:main#1")
            .unwrap();
        let v = m
            .on_popped(main, &name, Status::Running, Status::Completed)
            .unwrap_err();
        assert_eq!(v.invariant, names::TREE_CONSISTENCY);
        assert!(
            v.message.contains("orphan") && v.message.contains(&fork.to_string()),
            "{v}"
        );
        let mut m = TreeModel::default();
        m.on_pushed(main, &name).unwrap();
        m.on_popped(main, &name, Status::Running, Status::Completed)
            .unwrap();
        // Nor may a fork of it start after its end.
        let v = m
            .on_fork_started(main, "main", Some("main"), 1, fork, "fork:main#1")
            .unwrap_err();
        assert_eq!(v.invariant, names::TREE_CONSISTENCY);
        assert!(v.message.contains("started after it"), "{v}");
    }

    #[test]
    fn an_agent_left_live_in_the_model_without_a_frame_breaks_tree_consistency() {
        use crate::model::agent::Catalog;
        use crate::runtime::RuntimeConfig;
        let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), NO_FRAME, &f, None, Status::Running)
            .unwrap();
        let v = m.end_of_step(&rt).unwrap_err();
        assert_eq!(v.invariant, names::TREE_CONSISTENCY);
        assert!(
            v.message.contains("agent:a") && v.message.contains("gone without ending"),
            "{v}"
        );
        // Nothing changed since: nothing is checked again.
        assert!(m.end_of_step(&rt).is_ok());
    }
}
