//! `fork-wait` (DESIGN §8): forks are numbered and named as their `fork` calls said, a `wait(h)`
//! answers only once fork `h` of its caller has ended, with exactly that fork's result and error
//! flag, and a workflow starts as many children as it decided on; judged from the fork and wait
//! events and the `tool_result`s that answer each wait, on the observer's model of the tree.
//! Also which fork a user's message may reach through the `wait`s it leads to (`routing`).

use std::sync::Arc;

use uuid::Uuid;

use super::tree::{Deferred, TreeModel};
use super::{names, violation, Violation};

impl TreeModel {
    /// The `wait` answers of the step that needed its end: a skip only for a caller that ended,
    /// `No fork` only for a handle no fork of the caller got.
    #[cold]
    pub(super) fn check_deferred(&mut self) -> Result<(), Violation> {
        for d in std::mem::take(&mut self.deferred) {
            match d {
                Deferred::Skipped {
                    caller,
                    frame,
                    tool_use_id,
                    content,
                } => {
                    let ended = self.has_ended(caller);
                    if !ended {
                        return Err(violation(
                            names::FORK_WAIT,
                            format!("{frame}'s wait ({tool_use_id}) got {content:?}, but {frame} goes on"),
                        ));
                    }
                }
                Deferred::Promised {
                    caller,
                    handle,
                    frame,
                    tool_use_id,
                } => {
                    let ended = self.has_ended(caller);
                    if !ended && !self.forks.contains_key(&(caller, handle)) {
                        return Err(violation(
                            names::FORK_WAIT,
                            format!("{frame}'s fork ({tool_use_id}) answered handle {handle}, but no fork {handle} of {frame} started"),
                        ));
                    }
                }
                Deferred::Children {
                    caller,
                    after,
                    count,
                    frame,
                } => {
                    let ended = self.has_ended(caller);
                    let started = self.last_fork(caller) - after;
                    if !ended && started as usize != count {
                        return Err(violation(
                            names::FORK_WAIT,
                            format!("{frame} ({caller}) decided on {count} subquestions, but {started} children of it started"),
                        ));
                    }
                }
                Deferred::NoFork {
                    caller,
                    handle,
                    frame,
                    tool_use_id,
                } => {
                    if let Some((fork, _)) = self.forks.get(&(caller, handle)) {
                        return Err(violation(
                            names::FORK_WAIT,
                            format!("{frame}'s wait({handle}) ({tool_use_id}) was told there is no fork {handle}, but {frame} started fork {handle} ({fork})"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// A fork started.
    ///
    /// A caller numbers its forks 1, 2, 3, … (workflow children included), and fork `h` of an
    /// agent whose script name is `script` is `fork:script#h`: the name its script is found by.
    pub(super) fn on_fork_started(
        &mut self,
        caller: Uuid,
        caller_name: &str,
        script: Option<&str>,
        handle: u32,
        fork: Uuid,
        fork_name: &str,
    ) -> Result<(), Violation> {
        // A caller's forks end before it (checked at its end), and none starts after.
        if self.has_ended(caller) {
            return Err(violation(
                names::TREE_CONSISTENCY,
                format!("{caller_name} ({caller}) ended, but its fork {fork} started after it: an orphan"),
            ));
        }
        let last = self.last_fork(caller);
        if handle != last + 1 {
            return Err(violation(
                names::FORK_WAIT,
                format!("{caller_name} started fork {handle} ({fork}), but its forks so far number {last}"),
            ));
        }
        let named = |script: &str| {
            fork_name
                .strip_prefix("fork:")
                .and_then(|n| n.strip_prefix(script))
                .and_then(|n| n.strip_prefix('#'))
                .is_some_and(|h| h == handle.to_string())
        };
        if let Some(script) = script.filter(|s| !named(s)) {
            return Err(violation(
                names::FORK_WAIT,
                format!("{caller_name}'s fork {handle} ({fork}) is named {fork_name:?}, not \"fork:{script}#{handle}\""),
            ));
        }
        self.forks.insert((caller, handle), (fork, None));
        self.fork_of.insert(fork, (caller, handle));
        Ok(())
    }

    /// The handle of `caller`'s latest fork (0 before its first).
    pub(super) fn last_fork(&self, caller: Uuid) -> u32 {
        self.forks
            .keys()
            .filter(|(c, _)| *c == caller)
            .map(|(_, h)| *h)
            .max()
            .unwrap_or(0)
    }

    /// A workflow agent moves from its subquestions step to its main execution, having decided
    /// on `count` subquestions: each must start as a child in the step.
    pub(super) fn on_subquestions(&mut self, caller: Uuid, frame: &Arc<str>, count: usize) {
        self.deferred.push(Deferred::Children {
            caller,
            after: self.last_fork(caller),
            count,
            frame: frame.clone(),
        });
        self.pending = true;
    }

    /// A `fork` call of `caller` was answered with `content` (not an error): the handle of the
    /// fork that must start in the step.
    pub(super) fn on_fork_answered(
        &mut self,
        caller: Uuid,
        frame: &Arc<str>,
        tool_use_id: &Arc<str>,
        content: &str,
    ) -> Result<(), Violation> {
        let Ok(handle) = content.parse::<u32>() else {
            return Err(violation(
                names::FORK_WAIT,
                format!(
                    "{frame}'s fork ({tool_use_id}) succeeded with {content:?}, which is no handle"
                ),
            ));
        };
        self.deferred.push(Deferred::Promised {
            caller,
            handle,
            frame: frame.clone(),
            tool_use_id: tool_use_id.clone(),
        });
        self.pending = true;
        Ok(())
    }

    /// A fork ended with `result`, failed (`is_error`) or not.
    pub(super) fn on_fork_ended(&mut self, fork: Uuid, result: &Arc<str>, is_error: bool) {
        if let Some(at) = self.fork_of.remove(&fork) {
            if let Some((_, r)) = self.forks.get_mut(&at) {
                *r = Some((result.clone(), is_error));
            }
        }
    }

    /// A frame called `wait` on `handle`.
    pub(super) fn on_wait(&mut self, caller: Uuid, tool_use_id: &Arc<str>, handle: Option<u32>) {
        self.waits.insert((caller, tool_use_id.clone()), handle);
    }

    /// Whether agent `caller` waits (through a parked `wait`, a workflow's wait for its
    /// children, and forks that wait in turn) on fork `target`, which asked the user: the end of
    /// that chain, with a question open by its events.
    pub(super) fn waits_on(&self, caller: Uuid, target: Uuid) -> bool {
        caller != target && self.asker_of(caller, 0) == Some(target)
    }

    /// The agent that waits for the user on behalf of `at`, as the runtime routes: `at` if it
    /// has a question open; else the end of the chain from the running fork its parked `wait`
    /// names (the least id, should there be more than one, whatever order the map holds them
    /// in); else, while it waits for its workflow children, the end of the chain from the least
    /// running child that has one.
    pub(super) fn asker_of(&self, at: Uuid, depth: u32) -> Option<Uuid> {
        // Forks nest only as deep as forks fork; a bound keeps a broken model from looping.
        if depth > 64 {
            return None;
        }
        if self.asking.contains_key(&at) {
            return Some(at);
        }
        let parked = self
            .waits
            .iter()
            .filter(|((c, _), _)| *c == at)
            .filter_map(|(_, h)| self.forks.get(&(at, (*h)?)))
            .filter(|(_, result)| result.is_none())
            .map(|(fork, _)| *fork)
            .min();
        if let Some(fork) = parked {
            return self.asker_of(fork, depth + 1);
        }
        if !self.waiting_all.contains(&at) {
            return None;
        }
        self.forks
            .iter()
            .filter(|((c, _), (_, result))| *c == at && result.is_none())
            .map(|(_, (fork, _))| *fork)
            .filter(|fork| self.asker_of(*fork, depth + 1).is_some())
            .min()
            .and_then(|fork| self.asker_of(fork, depth + 1))
    }

    /// A `tool_result`: if it answers a `wait`, it must be the result of a fork that ended, with
    /// its error flag, or say that the caller has no such fork (checked again at the end of the
    /// step, once the step's forks have started), or be a skip text of a caller that ends in the
    /// step (an interruption's text aside, which the watchdog's checks judge).
    #[inline]
    pub(super) fn on_result(
        &mut self,
        frame_id: Uuid,
        frame: &Arc<str>,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
    ) -> Result<(), Violation> {
        if !self.asking.is_empty()
            && self
                .asking
                .get(&frame_id)
                .is_some_and(|asked| asked.as_ref() == Some(tool_use_id))
        {
            self.asking.remove(&frame_id);
        }
        if self.waits.is_empty() {
            return Ok(());
        }
        self.check_wait(frame_id, frame, tool_use_id, content, is_error)
    }

    pub(super) fn check_wait(
        &mut self,
        frame_id: Uuid,
        frame: &Arc<str>,
        tool_use_id: &Arc<str>,
        content: &Arc<str>,
        is_error: bool,
    ) -> Result<(), Violation> {
        let Some(handle) = self.waits.remove(&(frame_id, tool_use_id.clone())) else {
            return Ok(());
        };
        let ended_so = |m: &Self| {
            handle
                .and_then(|h| m.forks.get(&(frame_id, h)))
                .is_some_and(|(_, r)| r.as_ref().is_some_and(|(text, _)| text == content))
        };
        if super::is_skip(content) && !ended_so(self) {
            if &**content != crate::model::messages::TOOL_INTERRUPTED {
                self.deferred.push(Deferred::Skipped {
                    caller: frame_id,
                    frame: frame.clone(),
                    tool_use_id: tool_use_id.clone(),
                    content: content.clone(),
                });
                self.pending = true;
            }
            return Ok(());
        }
        let shown = HandleShown(handle);
        match handle.and_then(|h| self.forks.get(&(frame_id, h))) {
            None if is_error && content.starts_with("No fork with handle") => {
                if let Some(handle) = handle {
                    self.deferred.push(Deferred::NoFork {
                        caller: frame_id,
                        handle,
                        frame: frame.clone(),
                        tool_use_id: tool_use_id.clone(),
                    });
                    self.pending = true;
                }
                Ok(())
            }
            None => Err(violation(
                names::FORK_WAIT,
                format!("{frame}'s wait({shown}) ({tool_use_id}) got {content:?}, though no fork {shown} of {frame} had ended"),
            )),
            Some((fork, None)) => Err(violation(
                names::FORK_WAIT,
                format!("{frame}'s wait({shown}) ({tool_use_id}) got {content:?} while fork {shown} ({fork}) still runs"),
            )),
            Some((fork, Some((result, failed)))) if result != content || *failed != is_error => {
                Err(violation(
                    names::FORK_WAIT,
                    format!("{frame}'s wait({shown}) ({tool_use_id}) got {content:?} (error: {is_error}), but fork {shown} ({fork}) ended with {result:?} (error: {failed})"),
                ))
            }
            Some(_) => Ok(()),
        }
    }
}

/// A `wait`'s handle in a message: its number, or `?` when it named none (written only into a
/// violation's message, so never built otherwise).
struct HandleShown(Option<u32>);

impl std::fmt::Display for HandleShown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(h) => write!(f, "{h}"),
            None => f.write_str("?"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::tree::Status;
    use crate::model::ids::FrameId;

    /// A place no frame holds: the model's own checks never look at it.
    const NO_FRAME: FrameId = FrameId::new(u32::MAX, 0);

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    /// Fork `handle` of `caller` starts (its name not judged).
    fn start(m: &mut TreeModel, caller: Uuid, handle: u32, fork: Uuid) {
        m.on_fork_started(caller, "main", None, handle, fork, "fork:main#1")
            .unwrap();
    }

    #[test]
    fn forks_are_numbered_named_and_started_as_their_fork_calls_said() {
        let mut m = TreeModel::default();
        let caller = id(1);
        let f: Arc<str> = "agent:research".into();
        let script = Some("research");
        m.on_fork_started(caller, &f, script, 1, id(10), "fork:research#1")
            .unwrap();
        // Handles count from 1 per caller, with no gap.
        let v = m
            .on_fork_started(caller, &f, script, 3, id(11), "fork:research#3")
            .unwrap_err();
        assert_eq!(v.invariant, names::FORK_WAIT);
        assert!(v.message.contains("its forks so far number 1"), "{v}");
        // Named after the caller's script and the handle.
        for wrong in [
            "fork:research#3",
            "research#2",
            "fork:main#2",
            "fork:#2",
            "fork:research#02",
        ] {
            let v = m
                .on_fork_started(caller, &f, script, 2, id(11), wrong)
                .unwrap_err();
            assert!(
                v.message.contains("not \"fork:research#2\""),
                "{wrong}: {v}"
            );
        }
        m.on_fork_started(caller, &f, script, 2, id(11), "fork:research#2")
            .unwrap();
        // A fork call answered with a handle: that fork starts in the step.
        let t: Arc<str> = "toolu_1".into();
        m.on_fork_answered(caller, &f, &t, "2").unwrap();
        assert!(m.check_deferred().is_ok(), "fork 2 started");
        m.on_fork_answered(caller, &f, &t, "3").unwrap();
        let v = m.check_deferred().unwrap_err();
        assert!(
            v.message.contains("no fork 3 of agent:research started"),
            "{v}"
        );
        let v = m.on_fork_answered(caller, &f, &t, "started").unwrap_err();
        assert!(v.message.contains("which is no handle"), "{v}");
        // Unless the caller ended in the step (its forks never start).
        m.on_fork_answered(caller, &f, &t, "3").unwrap();
        m.on_state(caller, NO_FRAME, &f, None, Status::Running)
            .unwrap();
        m.on_state(caller, NO_FRAME, &f, Some(Status::Running), Status::Error)
            .unwrap();
        assert!(m.check_deferred().is_ok());
    }

    #[test]
    fn a_workflow_starts_as_many_children_as_it_decided_on() {
        use crate::agents::workflow::Step;
        let mut m = TreeModel::default();
        let (agent, f): (Uuid, Arc<str>) = (id(1), "main".into());
        m.on_workflow_step(agent, Step::Subquestions);
        assert!(m.at_subquestions(agent));
        m.on_subquestions(agent, &f, 2);
        start(&mut m, agent, 1, id(10));
        let v = m.check_deferred().unwrap_err();
        assert_eq!(v.invariant, names::FORK_WAIT);
        assert!(
            v.message
                .contains("decided on 2 subquestions, but 1 children"),
            "{v}"
        );
        m.on_subquestions(agent, &f, 1);
        start(&mut m, agent, 2, id(11));
        assert!(m.check_deferred().is_ok());
        m.on_workflow_step(agent, Step::Main);
        assert!(!m.at_subquestions(agent));
    }

    #[test]
    fn a_wait_answered_early_or_with_another_forks_result_breaks_fork_wait() {
        let mut m = TreeModel::default();
        let caller = id(1);
        let f: Arc<str> = "main".into();
        let (w1, w2, w3): (Arc<str>, Arc<str>, Arc<str>) = ("w1".into(), "w2".into(), "w3".into());
        start(&mut m, caller, 1, id(10));
        start(&mut m, caller, 2, id(11));
        // Answered while fork 1 runs.
        m.on_wait(caller, &w1, Some(1));
        let v = m
            .on_result(caller, &f, &w1, &"partial".into(), false)
            .unwrap_err();
        assert_eq!(v.invariant, names::FORK_WAIT);
        assert!(v.message.contains("still runs"), "{v}");
        // Answered with fork 2's result.
        m.on_fork_ended(id(10), &"one".into(), false);
        m.on_fork_ended(id(11), &"two".into(), false);
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
        assert!(m.check_deferred().is_ok());
        // `No fork` for a handle the caller's fork gets in the same step (forked in the same
        // reply) is caught at the step's end.
        m.on_wait(caller, &w3, Some(3));
        let no3 = "No fork with handle 3".into();
        assert!(m.on_result(caller, &f, &w3, &no3, true).is_ok());
        start(&mut m, caller, 3, id(12));
        let v = m.check_deferred().unwrap_err();
        assert!(v.message.contains("started fork 3"), "{v}");
        // The right result with the wrong error flag.
        m.on_fork_ended(id(12), &"three".into(), true);
        m.on_wait(caller, &w3, Some(3));
        let v = m
            .on_result(caller, &f, &w3, &"three".into(), false)
            .unwrap_err();
        assert!(v.message.contains("(error: true)"), "{v}");
        m.on_wait(caller, &w3, Some(7));
        let v = m
            .on_result(caller, &f, &w3, &"seven".into(), false)
            .unwrap_err();
        assert!(v.message.contains("no fork 7 of main had ended"), "{v}");
        // A skip text only for a caller that ends in the step.
        m.on_wait(caller, &w1, Some(1));
        let skip = crate::model::messages::AGENT_DELETED.into();
        assert!(m.on_result(caller, &f, &w1, &skip, true).is_ok());
        let v = m.check_deferred().unwrap_err();
        assert!(v.message.contains("but main goes on"), "{v}");
        m.on_wait(caller, &w1, Some(1));
        assert!(m.on_result(caller, &f, &w1, &skip, true).is_ok());
        m.on_state(caller, NO_FRAME, &f, None, Status::Running)
            .unwrap();
        m.on_state(caller, NO_FRAME, &f, Some(Status::Running), Status::Deleted)
            .unwrap();
        assert!(m.check_deferred().is_ok());
        // A result of another tool use is none of its business.
        assert!(m
            .on_result(caller, &f, &"t9".into(), &"x".into(), false)
            .is_ok());
    }

    #[test]
    fn a_caller_waits_on_the_forks_its_parked_waits_lead_to() {
        let mut m = TreeModel::default();
        let (main, f1, f2, f11) = (id(1), id(10), id(11), id(20));
        start(&mut m, main, 1, f1);
        start(&mut m, main, 2, f2);
        start(&mut m, f1, 1, f11);
        assert!(!m.waits_on(main, f1), "no wait parked yet");
        m.on_wait(main, &"w1".into(), Some(1));
        m.on_wait(f1, &"w2".into(), Some(1));
        let (name, up): (Arc<str>, Option<Status>) = ("fork".into(), None);
        for f in [f1, f11] {
            m.on_state(f, NO_FRAME, &name, up, Status::Running).unwrap();
        }
        assert!(!m.waits_on(main, f11), "fork 1#1 did not ask");
        m.on_question(f11, &Some("q".into()));
        assert!(!m.waits_on(main, f1), "fork 1 waits itself, it did not ask");
        assert!(
            m.waits_on(main, f11),
            "through the fork that waits in turn, to the one that asked"
        );
        assert!(!m.waits_on(main, f2), "fork 2 is not waited on");
        // Once fork 1 ended, main no longer waits through it.
        m.on_fork_ended(f1, &"done".into(), false);
        assert!(!m.waits_on(main, f11));
    }

    #[test]
    fn a_workflow_agent_waiting_for_its_children_leads_to_the_least_asking_one() {
        let mut m = TreeModel::default();
        let (main, c1, c2, c3) = (id(1), id(12), id(11), id(13));
        for (h, c) in [(1, c1), (2, c2), (3, c3)] {
            start(&mut m, main, h, c);
        }
        m.on_question(c1, &None);
        m.on_question(c3, &None);
        assert!(
            !m.waits_on(main, c1),
            "main does not wait for its children yet"
        );
        m.on_wait_all(main, true);
        assert!(!m.waits_on(main, c3), "the least asking child by id is c1");
        assert!(m.waits_on(main, c1));
        assert!(!m.waits_on(main, c2), "c2 did not ask");
        // Answering c1 closes its workflow question: the message would go to c3 next.
        m.on_answered(c1);
        assert!(m.waits_on(main, c3));
        m.on_wait_all(main, false);
        assert!(!m.waits_on(main, c3));
    }
}
