//! One conformance suite for every question store (seed 003, DESIGN §9): the in-memory one and
//! SQLite (in memory and in a file). Then what only a file can show: what was acknowledged is
//! there after reopening, and a file that is not our database is refused without being changed.

use agentsim::store::questions::{Answered, NewQuestion, QuestionStore, SessionStatus, StoreError};
use agentsim::store::MemoryQuestions;

fn question(id: &str, session: &str) -> NewQuestion {
    NewQuestion {
        id: id.into(),
        session_id: session.into(),
        question: format!("{id}: which style?"),
        context: Some(r#"{"topic":"love"}"#.into()),
    }
}

/// The outbox: a question and its callback are stored together or not at all; settled callbacks
/// leave it; the store's open sessions are those not ended.
fn outbox_conformance(store: &mut dyn QuestionStore) {
    use agentsim::store::questions::{Callback, Settled};
    let callback = |q: &str, s: &str| Callback {
        question_id: q.into(),
        session_id: s.into(),
        url: "http://127.0.0.1:9/hook".into(),
        body: format!(r#"{{"question":"{q}"}}"#),
    };
    store.create_session("o1", "poet", "{}", 1).unwrap();
    store.create_session("o2", "poet", "{}", 2).unwrap();
    store.create_session("o3", "poet", "{}", 3).unwrap();
    store
        .ask_with(
            &question("oq1", "o1"),
            Some(&callback("oq1", "o1")),
            Some(r#"{"waiting":1}"#),
            4,
        )
        .unwrap();
    // A question refused (its session already asks) leaves no callback behind.
    assert!(store
        .ask_with(
            &question("oq1b", "o1"),
            Some(&callback("oq1b", "o1")),
            Some("{}"),
            5
        )
        .is_err());
    store
        .ask_with(
            &question("oq2", "o2"),
            Some(&callback("oq2", "o2")),
            None,
            6,
        )
        .unwrap();
    let ids = |store: &dyn QuestionStore| -> Vec<String> {
        store
            .outbox()
            .unwrap()
            .into_iter()
            .map(|c| c.question_id)
            .collect()
    };
    assert_eq!(ids(store), ["oq1", "oq2"]);
    // The execution state went with the first question, and the refused one changed nothing.
    let o1 = store.session("o1").unwrap().unwrap();
    assert_eq!(o1.execution_state.as_deref(), Some(r#"{"waiting":1}"#));
    assert_eq!(store.session("o2").unwrap().unwrap().execution_state, None);
    assert_eq!(store.outbox().unwrap()[0], callback("oq1", "o1"));
    store.settle_callback("oq1", Settled::Delivered, 7).unwrap();
    assert_eq!(ids(store), ["oq2"]);
    store.settle_callback("oq2", Settled::Obsolete, 8).unwrap();
    assert!(ids(store).is_empty());
    store.transition("o3", SessionStatus::Completed, 9).unwrap();
    let open: Vec<String> = store
        .open_sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(open, ["o1", "o2"]);
    agentsim::store::questions::abandon(store, "o1", "gone", 10).unwrap();
    let row = store.session("o1").unwrap().unwrap();
    assert_eq!(
        (row.status, row.abandoned().as_deref()),
        (SessionStatus::Failed, Some("gone"))
    );
}

/// The suite: every rule of the lifecycle, the questions and the answers.
fn conformance(store: &mut dyn QuestionStore) {
    use SessionStatus::*;
    store
        .create_session("s1", "write-poem", r#"{"topic":"love"}"#, 1_000)
        .unwrap();
    store
        .create_session("s2", "write-poem", r#"{"topic":"rain"}"#, 2_000)
        .unwrap();
    assert!(matches!(
        store.create_session("s1", "x", "{}", 3_000),
        Err(StoreError::Conflict(_))
    ));
    let s1 = store.session("s1").unwrap().expect("s1 exists");
    assert_eq!(
        (s1.status, s1.created_at, s1.updated_at),
        (Running, 1_000, 1_000)
    );
    assert_eq!(s1.original_payload, r#"{"topic":"love"}"#);
    assert_eq!(store.session("nope").unwrap(), None);

    // Questions: one open at a time, only on a running session; the session waits.
    store.ask(&question("q1", "s1"), 5_000).unwrap();
    assert_eq!(store.session("s1").unwrap().unwrap().status, PendingInput);
    assert!(matches!(
        store.ask(&question("q2", "s1"), 6_000),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.ask(&question("q1", "s2"), 6_000),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.ask(&question("qx", "nope"), 6_000),
        Err(StoreError::NotFound(_))
    ));
    store.ask(&question("q3", "s2"), 7_000).unwrap();
    let pending = store.pending().unwrap();
    let ids: Vec<&str> = pending.iter().map(|p| p.question.id.as_str()).collect();
    assert_eq!(ids, ["q1", "q3"], "creation order");
    assert_eq!(pending[0].agent_name, "write-poem");
    assert_eq!(
        pending[0].question.context.as_deref(),
        Some(r#"{"topic":"love"}"#)
    );
    assert_eq!(pending[0].question.created_at, 5_000);

    // Answers: unknown session or another session's question is NotFound; the first wins.
    assert!(matches!(
        store.answer("nope", "q1", "haiku", 8_000),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.answer("s2", "q1", "haiku", 8_000),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.answer("s1", "q9", "haiku", 8_000),
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store.answer("s1", "q1", "haiku", 8_000).unwrap(),
        Answered::Resumed
    );
    assert_eq!(
        store.answer("s1", "q1", "sonnet", 9_000).unwrap(),
        Answered::DuplicateIgnored
    );
    let q1 = &store.questions("s1").unwrap()[0];
    assert_eq!(
        (q1.answer.as_deref(), q1.answered_at),
        (Some("haiku"), Some(8_000))
    );
    let s1 = store.session("s1").unwrap().unwrap();
    assert_eq!((s1.status, s1.updated_at), (Running, 8_000));
    let ids: Vec<String> = store
        .pending()
        .unwrap()
        .into_iter()
        .map(|p| p.question.id)
        .collect();
    assert_eq!(ids, ["q3"]);

    // A second question once the first is answered (sequential).
    store.ask(&question("q2", "s1"), 10_000).unwrap();
    assert_eq!(store.questions("s1").unwrap().len(), 2);

    // The lifecycle: only its transitions; the ends absorb; an ended session answers nothing.
    assert!(matches!(
        store.transition("s1", Completed, 11_000),
        Err(StoreError::Illegal {
            from: PendingInput,
            to: Completed,
            ..
        })
    ));
    store.transition("s1", Failed, 11_000).unwrap(); // a timeout
    assert!(matches!(
        store.answer("s1", "q2", "late", 12_000),
        Err(StoreError::NotFound(_))
    ));
    for to in [Running, PendingInput, Completed, Failed] {
        assert!(matches!(
            store.transition("s1", to, 13_000),
            Err(StoreError::Illegal { from: Failed, .. })
        ));
    }
    assert_eq!(store.session("s1").unwrap().unwrap().status, Failed);
    assert!(store
        .pending()
        .unwrap()
        .iter()
        .all(|p| p.question.session_id != "s1"));
    store.answer("s2", "q3", "rhyming", 14_000).unwrap();
    store.save_state("s2", r#"{"step":3}"#, 15_000).unwrap();
    store.transition("s2", Completed, 16_000).unwrap();
    let s2 = store.session("s2").unwrap().unwrap();
    assert_eq!(s2.execution_state.as_deref(), Some(r#"{"step":3}"#));
    assert!(matches!(
        store.save_state("nope", "{}", 1),
        Err(StoreError::NotFound(_))
    ));
    assert!(store.pending().unwrap().is_empty());
}

/// Retention: the sessions that ended before a time go with their questions, callbacks and
/// keys; those that ended later, and those still open however old, stay.
fn purge_conformance(store: &mut dyn QuestionStore) {
    use agentsim::store::questions::Callback;
    for (id, at) in [("old", 10), ("late", 20), ("open", 1)] {
        store.create_session(id, "poet", "{}", at).unwrap();
        let callback = Callback {
            question_id: format!("q-{id}"),
            session_id: id.into(),
            url: "http://127.0.0.1:9/hook".into(),
            body: "{}".into(),
        };
        store
            .ask_with(&question(&format!("q-{id}"), id), Some(&callback), None, at)
            .unwrap();
        store.remember_key(&format!("k-{id}"), id, at).unwrap();
    }
    store.transition("old", SessionStatus::Failed, 11).unwrap();
    store.transition("late", SessionStatus::Failed, 30).unwrap();
    assert_eq!(store.purge_ended(25).unwrap(), 1);
    assert_eq!(store.session("old").unwrap(), None);
    assert!(store.questions("old").unwrap().is_empty());
    assert_eq!(store.session_of_key("k-old").unwrap(), None);
    assert!(store
        .outbox()
        .unwrap()
        .iter()
        .all(|c| c.session_id != "old"));
    assert!(store.session("late").unwrap().is_some());
    assert_eq!(store.questions("late").unwrap().len(), 1);
    assert_eq!(
        store.session_of_key("k-late").unwrap().as_deref(),
        Some("late")
    );
    assert_eq!(
        store.session("open").unwrap().unwrap().status,
        SessionStatus::PendingInput
    );
    assert_eq!(store.pending().unwrap().len(), 1);
    assert_eq!(store.purge_ended(25).unwrap(), 0);
    assert_eq!(store.purge_ended(u64::MAX).unwrap(), 1);
    assert!(store.session("open").unwrap().is_some());
}

#[test]
fn the_memory_store_conforms() {
    conformance(&mut MemoryQuestions::new());
    outbox_conformance(&mut MemoryQuestions::new());
    purge_conformance(&mut MemoryQuestions::new());
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use agentsim::store::SqliteQuestions;
    use std::path::PathBuf;

    fn fresh(name: &str) -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("question-store");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
        }
        path
    }

    #[test]
    fn the_sqlite_store_conforms_in_memory_and_in_a_file() {
        conformance(&mut SqliteQuestions::in_memory().unwrap());
        conformance(&mut SqliteQuestions::open(&fresh("conformance.db")).unwrap());
        outbox_conformance(&mut SqliteQuestions::in_memory().unwrap());
        outbox_conformance(&mut SqliteQuestions::open(&fresh("outbox.db")).unwrap());
        purge_conformance(&mut SqliteQuestions::open(&fresh("purge.db")).unwrap());
    }

    #[test]
    fn what_was_acknowledged_is_there_after_reopening() {
        let path = fresh("reopen.db");
        {
            let mut s = SqliteQuestions::open(&path).unwrap();
            s.create_session("s1", "poem", "{}", 1).unwrap();
            s.ask(&question("q1", "s1"), 2).unwrap();
            assert_eq!(s.answer("s1", "q1", "haiku", 3).unwrap(), Answered::Resumed);
            // Dropped without any explicit close: each answer was committed when acknowledged.
        }
        let mut s = SqliteQuestions::open(&path).unwrap();
        let q = &s.questions("s1").unwrap()[0];
        assert_eq!(
            (q.answer.as_deref(), q.answered_at),
            (Some("haiku"), Some(3))
        );
        assert_eq!(
            s.answer("s1", "q1", "again", 4).unwrap(),
            Answered::DuplicateIgnored
        );
        drop(s);
        // Read back by another connection: the file is in write-ahead-log mode.
        let c = rusqlite::Connection::open(&path).unwrap();
        let mode: String = c
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_file_that_is_not_our_database_is_refused_and_left_alone() {
        let path = fresh("garbage.db");
        let garbage =
            b"this is not a database at all, just some text that goes on and on".repeat(100);
        std::fs::write(&path, &garbage).unwrap();
        let e = SqliteQuestions::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
        assert!(
            e.to_string().contains("not a readable SQLite database"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            garbage,
            "nothing written to it"
        );

        // A SQLite database with one of our tables only, or tables of another shape.
        let path = fresh("half.db");
        {
            let mut s = SqliteQuestions::open(&path).unwrap();
            s.create_session("s1", "poem", "{}", 1).unwrap();
        }
        let other = fresh("other.db");
        std::fs::copy(&path, &other).unwrap();
        drop_table(&other, "agent_questions");
        let e = SqliteQuestions::open(&other).unwrap_err();
        assert!(
            e.to_string()
                .contains("has agent_sessions but not agent_questions"),
            "{e}"
        );
    }

    fn drop_table(path: &std::path::Path, table: &str) {
        let c = rusqlite::Connection::open(path).unwrap();
        c.execute_batch(&format!("DROP TABLE {table}")).unwrap();
    }

    #[test]
    fn a_database_locked_by_another_process_is_a_clear_error() {
        let path = fresh("locked.db");
        drop(SqliteQuestions::open(&path).unwrap());
        let other = rusqlite::Connection::open(&path).unwrap();
        other
            .execute_batch("PRAGMA journal_mode = DELETE; BEGIN EXCLUSIVE;")
            .unwrap();
        let e = SqliteQuestions::open(&path).unwrap_err();
        assert!(matches!(e, StoreError::Io(_)), "{e}");
        assert!(
            e.to_string().contains("is locked by another process"),
            "{e}"
        );
        other.execute_batch("COMMIT").unwrap();
        drop(other);
        let mut s = SqliteQuestions::open(&path).expect("free again");
        s.create_session("s1", "poem", "{}", 1).unwrap();
    }

    #[test]
    fn a_thousand_concurrent_answers_from_eight_connections_have_one_winner() {
        let path = fresh("race.db");
        {
            let mut s = SqliteQuestions::open(&path).unwrap();
            s.create_session("s1", "poem", "{}", 1).unwrap();
            s.ask(&question("q1", "s1"), 2).unwrap();
        }
        let outcomes: Vec<Answered> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..8)
                .map(|w| {
                    let path = path.clone();
                    scope.spawn(move || {
                        let mut s = SqliteQuestions::open(&path).unwrap();
                        (0..125)
                            .map(|i| {
                                s.answer("s1", "q1", &format!("answer {w}-{i}"), 10)
                                    .expect("every answer is taken or ignored")
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let resumed = outcomes.iter().filter(|o| **o == Answered::Resumed).count();
        assert_eq!(outcomes.len(), 1000);
        assert_eq!(resumed, 1, "exactly one answer wins");
        let s = SqliteQuestions::open(&path).unwrap();
        let q = &s.questions("s1").unwrap()[0];
        assert!(q
            .answer
            .as_deref()
            .is_some_and(|a| a.starts_with("answer ")));
        assert_eq!(
            s.session("s1").unwrap().unwrap().status,
            SessionStatus::Running
        );
    }

    #[test]
    fn tables_of_another_shape_are_refused() {
        let path = fresh("shape.db");
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE agent_sessions (id TEXT PRIMARY KEY, name TEXT);
             CREATE TABLE agent_questions (id TEXT PRIMARY KEY);",
        )
        .unwrap();
        drop(c);
        let e = SqliteQuestions::open(&path).unwrap_err();
        assert!(
            e.to_string().contains(
                "table agent_sessions has columns (id, name), expected (id, agent_name, status"
            ),
            "{e}"
        );
    }
}
