//! What a run against an outside runtime gives: the [`Outcome`] with its first [`Failure`], the
//! transcript, the mock server's report and the runtime's stderr, and its text and JSON renderings.

use serde_json::{json, Value};

use crate::mock_llm::server::Report;
use crate::outside::ProtocolError;
use crate::report;

/// Why a run against an outside runtime failed.
#[derive(Clone, Debug, PartialEq)]
pub enum FailureKind {
    /// An `expect` step did not hold.
    Expectation,
    /// A named check broke: a wire check of the mock server (`tool-pairing`,
    /// `replayed-history`, `request-format`), `no-display-leak` or `idle`.
    Check(String),
    /// A line of the runtime broke the protocol.
    Protocol(ProtocolError),
    /// A model request did not name a conversation agentsim knows, though the runtime offered
    /// the capability `conversation-header`.
    ConversationHeader,
    /// A timeout of section 8: `ready`, `idle`, `shutdown` or `run`.
    Timeout(&'static str),
    /// The process exited before `shutdown`, or could not be started.
    UnexpectedExit,
    /// A model request the scenario has no reply for.
    ModelMiss,
    /// A tool called more times than its script has entries.
    ToolScriptExhausted,
    /// Scripted model replies never served.
    UnusedReplies,
    /// Per-call tool outcomes never used.
    UnusedToolOutcomes,
    /// The scenario expects a check to break and none did.
    ExpectedViolation(String),
    /// The expected check broke, ending the run, before `expect` steps that were never judged.
    UncheckedExpectations(String),
}

impl FailureKind {
    /// The failure's name in reports (`expectation`, `tool-pairing`, `protocol`, ...).
    pub fn name(&self) -> String {
        match self {
            FailureKind::Expectation => "expectation".to_owned(),
            FailureKind::Check(name) => name.clone(),
            FailureKind::Protocol(e) => e.kind.as_str().to_owned(),
            FailureKind::ConversationHeader => "conversation-header".to_owned(),
            FailureKind::Timeout(_) => "timeout".to_owned(),
            FailureKind::UnexpectedExit => "unexpected-exit".to_owned(),
            FailureKind::ModelMiss => "model-miss".to_owned(),
            FailureKind::ToolScriptExhausted => "tool-script-exhausted".to_owned(),
            FailureKind::UnusedReplies => "unused-replies".to_owned(),
            FailureKind::UnusedToolOutcomes => "unused-tool-outcomes".to_owned(),
            FailureKind::ExpectedViolation(_) => "expected-violation".to_owned(),
            FailureKind::UncheckedExpectations(_) => "unchecked-expectations".to_owned(),
        }
    }
}

/// The first failure of a run, with where it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// What failed.
    pub kind: FailureKind,
    /// The 1-based step during or after which it happened (`None`: before the first step or
    /// after the last).
    pub step: Option<usize>,
    /// The step's line and column in the file (0, 0 without a step).
    pub location: (u32, u32),
    /// What was seen, for a person (the runtime's last stderr lines included where they help).
    pub message: String,
}

impl Failure {
    /// The failure as JSON: `kind`, `message`, and `step`, `line`, `column` when located.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"kind": self.kind.name(), "message": self.message});
        if let Some(step) = self.step {
            v["step"] = step.into();
        }
        if self.location.0 > 0 {
            v["line"] = self.location.0.into();
            v["column"] = self.location.1.into();
        }
        if let FailureKind::Protocol(e) = &self.kind {
            v["runtime_line"] = e.line.into();
            v["text"] = e.text.clone().into();
        }
        v
    }
}

/// One entry of an outside run's transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// How many model exchanges the mock server had served when it happened (its exchanges are
    /// shown between the entries by this count).
    pub exchanges: u64,
    /// The line, as shown (one line, without a newline).
    pub text: String,
    /// What it draws in the page's sequence, if anything.
    pub row: Option<report::html::Row>,
}

/// The result of running a scenario against an outside runtime.
#[derive(Debug)]
pub struct Outcome {
    /// The scenario's name.
    pub name: String,
    /// Its file, as given.
    pub path: String,
    /// The seed given in `hello`.
    pub seed: u64,
    /// The runtime's command, as a person types it.
    pub command: String,
    /// What the runtime's `ready` offered.
    pub capabilities: Vec<String>,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
    /// The check the scenario expected to break, and did (a reproduced bug).
    pub reproduced: Option<String>,
    /// agentsim's and the runtime's lines, in order.
    pub entries: Vec<Entry>,
    /// Every `send` of the runtime, as (conversation, text), in order.
    pub sent: Vec<(String, String)>,
    /// For each send of `sent`, the `seq` of the last `user` line written before it.
    pub sent_seq: Vec<u64>,
    /// Every `tool_call` of the runtime, as (conversation, tool, input), in order.
    pub tool_calls: Vec<(String, String, Value)>,
    /// The mock server's journal, one JSON value per exchange.
    pub exchanges: Vec<Value>,
    /// The mock server's report.
    pub model: Report,
    /// The runtime's last stderr lines (of its last process).
    pub stderr: Vec<String>,
    /// The `expect` steps judged while a turn was still running: their result depends on timing.
    pub timed_steps: Vec<usize>,
    /// The time scale used.
    pub time_scale: f64,
    /// Each scripted tool's outcomes as delivered, per tool, in call order (injected tool
    /// faults included).
    pub tool_steps: std::collections::BTreeMap<String, Vec<crate::drive::backend::ToolStep>>,
    /// The tool faults injected, as (tool, call number from 1, fault).
    pub tool_faults: Vec<(String, usize, super::ToolFault)>,
    /// The model request (exchange number) at which the failing check broke, when it broke on
    /// a model request (a wire check, or a check read from the requests).
    pub broke_at: Option<u64>,
    /// The runtime's flags beyond `--runtime` that a rerun needs (`--runtime-env`, ...), each
    /// with a leading space.
    pub flags: String,
    /// The wall time of each `user` step that waited for the runtime: from agentsim's `user`
    /// line to the runtime's `idle` (for `agentsim bench runtime`).
    pub user_steps: Vec<std::time::Duration>,
}

impl Outcome {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// The command that reruns this run.
    pub fn rerun_command(&self) -> String {
        format!(
            "agentsim run {} --runtime {}{} --seed {}",
            super::options::join_command(std::slice::from_ref(&self.path)),
            super::options::join_command(std::slice::from_ref(&self.command)),
            self.flags,
            self.seed
        )
    }

    /// The transcript: agentsim's and the runtime's lines with the model exchanges between them,
    /// each line ending with a newline.
    pub fn transcript(&self) -> String {
        let mut out = String::new();
        let mut next = 0usize;
        let mut flush_until = |n: u64, out: &mut String| {
            while next < self.exchanges.len()
                && self.exchanges[next]
                    .get("exchange")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    <= n
            {
                for line in crate::mock_llm::transcript::render(&self.exchanges[next]).lines() {
                    out.push_str("  ");
                    out.push_str(line);
                    out.push('\n');
                }
                next += 1;
            }
        };
        for e in &self.entries {
            flush_until(e.exchanges, &mut out);
            out.push_str(&report::terminal(&e.text));
            out.push('\n');
        }
        flush_until(u64::MAX, &mut out);
        out
    }

    /// The whole text report: the heading, the transcript, and the verdict with its reasons.
    pub fn text(&self) -> String {
        let mut out = format!(
            "scenario: {} ({})\nruntime: {} (seed {}, time scale {})\ncapabilities: {}\n\n",
            report::terminal(&self.name),
            report::terminal(&self.path),
            report::terminal(&self.command),
            self.seed,
            self.time_scale,
            if self.capabilities.is_empty() {
                "none".to_owned()
            } else {
                self.capabilities.join(", ")
            }
        );
        out.push_str(&self.transcript());
        out.push('\n');
        if !self.timed_steps.is_empty() {
            let steps: Vec<String> = self.timed_steps.iter().map(|s| s.to_string()).collect();
            out.push_str(&format!(
                "timing: the expectations of step {} were judged while a turn was running, in real time\n",
                steps.join(", ")
            ));
        }
        match (&self.failure, &self.reproduced) {
            (None, Some(check)) => {
                out.push_str(&format!("PASSED: reproduces {check}, as expected\n"))
            }
            (None, None) => out.push_str("PASSED\n"),
            (Some(f), _) => {
                out.push_str(&format!("FAILED: {}\n", report::terminal(&f.message)));
                if !self.stderr.is_empty() {
                    out.push_str("the runtime's last stderr lines:\n");
                    for line in self
                        .stderr
                        .iter()
                        .rev()
                        .take(super::process::STDERR_QUOTED)
                        .rev()
                    {
                        out.push_str(&format!("  | {}\n", report::terminal(line)));
                    }
                }
            }
        }
        out
    }

    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "path": self.path,
            "runtime": self.command,
            "seed": self.seed,
            "time_scale": self.time_scale,
            "capabilities": self.capabilities,
            "passed": self.passed(),
            "reproduced": self.reproduced,
            "failure": self.failure.as_ref().map(Failure::to_json),
            "timed_steps": self.timed_steps,
            "transcript": self.entries.iter().map(|e| json!({"exchanges": e.exchanges, "text": e.text})).collect::<Vec<_>>(),
            "model": self.model,
            "stderr": self.stderr,
        })
    }
}
