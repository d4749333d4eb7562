//! Webhook idempotency keys beside the runtime's state (`--state DIR` with a store that forgets
//! at a restart, i.e. without `--db`): `DIR/webhook-keys.jsonl`, one `{"key","session"}` line
//! per key, appended and synced before the webhook's reply, given back to the store at the next
//! start. The file holds at most twice [`WEBHOOK_KEYS_KEPT`] lines: past that it is rewritten
//! with the newest keys (a temporary file renamed over it), so it does not grow without bound.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::store::questions::{QuestionStore, WEBHOOK_KEYS_KEPT};

/// The file's name in the state directory.
pub(super) const FILE: &str = "webhook-keys.jsonl";

/// The key file, open for appending.
pub(super) struct KeyFile {
    path: PathBuf,
    file: File,
    /// The keys and sessions it holds, oldest first (newest kept when it is rewritten).
    entries: std::collections::VecDeque<(String, String)>,
    lines: usize,
}

impl KeyFile {
    /// Opens (or creates) the key file in `dir` and gives every key it holds to `store`, oldest
    /// first. A line that cannot be read (the last one, torn by a kill) is skipped and said.
    pub(super) fn open(dir: &Path, store: &mut dyn QuestionStore) -> std::io::Result<KeyFile> {
        let path = dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let mut entries = std::collections::VecDeque::new();
        let mut lines = 0;
        for (n, line) in text.lines().enumerate() {
            lines += 1;
            let entry = serde_json::from_str::<Value>(line).ok().and_then(|v| {
                let key = v.get("key")?.as_str()?.to_owned();
                let session = v.get("session")?.as_str()?.to_owned();
                Some((key, session))
            });
            let Some((key, session)) = entry else {
                tracing::warn!(file = %path.display(), line = n + 1, "a webhook key line that cannot be read is skipped");
                continue;
            };
            store
                .remember_key(&key, &session, 0)
                .map_err(std::io::Error::other)?;
            entries.push_back((key, session));
            if entries.len() > WEBHOOK_KEYS_KEPT {
                entries.pop_front();
            }
        }
        let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
        if !text.is_empty() && !text.ends_with('\n') {
            // The torn line is ended, so that the next key starts a line of its own.
            file.write_all(b"\n")?;
            file.sync_data()?;
        }
        Ok(KeyFile {
            path,
            file,
            entries,
            lines,
        })
    }

    /// Appends a key and its session and syncs the file; rewrites it with the newest keys when
    /// it holds twice as many lines as are kept.
    pub(super) fn append(&mut self, key: &str, session: &str) -> std::io::Result<()> {
        let line = format!("{}\n", json!({ "key": key, "session": session }));
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        self.lines += 1;
        self.entries.push_back((key.to_owned(), session.to_owned()));
        if self.entries.len() > WEBHOOK_KEYS_KEPT {
            self.entries.pop_front();
        }
        if self.lines > 2 * WEBHOOK_KEYS_KEPT {
            self.rewrite()?;
        }
        Ok(())
    }

    fn rewrite(&mut self) -> std::io::Result<()> {
        let tmp = self.path.with_extension("jsonl.tmp");
        {
            let mut out = std::io::BufWriter::new(File::create(&tmp)?);
            for (key, session) in &self.entries {
                writeln!(out, "{}", json!({ "key": key, "session": session }))?;
            }
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.lines = self.entries.len();
        Ok(())
    }
}
