//! Seed 003's async sessions in the simulation: triggers, answers through the store of async
//! sessions (the simulation's database, which a restart of the runtime keeps), and the simulated
//! endpoint of questions' callbacks, whose attempts are played out in virtual time when a question
//! opens.

use std::fmt;
use std::sync::Arc;

use crate::agents::session::CallbackReply;
use crate::protocol::Input;

use super::{Entry, Note, Record, RunError, Sim};

/// The simulated endpoint of questions' callbacks (seed 003's B20): what it replies, and the
/// callbacks sent so far.
#[derive(Clone, Debug, Default)]
pub(super) struct Callbacks {
    pub(super) replies: std::collections::VecDeque<CallbackReply>,
    pub(super) sent: Vec<SentCallback>,
}

/// A question's callback as the simulator played it: every attempt in virtual time. Nothing in
/// the runtime waits for a callback, so its attempts are played out when the question opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentCallback {
    /// The session.
    pub session: uuid::Uuid,
    /// The question.
    pub question: uuid::Uuid,
    /// The agent that asked.
    pub agent: Arc<str>,
    /// Where it went.
    pub url: Arc<str>,
    /// The body posted (the same on every attempt).
    pub body: serde_json::Value,
    /// Each attempt's start (ms after the question opened) and what it got.
    pub attempts: Vec<(u64, CallbackReply)>,
}

impl SentCallback {
    /// `agent → url: refused at +0ms, delivered at +1000ms` (each attempt's start after the
    /// question opened).
    pub fn timeline(&self) -> String {
        let attempts: Vec<String> = self
            .attempts
            .iter()
            .map(|(at, reply)| format!("{reply} at +{at}ms"))
            .collect();
        let end = if self.delivered() { "" } else { ", gave up" };
        format!(
            "{} → {}: {}{end}",
            self.agent,
            self.url,
            attempts.join(", ")
        )
    }

    /// Whether an attempt delivered it.
    pub fn delivered(&self) -> bool {
        self.attempts.last().is_some_and(|a| a.1.delivered())
    }
}

impl fmt::Display for SentCallback {
    /// `agent → url: refused, 500, delivered` (`…, gave up` when no attempt delivered it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} → {}: ", self.agent, self.url)?;
        for (n, (_, reply)) in self.attempts.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{reply}")?;
        }
        if !self.delivered() {
            f.write_str(", gave up")?;
        }
        Ok(())
    }
}

/// The answer URL's base in callbacks the simulator sends.
pub const SIM_PUBLIC_URL: &str = "http://agentsim.sim";

impl Sim {
    /// A webhook triggers a session of `agent` with `payload` (seed 003).
    pub fn trigger(&mut self, agent: &str, payload: serde_json::Value) -> Result<(), RunError> {
        self.feed(Input::Trigger {
            agent: agent.into(),
            payload,
        })
    }

    /// Someone answers question `question` of session `session` through the store (seed 003's
    /// `POST /agent/answer/{session}`): the first answer is stored and resumes the agent; a
    /// duplicate, or an answer to an unknown, completed or failed session, changes nothing and
    /// is noted.
    pub(crate) fn answer_async(
        &mut self,
        session: uuid::Uuid,
        question: uuid::Uuid,
        text: &str,
    ) -> Result<(), RunError> {
        use crate::store::questions::{Answered, QuestionStore, StoreError};
        let now = self.clock.now();
        let outcome = self
            .store
            .answer(&session.to_string(), &question.to_string(), text, now);
        let refused = match outcome {
            Ok(Answered::Resumed) => None,
            Ok(Answered::DuplicateIgnored) => Some("duplicate_ignored"),
            Err(StoreError::NotFound(_)) => Some("not_found"),
            Err(e) => return Err(RunError::Store(e.to_string())),
        };
        match refused {
            None => self.answer(question, text),
            Some(outcome) => {
                if self.record || self.observer.is_some() {
                    self.records.push(Record {
                        t_ms: now,
                        step: self.steps,
                        entry: Entry::Sim(Note::AsyncAnswer { question, outcome }),
                    });
                }
                Ok(())
            }
        }
    }

    /// The store of async sessions.
    pub fn store(&self) -> &crate::store::MemoryQuestions {
        &self.store
    }

    /// The async sessions in the order they started, each with its questions in the order asked.
    pub fn sessions(&self) -> &[(uuid::Uuid, Vec<uuid::Uuid>)] {
        &self.sessions
    }

    /// The questions' callbacks sent so far, in order (seed 003's B20).
    pub fn callbacks(&self) -> &[SentCallback] {
        &self.callbacks.sent
    }
}

/// Records what the runtime told the store of async sessions, and the order of sessions and
/// their questions (which `async_answer` steps count by).
pub(super) fn apply_session(
    store: &mut crate::store::MemoryQuestions,
    sessions: &mut Vec<(uuid::Uuid, Vec<uuid::Uuid>)>,
    callbacks: &mut Callbacks,
    policy: &crate::agents::session::CallbackPolicy,
    notes: &mut Vec<Note>,
    op: crate::protocol::SessionOp,
    now: u64,
) -> Result<(), crate::store::questions::StoreError> {
    use crate::protocol::SessionOp;
    crate::store::questions::record(store, &op, now)?;
    match op {
        SessionOp::Started { session, .. } => sessions.push((session, Vec::new())),
        SessionOp::Asked {
            session,
            question,
            text,
            context,
            agent,
            callback,
        } => {
            if let Some((_, asked)) = sessions.iter_mut().find(|(s, _)| *s == session) {
                asked.push(question);
            }
            if let Some(url) = callback {
                let replies = &mut callbacks.replies;
                let attempts = crate::agents::session::callback_attempts(policy, || {
                    replies.pop_front().unwrap_or(CallbackReply::Status(200))
                });
                let sent = SentCallback {
                    session,
                    question,
                    body: crate::agents::session::callback_body(
                        session,
                        &agent,
                        question,
                        &text,
                        context.as_deref(),
                        SIM_PUBLIC_URL,
                    ),
                    agent,
                    url,
                    attempts,
                };
                notes.push(Note::Callback {
                    summary: sent.timeline(),
                });
                callbacks.sent.push(sent);
            }
        }
        SessionOp::TimedOut { .. } | SessionOp::Withdrawn { .. } | SessionOp::Ended { .. } => {}
    }
    Ok(())
}
