//! The runtime's process: started with exactly the environment the protocol gives it, its stdout
//! read as bounded lines into a channel, its stderr kept as a bounded tail, and stopped by
//! `shutdown`, by `SIGTERM` or by `SIGKILL`.

use std::collections::VecDeque;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

use crate::outside::MAX_LINE;

/// How much of the runtime's stderr is kept.
pub const STDERR_KEPT: usize = 64 * 1024;

/// How many of stderr's last lines a failure quotes.
pub const STDERR_QUOTED: usize = 20;

/// What the stdout reader hands over.
pub(super) enum Out {
    /// One line without its `\n`, clipped to `MAX_LINE + 1` bytes (enough to know it is over).
    Line(Vec<u8>),
    /// stdout was closed (the process exited or closed it).
    Eof,
}

/// The last bytes of the runtime's stderr.
#[derive(Default)]
pub(super) struct StderrTail {
    bytes: VecDeque<u8>,
    dropped: bool,
}

impl StderrTail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        if self.bytes.len() > STDERR_KEPT {
            let extra = self.bytes.len() - STDERR_KEPT;
            self.bytes.drain(..extra);
            self.dropped = true;
        }
    }

    /// Forgets what was kept (a kept process starts a new run).
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.dropped = false;
    }

    /// Its lines (lossy UTF-8), the first one dropped if it was cut.
    pub(super) fn lines(&self) -> Vec<String> {
        let (a, b) = self.bytes.as_slices();
        let text = String::from_utf8_lossy(&[a, b].concat()).into_owned();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if self.dropped && !lines.is_empty() {
            lines.remove(0);
        }
        lines
    }
}

/// A running runtime.
pub(super) struct Process {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(super) out: mpsc::Receiver<Out>,
    status: Option<ExitStatus>,
}

/// Starts `command` (argv) in `cwd` with exactly `env`.
pub(super) fn spawn(
    command: &[String],
    cwd: Option<&Path>,
    env: &[(String, String)],
    stderr: Arc<Mutex<StderrTail>>,
) -> std::io::Result<Process> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("the command is empty"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn()?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("stdout is piped");
    let err = child.stderr.take().expect("stderr is piped");
    let (tx, out) = mpsc::channel(1024);
    tokio::spawn(read_lines(stdout, tx));
    let tail = stderr;
    tokio::spawn(async move {
        let mut err = err;
        let mut buf = vec![0u8; 8192];
        while let Ok(n) = err.read(&mut buf).await {
            if n == 0 {
                break;
            }
            tail.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]);
        }
    });
    Ok(Process {
        child,
        stdin,
        out,
        status: None,
    })
}

/// Reads stdout as lines of at most `MAX_LINE + 1` kept bytes (the rest of a longer line is read
/// and dropped), so that no output makes agentsim hold more than that per line.
async fn read_lines(stdout: ChildStdout, tx: mpsc::Sender<Out>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line: Vec<u8> = Vec::new();
    let mut started = false;
    while let Ok(buf) = reader.fill_buf().await {
        if buf.is_empty() {
            if started && tx.send(Out::Line(std::mem::take(&mut line))).await.is_err() {
                return;
            }
            break;
        }
        started = true;
        let (part, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = (MAX_LINE + 1).saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        let used = end.unwrap_or(buf.len());
        reader.consume(used);
        if end.is_some() {
            started = false;
            if tx.send(Out::Line(std::mem::take(&mut line))).await.is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Out::Eof).await;
}

impl Process {
    /// The process id, while it runs.
    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Writes one line; an error means the runtime no longer reads its stdin.
    pub(super) async fn write(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin is closed"))?;
        stdin.write_all(line.as_bytes()).await?;
        stdin.flush().await
    }

    /// Drops the lines already read but not taken (a kept process's lines written after its
    /// run's last `idle`, judged by nothing, as lines crossing `shutdown` are); `false` if its
    /// stdout is closed.
    pub(super) fn drain(&mut self) -> bool {
        loop {
            match self.out.try_recv() {
                Ok(Out::Line(_)) => {}
                Ok(Out::Eof) | Err(mpsc::error::TryRecvError::Disconnected) => return false,
                Err(mpsc::error::TryRecvError::Empty) => return true,
            }
        }
    }

    /// Closes its stdin (after `shutdown`).
    pub(super) fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Its exit status, waiting at most `wait` for it.
    pub(super) async fn exit_status(&mut self, wait: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Ok(status)) = tokio::time::timeout(wait, self.child.wait()).await {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// `SIGKILL`, and reaps it.
    pub(super) async fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.start_kill();
            if let Ok(status) = self.child.wait().await {
                self.status = Some(status);
            }
        }
    }

    /// `SIGTERM`, then `SIGKILL` after `grace`.
    pub(super) async fn terminate(&mut self, grace: Duration) {
        if self.status.is_some() {
            return;
        }
        if let Some(pid) = self.pid().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) with a pid this process started and has not reaped (the child is
            // still ours: `status` is unset), and a valid signal number.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        if self.exit_status(grace).await.is_none() {
            self.kill().await;
        }
    }
}

/// An exit status as a person reads it: `status 2`, `signal 9 (SIGKILL)`.
pub(super) fn describe(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "still running".to_owned(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("status {code}"),
            (None, Some(sig)) => {
                let name = match sig {
                    libc::SIGKILL => " (SIGKILL)",
                    libc::SIGTERM => " (SIGTERM)",
                    libc::SIGSEGV => " (SIGSEGV)",
                    libc::SIGABRT => " (SIGABRT)",
                    libc::SIGINT => " (SIGINT)",
                    libc::SIGPIPE => " (SIGPIPE)",
                    _ => "",
                };
                format!("signal {sig}{name}")
            }
            (None, None) => "an unknown status".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stderr_tail_keeps_the_last_bytes_and_drops_a_cut_first_line() {
        let mut t = StderrTail::default();
        t.push(b"one\ntwo\n");
        assert_eq!(t.lines(), ["one", "two"]);
        let big = vec![b'x'; STDERR_KEPT];
        t.push(&big);
        t.push(b"\nlast\n");
        assert_eq!(t.lines(), ["last"]);
    }
}
