//! The agent tree's invariants (DESIGN §8): `status-transitions` from the `agent-state` events
//! alone, `tree-consistency` from the observer's own model of which agents live compared with
//! the runtime's frames at the end of a step that changed the tree, and `fork-wait` from the fork
//! and wait events and the `tool_result`s that answer each wait.

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::tree::Status;
use crate::model::hash::{FxHashMap, FxHashSet};
use crate::runtime::Runtime;

use super::{names, violation, Violation};

/// A fork as the events showed it: its agent id, and its result once it ended.
type ForkSeen = (Uuid, Option<Arc<str>>);

/// What the observer knows of the tree, from the events only.
#[derive(Clone, Debug, Default)]
pub(super) struct TreeModel {
    /// Live agents and their status as the events told it.
    live: FxHashMap<Uuid, (Status, Arc<str>)>,
    /// Agents that ended (looked up, never iterated into output).
    ended: FxHashSet<Uuid>,
    /// The tree changed in this step.
    touched: bool,
    /// Forks by caller and handle: the fork's agent id, and its result once it ended.
    forks: FxHashMap<(Uuid, u32), ForkSeen>,
    /// Each running fork's caller and handle.
    fork_of: FxHashMap<Uuid, (Uuid, u32)>,
    /// `wait` calls not answered yet, by caller and tool use: the handle named.
    waits: FxHashMap<(Uuid, Arc<str>), Option<u32>>,
}

impl TreeModel {
    /// An `agent-state` event: the move must start from the status the agent had, be one the
    /// machine allows, and never leave an end.
    pub(super) fn on_state(
        &mut self,
        agent_id: Uuid,
        frame: &Arc<str>,
        from: Option<Status>,
        to: Status,
    ) -> Result<(), Violation> {
        self.touched = true;
        if self.ended.contains(&agent_id) {
            return Err(violation(
                names::STATUS_TRANSITIONS,
                format!("{frame} ({agent_id}) moved to {to} after it had ended"),
            ));
        }
        let known = self.live.get(&agent_id).map(|(s, _)| *s);
        match (known, from) {
            (None, None) if to != Status::Running => {
                return Err(violation(
                    names::STATUS_TRANSITIONS,
                    format!("{frame} ({agent_id}) started as {to}, not running"),
                ));
            }
            (None, Some(from)) => {
                return Err(violation(
                    names::STATUS_TRANSITIONS,
                    format!("{frame} ({agent_id}) moved from {from} to {to}, but it never started"),
                ));
            }
            (Some(had), None) => {
                return Err(violation(
                    names::STATUS_TRANSITIONS,
                    format!("{frame} ({agent_id}) started again as {to} while it was {had}"),
                ));
            }
            (Some(had), Some(from)) if had != from => {
                return Err(violation(
                    names::STATUS_TRANSITIONS,
                    format!("{frame} ({agent_id}) moved from {from} to {to}, but it was {had}"),
                ));
            }
            (Some(_), Some(from)) if !from.can_become(to) => {
                return Err(violation(
                    names::STATUS_TRANSITIONS,
                    format!("{frame} ({agent_id}) moved from {from} to {to}, which the status machine does not allow"),
                ));
            }
            _ => {}
        }
        if to.is_terminal() {
            self.live.remove(&agent_id);
            self.ended.insert(agent_id);
        } else {
            self.live.insert(agent_id, (to, frame.clone()));
        }
        Ok(())
    }

    /// A fork started.
    pub(super) fn on_fork_started(&mut self, caller: Uuid, handle: u32, fork: Uuid) {
        self.forks.insert((caller, handle), (fork, None));
        self.fork_of.insert(fork, (caller, handle));
    }

    /// A fork ended with `result`.
    pub(super) fn on_fork_ended(&mut self, fork: Uuid, result: &Arc<str>) {
        if let Some(at) = self.fork_of.remove(&fork) {
            if let Some((_, r)) = self.forks.get_mut(&at) {
                *r = Some(result.clone());
            }
        }
    }

    /// A frame called `wait` on `handle`.
    pub(super) fn on_wait(&mut self, caller: Uuid, tool_use_id: &Arc<str>, handle: Option<u32>) {
        self.waits.insert((caller, tool_use_id.clone()), handle);
    }

    /// A `tool_result`: if it answers a `wait`, it must be the result of a fork that ended, or
    /// say that the caller has no such fork. A skip text (the caller itself ends) is judged by
    /// `tool-execution`, not here.
    pub(super) fn on_result(
        &mut self,
        frame_id: Uuid,
        frame: &Arc<str>,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
    ) -> Result<(), Violation> {
        if self.waits.is_empty() {
            return Ok(());
        }
        let Some(handle) = self.waits.remove(&(frame_id, tool_use_id.clone())) else {
            return Ok(());
        };
        if super::semantic::is_skip(content) {
            return Ok(());
        }
        let shown = handle.map_or_else(|| "?".to_owned(), |h| h.to_string());
        match handle.and_then(|h| self.forks.get(&(frame_id, h))) {
            None if is_error && content.starts_with("No fork with handle") => Ok(()),
            None => Err(violation(
                names::FORK_WAIT,
                format!("{frame}'s wait({shown}) ({tool_use_id}) got {content:?}, though no fork {shown} of {frame} had ended"),
            )),
            Some((fork, None)) => Err(violation(
                names::FORK_WAIT,
                format!("{frame}'s wait({shown}) ({tool_use_id}) got {content:?} while fork {shown} ({fork}) still runs"),
            )),
            Some((fork, Some(result))) if result != content => Err(violation(
                names::FORK_WAIT,
                format!("{frame}'s wait({shown}) ({tool_use_id}) got {content:?}, but fork {shown} ({fork}) ended with {result:?}"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// At the end of a step that changed the tree: the runtime's live frames are exactly the
    /// agents the events left alive, each with the status they told, under a live parent that
    /// lists it.
    pub(super) fn end_of_step(&mut self, rt: &Runtime) -> Result<(), Violation> {
        if !std::mem::take(&mut self.touched) {
            return Ok(());
        }
        let mut count = 0;
        for frame in rt.stacks().live_frames() {
            count += 1;
            let id = frame.frame_id();
            let name = frame.agent_name();
            if self.ended.contains(&id) {
                return Err(violation(
                    names::TREE_CONSISTENCY,
                    format!("{name} ({id}) ended, but its frame still lives"),
                ));
            }
            let Some((status, _)) = self.live.get(&id) else {
                return Err(violation(
                    names::TREE_CONSISTENCY,
                    format!("{name} ({id}) lives, but no agent-state event started it"),
                ));
            };
            if *status != frame.status() {
                return Err(violation(
                    names::TREE_CONSISTENCY,
                    format!(
                        "{name} ({id}) is {}, but its agent-state events left it {status}",
                        frame.status()
                    ),
                ));
            }
            let node = frame.node();
            if let Some(parent) = node.parent_agent {
                if self.ended.contains(&parent) {
                    return Err(violation(
                        names::TREE_CONSISTENCY,
                        format!("{name} ({id}) runs on, but its parent {parent} ended: an orphan"),
                    ));
                }
                // The frame below on a stack, or a fork's caller.
                let listed = frame
                    .parent()
                    .and_then(|p| rt.frame(p))
                    .is_some_and(|p| p.frame_id() == parent && p.node().subagents.contains(&id));
                if !listed {
                    return Err(violation(
                        names::TREE_CONSISTENCY,
                        format!("{name} ({id}) names {parent} as its parent, which does not list it among its live subagents"),
                    ));
                }
            }
        }
        if count != self.live.len() {
            // The least name, whatever order the map holds them in.
            let missing = self
                .live
                .iter()
                .filter(|(id, _)| rt.find_agent(**id).is_none())
                .map(|(_, (_, name))| name.to_string())
                .min()
                .unwrap_or_default();
            return Err(violation(
                names::TREE_CONSISTENCY,
                format!(
                    "{} agents live by their agent-state events, but the runtime has {count} frames (gone without ending: {missing})",
                    self.live.len()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn a_status_changed_after_an_end_breaks_status_transitions() {
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), &f, None, Status::Running).unwrap();
        m.on_state(id(1), &f, Some(Status::Running), Status::Completed)
            .unwrap();
        let v = m
            .on_state(id(1), &f, Some(Status::Completed), Status::Running)
            .unwrap_err();
        assert_eq!(v.invariant, names::STATUS_TRANSITIONS);
        assert!(v.message.contains("after it had ended"), "{v}");
    }

    #[test]
    fn a_move_the_machine_forbids_or_from_a_wrong_status_breaks_status_transitions() {
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), &f, None, Status::Running).unwrap();
        m.on_state(id(1), &f, Some(Status::Running), Status::AwaitingUser)
            .unwrap();
        let v = m
            .on_state(id(1), &f, Some(Status::AwaitingUser), Status::Completed)
            .unwrap_err();
        assert!(v.message.contains("does not allow"), "{v}");
        let v = m
            .on_state(id(1), &f, Some(Status::Running), Status::Error)
            .unwrap_err();
        assert!(v.message.contains("but it was awaiting_user"), "{v}");
        let v = m
            .on_state(id(2), &f, None, Status::AwaitingUser)
            .unwrap_err();
        assert!(v.message.contains("started as awaiting_user"), "{v}");
        let v = m
            .on_state(id(3), &f, Some(Status::Running), Status::Error)
            .unwrap_err();
        assert!(v.message.contains("never started"), "{v}");
    }

    #[test]
    fn a_wait_answered_early_or_with_another_forks_result_breaks_fork_wait() {
        let mut m = TreeModel::default();
        let caller = id(1);
        let f: Arc<str> = "main".into();
        let (w1, w2, w3): (Arc<str>, Arc<str>, Arc<str>) = ("w1".into(), "w2".into(), "w3".into());
        m.on_fork_started(caller, 1, id(10));
        m.on_fork_started(caller, 2, id(11));
        // Answered while fork 1 runs.
        m.on_wait(caller, &w1, Some(1));
        let v = m
            .on_result(caller, &f, &w1, &"partial".into(), false)
            .unwrap_err();
        assert_eq!(v.invariant, names::FORK_WAIT);
        assert!(v.message.contains("still runs"), "{v}");
        // Answered with fork 2's result.
        m.on_fork_ended(id(10), &"one".into());
        m.on_fork_ended(id(11), &"two".into());
        m.on_wait(caller, &w2, Some(1));
        let v = m
            .on_result(caller, &f, &w2, &"two".into(), false)
            .unwrap_err();
        assert!(v.message.contains("ended with \"one\""), "{v}");
        // The right answers pass: the fork's result, a missing handle, a skip.
        m.on_wait(caller, &w2, Some(1));
        assert!(m.on_result(caller, &f, &w2, &"one".into(), false).is_ok());
        m.on_wait(caller, &w3, Some(7));
        let no = "No fork with handle 7".into();
        assert!(m.on_result(caller, &f, &w3, &no, true).is_ok());
        m.on_wait(caller, &w3, Some(7));
        let v = m
            .on_result(caller, &f, &w3, &"seven".into(), false)
            .unwrap_err();
        assert!(v.message.contains("no fork 7 of main had ended"), "{v}");
        m.on_wait(caller, &w1, Some(1));
        let skip = crate::model::messages::AGENT_DELETED.into();
        assert!(m.on_result(caller, &f, &w1, &skip, true).is_ok());
        // A result of another tool use is none of its business.
        assert!(m
            .on_result(caller, &f, &"t9".into(), &"x".into(), false)
            .is_ok());
    }

    #[test]
    fn an_agent_left_live_in_the_model_without_a_frame_breaks_tree_consistency() {
        use crate::model::agent::Catalog;
        use crate::runtime::RuntimeConfig;
        let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
        let mut m = TreeModel::default();
        let f: Arc<str> = "agent:a".into();
        m.on_state(id(1), &f, None, Status::Running).unwrap();
        let v = m.end_of_step(&rt).unwrap_err();
        assert_eq!(v.invariant, names::TREE_CONSISTENCY);
        assert!(v.message.contains("gone without ending: agent:a"), "{v}");
        // Nothing changed since: nothing is checked again.
        assert!(m.end_of_step(&rt).is_ok());
    }
}
