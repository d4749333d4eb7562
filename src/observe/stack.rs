//! The observer's model of each conversation's stack, built only from the runtime's push and pop
//! events, and the structural invariants judged on it: `main-at-bottom` and `stack-linkage` (each
//! push and pop, and at the end of the step each frame pushed in it against the runtime's
//! stack), `routing` (a user message goes to the frame on top, or to the fork it waits on) and
//! `cleanup` (no frame is left when the main agent answers or the stack unwinds).

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::tree::Status;
use crate::model::agent::AgentKind;
use crate::model::ids::{CallId, FrameId};
use crate::protocol::{Event, FrameInfo, PopReason};
use crate::runtime::Runtime;
use crate::wire::pairing::Pairing;

use super::batch::BatchModel;
use super::delivery::Delivery;
use super::input::{Delegation, Use};
use super::names::{self, *};
use super::{same_text, violation, Observer, Violation};

/// One frame of the observer's model of a stack.
#[derive(Clone, Debug)]
pub(super) struct ModelFrame {
    pub(super) info: FrameInfo,
    /// Model calls this frame made, as the observer counted them.
    pub(super) calls: u32,
    /// Validation state of a child's session (the main session's lives in [`KeyModel::main`],
    /// since it outlives each main frame).
    pub(super) pairing: Pairing,
    /// Passes through the loop head, as the observer counted them (model calls, and the passes
    /// that only run the tool uses left when a child returned).
    pub(super) passes: u32,
    /// The frame's iteration limit, as its model calls state it.
    pub(super) limit: u32,
    /// Its model call in flight.
    pub(super) call: Option<CallId>,
    /// The tool uses of its latest reply.
    pub(super) uses: smallvec::SmallVec<[Use; 1]>,
    /// A `complete` of its latest reply succeeded.
    pub(super) completed: bool,
    /// It resumed at the loop head with tool uses left and no pass left: it must end there.
    pub(super) at_limit: bool,
    /// The watchdog interrupted it: its passes are not checked (seed 004's continuation prompts
    /// add passes the observer does not model).
    pub(super) lenient: bool,
    /// A batch child's model (`batch-answer`).
    pub(super) batch: Option<Box<BatchModel>>,
}

impl ModelFrame {
    pub(super) fn new(info: FrameInfo) -> ModelFrame {
        ModelFrame {
            info,
            calls: 0,
            pairing: Pairing::default(),
            passes: 0,
            limit: 0,
            call: None,
            uses: smallvec::SmallVec::new(),
            completed: false,
            at_limit: false,
            lenient: false,
            batch: None,
        }
    }
}

/// The observer's model of one conversation.
#[derive(Clone, Debug)]
pub(super) struct KeyModel {
    pub(super) key: Arc<str>,
    pub(super) frames: Vec<ModelFrame>,
    /// The main session and its validation state.
    pub(super) main: Option<(Uuid, Pairing)>,
    /// Pushed or popped in this step (its depth is compared with the runtime's at the end).
    pub(super) touched: bool,
    /// User messages sent and not yet delivered or dropped.
    pub(super) pending: u32,
    /// Cancel words sent in this step to its active stack.
    pub(super) cancels: u32,
    /// Cancel words among the pending messages (sent while no stack was active).
    pub(super) pending_cancels: u32,
    /// Listed in [`Observer::pending_keys`].
    pub(super) listed: bool,
    /// The tool uses of the main session's latest reply and the main agent's limit, kept between
    /// turns (the main session outlives each main frame).
    pub(super) main_uses: smallvec::SmallVec<[Use; 1]>,
    pub(super) main_limit: u32,
    /// A trigger started it (seed 003): its questions go to the store.
    pub(super) session: bool,
}

impl Observer {
    /// A `push` event: a main frame only on an empty stack, a child only on a frame whose
    /// `tool_use` it names, at the depth the model gives.
    #[inline(always)]
    pub(super) fn check_push(
        &mut self,
        key: &Arc<str>,
        frame: &FrameInfo,
        depth: usize,
        frame_ref: FrameId,
    ) -> Result<(), Violation> {
        let k = self.touch(key);
        let model = &mut self.keys[k].frames;
        match (frame.kind, model.first()) {
            (AgentKind::Main, Some(bottom)) => {
                return Err(violation(
                    MAIN_AT_BOTTOM,
                    format!(
                        "main pushed on top of {} at depth {depth}",
                        bottom.info.name
                    ),
                ));
            }
            (AgentKind::Main, None) => {}
            (_, None) => {
                return Err(violation(
                    MAIN_AT_BOTTOM,
                    format!("{} pushed on an empty stack", frame.name),
                ));
            }
            (_, Some(_)) if frame.parent_tool_use_id.is_none() => {
                return Err(violation(
                    STACK_LINKAGE,
                    format!("{} has no parent_tool_use_id", frame.name),
                ));
            }
            _ => {}
        }
        if let (Some(link), Some(parent)) =
            (&frame.parent_tool_use_id, self.keys[k].frames.last_mut())
        {
            if let Some(u) = parent.uses.iter_mut().find(|u| same_text(&u.id, link)) {
                u.pushed = true;
                if u.delegation == Delegation::Passthrough {
                    return Err(violation(
                        names::TOOL_EXECUTION,
                        format!("{} pushed {} to answer {link}, a use_skill of a passthrough skill (one external run, never a frame)", parent.info.name, frame.name),
                    ));
                }
            }
        }
        let mut new = ModelFrame::new(frame.clone());
        if frame.kind == AgentKind::Main {
            new.uses = std::mem::take(&mut self.keys[k].main_uses);
            new.limit = self.keys[k].main_limit;
        }
        let model = &mut self.keys[k].frames;
        model.push(new);
        if depth != model.len() {
            return Err(violation(
                STACK_LINKAGE,
                format!(
                    "push reported depth {depth}, the stack holds {}",
                    model.len()
                ),
            ));
        }
        self.pushed.push((k, frame.frame_id, frame_ref));
        if frame.parent_tool_use_id.is_some() {
            self.expect("agent_session", frame.session_id, None, None, &frame.name);
        }
        // Its agent started (the `agent-state` the push stands for).
        self.tree.on_pushed(frame.frame_id, &frame.name)?;
        Ok(())
    }

    /// A `pop` event: the frame on top leaves, a main frame only from the bottom; a child's
    /// result must then reach its parent once (see [`super::delivery`]).
    #[inline(always)]
    pub(super) fn check_pop(
        &mut self,
        key: &Arc<str>,
        frame: &FrameInfo,
        reason: PopReason,
        iterations: u32,
        from: Status,
    ) -> Result<(), Violation> {
        // Its agent ended (the `agent-state` the pop stands for, which comes first).
        self.tree
            .on_popped(frame.frame_id, &frame.name, from, reason.ended_as())?;
        self.tools.on_ended(frame.frame_id);
        let k = self.touch(key);
        self.sessions.on_left(key, frame.frame_id);
        let model = &mut self.keys[k].frames;
        match model.last() {
            Some(top) if top.info.frame_id == frame.frame_id => {}
            Some(top) => {
                return Err(violation(
                    STACK_LINKAGE,
                    format!("popped {} but {} is on top", frame.name, top.info.name),
                ));
            }
            None => {
                return Err(violation(
                    STACK_LINKAGE,
                    format!("popped {} from an empty stack", frame.name),
                ));
            }
        }
        let popped = model.pop().expect("the top was just matched");
        let parent = model
            .last()
            .map(|p| (p.info.session_id, p.info.name.clone()));
        if !self.stray_calls.is_empty() {
            self.stray_calls.remove(&frame.frame_id);
        }
        if frame.kind == AgentKind::Main && reason == PopReason::Completed {
            return Err(violation(
                SINGLE_DELIVERY,
                "the main frame completed: there is no parent to deliver its result to",
            ));
        }
        match (frame.kind, parent) {
            (AgentKind::Main, Some((_, below))) => {
                return Err(violation(
                    MAIN_AT_BOTTOM,
                    format!("main popped with {below} still below it"),
                ));
            }
            (AgentKind::Main, None) => {}
            (_, None) => {
                return Err(violation(
                    MAIN_AT_BOTTOM,
                    format!("{} popped with no frame below it", frame.name),
                ));
            }
            (_, Some((parent_session, parent_name))) => {
                // The child's own validation state went with its model frame.
                if !self.stray_pairing.is_empty() {
                    self.stray_pairing.remove(&frame.session_id);
                }
                let expect_error = self.on_pop(k, &popped, reason, iterations);
                let expect_content = match (reason, popped.batch) {
                    (PopReason::Completed, Some(b)) => b.answer,
                    _ => None,
                };
                self.deliveries.push(Delivery {
                    child: frame.clone(),
                    parent_session,
                    parent_name,
                    count: 0,
                    is_error: None,
                    expect_error,
                    expect_content,
                });
                return Ok(());
            }
        }
        self.on_pop(k, &popped, reason, iterations);
        self.sessions.on_main_left(key, reason);
        if popped.info.kind == AgentKind::Main {
            self.keys[k].main_uses = popped.uses;
        }
        Ok(())
    }

    /// A `user_message` event: `routing`, then what the message does to the frame.
    #[inline(always)]
    pub(super) fn check_routing(
        &mut self,
        rt: &Runtime,
        key: &Arc<str>,
        frame: &Arc<str>,
        frame_id: Uuid,
        text: &Arc<str>,
    ) -> Result<(), Violation> {
        let k = self.key_index(key);
        let model = &self.keys[k].frames;
        match model.last() {
            Some(top) if top.info.frame_id == frame_id => {}
            // The fork the top frame waits on, which asked the user.
            Some(top) if self.tree.waits_on(top.info.frame_id, frame_id) => {}
            Some(top) => {
                return Err(violation(
                    ROUTING,
                    format!(
                        "a user message went to {frame}, but {} is on top",
                        top.info.name
                    ),
                ));
            }
            None => {
                return Err(violation(
                    ROUTING,
                    format!("a user message went to {frame} with no main frame"),
                ));
            }
        }
        self.tree.on_answered(frame_id);
        self.tree.on_user_message(frame_id);
        self.on_user_message(rt, k, frame_id, text);
        Ok(())
    }

    /// A `response` or `cancelled` event: `cleanup`, then what the answer or unwind does.
    #[inline(always)]
    pub(super) fn check_cleanup(&mut self, key: &Arc<str>, event: &Event) -> Result<(), Violation> {
        let what = if matches!(event, Event::Response { .. }) {
            "the main agent answered"
        } else {
            "the stack was unwound"
        };
        let model = self.model(key);
        if let Some(left) = model.last() {
            return Err(violation(
                CLEANUP,
                format!(
                    "{what} but {} (depth {}) remains",
                    left.info.name,
                    model.len()
                ),
            ));
        }
        let k = self.key_index(key);
        match event {
            Event::Response { response, .. } => self.on_response(k, &response.text),
            Event::Cancelled { dropped, .. } => self.on_cancelled(k, *dropped),
            _ => {}
        }
        Ok(())
    }

    /// At the end of a step that pushed or popped: each child popped delivered once, each frame
    /// pushed is linked in the runtime as its push said, and each stack touched is the model's.
    pub(super) fn structural_end(&mut self, rt: &Runtime) -> Result<(), Violation> {
        if self.deliveries.is_empty() && self.pushed.is_empty() && self.touched.is_empty() {
            return Ok(()); // No frame was pushed or popped in this step: nothing to check.
        }
        self.check_deliveries()?;
        // The two lists below are cleared, not dropped, so that their buffers serve every step.
        let linked = self
            .pushed
            .iter()
            .try_for_each(|&(k, frame_id, at)| self.check_link(rt, k, frame_id, at));
        self.pushed.clear();
        linked?;
        // The runtime's stacks must be the ones its events describe.
        let matched = self
            .touched
            .iter()
            .try_for_each(|&k| self.check_depth(rt, k));
        for &k in &self.touched {
            self.keys[k].touched = false;
        }
        self.touched.clear();
        matched
    }

    /// A frame pushed in this step and still present must name an unresolved `tool_use` of the
    /// frame below it.
    fn check_link(
        &self,
        rt: &Runtime,
        k: usize,
        frame_id: Uuid,
        at: FrameId,
    ) -> Result<(), Violation> {
        #[cfg(test)]
        if self.no_runtime {
            return Ok(());
        }
        let KeyModel { key, frames, .. } = &self.keys[k];
        let Some(i) = frames.iter().rposition(|f| f.info.frame_id == frame_id) else {
            return Ok(());
        };
        // Its agent, started by the push, lives in the runtime as the events tell (unless it
        // moved since, which the touched-agent check judges).
        let frame = rt.frame(at).filter(|f| f.frame_id() == frame_id);
        let Some(frame) = frame else {
            return Err(self.pushed_lost(i, k, frame_id));
        };
        if frame.status() != Status::Running && !self.tree.moved(frame_id) {
            return Err(violation(
                names::TREE_CONSISTENCY,
                format!(
                    "{} ({frame_id}) is {}, but its agent-state events left it running",
                    frames[i].info.name,
                    frame.status()
                ),
            ));
        }
        if i == 0 {
            return Ok(());
        }
        // Its parent is the frame below it.
        super::tree::check_listed(rt, frame, frames[i - 1].info.frame_id, &frames[i].info.name)?;
        let child = &frames[i].info;
        let link: &str = child.parent_tool_use_id.as_deref().unwrap_or("");
        let below = rt.stack(key).and_then(|v| v.get(i - 1));
        match below {
            Some(parent) if parent.session.is_unresolved(link) => Ok(()),
            Some(parent) => Err(violation(
                names::STACK_LINKAGE,
                format!(
                    "{} names {link}, which is not an unresolved tool_use of {}",
                    child.name, parent.agent.frame_name
                ),
            )),
            None => Err(violation(
                names::STACK_LINKAGE,
                format!("{} has no frame below it in the runtime", child.name),
            )),
        }
    }

    /// The violation when frame `frame_id`, `i`-th on conversation `k`'s stack by the events,
    /// has no frame at the place its push named.
    #[cold]
    fn pushed_lost(&self, i: usize, k: usize, frame_id: Uuid) -> Violation {
        violation(
            names::TREE_CONSISTENCY,
            format!(
                "{} ({frame_id}) lives by its push, but the runtime has no frame for it (gone without ending)",
                self.keys[k].frames[i].info.name
            ),
        )
    }

    /// The runtime's stack for conversation `k` has the depth and top frame of the model.
    fn check_depth(&self, rt: &Runtime, k: usize) -> Result<(), Violation> {
        #[cfg(test)]
        if self.no_runtime {
            return Ok(());
        }
        let KeyModel {
            key, frames: model, ..
        } = &self.keys[k];
        let (depth, top) = match rt.stack(key) {
            Some(v) => (v.depth(), v.top().map(|f| f.frame_id)),
            None => (0, None),
        };
        if depth != model.len() || top != model.last().map(|f| f.info.frame_id) {
            return Err(violation(
                names::STACK_LINKAGE,
                format!(
                    "the runtime's stack for {key} has depth {depth} but its push/pop events give {}",
                    model.len()
                ),
            ));
        }
        Ok(())
    }
}
