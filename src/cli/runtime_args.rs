//! The flags that point `run` and `check` at a user's runtime instead of agentsim's own: the
//! command, its environment allow-list, its working directory, the time scale and the timeouts of
//! the runtime protocol.

use std::path::PathBuf;
use std::time::Duration;

use agentsim::outside_run::{split_command, EnvEntry, Options, Timeouts};
use agentsim::scenario::format::parse_duration;

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
    #[arg(long = "runtime-env", value_name = "NAME[=VALUE]", requires = "runtime", value_parser = parse_env)]
    pub(crate) runtime_env: Vec<EnvEntry>,
    /// The runtime's working directory (default: agentsim's).
    #[arg(long = "runtime-cwd", value_name = "DIR", requires = "runtime")]
    pub(crate) runtime_cwd: Option<PathBuf>,
    /// Real seconds per scripted second for tool latencies and `advance` steps (default: 1 for a
    /// scenario with a `wait: false` step, whose expectations are judged while a turn runs;
    /// 0.2 otherwise).
    #[arg(long, value_name = "SCALE", requires = "runtime", value_parser = parse_scale)]
    pub(crate) time_scale: Option<f64>,
    /// How long the runtime may take to answer `hello` with `ready`.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_timeout)]
    pub(crate) ready_timeout: Duration,
    /// How long the runtime may stay silent (no line, no model request) while agentsim waits for
    /// it, not counting the time agentsim holds a tool's result back.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_timeout)]
    pub(crate) idle_timeout: Duration,
    /// How long the runtime may take to exit after `shutdown` (then SIGTERM, and SIGKILL a second
    /// later).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_timeout)]
    pub(crate) shutdown_timeout: Duration,
    /// How long one whole run may take.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_timeout)]
    pub(crate) run_timeout: Duration,
}

fn parse_env(s: &str) -> Result<EnvEntry, String> {
    EnvEntry::parse(s)
}

fn parse_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1000.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a time scale: a number above 0 and at most 1000 (0.2 makes a scripted second 200 ms)"
        )),
    }
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let ms = parse_duration(s)?;
    if ms == 0 {
        return Err(format!("`{s}`: a timeout must be longer than 0"));
    }
    Ok(Duration::from_millis(ms))
}

impl RuntimeArgs {
    /// The options of a run against the runtime, if `--runtime` was given.
    pub(crate) fn options(&self, seed: Option<u64>) -> Result<Option<Options>, String> {
        let Some(command) = &self.runtime else {
            return Ok(None);
        };
        let words = split_command(command).map_err(|e| format!("--runtime: {e}"))?;
        Ok(Some(Options {
            command: words,
            cwd: self.runtime_cwd.clone(),
            env: self.runtime_env.clone(),
            timeouts: Timeouts {
                ready: self.ready_timeout,
                idle: self.idle_timeout,
                shutdown: self.shutdown_timeout,
                run: self.run_timeout,
            },
            time_scale: self.time_scale,
            seed,
            model_faults: None,
            tool_faults: None,
        }))
    }
}
