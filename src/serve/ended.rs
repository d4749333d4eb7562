//! Ended sessions beside the runtime's state (`--state DIR` with a store that forgets at a
//! restart, i.e. without `--db`): `DIR/sessions-ended.jsonl`, one line per session that ended,
//! with its questions, appended and synced before the runtime drops the session from its state,
//! and given back to the store at the next start. So the runtime's state (rewritten whole at
//! every input) holds only the sessions that still run or wait, and an ended session costs one
//! appended line. With `--retention`, the sessions it deletes leave the file at the next start
//! (it is rewritten without them).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::store::questions::{NewQuestion, QuestionStore, SessionRow, SessionStatus};

/// The file's name in the state directory.
pub(super) const FILE: &str = "sessions-ended.jsonl";

/// The file of ended sessions, open for appending.
pub(super) struct EndedFile {
    file: File,
}

/// A session and its questions as one line.
fn line(session: &SessionRow, store: &dyn QuestionStore) -> Result<String, String> {
    let questions = store
        .questions(&session.id)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|q| {
            json!({
                "id": q.id, "question": q.question, "context": q.context, "answer": q.answer,
                "answered_at": q.answered_at, "created_at": q.created_at,
            })
        })
        .collect::<Vec<_>>();
    Ok(json!({
        "id": session.id,
        "agent_name": session.agent_name,
        "status": session.status.as_str(),
        "original_payload": session.original_payload,
        "execution_state": session.execution_state,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "questions": questions,
    })
    .to_string())
}

/// Puts a session read from a line back in `store`, through its lifecycle (created, each
/// question asked and answered, ended) at the times the line gives.
fn import(v: &Value, store: &mut dyn QuestionStore) -> Option<Result<(), String>> {
    let text = |v: &Value, k: &str| v.get(k)?.as_str().map(str::to_owned);
    let id = text(v, "id")?;
    let status = SessionStatus::parse(v.get("status")?.as_str()?)?;
    let (created, updated) = (
        v.get("created_at")?.as_u64()?,
        v.get("updated_at")?.as_u64()?,
    );
    let mut put = || -> Result<(), crate::store::questions::StoreError> {
        let payload = text(v, "original_payload").unwrap_or_default();
        store.create_session(
            &id,
            &text(v, "agent_name").unwrap_or_default(),
            &payload,
            created,
        )?;
        for q in v
            .get("questions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let asked = q
                .get("created_at")
                .and_then(Value::as_u64)
                .unwrap_or(created);
            let question = NewQuestion {
                id: text(q, "id").unwrap_or_default(),
                session_id: id.clone(),
                question: text(q, "question").unwrap_or_default(),
                context: text(q, "context"),
            };
            store.ask(&question, asked)?;
            if let Some(answer) = text(q, "answer") {
                let at = q
                    .get("answered_at")
                    .and_then(Value::as_u64)
                    .unwrap_or(asked);
                store.answer(&id, &question.id, &answer, at)?;
            }
        }
        if let Some(state) = text(v, "execution_state") {
            store.save_state(&id, &state, updated)?;
        }
        store.transition(&id, status, updated)
    };
    Some(put().map_err(|e| format!("session {id}: {e}")))
}

impl EndedFile {
    /// Opens (or creates) the file in `dir` and gives every session it holds to `store`. A line
    /// that cannot be read (the last one, torn by a kill) is skipped and said.
    pub(super) fn open(dir: &Path, store: &mut dyn QuestionStore) -> std::io::Result<EndedFile> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        for (n, l) in text.lines().enumerate() {
            let imported = serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| import(&v, store));
            match imported {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    tracing::warn!(file = %path.display(), line = n + 1, error = %e, "an ended session could not be given back to the store")
                }
                None => {
                    tracing::warn!(file = %path.display(), line = n + 1, "an ended session's line that cannot be read is skipped")
                }
            }
        }
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        if !text.is_empty() && !text.ends_with('\n') {
            // The torn line is ended, so that the next session starts a line of its own.
            file.write_all(b"\n")?;
            file.sync_data()?;
        }
        Ok(EndedFile { file })
    }

    /// Appends session `session` as the store has it, with its questions, and syncs the file.
    pub(super) fn append(
        &mut self,
        session: &SessionRow,
        store: &dyn QuestionStore,
    ) -> Result<(), String> {
        let mut text = line(session, store)?;
        text.push('\n');
        self.file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| e.to_string())
    }

    /// Rewrites the file in `dir` with the sessions `store` still holds (after a retention
    /// sweep deleted some): a temporary file renamed over it.
    pub(super) fn rewrite(&mut self, dir: &Path, store: &dyn QuestionStore) -> std::io::Result<()> {
        let path: PathBuf = dir.join(FILE);
        let text = std::fs::read_to_string(&path)?;
        let tmp = path.with_extension("jsonl.tmp");
        {
            let mut out = std::io::BufWriter::new(File::create(&tmp)?);
            for l in text.lines() {
                let id = serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| v.get("id")?.as_str().map(str::to_owned));
                let kept = id.is_some_and(|id| matches!(store.session(&id), Ok(Some(_))));
                if kept {
                    writeln!(out, "{l}")?;
                }
            }
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        self.file = OpenOptions::new().append(true).open(&path)?;
        Ok(())
    }
}
