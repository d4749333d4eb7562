//! Async questions (seed 003, DESIGN §9): the sessions a trigger starts and the questions their
//! agents ask, behind one trait with two implementations: [`MemoryQuestions`] for fast
//! simulation and `SqliteQuestions` (feature `sqlite`) holding exactly the seed's
//! `agent_sessions` and `agent_questions` tables and indexes. `tests/question_store.rs` runs one
//! conformance suite against both.
//!
//! The rules every implementation keeps (requirements B14 to B19, B23):
//!
//! - a session goes `running → pending_input → running → completed | failed`, or
//!   `pending_input → failed` (a timeout); `completed` and `failed` are absorbing; any other
//!   transition is refused, never applied;
//! - a question opens only on a running session with no open question (sequential questions),
//!   and moves the session to `pending_input` in the same operation;
//! - the first answer wins: it is stored with its time and the session goes back to `running`,
//!   in one operation, before the call returns; another answer to the same question changes
//!   nothing and says so (`DuplicateIgnored`); an unknown session, a completed or failed one, or
//!   a question of another session is `NotFound`;
//! - pending questions are listed in creation order, with their session's agent.
//!
//! Times are the driver's milliseconds (virtual in the simulator), kept as UTC timestamps.

use std::fmt;

/// A session's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionStatus {
    /// The agent runs.
    Running,
    /// The agent waits for an answer.
    PendingInput,
    /// It finished.
    Completed,
    /// It failed (or its question timed out).
    Failed,
}

impl SessionStatus {
    /// The name stored in the table (`running`, `pending_input`, `completed`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Running => "running",
            SessionStatus::PendingInput => "pending_input",
            SessionStatus::Completed => "completed",
            SessionStatus::Failed => "failed",
        }
    }

    /// The status named `s`.
    pub fn parse(s: &str) -> Option<SessionStatus> {
        [
            SessionStatus::Running,
            SessionStatus::PendingInput,
            SessionStatus::Completed,
            SessionStatus::Failed,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    /// Whether the session has ended (absorbing).
    pub fn is_terminal(self) -> bool {
        matches!(self, SessionStatus::Completed | SessionStatus::Failed)
    }

    /// Whether `self → to` is a transition the lifecycle allows (B14).
    pub(crate) fn may_become(self, to: SessionStatus) -> bool {
        use SessionStatus::*;
        matches!(
            (self, to),
            (Running, PendingInput)
                | (PendingInput, Running)
                | (Running, Completed)
                | (Running, Failed)
                | (PendingInput, Failed)
        )
    }
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row of `agent_sessions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    /// The session id (a uuid).
    pub id: String,
    /// The agent it runs.
    pub agent_name: String,
    /// Its status.
    pub status: SessionStatus,
    /// The trigger's payload, as JSON text.
    pub original_payload: String,
    /// The agent's saved state for resumption, as JSON text.
    pub execution_state: Option<String>,
    /// When it was created, in ms.
    pub created_at: u64,
    /// When it last changed, in ms.
    pub updated_at: u64,
}

/// A row of `agent_questions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuestionRow {
    /// The question id.
    pub id: String,
    /// Its session.
    pub session_id: String,
    /// The question.
    pub question: String,
    /// More context, as JSON text.
    pub context: Option<String>,
    /// The answer, once there is one.
    pub answer: Option<String>,
    /// When it was answered, in ms.
    pub answered_at: Option<u64>,
    /// When it was asked, in ms.
    pub created_at: u64,
}

/// A question waiting for its answer, with its session's agent (B15).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingQuestion {
    /// The question.
    pub question: QuestionRow,
    /// The agent that asked it.
    pub agent_name: String,
}

/// What an answer did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// It was the first: stored, and the session runs again.
    Resumed,
    /// The question already had its answer: nothing changed.
    DuplicateIgnored,
}

/// Why a store operation was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// No such session (or no such question in it), or the session has ended.
    NotFound(String),
    /// A transition the lifecycle does not allow.
    Illegal {
        /// The session.
        session: String,
        /// Its status.
        from: SessionStatus,
        /// The status asked for.
        to: SessionStatus,
    },
    /// The operation contradicts what is stored (an id taken, a question already open).
    Conflict(String),
    /// What is stored cannot be read as the seed's tables.
    Corrupt(String),
    /// The storage itself failed.
    Io(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotFound(what) => write!(f, "not found: {what}"),
            StoreError::Illegal { session, from, to } => write!(
                f,
                "session {session}: {from} cannot become {to} (allowed: running → pending_input → running → completed | failed, pending_input → failed)"
            ),
            StoreError::Conflict(what) => write!(f, "conflict: {what}"),
            StoreError::Corrupt(what) => write!(f, "corrupt store: {what}"),
            StoreError::Io(what) => write!(f, "store failure: {what}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A question to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewQuestion {
    /// Its id.
    pub id: String,
    /// Its session.
    pub session_id: String,
    /// The question.
    pub question: String,
    /// More context, as JSON text.
    pub context: Option<String>,
}

/// A question's callback to deliver (the outbox): stored with its question, in the same
/// operation, so that a question is never open without its callback on record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Callback {
    /// The question it announces (also the idempotency key its receiver sees).
    pub question_id: String,
    /// The question's session.
    pub session_id: String,
    /// Where it goes.
    pub url: String,
    /// The body, as JSON text: sent byte for byte the same on every attempt.
    pub body: String,
}

/// What became of a callback: it leaves the outbox either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// A receiver took it (a 2xx reply).
    Delivered,
    /// Its question was answered, or its session ended, before it got through: nobody needs it.
    Obsolete,
}

impl Settled {
    /// The name stored (`delivered`, `obsolete`).
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Delivered => "delivered",
            Settled::Obsolete => "obsolete",
        }
    }
}

/// Where sessions and questions are kept. Every method that changes something has done so
/// durably when it returns `Ok`.
pub trait QuestionStore {
    /// Starts a `running` session.
    fn create_session(
        &mut self,
        id: &str,
        agent_name: &str,
        payload: &str,
        at_ms: u64,
    ) -> Result<(), StoreError>;

    /// A session, if it exists.
    fn session(&self, id: &str) -> Result<Option<SessionRow>, StoreError>;

    /// Moves a session to `to`, if the lifecycle allows it from where it is.
    fn transition(&mut self, id: &str, to: SessionStatus, at_ms: u64) -> Result<(), StoreError>;

    /// Saves the agent's state for resumption.
    fn save_state(&mut self, id: &str, state: &str, at_ms: u64) -> Result<(), StoreError>;

    /// Opens a question on a running session with none open; the session becomes
    /// `pending_input`.
    fn ask(&mut self, question: &NewQuestion, at_ms: u64) -> Result<(), StoreError>;

    /// Opens a question as [`QuestionStore::ask`] does, puts its callback (if any) in the
    /// outbox and saves the session's `execution_state` (if given), in one operation: all or
    /// nothing.
    fn ask_with(
        &mut self,
        question: &NewQuestion,
        callback: Option<&Callback>,
        execution_state: Option<&str>,
        at_ms: u64,
    ) -> Result<(), StoreError>;

    /// The callbacks in the outbox (neither delivered nor obsolete), oldest first.
    fn outbox(&self) -> Result<Vec<Callback>, StoreError>;

    /// Takes a question's callback out of the outbox, saying what became of it.
    fn settle_callback(
        &mut self,
        question_id: &str,
        settled: Settled,
        at_ms: u64,
    ) -> Result<(), StoreError>;

    /// Answers `question_id` of `session_id`: the first answer wins.
    fn answer(
        &mut self,
        session_id: &str,
        question_id: &str,
        answer: &str,
        at_ms: u64,
    ) -> Result<Answered, StoreError>;

    /// The unanswered questions of `pending_input` sessions, in creation order.
    fn pending(&self) -> Result<Vec<PendingQuestion>, StoreError>;

    /// A session's questions, in creation order.
    fn questions(&self, session_id: &str) -> Result<Vec<QuestionRow>, StoreError>;

    /// The sessions that have not ended (`running` or `pending_input`), oldest first.
    fn open_sessions(&self) -> Result<Vec<SessionRow>, StoreError>;

    /// Remembers that the request with the idempotency `key` (a webhook's `Idempotency-Key` or
    /// `X-Event-Id`) started `session_id`, replacing what the key named before. The store keeps
    /// the newest [`WEBHOOK_KEYS_KEPT`] keys and forgets older ones.
    fn remember_key(&mut self, key: &str, session_id: &str, at_ms: u64) -> Result<(), StoreError>;

    /// The session a remembered idempotency key started, if the store still remembers it.
    fn session_of_key(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// Deletes the sessions that ended (`completed` or `failed`) and last changed before
    /// `before_ms`, with their questions, their callbacks and the idempotency keys that name
    /// them (a retention setting); how many sessions went.
    fn purge_ended(&mut self, before_ms: u64) -> Result<usize, StoreError>;

    /// Whether what the store holds outlives the process (a database), or goes with it.
    fn durable(&self) -> bool {
        false
    }
}

/// How many webhook idempotency keys a store remembers (the newest ones): a retry within that
/// many keyed webhooks finds its session, and the store does not grow without bound.
pub const WEBHOOK_KEYS_KEPT: usize = 100_000;

/// Records what a runtime told the store of async sessions (a [`crate::protocol::SessionOp`]) at
/// `now`: the one mapping every driver uses. A session's final text is kept in its
/// `execution_state` as `{"result": ...}` (see [`SessionRow::result`]).
pub fn record(
    store: &mut dyn QuestionStore,
    op: &crate::protocol::SessionOp,
    now: u64,
) -> Result<(), StoreError> {
    use crate::protocol::SessionOp;
    match op {
        SessionOp::Started {
            session,
            agent,
            payload,
        } => store.create_session(&session.to_string(), agent, payload, now),
        SessionOp::Asked {
            session,
            question,
            text,
            context,
            ..
        } => store.ask(
            &NewQuestion {
                id: question.to_string(),
                session_id: session.to_string(),
                question: text.to_string(),
                context: context.as_ref().map(|c| c.to_string()),
            },
            now,
        ),
        SessionOp::TimedOut {
            session,
            question,
            answer: Some(answer),
        } => store
            .answer(&session.to_string(), &question.to_string(), answer, now)
            .map(|_| ()),
        SessionOp::TimedOut { session, .. } | SessionOp::Withdrawn { session, .. } => {
            store.transition(&session.to_string(), SessionStatus::Failed, now)
        }
        SessionOp::Ended {
            session,
            completed,
            result,
        } => {
            let id = session.to_string();
            let state = serde_json::json!({ "result": &**result }).to_string();
            store.save_state(&id, &state, now)?;
            let to = if *completed {
                SessionStatus::Completed
            } else {
                SessionStatus::Failed
            };
            store.transition(&id, to, now)
        }
    }
}

impl SessionRow {
    /// The session's final text, once it ended with one (kept by [`record`]).
    pub fn result(&self) -> Option<String> {
        let state: serde_json::Value =
            serde_json::from_str(self.execution_state.as_deref()?).ok()?;
        state.get("result")?.as_str().map(str::to_owned)
    }

    /// Why the session was abandoned, if it was: a service that could not resume it ended it
    /// as `failed` and kept the reason in its `execution_state` as `{"abandoned": ...}` (see
    /// [`abandon`]).
    pub fn abandoned(&self) -> Option<String> {
        let state: serde_json::Value =
            serde_json::from_str(self.execution_state.as_deref()?).ok()?;
        state.get("abandoned")?.as_str().map(str::to_owned)
    }
}

/// Ends a session that nothing can resume any more: `failed`, with `reason` kept in its
/// `execution_state` as `{"abandoned": reason}`; its open question leaves the pending list and
/// answers to it are refused.
pub fn abandon(
    store: &mut dyn QuestionStore,
    id: &str,
    reason: &str,
    now: u64,
) -> Result<(), StoreError> {
    let state = serde_json::json!({ "abandoned": reason }).to_string();
    store.save_state(id, &state, now)?;
    store.transition(id, SessionStatus::Failed, now)
}

/// The checks shared by every store: what `answer` decides from a session and its question.
pub(crate) fn judge_answer(
    session_id: &str,
    question_id: &str,
    session: Option<&SessionRow>,
    question: Option<&QuestionRow>,
) -> Result<Option<Answered>, StoreError> {
    let Some(session) = session else {
        return Err(StoreError::NotFound(format!("session {session_id}")));
    };
    if session.status.is_terminal() {
        return Err(StoreError::NotFound(format!(
            "session {session_id} has {}",
            session.status
        )));
    }
    let Some(question) = question.filter(|q| q.session_id == session_id) else {
        return Err(StoreError::NotFound(format!(
            "question {question_id} of session {session_id}"
        )));
    };
    if question.answer.is_some() {
        return Ok(Some(Answered::DuplicateIgnored));
    }
    if session.status != SessionStatus::PendingInput {
        return Err(StoreError::Illegal {
            session: session_id.to_owned(),
            from: session.status,
            to: SessionStatus::Running,
        });
    }
    Ok(None)
}

/// Sessions and questions in memory (the simulator's store: fast, exact, gone with the process).
#[derive(Clone, Debug, Default)]
pub struct MemoryQuestions {
    sessions: Vec<SessionRow>,
    questions: Vec<QuestionRow>,
    /// Idempotency keys and their sessions, and the keys oldest first (to forget the oldest).
    keys: std::collections::BTreeMap<String, String>,
    key_order: std::collections::VecDeque<String>,
    /// The callbacks not yet settled, oldest first.
    outbox: Vec<Callback>,
    /// Where each session is in `sessions`, by id.
    session_at: std::collections::BTreeMap<String, usize>,
    /// Where each question is in `questions`, by id.
    question_at: std::collections::BTreeMap<String, usize>,
    /// Each session's questions, as places in `questions`, in creation order.
    by_session: std::collections::BTreeMap<String, Vec<usize>>,
    /// The unanswered questions, as places in `questions` (creation order).
    unanswered: std::collections::BTreeSet<usize>,
}

impl MemoryQuestions {
    /// An empty store.
    pub fn new() -> MemoryQuestions {
        MemoryQuestions::default()
    }

    fn session_mut(&mut self, id: &str) -> Result<&mut SessionRow, StoreError> {
        self.session_at
            .get(id)
            .and_then(|&at| self.sessions.get_mut(at))
            .ok_or_else(|| StoreError::NotFound(format!("session {id}")))
    }

    fn session_ref(&self, id: &str) -> Option<&SessionRow> {
        self.sessions.get(*self.session_at.get(id)?)
    }

    fn question_ref(&self, id: &str) -> Option<&QuestionRow> {
        self.questions.get(*self.question_at.get(id)?)
    }

    /// Rebuilds the indexes from the rows (after rows were deleted).
    fn reindex(&mut self) {
        self.session_at = (self.sessions.iter().enumerate())
            .map(|(i, s)| (s.id.clone(), i))
            .collect();
        self.question_at = (self.questions.iter().enumerate())
            .map(|(i, q)| (q.id.clone(), i))
            .collect();
        self.by_session.clear();
        self.unanswered.clear();
        for (i, q) in self.questions.iter().enumerate() {
            self.by_session
                .entry(q.session_id.clone())
                .or_default()
                .push(i);
            if q.answer.is_none() {
                self.unanswered.insert(i);
            }
        }
    }
}

impl QuestionStore for MemoryQuestions {
    fn create_session(
        &mut self,
        id: &str,
        agent_name: &str,
        payload: &str,
        at_ms: u64,
    ) -> Result<(), StoreError> {
        if self.session_at.contains_key(id) {
            return Err(StoreError::Conflict(format!("session {id} exists")));
        }
        self.session_at.insert(id.to_owned(), self.sessions.len());
        self.sessions.push(SessionRow {
            id: id.to_owned(),
            agent_name: agent_name.to_owned(),
            status: SessionStatus::Running,
            original_payload: payload.to_owned(),
            execution_state: None,
            created_at: at_ms,
            updated_at: at_ms,
        });
        Ok(())
    }

    fn session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        Ok(self.session_ref(id).cloned())
    }

    fn transition(&mut self, id: &str, to: SessionStatus, at_ms: u64) -> Result<(), StoreError> {
        let s = self.session_mut(id)?;
        if !s.status.may_become(to) {
            return Err(StoreError::Illegal {
                session: id.to_owned(),
                from: s.status,
                to,
            });
        }
        s.status = to;
        s.updated_at = at_ms;
        Ok(())
    }

    fn save_state(&mut self, id: &str, state: &str, at_ms: u64) -> Result<(), StoreError> {
        let s = self.session_mut(id)?;
        s.execution_state = Some(state.to_owned());
        s.updated_at = at_ms;
        Ok(())
    }

    fn ask(&mut self, q: &NewQuestion, at_ms: u64) -> Result<(), StoreError> {
        if self.question_at.contains_key(&q.id) {
            return Err(StoreError::Conflict(format!("question {} exists", q.id)));
        }
        let asked = self.by_session.get(&q.session_id).into_iter().flatten();
        if asked
            .filter_map(|&i| self.questions.get(i))
            .any(|x| x.answer.is_none())
        {
            return Err(StoreError::Conflict(format!(
                "session {} already has an open question",
                q.session_id
            )));
        }
        self.transition(&q.session_id, SessionStatus::PendingInput, at_ms)?;
        let at = self.questions.len();
        self.question_at.insert(q.id.clone(), at);
        self.by_session
            .entry(q.session_id.clone())
            .or_default()
            .push(at);
        self.unanswered.insert(at);
        self.questions.push(QuestionRow {
            id: q.id.clone(),
            session_id: q.session_id.clone(),
            question: q.question.clone(),
            context: q.context.clone(),
            answer: None,
            answered_at: None,
            created_at: at_ms,
        });
        Ok(())
    }

    fn ask_with(
        &mut self,
        q: &NewQuestion,
        callback: Option<&Callback>,
        execution_state: Option<&str>,
        at_ms: u64,
    ) -> Result<(), StoreError> {
        self.ask(q, at_ms)?;
        if let Some(state) = execution_state {
            self.save_state(&q.session_id, state, at_ms)?;
        }
        self.outbox.extend(callback.cloned());
        Ok(())
    }

    fn outbox(&self) -> Result<Vec<Callback>, StoreError> {
        Ok(self.outbox.clone())
    }

    fn settle_callback(
        &mut self,
        question_id: &str,
        _settled: Settled,
        _at_ms: u64,
    ) -> Result<(), StoreError> {
        self.outbox.retain(|c| c.question_id != question_id);
        Ok(())
    }

    fn answer(
        &mut self,
        session_id: &str,
        question_id: &str,
        answer: &str,
        at_ms: u64,
    ) -> Result<Answered, StoreError> {
        let session = self.session_ref(session_id);
        let question = self.question_ref(question_id);
        if let Some(done) = judge_answer(session_id, question_id, session, question)? {
            return Ok(done);
        }
        self.transition(session_id, SessionStatus::Running, at_ms)?;
        let at = self.question_at[question_id];
        self.unanswered.remove(&at);
        let q = &mut self.questions[at];
        q.answer = Some(answer.to_owned());
        q.answered_at = Some(at_ms);
        Ok(Answered::Resumed)
    }

    fn pending(&self) -> Result<Vec<PendingQuestion>, StoreError> {
        Ok(self
            .unanswered
            .iter()
            .filter_map(|&i| {
                let q = self.questions.get(i)?;
                let s = self.session_ref(&q.session_id)?;
                (s.status == SessionStatus::PendingInput).then(|| PendingQuestion {
                    question: q.clone(),
                    agent_name: s.agent_name.clone(),
                })
            })
            .collect())
    }

    fn remember_key(&mut self, key: &str, session_id: &str, _at_ms: u64) -> Result<(), StoreError> {
        if self
            .keys
            .insert(key.to_owned(), session_id.to_owned())
            .is_none()
        {
            self.key_order.push_back(key.to_owned());
        }
        while self.key_order.len() > WEBHOOK_KEYS_KEPT {
            if let Some(old) = self.key_order.pop_front() {
                self.keys.remove(&old);
            }
        }
        Ok(())
    }

    fn session_of_key(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.keys.get(key).cloned())
    }

    fn purge_ended(&mut self, before_ms: u64) -> Result<usize, StoreError> {
        let gone: std::collections::BTreeSet<String> = self
            .sessions
            .iter()
            .filter(|s| s.status.is_terminal() && s.updated_at < before_ms)
            .map(|s| s.id.clone())
            .collect();
        if gone.is_empty() {
            return Ok(0);
        }
        self.sessions.retain(|s| !gone.contains(&s.id));
        self.questions.retain(|q| !gone.contains(&q.session_id));
        self.outbox.retain(|c| !gone.contains(&c.session_id));
        let keys = &mut self.keys;
        keys.retain(|_, session| !gone.contains(session));
        self.key_order.retain(|k| keys.contains_key(k));
        self.reindex();
        Ok(gone.len())
    }

    fn questions(&self, session_id: &str) -> Result<Vec<QuestionRow>, StoreError> {
        let asked = self.by_session.get(session_id).into_iter().flatten();
        Ok(asked
            .filter_map(|&i| self.questions.get(i).cloned())
            .collect())
    }

    fn open_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        Ok(self
            .sessions
            .iter()
            .filter(|s| !s.status.is_terminal())
            .cloned()
            .collect())
    }
}

/// `ms` since the epoch as a UTC timestamp, `YYYY-MM-DD HH:MM:SS.mmm` (as SQLite's date
/// functions read it).
pub fn timestamp(ms: u64) -> String {
    let days = (ms / 86_400_000) as i64;
    let rest = ms % 86_400_000;
    // Days to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// `ms` since the epoch as an ISO 8601 UTC timestamp, `YYYY-MM-DDTHH:MM:SS.mmmZ` (what an HTTP
/// API answers).
pub fn iso_timestamp(ms: u64) -> String {
    let mut text = timestamp(ms).replacen(' ', "T", 1);
    text.push('Z');
    text
}

/// A timestamp written by [`timestamp`] back to ms since the epoch.
pub(crate) fn parse_timestamp(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 23 || b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[19] != b'.' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    // A civil date to days (the inverse of the above).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total = days * 86_400_000 + hh * 3_600_000 + mm * 60_000 + ss * 1000 + ms;
    u64::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_and_read_back() {
        assert_eq!(timestamp(0), "1970-01-01 00:00:00.000");
        assert_eq!(timestamp(1_704_110_400_123), "2024-01-01 12:00:00.123");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29 00:00:00.000");
        for ms in [
            0,
            1,
            86_399_999,
            951_782_400_000,
            1_704_110_400_123,
            4_102_444_800_000,
        ] {
            assert_eq!(parse_timestamp(&timestamp(ms)), Some(ms));
        }
        assert_eq!(parse_timestamp("2024-13-01 00:00:00.000"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn the_lifecycle_allows_only_its_transitions() {
        use SessionStatus::*;
        let all = [Running, PendingInput, Completed, Failed];
        let allowed: Vec<(SessionStatus, SessionStatus)> = all
            .iter()
            .flat_map(|&a| all.iter().map(move |&b| (a, b)))
            .filter(|(a, b)| a.may_become(*b))
            .collect();
        assert_eq!(
            allowed,
            [
                (Running, PendingInput),
                (Running, Completed),
                (Running, Failed),
                (PendingInput, Running),
                (PendingInput, Failed)
            ]
        );
        for s in all {
            assert_eq!(SessionStatus::parse(s.as_str()), Some(s));
        }
    }
}
