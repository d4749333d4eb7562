//! The `agentsim` binary as the tests run it, and how they read what it printed.

use std::path::Path;
use std::process::{Command, Output};

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
