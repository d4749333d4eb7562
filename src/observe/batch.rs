//! `batch-answer`: what a batch delegation answers its caller (DESIGN §3 item 12, seed 004's
//! `AgentTool`), judged from the batch child's own replies and its agent's empty-answer policy.
//!
//! A batch child's reply without tool uses ends its send. Its text, when not blank, is the answer.
//! A blank one is kept under `accept_empty`; under `extract_from_conversation` it is replaced by
//! the child's latest non-blank assistant text (blank if it never said anything); under
//! `ask_for_summary` likewise, except that a child that never said anything is first sent the
//! summary prompt, once (seed 004's second `sendMessage`), and its answer to that is judged the
//! same way. The runtime must act in the reply's step: the `delegation` event names the answer
//! or the summary request, and the answer is the result the caller's `tool_use` receives.

use std::sync::Arc;

use uuid::Uuid;

use crate::model::agent::EmptyAnswer;

use super::{names, same_text, Observer};

/// The observer's model of one batch child (boxed in its [`super::ModelFrame`]: few frames are
/// batch children).
#[derive(Clone, Debug)]
pub(super) struct BatchModel {
    policy: EmptyAnswer,
    /// Its latest non-blank assistant text (the concatenated text blocks of a reply).
    said: Option<Arc<str>>,
    /// What the runtime must do about the reply of this step that ended its send.
    due: Option<Due>,
    /// It was asked for a summary.
    asked: bool,
    /// The answer it gave, which its caller must receive.
    pub(super) answer: Option<Arc<str>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Due {
    Answer(Arc<str>),
    Summary,
}

impl BatchModel {
    pub(super) fn new(policy: EmptyAnswer) -> BatchModel {
        BatchModel {
            policy,
            said: None,
            due: None,
            asked: false,
            answer: None,
        }
    }

    /// A reply of the child was applied: `text` is its text (blocks joined), `ends` whether it
    /// has no tool use (its send ends). Returns whether something is now due in this step.
    pub(super) fn on_reply(&mut self, text: Option<Arc<str>>, ends: bool) -> bool {
        let blank = text.as_ref().is_none_or(|t| t.trim().is_empty());
        if ends {
            self.due = Some(match (blank, self.policy, &self.said) {
                (false, _, _) | (true, EmptyAnswer::AcceptEmpty, _) => {
                    Due::Answer(text.clone().unwrap_or_else(|| "".into()))
                }
                (true, _, Some(said)) => Due::Answer(said.clone()),
                (true, EmptyAnswer::AskForSummary, None) if !self.asked => Due::Summary,
                (true, _, None) => Due::Answer(text.clone().unwrap_or_else(|| "".into())),
            });
        }
        if !blank {
            self.said = text;
        }
        ends
    }

    /// What is due and was not done, when the step ends.
    fn pending(&self) -> Option<String> {
        match self.due.as_ref()? {
            Due::Answer(a) => Some(format!("to answer {a:?}")),
            Due::Summary => Some("to be asked for a summary".to_owned()),
        }
    }
}

impl Observer {
    /// A `delegation` event: the batch child `frame` of conversation `k` (the latest frame of
    /// that name) answered `text`, a success, or was asked for a summary. An answer the watchdog
    /// caused in this step may be its interruption text.
    pub(super) fn on_delegation(
        &mut self,
        k: usize,
        frame: &Arc<str>,
        what: &str,
        text: &Arc<str>,
    ) {
        let watched = self
            .step
            .watchdog
            .iter()
            .any(|(wk, n)| *wk == k && n == frame);
        let Some(f) = self.keys[k]
            .frames
            .iter_mut()
            .rev()
            .find(|f| f.info.name == *frame)
        else {
            return;
        };
        if what == "answer" {
            self.step
                .mark(super::step::fact::DELEGATED)
                .delegated
                .push(f.info.frame_id);
        }
        let lenient = f.lenient;
        // A workflow agent's answer is its summary, judged by the workflow's checks.
        let Some(b) = f.batch.as_deref_mut() else {
            return;
        };
        let policy = b.policy;
        let problem = match (what, b.due.take()) {
            ("summary request", Some(Due::Summary)) => {
                b.asked = true;
                None
            }
            ("answer", Some(Due::Answer(want))) if same_text(&want, text) => {
                b.answer = Some(want);
                None
            }
            ("answer", None) if watched || lenient => None,
            ("answer", Some(Due::Answer(want))) => Some(format!(
                "{frame} ({policy:?}) answered {text:?}, but its answer is {want:?}"
            )),
            ("answer", Some(Due::Summary)) => Some(format!(
                "{frame} ({policy:?}) answered {text:?}, but it never said anything and was never asked for a summary: it must be asked for one"
            )),
            ("summary request", Some(Due::Answer(want))) => Some(format!(
                "{frame} ({policy:?}) was asked for a summary, but its answer is {want:?}"
            )),
            (what, None) => Some(format!(
                "{frame} ({policy:?}) got a {what} {text:?}, but no reply of it ended its send"
            )),
            (what, Some(_)) => Some(format!("{frame} got an unknown delegation {what:?}")),
        };
        if let Some(m) = problem {
            self.defer(names::BATCH_ANSWER, m);
        }
    }

    /// The end-of-step check: every batch child whose reply ended its send in this step and is
    /// still on its stack was answered or asked for a summary.
    pub(super) fn batch_checks(&self, due: &[(usize, Uuid)]) -> Result<(), super::Violation> {
        for (k, id) in due {
            let Some(f) = self.keys[*k]
                .frames
                .iter()
                .rev()
                .find(|f| f.info.frame_id == *id)
            else {
                continue;
            };
            if let Some(pending) = f.batch.as_deref().and_then(BatchModel::pending) {
                return Err(super::violation(
                    names::BATCH_ANSWER,
                    format!(
                        "{}'s reply ended its send, but the step ended with nothing done: it was due {pending}",
                        f.info.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Option<Arc<str>> {
        Some(s.into())
    }

    #[test]
    fn a_non_blank_final_text_is_the_answer_under_every_policy() {
        for policy in [
            EmptyAnswer::AcceptEmpty,
            EmptyAnswer::ExtractFromConversation,
            EmptyAnswer::AskForSummary,
        ] {
            let mut b = BatchModel::new(policy);
            assert!(!b.on_reply(t("working"), false));
            assert!(b.on_reply(t("found it"), true));
            assert_eq!(b.due, Some(Due::Answer("found it".into())));
        }
    }

    #[test]
    fn a_blank_final_text_follows_the_policy() {
        // accept_empty keeps the blank text as it is.
        let mut b = BatchModel::new(EmptyAnswer::AcceptEmpty);
        b.on_reply(t("earlier"), false);
        b.on_reply(t("  "), true);
        assert_eq!(b.due, Some(Due::Answer("  ".into())));
        // extract_from_conversation takes the latest non-blank text, or the blank text.
        let mut b = BatchModel::new(EmptyAnswer::ExtractFromConversation);
        b.on_reply(t("first"), false);
        b.on_reply(t("second"), false);
        b.on_reply(t(" "), false);
        b.on_reply(None, true);
        assert_eq!(b.due, Some(Due::Answer("second".into())));
        let mut b = BatchModel::new(EmptyAnswer::ExtractFromConversation);
        b.on_reply(None, true);
        assert_eq!(b.due, Some(Due::Answer("".into())));
        // ask_for_summary asks once when there is nothing to extract, then gives up.
        let mut b = BatchModel::new(EmptyAnswer::AskForSummary);
        b.on_reply(None, true);
        assert_eq!(b.due.take(), Some(Due::Summary));
        b.asked = true;
        b.on_reply(t(""), true);
        assert_eq!(b.due, Some(Due::Answer("".into())));
        let mut b = BatchModel::new(EmptyAnswer::AskForSummary);
        b.on_reply(t("said"), false);
        b.on_reply(None, true);
        assert_eq!(b.due, Some(Due::Answer("said".into())));
    }
}
