//! The observer's own model of seed 003's async sessions (`session-lifecycle`), from the events
//! only: a session starts `running` when a trigger starts it; a question moves it to
//! `pending_input` (one at a time); an accepted answer or a default answer moves it back; a
//! question that times out under the `fail` policy fails it; its end completes or fails it, once.
//! `completed` and `failed` are absorbing. After every step, each session the step touched must
//! agree with the runtime (a session the model has ended is ended in the runtime, and the other
//! way round).

use std::sync::Arc;

use smallvec::SmallVec;

use super::{names, violation, Violation};
use crate::model::hash::FxHashMap;
use crate::runtime::Runtime;

/// A session's status as its events tell it (the store's lifecycle, seen from the observer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SessionStatus {
    Running,
    PendingInput,
    Completed,
    Failed,
}

impl SessionStatus {
    fn is_terminal(self) -> bool {
        matches!(self, SessionStatus::Completed | SessionStatus::Failed)
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SessionStatus::Running => "running",
            SessionStatus::PendingInput => "pending_input",
            SessionStatus::Completed => "completed",
            SessionStatus::Failed => "failed",
        })
    }
}

/// What the observer knows of the async sessions.
#[derive(Clone, Debug, Default)]
pub(super) struct SessionModel {
    /// Every session the events started, by key (looked up, never iterated into output).
    sessions: FxHashMap<Arc<str>, SessionStatus>,
    /// Each session's agent and when it started.
    started: FxHashMap<Arc<str>, (Arc<str>, u64)>,
    /// The agent that asked each session's latest question: its definition's name and its id.
    asker: FxHashMap<Arc<str>, (Arc<str>, uuid::Uuid)>,
    /// Sessions whose asking agent left its stack while its question was open, in this step:
    /// they must have failed by the step's end (nobody would take the answer).
    orphaned: SmallVec<[Arc<str>; 1]>,
    /// Each open question's session and the time by which it must be settled (answered, timed
    /// out, or failing its session): its agent's `question_timeout` (else the settings'), or
    /// its session's expiry if that comes first.
    due: SmallVec<[(Arc<str>, u64); 1]>,
    /// Sessions the current step touched.
    touched: SmallVec<[Arc<str>; 1]>,
    /// The trigger the current step's input carried: its agent, and whether the definitions
    /// declare it (then it must start a session in the step; else it must be refused).
    trigger: Option<(Arc<str>, bool)>,
    /// Sessions whose main frame left its stack in the current step: whether it answered, and
    /// whether the session had failed before (it must be over by the step's end: completed when
    /// its agent answered, failed otherwise).
    left: SmallVec<[(Arc<str>, bool, bool); 1]>,
    /// Something above is for the end of a step to look at: set with every addition, and
    /// recomputed after each look (so that a step with nothing costs one test, not five).
    pending: bool,
}

impl SessionModel {
    fn moved(
        &mut self,
        key: &Arc<str>,
        what: &str,
        from: &[SessionStatus],
        to: SessionStatus,
    ) -> Result<(), Violation> {
        let Some(status) = self.sessions.get_mut(key) else {
            return Ok(()); // Not a session: a user's conversation.
        };
        if !from.contains(status) {
            return Err(violation(
                names::SESSION_LIFECYCLE,
                format!("session {key}: {what} while it was {status}"),
            ));
        }
        *status = to;
        if to != SessionStatus::PendingInput {
            self.due.retain(|(k, _)| k != key);
        }
        if !self.touched.contains(key) {
            self.touched.push(key.clone());
            self.pending = true;
        }
        Ok(())
    }

    /// A trigger started the session `key` of `agent` at `now`.
    pub(super) fn on_started(
        &mut self,
        key: &Arc<str>,
        agent: &Arc<str>,
        now: u64,
    ) -> Result<(), Violation> {
        if self.sessions.contains_key(key) {
            return Err(violation(
                names::SESSION_LIFECYCLE,
                format!("session {key} was started twice"),
            ));
        }
        self.sessions.insert(key.clone(), SessionStatus::Running);
        self.started.insert(key.clone(), (agent.clone(), now));
        self.touched.push(key.clone());
        self.pending = true;
        Ok(())
    }

    /// Frame `frame` of conversation `key` asked a question (at `rt`'s time): in a session, it
    /// must be settled by its deadline, read from the asking agent's definition and the
    /// settings.
    pub(super) fn on_question(
        &mut self,
        key: &Arc<str>,
        frame: &str,
        agent_id: uuid::Uuid,
        rt: &Runtime,
    ) -> Result<(), Violation> {
        use SessionStatus::*;
        self.moved(key, "a question opened", &[Running], PendingInput)?;
        let Some((agent, started)) = self.started.get(key) else {
            return Ok(()); // Not a session.
        };
        // The session's own agent runs as `main`; a child by its kind and name.
        let name = match frame {
            "main" => &**agent,
            _ => frame.split_once(':').map_or(frame, |(_, name)| name),
        };
        self.asker.insert(key.clone(), (name.into(), agent_id));
        let config = rt.config();
        let timeout = rt
            .catalog()
            .get(name)
            .and_then(|def| def.async_questions.as_ref())
            .map_or(config.question_timeout_ms, |a| {
                a.timeout_ms.unwrap_or(config.question_timeout_ms)
            });
        let mut deadline = rt.now().saturating_add(timeout);
        if let Some(expiry) = config.session_expiry_ms {
            // A question asked past its session's expiry is settled at once.
            deadline = deadline.min(started.saturating_add(expiry).max(rt.now()));
        }
        self.due.push((key.clone(), deadline));
        self.pending = true;
        Ok(())
    }

    /// The step's input is a trigger of `agent`, which the definitions declare or not.
    pub(super) fn on_trigger_input(&mut self, agent: &Arc<str>, declared: bool) {
        self.trigger = Some((agent.clone(), declared));
        self.pending = true;
    }

    /// The runtime's answer to a trigger of `agent`: whether it started a session.
    pub(super) fn on_triggered(
        &mut self,
        agent: &Arc<str>,
        started: bool,
    ) -> Result<(), Violation> {
        match self.trigger.take() {
            Some((want, declared)) if want == *agent && declared == started => Ok(()),
            Some((want, declared)) => Err(violation(
                names::SESSION_LIFECYCLE,
                format!(
                    "a trigger of {want} ({}) was answered as a trigger of {agent} that {}",
                    if declared {
                        "a declared agent"
                    } else {
                        "no such agent"
                    },
                    if started {
                        "started a session"
                    } else {
                        "started none"
                    }
                ),
            )),
            // A driver that calls `Runtime::trigger` itself tells the observer nothing first.
            None => Ok(()),
        }
    }

    /// Frame `agent` of conversation `key` left its stack: if it asked the session's open
    /// question, the session must fail in the step.
    #[inline]
    pub(super) fn on_left(&mut self, key: &Arc<str>, agent: uuid::Uuid) {
        if self.asker.is_empty() {
            return;
        }
        let pending = self.sessions.get(key) == Some(&SessionStatus::PendingInput);
        if pending && self.asker.get(key).is_some_and(|(_, id)| *id == agent) {
            self.orphaned.push(key.clone());
            self.pending = true;
        }
    }

    /// The main frame of conversation `key` left its stack for `reason`: a session's ends with
    /// it (a cancel word aside, which no session is sent).
    pub(super) fn on_main_left(&mut self, key: &Arc<str>, reason: crate::protocol::PopReason) {
        use crate::protocol::PopReason as R;
        let Some(status) = self.sessions.get(key) else {
            return;
        };
        if reason != R::Cancelled {
            let failed = *status == SessionStatus::Failed;
            self.left.push((key.clone(), reason == R::Answered, failed));
            self.pending = true;
        }
    }

    /// A question of conversation `key` was answered (by its id).
    pub(super) fn on_answer(&mut self, key: &Arc<str>) -> Result<(), Violation> {
        use SessionStatus::*;
        self.moved(key, "an answer resumed it", &[PendingInput], Running)
    }

    /// The question of session `key` timed out (at `rt`'s time) with `answer`, its session
    /// `expired` or not: both are what the definitions and the settings give. It is answered by
    /// default only under its agent's `default_answer` policy and only before its session's
    /// expiry; it fails its session otherwise.
    pub(super) fn judge_timeout(
        &self,
        key: &Arc<str>,
        answer: Option<&Arc<str>>,
        expired: bool,
        rt: &Runtime,
    ) -> Result<(), Violation> {
        use crate::model::agent::OnTimeout;
        let (Some((_, started)), Some((agent, _))) = (self.started.get(key), self.asker.get(key))
        else {
            return Ok(());
        };
        let now = rt.now();
        let past_expiry = rt
            .config()
            .session_expiry_ms
            .is_some_and(|e| now >= started.saturating_add(e));
        let policy = rt
            .catalog()
            .get(agent)
            .and_then(|d| d.async_questions.as_ref())
            .map(|a| &a.on_timeout);
        let want = match policy {
            Some(OnTimeout::DefaultAnswer(text)) if !past_expiry => Some(text),
            _ => None,
        };
        if expired == past_expiry && want == answer {
            return Ok(());
        }
        let told = |e: bool| if e { "expired" } else { "not expired" };
        Err(violation(
            names::SESSION_LIFECYCLE,
            format!(
                "session {key}: {agent}'s question timed out at {now}ms with the answer {answer:?}, its session {}, but by the definitions it is {want:?}, its session {}",
                told(expired),
                told(past_expiry)
            ),
        ))
    }

    /// A question of conversation `key` timed out, answered by default or failing the session.
    pub(super) fn on_timed_out(&mut self, key: &Arc<str>, answered: bool) -> Result<(), Violation> {
        use SessionStatus::*;
        let to = if answered { Running } else { Failed };
        self.moved(key, "a question timed out", &[PendingInput], to)
    }

    /// The agent waiting for an answer in session `key` left: the session failed.
    pub(super) fn on_withdrawn(&mut self, key: &Arc<str>) -> Result<(), Violation> {
        use SessionStatus::*;
        self.moved(key, "its question was withdrawn", &[PendingInput], Failed)
    }

    /// The session `key` ended: completed only from running; failed also while it waited (its
    /// agent was deleted or cancelled while asking).
    pub(super) fn on_ended(&mut self, key: &Arc<str>, completed: bool) -> Result<(), Violation> {
        use SessionStatus::*;
        if completed {
            self.moved(key, "it completed", &[Running], Completed)
        } else {
            self.moved(key, "it failed", &[Running, PendingInput], Failed)
        }
    }

    /// Each session the step touched agrees with the runtime, and no question is open past its
    /// deadline (its timeout is the runtime's to keep, whatever else happens).
    #[inline]
    pub(super) fn end_of_step(&mut self, rt: &Runtime) -> Result<(), Violation> {
        debug_assert!(
            self.pending || self.is_clear(),
            "a session fact without `pending`"
        );
        if !self.pending {
            return Ok(());
        }
        let checked = self.check_end(rt);
        self.pending = !self.is_clear();
        checked
    }

    /// Nothing is left for the end of a step to look at.
    fn is_clear(&self) -> bool {
        self.due.is_empty()
            && self.touched.is_empty()
            && self.trigger.is_none()
            && self.left.is_empty()
            && self.orphaned.is_empty()
    }

    #[inline(never)]
    fn check_end(&mut self, rt: &Runtime) -> Result<(), Violation> {
        if let Some((agent, declared)) = self.trigger.take() {
            return Err(violation(
                names::SESSION_LIFECYCLE,
                format!(
                    "a trigger of {agent} ({}) was neither started nor refused in its step",
                    if declared {
                        "a declared agent"
                    } else {
                        "no such agent"
                    }
                ),
            ));
        }
        for key in std::mem::take(&mut self.orphaned) {
            let status = self.sessions[&key];
            if status != SessionStatus::Failed {
                return Err(violation(
                    names::SESSION_LIFECYCLE,
                    format!("session {key}'s asking agent left its stack with its question open, but the session is {status}, not failed"),
                ));
            }
        }
        for (key, answered, failed_before) in std::mem::take(&mut self.left) {
            let status = self.sessions[&key];
            let right = match status {
                SessionStatus::Completed => answered,
                SessionStatus::Failed => !answered || failed_before,
                SessionStatus::Running | SessionStatus::PendingInput => false,
            };
            if !right {
                return Err(violation(
                    names::SESSION_LIFECYCLE,
                    format!(
                        "session {key}'s agent left its stack {}, but the session is {status}",
                        if answered { "answering" } else { "failing" }
                    ),
                ));
            }
        }
        if let Some((key, deadline)) = self.due.iter().find(|(_, at)| *at < rt.now()) {
            return Err(violation(
                names::SESSION_LIFECYCLE,
                format!(
                    "session {key}: its question is still open at {}ms, past its deadline of {deadline}ms",
                    rt.now()
                ),
            ));
        }
        if self.touched.is_empty() {
            return Ok(());
        }
        for key in std::mem::take(&mut self.touched) {
            let status = self.sessions[&key];
            let Some(session) = rt.stacks().get(&key).and_then(|e| e.session.as_deref()) else {
                return Err(violation(
                    names::SESSION_LIFECYCLE,
                    format!("session {key} is {status} by its events, but the runtime has no such session"),
                ));
            };
            // The runtime keeps a failed session's agent running to its end, and marks it failed.
            let over = status.is_terminal();
            let runtime_over = session.ended || session.failed;
            if over != runtime_over {
                return Err(violation(
                    names::SESSION_LIFECYCLE,
                    format!(
                        "session {key} is {status} by its events, but the runtime has it {}",
                        if runtime_over { "over" } else { "still going" }
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

    /// A runtime whose agent `poet` asks asynchronously, its questions waiting a minute, at time
    /// 0.
    fn runtime() -> Runtime {
        use crate::model::agent::{AgentDef, AgentKind, AsyncQuestions, Catalog, OnTimeout};
        let mut catalog = Catalog::default();
        catalog.add(AgentDef::new("main", AgentKind::Main));
        let mut poet = AgentDef::new("poet", AgentKind::Agent);
        poet.async_questions = Some(AsyncQuestions {
            timeout_ms: Some(60_000),
            on_timeout: OnTimeout::Fail,
            callback: None,
        });
        catalog.add(poet);
        Runtime::new(Arc::new(catalog), crate::runtime::RuntimeConfig::default())
    }

    #[test]
    fn a_question_open_past_its_deadline_breaks_the_invariant() {
        let mut rt = runtime();
        let (key, agent): (Arc<str>, Arc<str>) = ("s1".into(), "poet".into());
        let mut m = SessionModel::default();
        m.on_started(&key, &agent, 0).unwrap();
        m.on_question(&key, "main", uuid::Uuid::nil(), &rt).unwrap();
        // The model's own session is not the runtime's: only the deadline is judged here.
        m.touched.clear();
        rt.set_now(60_000);
        m.end_of_step(&rt).unwrap();
        rt.set_now(60_001);
        let v = m.end_of_step(&rt).unwrap_err();
        assert!(v.message.contains("past its deadline of 60000ms"), "{v:?}");
        // Settled in time (a default answer at the deadline): nothing is due.
        let mut m = SessionModel::default();
        rt.set_now(0);
        m.on_started(&key, &agent, 0).unwrap();
        m.on_question(&key, "main", uuid::Uuid::nil(), &rt).unwrap();
        m.on_timed_out(&key, true).unwrap();
        m.touched.clear();
        rt.set_now(120_000);
        m.end_of_step(&rt).unwrap();
    }

    #[test]
    fn the_lifecycle_allows_only_its_moves() {
        let rt = runtime();
        let agent: Arc<str> = "poet".into();
        let mut m = SessionModel::default();
        let key: Arc<str> = "s1".into();
        let user: Arc<str> = "default".into();
        // A user's conversation is not a session: its questions change nothing.
        m.on_question(&user, "main", uuid::Uuid::nil(), &rt)
            .unwrap();
        m.on_started(&key, &agent, 0).unwrap();
        assert!(m.on_started(&key, &agent, 0).is_err(), "started twice");
        let mut m2 = m.clone();
        assert!(
            m2.on_answer(&key).is_err(),
            "an answer with no question open"
        );
        m.on_question(&key, "main", uuid::Uuid::nil(), &rt).unwrap();
        let mut m3 = m.clone();
        let v = m3
            .on_question(&key, "main", uuid::Uuid::nil(), &rt)
            .unwrap_err();
        assert_eq!(
            v.invariant,
            names::SESSION_LIFECYCLE,
            "two questions at once"
        );
        m.on_answer(&key).unwrap();
        m.on_question(&key, "main", uuid::Uuid::nil(), &rt).unwrap();
        m.on_timed_out(&key, false).unwrap();
        // Failed is absorbing: its agent's end changes nothing more.
        assert!(m.on_ended(&key, true).is_err());
        assert!(m.on_answer(&key).is_err());
    }

    #[test]
    fn a_waiting_session_may_fail_but_never_complete() {
        let rt = runtime();
        let agent: Arc<str> = "poet".into();
        let key: Arc<str> = "s1".into();
        let mut m = SessionModel::default();
        m.on_started(&key, &agent, 0).unwrap();
        assert!(
            m.on_withdrawn(&key).is_err(),
            "no question open to withdraw"
        );
        m.on_question(&key, "main", uuid::Uuid::nil(), &rt).unwrap();
        let mut completed = m.clone();
        let v = completed.on_ended(&key, true).unwrap_err();
        assert!(
            v.message.contains("completed while it was pending_input"),
            "{v:?}"
        );
        // Its asking main agent deleted: it fails.
        m.clone().on_ended(&key, false).unwrap();
        // Its asking child deleted: it fails, and what its agent does next changes nothing.
        m.on_withdrawn(&key).unwrap();
        assert!(m.on_ended(&key, true).is_err());
        assert!(m.on_question(&key, "main", uuid::Uuid::nil(), &rt).is_err());
    }

    #[test]
    fn a_trigger_starts_a_session_of_a_declared_agent_and_none_of_another_in_its_step() {
        let rt = runtime();
        let (poet, ghost): (Arc<str>, Arc<str>) = ("poet".into(), "ghost".into());
        let mut m = SessionModel::default();
        m.on_trigger_input(&poet, true);
        m.on_triggered(&poet, true).unwrap();
        m.on_trigger_input(&ghost, false);
        m.on_triggered(&ghost, false).unwrap();
        m.end_of_step(&rt).unwrap();
        // Refused although declared, or started although not.
        m.on_trigger_input(&poet, true);
        assert!(m.on_triggered(&poet, false).is_err());
        m.on_trigger_input(&ghost, false);
        assert!(m.on_triggered(&ghost, true).is_err());
        // Answered for another agent.
        m.on_trigger_input(&poet, true);
        assert!(m.on_triggered(&ghost, true).is_err());
        // Nothing done with it by the step's end.
        m.on_trigger_input(&poet, true);
        let v = m.end_of_step(&rt).unwrap_err();
        assert!(v.message.contains("neither started nor refused"), "{v:?}");
    }

    #[test]
    fn a_session_ends_with_its_agent_completed_when_it_answered_failed_otherwise() {
        use crate::protocol::PopReason;
        let rt = runtime();
        let (key, agent): (Arc<str>, Arc<str>) = ("s1".into(), "poet".into());
        let started = || {
            let mut m = SessionModel::default();
            m.on_started(&key, &agent, 0).unwrap();
            m
        };
        // Its agent answered, and the session completed in the step: sound.
        let mut m = started();
        m.on_main_left(&key, PopReason::Answered);
        m.on_ended(&key, true).unwrap();
        m.touched.clear();
        m.end_of_step(&rt).unwrap();
        // Its agent answered, but the session goes on.
        let mut m = started();
        m.touched.clear();
        m.on_main_left(&key, PopReason::Answered);
        let v = m.end_of_step(&rt).unwrap_err();
        assert!(v.message.contains("left its stack answering"), "{v:?}");
        // Its agent failed, but the session completed.
        let mut m = started();
        m.on_main_left(&key, PopReason::Error);
        m.on_ended(&key, true).unwrap();
        m.touched.clear();
        assert!(m.end_of_step(&rt).is_err());
        // A session failed earlier (its question timed out) stays failed when its agent answers.
        let mut m = started();
        m.on_question(&key, "main", uuid::Uuid::nil(), &rt).unwrap();
        m.on_timed_out(&key, false).unwrap();
        m.on_main_left(&key, PopReason::Answered);
        m.touched.clear();
        m.end_of_step(&rt).unwrap();
        // A user's conversation is no session: its main frame leaves as it may.
        let mut m = SessionModel::default();
        m.on_main_left(&"default".into(), PopReason::Answered);
        m.end_of_step(&rt).unwrap();
    }

    #[test]
    fn a_timed_out_question_is_answered_by_default_only_by_its_policy_and_before_expiry() {
        use crate::model::agent::{AgentDef, AgentKind, AsyncQuestions, Catalog, OnTimeout};
        let mut catalog = Catalog::default();
        let mut patient = AgentDef::new("patient", AgentKind::Agent);
        patient.async_questions = Some(AsyncQuestions {
            timeout_ms: Some(60_000),
            on_timeout: OnTimeout::DefaultAnswer("go ahead".into()),
            callback: None,
        });
        catalog.add(patient);
        let config = crate::runtime::RuntimeConfig {
            session_expiry_ms: Some(100_000),
            ..Default::default()
        };
        let mut rt = Runtime::new(Arc::new(catalog), config);
        let key: Arc<str> = "s1".into();
        let asked = |agent: &str, rt: &Runtime| {
            let mut m = SessionModel::default();
            m.on_started(&key, &agent.into(), 0).unwrap();
            m.on_question(&key, "main", uuid::Uuid::nil(), rt).unwrap();
            m
        };
        let default: Arc<str> = "go ahead".into();
        // Before the expiry: its default answer, and nothing else.
        rt.set_now(60_000);
        let m = asked("patient", &rt);
        m.judge_timeout(&key, Some(&default), false, &rt).unwrap();
        assert!(m.judge_timeout(&key, None, false, &rt).is_err());
        assert!(m
            .judge_timeout(&key, Some(&"yes".into()), false, &rt)
            .is_err());
        assert!(m.judge_timeout(&key, Some(&default), true, &rt).is_err());
        // At the expiry: the session fails, whatever the policy.
        rt.set_now(100_000);
        m.judge_timeout(&key, None, true, &rt).unwrap();
        assert!(m.judge_timeout(&key, Some(&default), true, &rt).is_err());
        assert!(m.judge_timeout(&key, None, false, &rt).is_err());
        // Under the `fail` policy (poet's, from `runtime()`'s definitions): no answer.
        let mut rt = runtime();
        rt.set_now(60_000);
        let m = asked("poet", &rt);
        m.judge_timeout(&key, None, false, &rt).unwrap();
        assert!(m.judge_timeout(&key, Some(&default), false, &rt).is_err());
    }

    #[test]
    fn a_session_whose_asking_agent_leaves_with_its_question_open_fails() {
        let rt = runtime();
        let (key, agent): (Arc<str>, Arc<str>) = ("s1".into(), "poet".into());
        let (asker, other) = (uuid::Uuid::from_u128(7), uuid::Uuid::from_u128(8));
        let asked = || {
            let mut m = SessionModel::default();
            m.on_started(&key, &agent, 0).unwrap();
            m.on_question(&key, "agent:poet", asker, &rt).unwrap();
            m.touched.clear();
            m
        };
        // Another agent leaves: nothing is due.
        let mut m = asked();
        m.on_left(&key, other);
        m.end_of_step(&rt).unwrap();
        // The asker leaves and its question is withdrawn: the session failed, as it must.
        let mut m = asked();
        m.on_withdrawn(&key).unwrap();
        m.on_left(&key, asker);
        m.touched.clear();
        m.end_of_step(&rt).unwrap();
        // The asker leaves and the session still waits for an answer nobody would take.
        let mut m = asked();
        m.on_left(&key, asker);
        let v = m.end_of_step(&rt).unwrap_err();
        assert!(v.message.contains("not failed"), "{v:?}");
    }

    #[test]
    fn a_session_the_runtime_does_not_have_breaks_the_invariant() {
        use crate::model::agent::Catalog;
        use crate::runtime::RuntimeConfig;
        let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
        let mut m = SessionModel::default();
        m.on_started(&"s1".into(), &"poet".into(), 0).unwrap();
        let v = m.end_of_step(&rt).unwrap_err();
        assert_eq!(v.invariant, names::SESSION_LIFECYCLE);
    }
}
