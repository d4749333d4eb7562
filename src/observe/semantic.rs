//! The semantic half of the observer: the invariants that hold when every structure is valid but
//! the runtime still says something false (a failure reported as a success, a tool use skipped
//! for no documented reason, a message that reaches nobody, a pass left uncounted, a state that
//! runs ahead of its journal).
//!
//! Its model is built from what the driver fed (the model's replies, the user's messages; see
//! [`Observer::before_input`]), the events, and the effects the step asked for; the runtime's
//! state is read only to know whether a conversation is idle.

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::tools::builtin;
use crate::model::agent::{AgentKind, EmptyAnswer};
use crate::model::ids::{same_id, CallId};
use crate::model::messages;
use crate::runtime::Runtime;

use super::batch::BatchModel;
use super::delivery::ResultSeen;
use super::input::{is_cancel_word, Delegation};
use super::stack::{KeyModel, ModelFrame};
use super::step::{fact, End};
use super::{is_skip, names, same_text, violation, Observer, Violation};

impl Observer {
    /// A trigger started a session: its envelope is a message waiting for the session's main
    /// frame, as a user's message would be (the runtime names the session's key only now).
    pub(super) fn on_triggered(&mut self, key: &Arc<str>) {
        let k = self.key_index(key);
        let m = &mut self.keys[k];
        m.session = true;
        m.pending += 1;
        if !m.listed {
            m.listed = true;
            self.pending_keys.push(k);
        }
    }

    /// Records a semantic violation to report at the end of the step (the first one wins).
    pub(super) fn defer(&mut self, invariant: &'static str, message: String) {
        if self.step.deferred.is_none() {
            self.step.mark(fact::DEFERRED).deferred = Some(violation(invariant, message));
        }
    }

    /// A model call of frame `frame_id` (found in conversation `k`): one pass.
    pub(super) fn on_request(
        &mut self,
        k: usize,
        frame_id: Uuid,
        call: CallId,
        iteration: u32,
        max_iterations: u32,
        batch: Option<EmptyAnswer>,
    ) {
        let Some(f) = find(&mut self.keys[k], frame_id) else {
            return;
        };
        if let (Some(policy), None, false) = (batch, &f.batch, f.info.kind == AgentKind::Main) {
            f.batch = Some(Box::new(BatchModel::new(policy)));
        }
        f.passes += 1;
        f.limit = max_iterations;
        f.at_limit = false;
        let main = f.info.kind == AgentKind::Main;
        let old = f.call.replace(call);
        let (passes, lenient) = (f.passes, f.lenient);
        if let (Some(old), false) = (old, self.partials.is_empty()) {
            self.partials.remove(&old);
        }
        if main {
            self.keys[k].main_limit = max_iterations;
        }
        if !lenient && iteration != passes {
            let name = self.keys[k]
                .frames
                .iter()
                .rev()
                .find(|f| f.info.frame_id == frame_id)
                .map(|f| f.info.name.clone())
                .unwrap_or_default();
            self.defer(
                names::ITERATION_ACCOUNTING,
                format!("{name} made model call at iteration {iteration}, but it has made {passes} passes"),
            );
        }
    }

    /// A call the restored runtime issued again.
    pub(super) fn on_reissued(&mut self, k: usize, frame_id: Uuid, call: CallId) {
        let Some(f) = find(&mut self.keys[k], frame_id) else {
            return;
        };
        if let Some(old) = f.call.replace(call) {
            self.partials.remove(&old);
        }
    }

    pub(super) fn on_llm_error(&mut self, frame_id: Uuid) {
        self.step.mark(fact::FAILED).failed.push(frame_id);
    }

    pub(super) fn on_watchdog(&mut self, k: usize, frame: &Arc<str>) {
        let m = &mut self.keys[k];
        if m.cancels > 0 {
            // A cancel word that stops only the frame on top (seed 004's scope) acts here.
            m.cancels -= 1;
        }
        if let Some(f) = m.frames.iter_mut().rev().find(|f| f.info.name == *frame) {
            f.lenient = true;
        }
        self.step
            .mark(fact::WATCHDOG)
            .watchdog
            .push((k, frame.clone()));
    }

    /// A workflow agent's text reply was a decision of its workflow (it entered a step, asked a
    /// question, or waits for its children), not an answer to the user.
    pub(super) fn on_workflow_decision(&mut self, frame_id: Uuid) {
        self.step.answered.retain(|f| *f != frame_id);
    }

    /// A workflow agent ended its workflow with its summary: a success, like a batch child's
    /// answer.
    pub(super) fn on_workflow_done(&mut self, frame_id: Uuid) {
        self.step.mark(fact::DELEGATED).delegated.push(frame_id);
    }

    pub(super) fn on_sent(&mut self, k: usize, text: &Arc<str>) {
        self.step.mark(fact::SENT).sent.push((k, text.clone()));
    }

    /// A user message delivered to frame `frame_id`.
    pub(super) fn on_user_message(
        &mut self,
        rt: &Runtime,
        k: usize,
        frame_id: Uuid,
        text: &Arc<str>,
    ) {
        // A cancel word reaches a frame as a message only when it starts the conversation (an
        // empty stack, whose new main frame it is pushed for); on a stack it unwinds (DESIGN §3).
        // (Only a message that waited can be one: a cancel word sent to a stack acts at once.)
        if self.keys[k].pending_cancels > 0
            && is_cancel_word(&rt.config().cancel_words, text)
            && !self.pushed.iter().any(|p| (p.0, p.1) == (k, frame_id))
        {
            let key = self.keys[k].key.clone();
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("the cancel word {text:?} was delivered in {key} as a message to a frame already on its stack, instead of unwinding it"),
            );
        }
        let m = &mut self.keys[k];
        if m.pending == 0 {
            let key = m.key.clone();
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("a user message {text:?} was delivered in {key}, but none was waiting (delivered twice, or never sent)"),
            );
            return;
        }
        m.pending -= 1;
        if m.pending_cancels > m.pending {
            m.pending_cancels = m.pending;
        }
        let Some(f) = find(m, frame_id) else {
            return;
        };
        // An open `ask_user` takes the message as its answer (a `tool_result`, journaled as one).
        let answer = f
            .uses
            .iter()
            .any(|u| !u.answered && &*u.name == builtin::ASK_USER);
        if !answer {
            // The message resumes the frame at the loop head: a pass of its own when tool uses
            // of an earlier reply are left to run.
            resume(f);
            let (session, name) = (f.info.session_id, f.info.name.clone());
            self.step.mark(fact::RESUMED).resumed.push(frame_id);
            self.expect("user", session, None, None, &name);
        }
    }

    /// A cancel word unwound conversation `k`, dropping `dropped` queued messages.
    pub(super) fn on_cancelled(&mut self, k: usize, dropped: usize) {
        let m = &mut self.keys[k];
        if m.cancels > 0 {
            m.cancels -= 1;
        } else if m.pending_cancels > 0 {
            // A cancel word that waited in the queue.
            m.pending_cancels -= 1;
            m.pending -= 1;
        } else {
            let key = m.key.clone();
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("{key} was unwound with no cancel word sent"),
            );
            return;
        }
        let dropped = u32::try_from(dropped).unwrap_or(u32::MAX);
        if dropped > m.pending {
            let (key, pending) = (m.key.clone(), m.pending);
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("the unwind of {key} dropped {dropped} queued messages, but {pending} were waiting"),
            );
            return;
        }
        m.pending -= dropped;
        m.pending_cancels = m.pending_cancels.min(m.pending);
    }

    /// A `tool_result` entered the session of frame `frame_id`; `delivery` when it is the result
    /// of a child popped in this step.
    pub(super) fn on_tool_result(&mut self, k: usize, r: ResultSeen<'_>, delivery: bool) {
        let ResultSeen {
            frame_id,
            session,
            tool_use_id,
            content,
            is_error,
        } = r;
        let resumed = self.step.resumed.contains(&frame_id);
        let watched = self.step.watchdog.iter().any(|(wk, _)| *wk == k);
        // Frames at or above the agent an intervention deletes in this step go with it.
        let deleting = self.delete_target.is_some();
        let being_deleted = self.delete_target.is_some_and(|target| {
            let frames = &self.keys[k].frames;
            let at = frames.iter().position(|f| f.info.frame_id == target);
            let me = frames.iter().position(|f| f.info.frame_id == frame_id);
            matches!((at, me), (Some(t), Some(m)) if m >= t)
        });
        let Some(f) = find(&mut self.keys[k], frame_id) else {
            return;
        };
        let name = f.info.name.clone();
        let persist_session = f.info.session_id == session;
        let Some(i) = f
            .uses
            .iter()
            .position(|u| !u.answered && same_id(&u.id, tool_use_id))
        else {
            if persist_session {
                self.expect(
                    "tool_result",
                    session,
                    Some(tool_use_id.clone()),
                    Some(is_error),
                    &name,
                );
            }
            return;
        };
        let u = &mut f.uses[i];
        u.answered = true;
        let (use_name, refusal) = (u.name.clone(), u.refusal.clone());
        let frame_expected = u.delegation == Delegation::Frame && !u.pushed;
        let at_once = u.at_once;
        let (completed, passes, limit) = (f.completed, f.passes, f.limit);
        let over = f.at_limit;
        let problem = match &**content {
            messages::SKIPPED_AFTER_COMPLETE if !completed => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was skipped as after `complete`, but {name} did not complete"
            )),
            messages::SKIPPED_AFTER_COMPLETE => None,
            messages::SKIPPED_AFTER_LIMIT if !(resumed && passes >= limit) => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was skipped at the iteration limit, but {name} had made {passes} of {limit} passes{}",
                if resumed { "" } else { " and was not resuming at the loop head" }
            )),
            messages::SKIPPED_AFTER_LIMIT => None,
            messages::CANCELLED_BY_USER => {
                self.step.mark(fact::CANCEL_SKIPS).cancel_skips.push((frame_id, name.clone()));
                None
            }
            messages::TOOL_INTERRUPTED if !watched => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was answered as interrupted, but nothing interrupted {name}"
            )),
            messages::TOOL_INTERRUPTED => None,
            // A fork's final text answers `wait`, whatever it says.
            _ if &*use_name == builtin::WAIT => None,
            _ if &*use_name == builtin::FORK && !is_error && !is_skip(content) => {
                if let Err(v) = self
                    .tree
                    .on_fork_answered(frame_id, &name, tool_use_id, content)
                {
                    self.step.mark(fact::DEFERRED).deferred.get_or_insert(v);
                }
                None
            }
            messages::AGENT_DELETED if !deleting => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was answered as deleted, but no intervention deleted anything"
            )),
            messages::AGENT_DELETED if being_deleted => {
                self.step.mark(fact::DELETE_SKIPS).delete_skips.push((frame_id, name.clone()));
                None
            }
            messages::AGENT_DELETED if !delivery => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was answered as deleted, but {name} is not being deleted"
            )),
            messages::AGENT_DELETED => None,
            _ if completed => Some(format!(
                "{tool_use_id} ({use_name}) of {name} ran after {name} called `complete`"
            )),
            _ => None,
        };
        let problem = problem.map(|m| (names::TOOL_EXECUTION, m)).or_else(|| {
            (over && !is_skip(content)).then(|| {
                let m = format!(
                    "{name} ran {tool_use_id} ({use_name}) in a pass over its limit of {limit}"
                );
                (names::ITERATION_BOUND, m)
            })
        });
        let main = f.info.kind == AgentKind::Main;
        // The built-in tools are the runtime's own: never "not found", and a child's `complete`
        // completes it.
        let builtin_name = matches!(
            &*use_name,
            builtin::COMPLETE | builtin::USE_SKILL | builtin::USE_AGENT | builtin::ASK_USER
        );
        let problem = problem.or_else(|| {
            (builtin_name && messages::is_tool_not_found(content, &use_name)).then(|| {
                let m = format!("{name} called the built-in {use_name} ({tool_use_id}), but it was answered as not found");
                (names::TOOL_EXECUTION, m)
            })
        });
        let problem = problem.or_else(|| {
            let m = match &refusal {
                Some(want) if !(is_skip(content) || (is_error && same_text(want, content))) => {
                    format!("{name} may not use {use_name}, so {tool_use_id} must be refused with {want:?}, but it got {content:?}")
                }
                None if is_error && is_refusal(&use_name, content) => format!(
                    "{tool_use_id} ({use_name}) was refused with {content:?}, but {name} may use it"
                ),
                _ => return None,
            };
            Some((names::TOOL_EXECUTION, m))
        });
        let problem = problem.or_else(|| {
            (at_once && !is_skip(content) && (is_error || **content != *messages::NO_ANSWER)).then(|| {
                let m = format!("{name}'s ask_user {tool_use_id} was answered {content:?}, but with query_user: none it is answered {:?}", messages::NO_ANSWER);
                (names::TOOL_EXECUTION, m)
            })
        });
        let problem = problem.or_else(|| {
            (frame_expected && !is_error && !is_skip(content)).then(|| {
                let m = format!("{name}'s use_skill {tool_use_id} was answered {content:?}, but its skill, which is not a passthrough skill, never ran as a child frame");
                (names::TOOL_EXECUTION, m)
            })
        });
        let problem = problem.or_else(|| {
            (&*use_name == builtin::COMPLETE && !main && is_error && !is_skip(content)).then(|| {
                let m = format!("{name} called `complete` ({tool_use_id}), but it was answered with the error {content:?}");
                (names::TOOL_EXECUTION, m)
            })
        });
        if &*use_name == builtin::COMPLETE && !is_error {
            f.completed = true;
            if !main {
                self.step
                    .mark(fact::COMPLETING)
                    .completing
                    .push((frame_id, name.clone()));
            }
        }
        // A child's result resumes its parent at the loop head: a pass of its own when tool uses
        // are left to run (DESIGN §3 item 6), unless the limit ends it there.
        if delivery && &**content != messages::CANCELLED_BY_USER && !being_deleted {
            self.step.mark(fact::RESUMED).resumed.push(frame_id);
            resume(f);
        }
        if let Some((invariant, message)) = problem {
            self.defer(invariant, message);
        }
        if persist_session {
            self.expect(
                "tool_result",
                session,
                Some(tool_use_id.clone()),
                Some(is_error),
                &name,
            );
        }
    }

    /// Frame `frame` left conversation `k`'s stack. Returns whether its result must be an
    /// error (`None`: the observer cannot tell, as after an interruption).
    pub(super) fn on_pop(
        &mut self,
        k: usize,
        popped: &ModelFrame,
        reason: crate::protocol::PopReason,
        iterations: u32,
    ) -> Option<bool> {
        use crate::protocol::PopReason as R;
        let id = popped.info.frame_id;
        let name = &popped.info.name;
        if let (Some(call), false) = (popped.call, self.partials.is_empty()) {
            self.partials.remove(&call);
        }
        if !popped.lenient && iterations > popped.limit && popped.limit > 0 {
            self.defer(
                names::ITERATION_BOUND,
                format!(
                    "{name} left the stack reporting {iterations} iterations, over its limit of {}",
                    popped.limit
                ),
            );
        } else if !popped.lenient && iterations != popped.passes {
            self.defer(
                names::ITERATION_ACCOUNTING,
                format!(
                    "{name} left the stack reporting {iterations} iterations, but it made {} passes",
                    popped.passes
                ),
            );
        }
        let main = popped.info.kind == AgentKind::Main;
        if !main {
            self.expect(
                "agent_session_complete",
                popped.info.session_id,
                None,
                None,
                name,
            );
        }
        let watched = self
            .step
            .watchdog
            .iter()
            .any(|(wk, n)| *wk == k && n == name);
        let end = if reason == R::Cancelled {
            End::Cancel
        } else if reason == R::Deleted {
            if self.delete_target.is_none() {
                self.defer(
                    names::ERROR_PROPAGATION,
                    format!("{name} left the stack as deleted, but no intervention deleted it"),
                );
                return Some(true);
            }
            End::Deleted
        } else if watched || popped.lenient {
            End::Interrupted
        } else if self.step.failed.contains(&id) {
            End::Error
        } else if popped.completed || self.step.delegated.contains(&id) {
            End::Success
        } else if main && self.step.answered.contains(&id) {
            End::Answered
        } else if popped.passes >= popped.limit {
            End::Limit
        } else {
            self.defer(
                names::ERROR_PROPAGATION,
                format!("{name} left the stack ({reason:?}) but did not complete, fail, reach its limit or get cancelled"),
            );
            return None;
        };
        let agrees = match end {
            End::Success => reason == R::Completed,
            End::Answered => reason == R::Answered,
            End::Error => reason == R::Error,
            End::Limit => reason == R::MaxIterations,
            End::Deleted => reason == R::Deleted,
            End::Cancel | End::Interrupted => true,
        };
        if !agrees {
            let saw = match end {
                End::Success => "completed",
                End::Answered => "answered",
                End::Error => "had its model call fail",
                End::Limit => "reached its iteration limit",
                End::Deleted => "was deleted",
                End::Cancel | End::Interrupted => "was interrupted",
            };
            self.defer(
                names::ERROR_PROPAGATION,
                format!("{name} {saw}, but left the stack as {reason:?}"),
            );
        }
        if main && matches!(end, End::Error | End::Limit) {
            self.step
                .mark(fact::MAIN_FAILURE)
                .main_failure
                .push((k, end));
        }
        match end {
            End::Success => Some(false),
            End::Error | End::Limit | End::Cancel | End::Deleted => Some(true),
            End::Interrupted | End::Answered => None,
        }
    }

    /// The main agent's turn ended with `text`: a failure must be told as one.
    pub(super) fn on_response(&mut self, k: usize, text: &Arc<str>) {
        let Some(i) = self.step.main_failure.iter().position(|(mk, _)| *mk == k) else {
            return;
        };
        let (_, end) = self.step.main_failure.swap_remove(i);
        let told = match end {
            End::Limit => &**text == messages::USER_MAX_STEPS,
            _ => text.starts_with("LLM error: "),
        };
        let sent = self.step.sent.iter().any(|(sk, s)| *sk == k && s == text);
        if !told || !sent {
            let what = if end == End::Limit {
                "reached its iteration limit"
            } else {
                "had its model call fail"
            };
            let key = self.keys[k].key.clone();
            self.defer(
                names::ERROR_PROPAGATION,
                format!(
                    "the main agent of {key} {what}, but the user was {} {text:?}",
                    if sent { "told" } else { "not sent" }
                ),
            );
        }
    }

    /// The end-of-step checks of the semantic invariants.
    /// `cancel_sent`: a cancel word was sent in the step (only then can one be left unhandled).
    pub(super) fn semantic_end(
        &mut self,
        rt: &Runtime,
        cancel_sent: bool,
    ) -> Result<(), Violation> {
        let result = self.semantic_checks(rt, cancel_sent);
        self.step.clear();
        result
    }

    fn semantic_checks(&mut self, rt: &Runtime, cancel_sent: bool) -> Result<(), Violation> {
        if let Some(v) = self.step.deferred.take() {
            return Err(v);
        }
        let on_stack = |id: &Uuid| {
            self.keys
                .iter()
                .any(|m| m.frames.iter().any(|f| f.info.frame_id == *id))
        };
        // Frames that had to leave the stack in this step: unwound, or completed.
        if let Some((_, name)) = self.step.cancel_skips.iter().find(|(id, _)| on_stack(id)) {
            return Err(violation(
                names::TOOL_EXECUTION,
                format!("tool uses of {name} were answered as cancelled by the user, but no cancel unwound {name}"),
            ));
        }
        if let Some((_, name)) = self.step.delete_skips.iter().find(|(id, _)| on_stack(id)) {
            return Err(violation(
                names::TOOL_EXECUTION,
                format!("tool uses of {name} were answered as deleted, but {name} is still on the stack"),
            ));
        }
        // With nobody to ask, an `ask_user` is answered in the step of its reply.
        for id in &self.step.at_once {
            let frame = self
                .keys
                .iter()
                .flat_map(|m| m.frames.iter())
                .find(|f| f.info.frame_id == *id);
            if let Some(f) = frame {
                if let Some(u) = f.uses.iter().find(|u| u.at_once && !u.answered) {
                    return Err(violation(
                        names::TOOL_EXECUTION,
                        format!("{}'s ask_user {} was left unanswered at the end of its reply's step, but with query_user: none it is answered at once", f.info.name, u.id),
                    ));
                }
            }
        }
        if let Some((_, name)) = self.step.completing.iter().find(|(id, _)| on_stack(id)) {
            return Err(violation(
                names::TOOL_EXECUTION,
                format!("{name} called `complete`, but it is still on the stack"),
            ));
        }
        for m in self.keys.iter_mut().filter(|_| cancel_sent) {
            if m.cancels > 0 {
                let key = m.key.clone();
                m.cancels = 0;
                return Err(violation(
                    names::MESSAGE_DELIVERY,
                    format!("a cancel word sent to {key} was neither acted on nor delivered"),
                ));
            }
        }
        let mut i = 0;
        while i < self.pending_keys.len() {
            let k = self.pending_keys[i];
            let m = &mut self.keys[k];
            if m.pending == 0 {
                m.listed = false;
                self.pending_keys.swap_remove(i);
                continue;
            }
            i += 1;
            let idle = rt.stack(&m.key).is_none_or(|v| {
                v.entry().inbox.is_empty() && v.top().is_none_or(|f| f.awaits_user())
            });
            if idle {
                return Err(violation(
                    names::MESSAGE_DELIVERY,
                    format!(
                        "{} is idle, but {} user message(s) sent to it were neither delivered nor dropped by a cancel",
                        m.key, m.pending
                    ),
                ));
            }
        }
        self.batch_checks(&self.step.batch_due)?;
        if self.persist {
            self.check_journal(rt.effects())?;
        }
        Ok(())
    }
}

/// Frame `f` resumes at the loop head: a pass of its own when tool uses are left to run, unless
/// it has no pass left, when it must end there.
fn resume(f: &mut ModelFrame) {
    if f.uses.iter().any(|u| !u.answered) {
        if f.passes < f.limit {
            f.passes += 1;
        } else {
            f.at_limit = true;
        }
    }
}

/// Whether `content` is a refusal of tool `name`: not found, not available to the agent or to a
/// fork, or `ask_user` in a batch agent.
fn is_refusal(name: &str, content: &str) -> bool {
    messages::is_tool_not_found(content, name)
        || messages::is_tool_not_available(content, name)
        || messages::is_not_available_to_fork(content, name)
        || (name == builtin::ASK_USER && content == messages::ASK_USER_IN_BATCH)
}

fn find(m: &mut KeyModel, frame_id: Uuid) -> Option<&mut ModelFrame> {
    m.frames
        .iter_mut()
        .rev()
        .find(|f| f.info.frame_id == frame_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_one_of_the_documented_texts_for_its_tool() {
        assert!(is_refusal("t1", &messages::tool_not_found("t1")));
        assert!(is_refusal("t1", &messages::tool_not_available("t1")));
        assert!(is_refusal(
            "use_agent",
            &messages::not_available_to_fork("use_agent")
        ));
        assert!(is_refusal("ask_user", messages::ASK_USER_IN_BATCH));
        // Another tool's refusal, a tool's own failure, or a batch refusal of another tool are not.
        assert!(!is_refusal("t2", &messages::tool_not_found("t1")));
        assert!(!is_refusal("t1", &messages::tool_failed("disk full")));
        assert!(!is_refusal("t1", messages::ASK_USER_IN_BATCH));
    }
}
