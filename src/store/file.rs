//! `state.json` and `context.jsonl` in a directory: atomic state writes (temporary file, fsync,
//! rename, fsync of the directory) and synced journal appends; beside them `scripted.json`, how
//! far a service's scripted model and tools went.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `state.json` and `context.jsonl` in a directory.
#[derive(Clone, Debug)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// A store in `dir` (created if needed).
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<FileStore> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(FileStore { dir })
    }

    /// Path of `state.json`.
    pub(crate) fn state_path(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// Path of `context.jsonl`.
    pub(crate) fn context_path(&self) -> PathBuf {
        self.dir.join("context.jsonl")
    }

    /// Path of `scripted.json`: how far a service's scripted model and tools went.
    pub(crate) fn scripts_path(&self) -> PathBuf {
        self.dir.join("scripted.json")
    }

    /// Replaces `state.json` atomically: a temporary file, fsync, rename, fsync of the directory.
    pub fn write_state(&self, json: &str) -> std::io::Result<()> {
        self.replace(&self.state_path(), json)
    }

    /// Replaces `scripted.json` atomically, as `state.json`.
    pub(crate) fn write_scripts(&self, json: &str) -> std::io::Result<()> {
        self.replace(&self.scripts_path(), json)
    }

    /// `scripted.json`, if there is one.
    pub(crate) fn load_scripts(&self) -> std::io::Result<Option<String>> {
        match fs::read_to_string(self.scripts_path()) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn replace(&self, path: &Path, json: &str) -> std::io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(json.as_bytes())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        sync_dir(&self.dir)
    }

    /// Appends lines to `context.jsonl` and syncs them.
    pub fn append_context(&self, lines: &str) -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.context_path())?;
        f.write_all(lines.as_bytes())?;
        f.sync_data()
    }

    /// Rewrites `context.jsonl` atomically with only the lines of the sessions `keep` names
    /// (a torn last line goes too): what a driver does once sessions ended, so that the journal
    /// holds what a restore needs and no more. The bytes before and after; a line that is not a
    /// journal entry (not the torn last one) is an error and changes nothing.
    pub(crate) fn compact_context(
        &self,
        keep: impl Fn(&uuid::Uuid) -> bool,
    ) -> std::io::Result<(u64, u64)> {
        #[derive(serde::Deserialize)]
        struct Line {
            agent_session_id: uuid::Uuid,
        }
        let context = match fs::read_to_string(self.context_path()) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
            Err(e) => return Err(e),
        };
        let ends_cleanly = context.is_empty() || context.ends_with('\n');
        let lines: Vec<&str> = context.split_terminator('\n').collect();
        let mut kept = String::new();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Line>(line) {
                Ok(l) if keep(&l.agent_session_id) => {
                    kept.push_str(line);
                    kept.push('\n');
                }
                Ok(_) => {}
                Err(_) if i + 1 == lines.len() && !ends_cleanly => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{} line {}: {e}", self.context_path().display(), i + 1),
                    ))
                }
            }
        }
        if kept.len() != context.len() {
            self.replace(&self.context_path(), &kept)?;
        }
        Ok((context.len() as u64, kept.len() as u64))
    }

    /// Reads both files (`None` for a missing `state.json`, "" for a missing journal).
    pub fn load(&self) -> std::io::Result<(Option<String>, String)> {
        let state = match fs::read_to_string(self.state_path()) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let context = match fs::read_to_string(self.context_path()) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        Ok((state, context))
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    // Directories can be opened and synced on Unix; elsewhere the rename is the best we have.
    match fs::File::open(dir) {
        Ok(d) => d.sync_all().or(Ok(())),
        Err(_) => Ok(()),
    }
}
