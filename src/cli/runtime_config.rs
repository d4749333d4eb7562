//! The `runtime:` block of a config file (`agentsim.yaml` in the current directory, or the file
//! `--config` names): the runtime under test of `run` and `check` written once beside the
//! scenarios instead of on every command line. Flags given on the command line win over it, field
//! by field.
//!
//! ```yaml
//! runtime:
//!   command: python my_agent.py        # or a list of words: [python, my_agent.py]
//!   cwd: .                             # relative to this file (default: this file's folder)
//!   env: [OPENAI_ORG, MODE=test]       # as --runtime-env
//!   time_scale: 0.2                    # as --time-scale
//!   timeouts: { ready: 10s, idle: 30s, shutdown: 5s, run: 5m }
//!   nondeterministic: ['[0-9]{2}:[0-9]{2}:[0-9]{2}']  # as --nondeterministic (explore --determinism)
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentsim::outside_run::{split_command, EnvEntry};
use agentsim::scenario::format::parse_duration;
use serde::Deserialize;

/// The file looked for in the current directory when `--config` is not given.
pub(crate) const DEFAULT_CONFIG: &str = "agentsim.yaml";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    runtime: Option<Block>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    command: Command,
    cwd: Option<PathBuf>,
    #[serde(default)]
    env: Vec<String>,
    time_scale: Option<f64>,
    timeouts: Option<TimeoutsBlock>,
    #[serde(default)]
    nondeterministic: Vec<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Command {
    Line(String),
    Words(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TimeoutsBlock {
    ready: Option<String>,
    idle: Option<String>,
    shutdown: Option<String>,
    run: Option<String>,
}

/// A config file's `runtime:` block, checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RuntimeConfig {
    /// The command's words.
    pub(crate) command: Vec<String>,
    /// The working directory, resolved against the file's folder.
    pub(crate) cwd: PathBuf,
    pub(crate) env: Vec<EnvEntry>,
    pub(crate) time_scale: Option<f64>,
    pub(crate) ready: Option<Duration>,
    pub(crate) idle: Option<Duration>,
    pub(crate) shutdown: Option<Duration>,
    pub(crate) run: Option<Duration>,
    /// Known nondeterminism, as `--nondeterministic` (checked patterns).
    pub(crate) nondeterministic: Vec<String>,
}

/// The config file that applies: `explicit`, else `agentsim.yaml` in the current directory if
/// there is one.
pub(crate) fn config_path(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(p) => Some(p.to_owned()),
        None => {
            let p = PathBuf::from(DEFAULT_CONFIG);
            p.is_file().then_some(p)
        }
    }
}

/// Reads the `runtime:` block of the config file at `path` (`None`: the file has none).
pub(crate) fn load(path: &Path) -> Result<Option<RuntimeConfig>, String> {
    let at = |what: String| format!("{}: {what}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| at(format!("cannot read it: {e}")))?;
    let file: ConfigFile = serde_saphyr::from_str(&text).map_err(|e| at(e.to_string()))?;
    let Some(block) = file.runtime else {
        return Ok(None);
    };
    let command = match block.command {
        Command::Line(line) => {
            split_command(&line).map_err(|e| at(format!("runtime.command: {e}")))?
        }
        Command::Words(words) => words,
    };
    if command.first().is_none_or(|w| w.is_empty()) {
        return Err(at("runtime.command: empty; give the command that starts your runtime, as `python my_agent.py`".to_owned()));
    }
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let cwd = match block.cwd {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => folder.join(dir),
        None => folder.to_owned(),
    };
    let env = block
        .env
        .iter()
        .enumerate()
        .map(|(i, e)| EnvEntry::parse(e).map_err(|m| at(format!("runtime.env[{i}]: {m}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let time_scale = match block.time_scale {
        Some(s) => {
            Some(parse_scale(&s.to_string()).map_err(|m| at(format!("runtime.time_scale: {m}")))?)
        }
        None => None,
    };
    let timeout = |name: &str, value: &Option<String>| -> Result<Option<Duration>, String> {
        value
            .as_deref()
            .map(|v| parse_timeout(v).map_err(|m| at(format!("runtime.timeouts.{name}: {m}"))))
            .transpose()
    };
    let t = block.timeouts.unwrap_or(TimeoutsBlock {
        ready: None,
        idle: None,
        shutdown: None,
        run: None,
    });
    for (i, p) in block.nondeterministic.iter().enumerate() {
        agentsim::explore::outside_determinism::patterns(std::slice::from_ref(p))
            .map_err(|m| at(format!("runtime.nondeterministic[{i}]: {m}")))?;
    }
    Ok(Some(RuntimeConfig {
        command,
        cwd,
        env,
        time_scale,
        ready: timeout("ready", &t.ready)?,
        idle: timeout("idle", &t.idle)?,
        shutdown: timeout("shutdown", &t.shutdown)?,
        run: timeout("run", &t.run)?,
        nondeterministic: block.nondeterministic,
    }))
}

/// A time scale: real seconds per scripted second, above 0 and at most 1000.
pub(crate) fn parse_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1000.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a time scale: a number above 0 and at most 1000 (0.2 makes a scripted second 200 ms)"
        )),
    }
}

/// A timeout: a duration (`10s`, `500ms`, `5m`) longer than 0.
pub(crate) fn parse_timeout(s: &str) -> Result<Duration, String> {
    let ms = parse_duration(s)?;
    if ms == 0 {
        return Err(format!("`{s}`: a timeout must be longer than 0"));
    }
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("agentsim-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agentsim.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_runtime_block_is_read_with_paths_relative_to_its_file() {
        let path = write(
            "ok",
            "runtime:\n  command: python 'my agent.py'\n  env: [HOME_ZONE, MODE=test]\n  time_scale: 0.5\n  timeouts: { idle: 2s }\n",
        );
        let c = load(&path).unwrap().unwrap();
        assert_eq!(c.command, ["python", "my agent.py"]);
        assert_eq!(c.cwd, path.parent().unwrap());
        assert_eq!(
            c.env,
            [
                EnvEntry::Pass("HOME_ZONE".into()),
                EnvEntry::Set("MODE".into(), "test".into())
            ]
        );
        assert_eq!(c.time_scale, Some(0.5));
        assert_eq!(c.idle, Some(Duration::from_secs(2)));
        assert_eq!(c.ready, None);
        let words = write(
            "words",
            "runtime:\n  command: [node, dist/runtime.js]\n  cwd: app\n",
        );
        let c = load(&words).unwrap().unwrap();
        assert_eq!(c.command, ["node", "dist/runtime.js"]);
        assert_eq!(c.cwd, words.parent().unwrap().join("app"));
        assert_eq!(load(&write("none", "{}\n")).unwrap(), None);
    }

    #[test]
    fn a_bad_runtime_block_is_an_error_naming_the_file_and_the_field() {
        let cases = [
            ("unknown", "runtime:\n  command: x\n  comand: y\n", "comand"),
            ("empty", "runtime:\n  command: ''\n", "runtime.command"),
            (
                "no words",
                "runtime:\n  command: []\n",
                "runtime.command: empty",
            ),
            (
                "env",
                "runtime:\n  command: x\n  env: [OPENAI_BASE_URL]\n",
                "runtime.env[0]",
            ),
            (
                "scale",
                "runtime:\n  command: x\n  time_scale: -1\n",
                "runtime.time_scale",
            ),
            (
                "timeout",
                "runtime:\n  command: x\n  timeouts: { run: 0s }\n",
                "runtime.timeouts.run",
            ),
            (
                "quote",
                "runtime:\n  command: \"python 'x\"\n",
                "runtime.command",
            ),
        ];
        for (name, text, said) in cases {
            let path = write(name, text);
            let e = load(&path).unwrap_err();
            assert!(e.starts_with(&path.display().to_string()), "{e}");
            assert!(e.contains(said), "{name}: {e}");
        }
    }
}
