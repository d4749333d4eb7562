//! The `agentsim` binary as the tests run it, and how they read what it printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty directory `group/name` under the target directory.
pub(super) fn fresh_dir(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The one file in `dir` (a finding `explore` wrote), and its text.
pub(super) fn the_file_in(dir: &Path) -> (PathBuf, String) {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    (files[0].clone(), text)
}

/// `agentsim ARGS` run from the crate's root, with no seed from the environment.
pub(super) fn agentsim(args: &[&str]) -> Output {
    agentsim_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, &[])
}

/// `agentsim ARGS` run in `dir`, with no seed from the environment and `env` set.
pub(super) fn agentsim_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentsim"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("AGENTSIM_SEED");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("the binary runs")
}

/// What a command printed on stdout.
pub(super) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a command printed on stderr.
pub(super) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A command's stdout then stderr.
pub(super) fn text(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}
