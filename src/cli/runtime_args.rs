//! The flags that point `run` and `check` at a user's runtime instead of agentsim's own: the
//! command, its environment allow-list, its working directory, the time scale and the timeouts of
//! the runtime protocol.

use std::path::PathBuf;
use std::time::Duration;

use agentsim::outside_run::{split_command, EnvEntry, Options, Timeouts};

use super::runtime_config::{self, config_path, parse_scale, parse_timeout};

#[derive(clap::Args, Clone, Debug, Default)]
#[command(next_help_heading = "Your runtime (docs/runtime-protocol.md)")]
pub(crate) struct RuntimeArgs {
    /// Run against your own runtime: a command that speaks the runtime protocol on its stdin and
    /// stdout (`"python my_agent.py"`), split into words as a shell would, but run by no shell.
    /// Its model calls go to agentsim's mock server (ANTHROPIC_BASE_URL, OPENAI_BASE_URL).
    #[arg(long, value_name = "CMD")]
    pub(crate) runtime: Option<String>,
    /// Pass a variable of agentsim's environment to the runtime (NAME), or set one (NAME=VALUE).
    /// The runtime gets nothing else of agentsim's environment beyond PATH, HOME, LANG and a few
    /// basics. Repeatable.
    #[arg(long = "runtime-env", value_name = "NAME[=VALUE]", value_parser = parse_env)]
    pub(crate) runtime_env: Vec<EnvEntry>,
    /// The runtime's working directory (default: agentsim's).
    #[arg(long = "runtime-cwd", value_name = "DIR")]
    pub(crate) runtime_cwd: Option<PathBuf>,
    /// Real seconds per scripted second for tool latencies and `advance` steps (default: 1 for a
    /// scenario with a `wait: false` step, whose expectations are judged while a turn runs;
    /// 0.2 otherwise).
    #[arg(long, value_name = "SCALE", value_parser = parse_scale)]
    pub(crate) time_scale: Option<f64>,
    /// How long the runtime may take to answer `hello` with `ready` (default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub(crate) ready_timeout: Option<Duration>,
    /// How long the runtime may stay silent (no line, no model request) while agentsim waits for
    /// it, not counting the time agentsim holds a tool's result back (default 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub(crate) idle_timeout: Option<Duration>,
    /// How long the runtime may take to exit after `shutdown` (then SIGTERM, and SIGKILL a second
    /// later; default 5s).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub(crate) shutdown_timeout: Option<Duration>,
    /// How long one whole run may take (default 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub(crate) run_timeout: Option<Duration>,
    /// A config file whose `runtime:` block gives the runtime and these settings, so that they
    /// need not be repeated (default: `agentsim.yaml` in the current directory, if there is one).
    /// Flags given here win over the file, one by one.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

fn parse_env(s: &str) -> Result<EnvEntry, String> {
    EnvEntry::parse(s)
}

impl RuntimeArgs {
    /// Whether the run goes to an outside runtime: `--runtime`, or a config file that may give
    /// one (whether it does is known once it is read).
    pub(crate) fn given(&self) -> bool {
        self.runtime.is_some() || config_path(self.config.as_deref()).is_some()
    }

    /// The options of a run against the runtime, if `--runtime` or the config file's `runtime:`
    /// block gives one; the flags win over the file.
    pub(crate) fn options(&self, seed: Option<u64>) -> Result<Option<Options>, String> {
        let config = match config_path(self.config.as_deref()) {
            Some(path) => runtime_config::load(&path)?,
            None => None,
        };
        let config = config.unwrap_or_default();
        let command = match &self.runtime {
            Some(command) => split_command(command).map_err(|e| format!("--runtime: {e}"))?,
            None if !config.command.is_empty() => config.command.clone(),
            None => {
                let lonely = [
                    (!self.runtime_env.is_empty(), "--runtime-env"),
                    (self.runtime_cwd.is_some(), "--runtime-cwd"),
                    (self.time_scale.is_some(), "--time-scale"),
                    (self.ready_timeout.is_some(), "--ready-timeout"),
                    (self.idle_timeout.is_some(), "--idle-timeout"),
                    (self.shutdown_timeout.is_some(), "--shutdown-timeout"),
                    (self.run_timeout.is_some(), "--run-timeout"),
                ];
                if let Some((_, flag)) = lonely.iter().find(|(given, _)| *given) {
                    return Err(format!(
                        "{flag} is for a run against your runtime: give --runtime CMD, or a config file with a `runtime:` block (agentsim.yaml, or --config FILE)"
                    ));
                }
                return Ok(None);
            }
        };
        let defaults = Timeouts::default();
        let mut env = config.env.clone();
        env.extend(self.runtime_env.iter().cloned());
        let config_cwd = (!config.command.is_empty()).then(|| config.cwd.clone());
        Ok(Some(Options {
            command,
            cwd: self.runtime_cwd.clone().or(config_cwd),
            env,
            timeouts: Timeouts {
                ready: self
                    .ready_timeout
                    .or(config.ready)
                    .unwrap_or(defaults.ready),
                idle: self.idle_timeout.or(config.idle).unwrap_or(defaults.idle),
                shutdown: self
                    .shutdown_timeout
                    .or(config.shutdown)
                    .unwrap_or(defaults.shutdown),
                run: self.run_timeout.or(config.run).unwrap_or(defaults.run),
            },
            time_scale: self.time_scale.or(config.time_scale),
            seed,
            model_faults: None,
            tool_faults: None,
            reuse: None,
        }))
    }
}
