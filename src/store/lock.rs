//! Ownership of what a service persists (a `--db` file, a `--state` directory): one process at a
//! time. The owner holds an exclusive `flock` on a lock file beside it for its whole life and
//! writes into that file who it is (its process id, when it started, where it listens); another
//! process that tries is refused with that description. The kernel releases the lock when the
//! owner exits in any way, a SIGKILL included, so a crashed owner never locks anything for good:
//! the stale description is simply overwritten by the next owner.
//!
//! `flock` is advisory and local: it keeps agentsim processes of one machine apart, not other
//! programs, and not processes on other machines sharing a network file system.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// An exclusive lock on a lock file, held until dropped (or until the process ends).
#[derive(Debug)]
pub struct OwnerLock {
    file: File,
    path: PathBuf,
    since: String,
}

impl OwnerLock {
    /// Takes the lock file at `path` (created if missing) for this process, without waiting. `what`
    /// names what it guards, for the error: `Err` says which process owns it (as that process
    /// described itself) and what to do.
    pub fn acquire(path: &Path, what: &str) -> Result<OwnerLock, String> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("{what}: cannot open its lock file {}: {e}", path.display()))?;
        if let Err(e) = try_lock(&file) {
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(format!("{what}: cannot lock {}: {e}", path.display()));
            }
            let mut owner = String::new();
            let _ = file.read_to_string(&mut owner);
            let owner = describe_owner(&owner);
            return Err(format!(
                "{what} is in use by another agentsim serve ({owner}; lock file {}). One service owns it for its whole life: stop that one first, or give this one another file",
                path.display()
            ));
        }
        let since = crate::store::questions::iso_timestamp(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        );
        let mut lock = OwnerLock {
            file,
            path: path.to_owned(),
            since,
        };
        lock.describe(None)
            .map_err(|e| format!("{what}: cannot write {}: {e}", lock.path.display()))?;
        Ok(lock)
    }

    /// Writes who owns the lock into the lock file: this process's id, since when, and where it
    /// listens (once it does).
    pub fn describe(&mut self, listening: Option<&str>) -> std::io::Result<()> {
        let text = serde_json::json!({
            "pid": std::process::id(),
            "since": self.since,
            "listening": listening,
        })
        .to_string();
        self.file.set_len(0)?;
        self.file.rewind()?;
        self.file.write_all(text.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.sync_data()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The owner as its lock file describes it.
fn describe_owner(text: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text.trim()) else {
        return "a process that has not described itself yet".to_owned();
    };
    let mut out = match v.get("pid").and_then(serde_json::Value::as_u64) {
        Some(pid) => format!("process {pid}"),
        None => "a process".to_owned(),
    };
    if let Some(at) = v.get("listening").and_then(serde_json::Value::as_str) {
        out.push_str(&format!(", listening on {at}"));
    }
    if let Some(since) = v.get("since").and_then(serde_json::Value::as_str) {
        out.push_str(&format!(", since {since}"));
    }
    out
}

#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a file descriptor this function borrows for the call's duration.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(unix))]
fn try_lock(_file: &File) -> std::io::Result<()> {
    // No flock here: ownership is not enforced on this platform.
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_with_the_first_named_and_a_dropped_lock_is_free_again() {
        let dir = std::env::temp_dir().join(format!("agentsim-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let mut first = OwnerLock::acquire(&path, "--db x").unwrap();
        first.describe(Some("http://127.0.0.1:9")).unwrap();
        // A second open file description in the same process conflicts as another process would.
        let e = OwnerLock::acquire(&path, "--db x").unwrap_err();
        assert!(
            e.contains(&format!("process {}", std::process::id())),
            "{e}"
        );
        assert!(e.contains("listening on http://127.0.0.1:9"), "{e}");
        drop(first);
        let again = OwnerLock::acquire(&path, "--db x").unwrap();
        assert_eq!(again.path(), path);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
