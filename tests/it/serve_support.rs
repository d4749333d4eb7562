//! The fixture of the serve tests that kill `agentsim serve` and start it again on the same
//! files (`serve_durable.rs`, `serve_scale.rs`): a scenario in a fresh temporary directory, the
//! command line that serves it (with the database and the runtime's state there when asked), and
//! the running instance, killed with SIGKILL and started again. Every start and stop is bounded.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::serve::{spawn_listening, Child};

/// A fresh temporary directory for the test `name` (this process's own).
pub(super) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentsim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A path as a command-line argument.
pub(super) fn text(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// Runs the binary with `args`, expecting it to stop by itself within ten seconds: its exit code
/// and stderr. One that is still running then (it served instead of refusing) is killed, and
/// the code is `None`.
pub(super) fn run_bounded(args: &[String]) -> (Option<i32>, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    (code, stderr)
}

/// A scenario served from a temporary directory, started, killed and started again. Dropped,
/// it kills the instance and removes the directory.
pub(super) struct Served {
    /// The temporary directory: the scenario, and the database and state when asked for.
    pub(super) dir: PathBuf,
    /// The command line after the binary's name, `--addr 127.0.0.1:0` last.
    pub(super) args: Vec<String>,
    server: Option<Child>,
    /// `http://ADDR` of the running instance (of the last one once it is killed).
    pub(super) base: String,
}

impl Served {
    /// `serve DIR/scenario.yaml --addr 127.0.0.1:0` with `yaml` written there, in the fresh
    /// temporary directory of `name`; not started.
    pub(super) fn new(name: &str, yaml: &str) -> Served {
        let dir = temp_dir(name);
        let file = dir.join("scenario.yaml");
        std::fs::write(&file, yaml).unwrap();
        Served {
            args: vec!["serve".to_owned(), text(&file)],
            dir,
            server: None,
            base: String::new(),
        }
    }

    /// The SQLite database `--db` names: `DIR/sessions.db`.
    pub(super) fn db(&self) -> PathBuf {
        self.dir.join("sessions.db")
    }

    /// The runtime's state directory `--state` names: `DIR/state`.
    pub(super) fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Serves with `--db DIR/sessions.db`.
    pub(super) fn with_db(self) -> Served {
        let db = text(&self.db());
        self.with(&["--db", &db])
    }

    /// Serves with `--state DIR/state`.
    pub(super) fn with_state(self) -> Served {
        let state = text(&self.state());
        self.with(&["--state", &state])
    }

    /// Serves with these further arguments.
    pub(super) fn with(mut self, args: &[&str]) -> Served {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// The command line, `--addr 127.0.0.1:0` last.
    pub(super) fn command(&self) -> Vec<String> {
        let mut args = self.args.clone();
        args.extend(["--addr".to_owned(), "127.0.0.1:0".to_owned()]);
        args
    }

    /// Starts an instance (none may run) and returns its `http://ADDR`.
    pub(super) fn start(&mut self) -> String {
        assert!(self.server.is_none(), "an instance already runs");
        let args = self.command();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (server, addr) = spawn_listening(&args);
        self.server = Some(server);
        self.base = format!("http://{addr}");
        self.base.clone()
    }

    /// The running instance's process id.
    pub(super) fn pid(&self) -> u32 {
        self.server.as_ref().expect("an instance runs").0.id()
    }

    /// Kills the running instance with SIGKILL and waits for it.
    pub(super) fn kill(&mut self) {
        let mut server = self.server.take().expect("an instance runs");
        server.0.kill().unwrap();
        server.0.wait().unwrap();
    }

    /// Kills the running instance and starts another on the same files: its `http://ADDR`.
    pub(super) fn restart(&mut self) -> String {
        self.kill();
        self.start()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        drop(self.server.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
