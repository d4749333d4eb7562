//! How a runtime under test is started and waited for: its command (split as a POSIX shell
//! splits words, but run by no shell), its working directory, the allow-list of its environment,
//! the timeouts of section 8 of the runtime protocol and the time scale.

use std::path::PathBuf;
use std::time::Duration;

/// The variables agentsim sets for the runtime itself; an allow-list entry may not name them.
pub const RESERVED_ENV: [&str; 6] = [
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "AGENTSIM_PROTOCOL",
    "AGENTSIM_STATE_DIR",
];

/// The variables of agentsim's own environment that every runtime gets (with the `LC_*` ones):
/// what a program needs to start.
pub const BASIC_ENV: [&str; 10] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE", "TERM",
];

/// One entry of the environment's allow-list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvEntry {
    /// `NAME`: agentsim's value of `NAME`, if it has one.
    Pass(String),
    /// `NAME=value`: this value.
    Set(String, String),
}

impl EnvEntry {
    /// Parses `NAME` or `NAME=value`; the name must be a portable variable name and not one of
    /// [`RESERVED_ENV`].
    pub fn parse(text: &str) -> Result<EnvEntry, String> {
        let (name, value) = match text.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        let portable = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !portable {
            return Err(format!(
                "`{}` is not a variable name (letters, digits and `_`, not starting with a digit), as in NAME or NAME=value",
                text.escape_debug()
            ));
        }
        if RESERVED_ENV.contains(&name) {
            return Err(format!(
                "`{name}` is set by agentsim for every runtime (the mock server's address, the state directory, the protocol version); it cannot be passed or overridden"
            ));
        }
        Ok(match value {
            Some(v) => EnvEntry::Set(name.to_owned(), v.to_owned()),
            None => EnvEntry::Pass(name.to_owned()),
        })
    }
}

/// The timeouts of section 8 of the runtime protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From the start of the process to `ready`.
    pub ready: Duration,
    /// Silence while agentsim waits for the runtime (not counting the time agentsim itself holds
    /// a tool's result back).
    pub idle: Duration,
    /// From `shutdown` to the process's exit.
    pub shutdown: Duration,
    /// A whole run.
    pub run: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            ready: Duration::from_secs(10),
            idle: Duration::from_secs(30),
            shutdown: Duration::from_secs(5),
            run: Duration::from_secs(300),
        }
    }
}

/// How to run a scenario against a runtime under test.
#[derive(Clone, Debug)]
pub struct Options {
    /// The command, split into words (see [`split_command`]).
    pub command: Vec<String>,
    /// Its working directory (default: agentsim's).
    pub cwd: Option<PathBuf>,
    /// The allow-list of its environment beyond what every runtime gets.
    pub env: Vec<EnvEntry>,
    /// The timeouts.
    pub timeouts: Timeouts,
    /// Real seconds per scripted second (`None`: 1 when an expectation is judged while a turn
    /// runs, that is after a `wait: false` step, else 0.2).
    pub time_scale: Option<f64>,
    /// The seed given in `hello` (default: the scenario's).
    pub seed: Option<u64>,
    /// Model faults the mock server injects in place of replies, each decision a function of
    /// this seed and of where the request was routed (`explore --runtime`).
    pub model_faults: Option<crate::mock_llm::server::RandomFaults>,
    /// Tool faults agentsim injects into the scripted tools' outcomes (`explore --runtime`).
    pub tool_faults: Option<ToolFaults>,
    /// Keep the runtime's process between runs and `reset` it, when it offers `reset`
    /// (`explore --runtime`): the slot of one job, see [`super::Reuse`].
    pub reuse: Option<super::Reuse>,
}

/// Tool faults injected at a rate, each decision a function of the seed, the tool's name and the
/// call's number for that tool in the run: a failure in place of the scripted outcome, extra
/// latency before it, or no outcome at all (a hang, only for a tool with a `timeout`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ToolFaults {
    /// The share of calls that fail, from 0 to 1.
    pub error_rate: f64,
    /// The share of calls that take longer, from 0 to 1.
    pub latency_rate: f64,
    /// The share of the calls of a tool with a `timeout` that never answer, from 0 to 1 (the
    /// runtime must abandon them: capability `tool-timeouts`).
    pub hang_rate: f64,
    /// The seed.
    pub seed: u64,
}

/// A tool fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFault {
    /// The call fails (as a tool that raises), in place of its scripted outcome.
    Fail,
    /// The call's outcome comes this many scripted ms later than scripted.
    Latency(u64),
    /// The call never answers (a tool with a `timeout` only).
    Hang,
}

impl ToolFaults {
    /// The fault of call `call` (from 1) of `tool`, if one is injected; a hang only when the
    /// tool `times_out` (has a `timeout`).
    pub fn decide(&self, tool: &str, call: usize, times_out: bool) -> Option<ToolFault> {
        use crate::model::ids::splitmix64;
        let mut h = self.seed ^ 0x7001_fa17_0000_0000;
        for b in tool.bytes() {
            h = splitmix64(h ^ u64::from(b));
        }
        h = splitmix64(h ^ call as u64);
        let roll = (h >> 11) as f64 / (1u64 << 53) as f64;
        if roll < self.error_rate {
            return Some(ToolFault::Fail);
        }
        let hang_rate = if times_out { self.hang_rate } else { 0.0 };
        if roll < self.error_rate + hang_rate {
            return Some(ToolFault::Hang);
        }
        if roll < self.error_rate + hang_rate + self.latency_rate {
            return Some(ToolFault::Latency(
                [500, 1000, 3000][(splitmix64(h) % 3) as usize],
            ));
        }
        None
    }
}

impl Options {
    /// Options for this command with the defaults.
    pub fn new(command: Vec<String>) -> Options {
        Options {
            command,
            cwd: None,
            env: Vec::new(),
            timeouts: Timeouts::default(),
            time_scale: None,
            seed: None,
            model_faults: None,
            tool_faults: None,
            reuse: None,
        }
    }

    /// The command as a person reads it (each word quoted when it needs to be).
    pub fn display(&self) -> String {
        join_command(&self.command)
    }

    /// The flags beyond `--runtime` that a rerun with these options needs (`--runtime-env`,
    /// `--runtime-cwd`, `--time-scale`, and each timeout that is not the default), each with a
    /// leading space.
    pub fn rerun_flags(&self) -> String {
        let mut flags = String::new();
        for e in &self.env {
            let text = match e {
                EnvEntry::Pass(n) => n.clone(),
                EnvEntry::Set(n, v) => format!("{n}={v}"),
            };
            flags.push_str(&format!(" --runtime-env {}", join_command(&[text])));
        }
        if let Some(dir) = &self.cwd {
            flags.push_str(&format!(
                " --runtime-cwd {}",
                join_command(&[dir.display().to_string()])
            ));
        }
        if let Some(scale) = self.time_scale {
            flags.push_str(&format!(" --time-scale {scale}"));
        }
        let defaults = Timeouts::default();
        for (flag, given, default) in [
            ("--ready-timeout", self.timeouts.ready, defaults.ready),
            ("--idle-timeout", self.timeouts.idle, defaults.idle),
            (
                "--shutdown-timeout",
                self.timeouts.shutdown,
                defaults.shutdown,
            ),
            ("--run-timeout", self.timeouts.run, defaults.run),
        ] {
            if given != default {
                let ms = given.as_millis();
                if ms % 1000 == 0 {
                    flags.push_str(&format!(" {flag} {}s", ms / 1000));
                } else {
                    flags.push_str(&format!(" {flag} {ms}ms"));
                }
            }
        }
        flags
    }
}

/// Splits a command into words as a POSIX shell does (blanks separate words; `'...'` keeps
/// everything; `"..."` keeps everything but `\"`, `\\`, `` \` `` and `\$`; a backslash outside
/// quotes keeps the next character), with no expansion at all: no `$VAR`, no globs, no pipes.
pub fn split_command(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("a single quote is not closed".to_owned()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '`' | '$')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("a double quote is not closed".to_owned()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("a double quote is not closed".to_owned()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(c) => word.push(c),
                    None => return Err("the command ends with a lone backslash".to_owned()),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err("the command is empty".to_owned());
    }
    Ok(words)
}

/// Words as one command line a shell would split back into the same words.
pub fn join_command(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            let plain = !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        split_command(text).unwrap()
    }

    #[test]
    fn commands_split_as_a_shell_splits_them_without_expanding_anything() {
        assert_eq!(words("python my_agent.py"), ["python", "my_agent.py"]);
        assert_eq!(
            words("  a\t 'b c'  \"d \\\" e\" f\\ g "),
            ["a", "b c", "d \" e", "f g"]
        );
        assert_eq!(words("echo $HOME '*'"), ["echo", "$HOME", "*"]);
        assert_eq!(words("a''b \"\""), ["ab", ""]);
        assert_eq!(words(r#""a\nb""#), [r"a\nb"]);
        for bad in ["", "   ", "'open", "\"open", "trailing\\"] {
            assert!(split_command(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_joined_command_splits_back_into_its_words() {
        for w in [
            vec!["python", "my agent.py"],
            vec!["sh", "-c", "echo 'hi' && exit 1"],
            vec!["", "x=1"],
        ] {
            let w: Vec<String> = w.into_iter().map(String::from).collect();
            assert_eq!(split_command(&join_command(&w)).unwrap(), w);
        }
    }

    #[test]
    fn env_entries_pass_or_set_and_refuse_what_agentsim_sets() {
        assert_eq!(
            EnvEntry::parse("LOG").unwrap(),
            EnvEntry::Pass("LOG".into())
        );
        assert_eq!(
            EnvEntry::parse("A_B=x=y").unwrap(),
            EnvEntry::Set("A_B".into(), "x=y".into())
        );
        for bad in [
            "",
            "=x",
            "1A",
            "A-B",
            "ANTHROPIC_BASE_URL=x",
            "AGENTSIM_STATE_DIR",
        ] {
            assert!(EnvEntry::parse(bad).is_err(), "{bad:?}");
        }
    }
}
