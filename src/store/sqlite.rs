//! The question store in SQLite (feature `sqlite`): exactly seed 003's `agent_sessions` and
//! `agent_questions` tables and indexes, in write-ahead-log mode with full syncs, every change in
//! one transaction committed before the call returns. A file that is not such a database (not
//! SQLite at all, or tables of another shape) is refused at open with a clear error; nothing in
//! it is changed.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::questions::{
    judge_answer, parse_timestamp, timestamp, Answered, Callback, NewQuestion, PendingQuestion,
    QuestionRow, QuestionStore, SessionRow, SessionStatus, Settled, StoreError, WEBHOOK_KEYS_KEPT,
};

/// The seed's schema (DESIGN §9), created when the database is new.
const SCHEMA: &str = "
CREATE TABLE agent_sessions (
    id TEXT PRIMARY KEY,
    agent_name TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'running',
    original_payload JSON NOT NULL,
    execution_state JSON,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
CREATE TABLE agent_questions (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES agent_sessions(id),
    question TEXT NOT NULL,
    context JSON,
    answer TEXT,
    answered_at TIMESTAMP,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP
);
CREATE INDEX idx_sessions_status ON agent_sessions(status);
CREATE INDEX idx_questions_session ON agent_questions(session_id);
";

const SESSION_COLUMNS: [&str; 7] = [
    "id",
    "agent_name",
    "status",
    "original_payload",
    "execution_state",
    "created_at",
    "updated_at",
];
const QUESTION_COLUMNS: [&str; 7] = [
    "id",
    "session_id",
    "question",
    "context",
    "answer",
    "answered_at",
    "created_at",
];

/// agentsim's own table beside the seed's: the webhooks' idempotency keys and the sessions they
/// started (the newest [`WEBHOOK_KEYS_KEPT`] of them), created when missing.
const KEYS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentsim_webhook_keys (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL
);
";
const KEY_COLUMNS: [&str; 4] = ["seq", "key", "session_id", "created_at"];

/// agentsim's outbox beside the seed's tables: each question's callback, written in the
/// question's own transaction, settled (`delivered` or `obsolete`) once it needs no sending.
/// Settled rows older than the newest [`CALLBACKS_KEPT`] callbacks are deleted.
const CALLBACKS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentsim_callbacks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    question_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    url TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL,
    outcome TEXT,
    settled_at TIMESTAMP
);
CREATE INDEX IF NOT EXISTS idx_agentsim_callbacks_open ON agentsim_callbacks(outcome);
";
const CALLBACK_COLUMNS: [&str; 8] = [
    "seq",
    "question_id",
    "session_id",
    "url",
    "body",
    "created_at",
    "outcome",
    "settled_at",
];

/// How many of the newest callbacks the outbox keeps once settled (for a look at what was sent).
const CALLBACKS_KEPT: i64 = 10_000;

/// How long an operation waits for a lock another process holds.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The question store in a SQLite database file.
#[derive(Debug)]
pub struct SqliteQuestions {
    conn: Connection,
}

fn io(e: rusqlite::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

impl SqliteQuestions {
    /// Opens (or creates) the database at `path`; refuses a file that is not one of ours.
    pub fn open(path: &Path) -> Result<SqliteQuestions, StoreError> {
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Io(format!("cannot open {}: {e}", path.display())))?;
        SqliteQuestions::init(conn, &path.display().to_string())
    }

    /// A database in memory (for tests).
    pub fn in_memory() -> Result<SqliteQuestions, StoreError> {
        SqliteQuestions::init(Connection::open_in_memory().map_err(io)?, ":memory:")
    }

    fn init(conn: Connection, name: &str) -> Result<SqliteQuestions, StoreError> {
        // Another process holding the database gets a little time to let go, then a clear
        // error; a file that is not SQLite at all is another error.
        conn.busy_timeout(LOCK_WAIT).map_err(io)?;
        let corrupt = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Io(format!(
                    "{name} is locked by another process (waited {}s): {e}",
                    LOCK_WAIT.as_secs()
                ))
            }
            _ => StoreError::Corrupt(format!("{name} is not a readable SQLite database: {e}")),
        };
        // Reading the schema first: a file that is not SQLite fails here, before anything is
        // written to it.
        let tables: Vec<String> = {
            let mut stmt = conn
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .map_err(corrupt)?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(corrupt)?;
            rows.collect::<Result<_, _>>().map_err(corrupt)?
        };
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(corrupt)?;
        if !mode.eq_ignore_ascii_case("wal") && name != ":memory:" {
            return Err(StoreError::Io(format!(
                "{name}: write-ahead logging could not be turned on (journal mode {mode})"
            )));
        }
        conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
            .map_err(io)?;
        let ours = ["agent_questions", "agent_sessions"];
        let present: Vec<&str> = ours
            .iter()
            .copied()
            .filter(|t| tables.iter().any(|x| x == t))
            .collect();
        if present.is_empty() {
            conn.execute_batch(&format!("BEGIN; {SCHEMA} COMMIT;"))
                .map_err(io)?;
        } else if present.len() != ours.len() {
            return Err(StoreError::Corrupt(format!(
                "{name} has {} but not {}",
                present.join(", "),
                ours.iter()
                    .filter(|t| !present.contains(t))
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let store = SqliteQuestions { conn };
        store.check_columns("agent_sessions", &SESSION_COLUMNS, name)?;
        store.check_columns("agent_questions", &QUESTION_COLUMNS, name)?;
        store.conn.execute_batch(KEYS_SCHEMA).map_err(io)?;
        store.check_columns("agentsim_webhook_keys", &KEY_COLUMNS, name)?;
        store.conn.execute_batch(CALLBACKS_SCHEMA).map_err(io)?;
        store.check_columns("agentsim_callbacks", &CALLBACK_COLUMNS, name)?;
        Ok(store)
    }

    fn check_columns(&self, table: &str, want: &[&str], name: &str) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info({table})"))
            .map_err(io)?;
        let got: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(1))
            .map_err(io)?
            .collect::<Result<_, _>>()
            .map_err(io)?;
        if got != want {
            return Err(StoreError::Corrupt(format!(
                "{name}: table {table} has columns ({}), expected ({})",
                got.join(", "),
                want.join(", ")
            )));
        }
        Ok(())
    }

    fn session_in(conn: &Connection, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let row = conn
            .query_row(
                "SELECT id, agent_name, status, original_payload, execution_state, created_at, updated_at FROM agent_sessions WHERE id = ?1",
                params![id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, String>(5)?,
                        r.get::<_, String>(6)?,
                    ))
                },
            )
            .optional()
            .map_err(io)?;
        row.map(
            |(id, agent_name, status, payload, state, created, updated)| {
                Ok(SessionRow {
                    status: SessionStatus::parse(&status).ok_or_else(|| {
                        StoreError::Corrupt(format!("session {id} has the status {status:?}"))
                    })?,
                    created_at: time_of(&created, &id)?,
                    updated_at: time_of(&updated, &id)?,
                    id,
                    agent_name,
                    original_payload: payload,
                    execution_state: state,
                })
            },
        )
        .transpose()
    }

    fn question_rows(
        conn: &Connection,
        filter: &str,
        arg: Option<&str>,
    ) -> Result<Vec<(QuestionRow, Option<String>)>, StoreError> {
        let sql = format!(
            "SELECT q.id, q.session_id, q.question, q.context, q.answer, q.answered_at, q.created_at, s.agent_name
             FROM agent_questions q JOIN agent_sessions s ON s.id = q.session_id
             WHERE {filter} ORDER BY q.created_at, q.rowid"
        );
        let mut stmt = conn.prepare(&sql).map_err(io)?;
        let map = |r: &rusqlite::Row<'_>| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, String>(6)?,
                r.get::<_, String>(7)?,
            ))
        };
        let rows: Vec<_> = match arg {
            Some(a) => stmt.query_map(params![a], map),
            None => stmt.query_map([], map),
        }
        .map_err(io)?
        .collect::<Result<_, _>>()
        .map_err(io)?;
        rows.into_iter()
            .map(
                |(id, session_id, question, context, answer, answered, created, agent)| {
                    let answered_at = answered.map(|t| time_of(&t, &id)).transpose()?;
                    Ok((
                        QuestionRow {
                            created_at: time_of(&created, &id)?,
                            id,
                            session_id,
                            question,
                            context,
                            answer,
                            answered_at,
                        },
                        Some(agent),
                    ))
                },
            )
            .collect()
    }

    fn question_in(conn: &Connection, id: &str) -> Result<Option<QuestionRow>, StoreError> {
        Ok(SqliteQuestions::question_rows(conn, "q.id = ?1", Some(id))?
            .into_iter()
            .next()
            .map(|(q, _)| q))
    }

    fn set_status(
        conn: &Connection,
        id: &str,
        to: SessionStatus,
        at_ms: u64,
    ) -> Result<(), StoreError> {
        let Some(s) = SqliteQuestions::session_in(conn, id)? else {
            return Err(StoreError::NotFound(format!("session {id}")));
        };
        if !s.status.may_become(to) {
            return Err(StoreError::Illegal {
                session: id.to_owned(),
                from: s.status,
                to,
            });
        }
        conn.execute(
            "UPDATE agent_sessions SET status = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, to.as_str(), timestamp(at_ms)],
        )
        .map_err(io)?;
        Ok(())
    }

    /// Opens a question inside the transaction `c` (see [`QuestionStore::ask`]).
    fn ask_in(c: &Connection, q: &NewQuestion, at_ms: u64) -> Result<(), StoreError> {
        if SqliteQuestions::question_in(c, &q.id)?.is_some() {
            return Err(StoreError::Conflict(format!("question {} exists", q.id)));
        }
        let open: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM agent_questions WHERE session_id = ?1 AND answer IS NULL",
                params![q.session_id],
                |r| r.get(0),
            )
            .map_err(io)?;
        if open > 0 {
            return Err(StoreError::Conflict(format!(
                "session {} already has an open question",
                q.session_id
            )));
        }
        SqliteQuestions::set_status(c, &q.session_id, SessionStatus::PendingInput, at_ms)?;
        c.execute(
            "INSERT INTO agent_questions (id, session_id, question, context, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![q.id, q.session_id, q.question, q.context, timestamp(at_ms)],
        )
        .map_err(io)?;
        Ok(())
    }

    /// Runs `f` in one immediate transaction, committed (durably) before returning its result;
    /// rolled back if it fails.
    fn write<T>(
        &mut self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(io)?;
        let out = f(&tx)?;
        tx.commit().map_err(io)?;
        Ok(out)
    }
}

fn time_of(text: &str, id: &str) -> Result<u64, StoreError> {
    parse_timestamp(text)
        .ok_or_else(|| StoreError::Corrupt(format!("row {id} has the time {text:?}")))
}

impl QuestionStore for SqliteQuestions {
    fn create_session(
        &mut self,
        id: &str,
        agent_name: &str,
        payload: &str,
        at_ms: u64,
    ) -> Result<(), StoreError> {
        self.write(|c| {
            if SqliteQuestions::session_in(c, id)?.is_some() {
                return Err(StoreError::Conflict(format!("session {id} exists")));
            }
            let t = timestamp(at_ms);
            c.execute(
                "INSERT INTO agent_sessions (id, agent_name, status, original_payload, created_at, updated_at) VALUES (?1, ?2, 'running', ?3, ?4, ?4)",
                params![id, agent_name, payload, t],
            )
            .map_err(io)?;
            Ok(())
        })
    }

    fn session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        SqliteQuestions::session_in(&self.conn, id)
    }

    fn transition(&mut self, id: &str, to: SessionStatus, at_ms: u64) -> Result<(), StoreError> {
        self.write(|c| SqliteQuestions::set_status(c, id, to, at_ms))
    }

    fn save_state(&mut self, id: &str, state: &str, at_ms: u64) -> Result<(), StoreError> {
        self.write(|c| {
            let n = c
                .execute(
                    "UPDATE agent_sessions SET execution_state = ?2, updated_at = ?3 WHERE id = ?1",
                    params![id, state, timestamp(at_ms)],
                )
                .map_err(io)?;
            if n == 0 {
                return Err(StoreError::NotFound(format!("session {id}")));
            }
            Ok(())
        })
    }

    fn ask(&mut self, q: &NewQuestion, at_ms: u64) -> Result<(), StoreError> {
        self.write(|c| SqliteQuestions::ask_in(c, q, at_ms))
    }

    fn ask_with(
        &mut self,
        q: &NewQuestion,
        callback: Option<&Callback>,
        execution_state: Option<&str>,
        at_ms: u64,
    ) -> Result<(), StoreError> {
        self.write(|c| {
            SqliteQuestions::ask_in(c, q, at_ms)?;
            if let Some(state) = execution_state {
                c.execute(
                    "UPDATE agent_sessions SET execution_state = ?2 WHERE id = ?1",
                    params![q.session_id, state],
                )
                .map_err(io)?;
            }
            let Some(callback) = callback else {
                return Ok(());
            };
            c.execute(
                "INSERT INTO agentsim_callbacks (question_id, session_id, url, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![callback.question_id, callback.session_id, callback.url, callback.body, timestamp(at_ms)],
            )
            .map_err(io)?;
            Ok(())
        })
    }

    fn outbox(&self) -> Result<Vec<Callback>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT question_id, session_id, url, body FROM agentsim_callbacks WHERE outcome IS NULL ORDER BY seq")
            .map_err(io)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Callback {
                    question_id: r.get(0)?,
                    session_id: r.get(1)?,
                    url: r.get(2)?,
                    body: r.get(3)?,
                })
            })
            .map_err(io)?;
        rows.collect::<Result<_, _>>().map_err(io)
    }

    fn settle_callback(
        &mut self,
        question_id: &str,
        settled: Settled,
        at_ms: u64,
    ) -> Result<(), StoreError> {
        self.write(|c| {
            c.execute(
                "UPDATE agentsim_callbacks SET outcome = ?2, settled_at = ?3 WHERE question_id = ?1 AND outcome IS NULL",
                params![question_id, settled.as_str(), timestamp(at_ms)],
            )
            .map_err(io)?;
            // Settled rows older than the newest callbacks kept go (a range of the key: the
            // cost does not grow with the callbacks ever sent).
            c.execute(
                "DELETE FROM agentsim_callbacks WHERE seq <= (SELECT MAX(seq) FROM agentsim_callbacks) - ?1 AND outcome IS NOT NULL",
                params![CALLBACKS_KEPT],
            )
            .map_err(io)?;
            Ok(())
        })
    }

    fn answer(
        &mut self,
        session_id: &str,
        question_id: &str,
        answer: &str,
        at_ms: u64,
    ) -> Result<Answered, StoreError> {
        self.write(|c| {
            let session = SqliteQuestions::session_in(c, session_id)?;
            let question = SqliteQuestions::question_in(c, question_id)?;
            if let Some(done) =
                judge_answer(session_id, question_id, session.as_ref(), question.as_ref())?
            {
                return Ok(done);
            }
            SqliteQuestions::set_status(c, session_id, SessionStatus::Running, at_ms)?;
            c.execute(
                "UPDATE agent_questions SET answer = ?2, answered_at = ?3 WHERE id = ?1 AND answer IS NULL",
                params![question_id, answer, timestamp(at_ms)],
            )
            .map_err(io)?;
            Ok(Answered::Resumed)
        })
    }

    fn pending(&self) -> Result<Vec<PendingQuestion>, StoreError> {
        Ok(SqliteQuestions::question_rows(
            &self.conn,
            "q.answer IS NULL AND s.status = 'pending_input'",
            None,
        )?
        .into_iter()
        .map(|(question, agent)| PendingQuestion {
            question,
            agent_name: agent.unwrap_or_default(),
        })
        .collect())
    }

    fn remember_key(&mut self, key: &str, session_id: &str, at_ms: u64) -> Result<(), StoreError> {
        self.write(|c| {
            c.execute(
                "INSERT OR REPLACE INTO agentsim_webhook_keys (key, session_id, created_at) VALUES (?1, ?2, ?3)",
                params![key, session_id, timestamp(at_ms)],
            )
            .map_err(io)?;
            // The newest keys are kept: the sequence numbers below the newest ones go.
            let newest = c.last_insert_rowid();
            c.execute(
                "DELETE FROM agentsim_webhook_keys WHERE seq <= ?1",
                params![newest - WEBHOOK_KEYS_KEPT as i64],
            )
            .map_err(io)?;
            Ok(())
        })
    }

    fn durable(&self) -> bool {
        true
    }

    fn purge_ended(&mut self, before_ms: u64) -> Result<usize, StoreError> {
        self.write(|c| {
            let ended = "SELECT id FROM agent_sessions WHERE status IN ('completed', 'failed') AND updated_at < ?1";
            let before = timestamp(before_ms);
            for table in ["agent_questions", "agentsim_callbacks", "agentsim_webhook_keys"] {
                c.execute(
                    &format!("DELETE FROM {table} WHERE session_id IN ({ended})"),
                    params![before],
                )
                .map_err(io)?;
            }
            c.execute(
                "DELETE FROM agent_sessions WHERE status IN ('completed', 'failed') AND updated_at < ?1",
                params![before],
            )
            .map_err(io)
        })
    }

    fn session_of_key(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row(
                "SELECT session_id FROM agentsim_webhook_keys WHERE key = ?1",
                params![key],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(io)
    }

    fn open_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        let ids: Vec<String> = {
            let mut stmt = self
                .conn
                .prepare("SELECT id FROM agent_sessions WHERE status IN ('running', 'pending_input') ORDER BY created_at, rowid")
                .map_err(io)?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(io)?;
            rows.collect::<Result<_, _>>().map_err(io)?
        };
        ids.iter()
            .filter_map(|id| SqliteQuestions::session_in(&self.conn, id).transpose())
            .collect()
    }

    fn questions(&self, session_id: &str) -> Result<Vec<QuestionRow>, StoreError> {
        Ok(
            SqliteQuestions::question_rows(&self.conn, "q.session_id = ?1", Some(session_id))?
                .into_iter()
                .map(|(q, _)| q)
                .collect(),
        )
    }
}
