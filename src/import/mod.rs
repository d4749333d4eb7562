//! `agentsim import`: real traffic turned into a scenario file (DESIGN section 15). The model's
//! side of a log is frozen into `llm:` scripts that `agentsim mock-llm` serves back: one agent per
//! routed conversation with the smallest `match:` rule that routes it, conversations that continue
//! each other linked (`history: continuation`), tools declared, repeated system prompts written
//! once. What cannot be mapped is kept as a comment in the file and listed in [`Imported::skipped`];
//! bad input is an [`ImportError`] located at its line, never a panic.
//!
//! **Whatever is written is checked before it is given out**: the written text is loaded as a
//! scenario, and its [`crate::mock_llm::book::Book`] is asked every request of the log, in order;
//! every reply, fault and stall must come back as the log has it (see `verify.rs`). A file that
//! passes therefore never says less than the log.
//!
//! Sources, one file each: `journal.rs` (mock-llm's JSONL journal), `bodies.rs` (provider request
//! bodies: their assistant turns become the script), `context.rs` (seed 000's `context.jsonl`
//! with its `state.json`: each session's replies become its agent's script). `assign.rs` addresses exchanges a log does
//! not address (agent, conversation, turn), `plan.rs` gathers agents, scripts and tools,
//! `routes.rs` finds each agent's smallest rule, `yaml.rs` writes the file.

mod assign;
mod bodies;
mod context;
mod journal;
mod plan;
mod routes;
mod verify;
mod yaml;

use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::mock_llm::book::Address;
use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::transcript::Block;
use crate::wire::{Provider, Request};

/// The largest input read, in bytes (a journal of a long session is tens of megabytes).
pub const MAX_INPUT_BYTES: usize = 512 * 1024 * 1024;

/// The largest line of a journal (a request and its reply), in bytes: mock-llm's body limit
/// (32 MiB) and room for the reply.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The text of line `line` of a JSON-lines input (`what` names it in the errors: "a journal",
/// "context.jsonl"), or `None` for a blank line; a line over [`MAX_LINE_BYTES`] or not UTF-8 is
/// an error located at it.
fn line_text<'a>(
    path: &Path,
    line: usize,
    raw: &'a [u8],
    what: &str,
) -> Result<Option<&'a str>, ImportError> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if raw.len() > MAX_LINE_BYTES {
        return Err(ImportError::at(
            path,
            line,
            format!(
                "the line is {} bytes, over the {MAX_LINE_BYTES} bytes a journal line may have",
                raw.len()
            ),
        ));
    }
    std::str::from_utf8(raw).map(Some).map_err(|e| {
        ImportError::at(
            path,
            line,
            format!(
                "the line is not UTF-8 (at byte {}): {what} is JSON text",
                e.valid_up_to()
            ),
        )
    })
}

/// One model call of the log: the request, where it was routed, what answered it.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// Where it is in the input: its line (a journal), or its place in a list of bodies (from 1).
    pub line: usize,
    /// Whether `line` is the place of a body in a list of bodies (else a line of the input).
    pub item: bool,
    /// Its number in the log (the journal's `exchange`), or its place.
    pub number: u64,
    /// The request's wire format.
    pub provider: Provider,
    /// The request body as the server checked it (a Responses input with its references
    /// resolved).
    pub body: Value,
    /// The request, decoded.
    pub request: Request,
    /// The `x-agentsim-agent` header the request carried.
    pub agent_header: Option<String>,
    /// Where the log says it was routed (mock-llm's journal), if it says.
    pub address: Option<Address>,
    /// What answered it.
    pub outcome: Outcome,
}

/// What answered a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A reply: its blocks, and its usage when the log gives one that must be kept.
    Reply {
        /// Text and tool uses, in order.
        blocks: Vec<Block>,
        /// The usage the reply reported.
        usage: Option<Usage>,
        /// Its reasoning (Anthropic thinking blocks, OpenAI Responses reasoning items).
        thinking: Vec<Thought>,
    },
    /// An error in place of a reply.
    Fault(Fault),
    /// No answer.
    Stall,
    /// Not a model call the script answers (a miss, a refused request): served back, it must
    /// not be answered either, and it is listed as a skip.
    Unanswered,
}

/// The model's reasoning in a reply: an Anthropic `thinking` block or an OpenAI Responses
/// `reasoning` item, written as the reply's `thinking:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thought {
    /// How many of the reply's blocks (text, tool uses) come before it.
    pub at: usize,
    /// Its signature (Anthropic) or item id (Responses) as the log has it: the requests that
    /// replay it carry it, and the file's server sends its own in its place (empty for a
    /// redacted block).
    pub id: String,
    /// Its text (a Responses item's summary texts joined); empty for reasoning a script cannot
    /// send (a redacted block, an item without a summary), which is listed as a skip.
    pub text: String,
}

/// An error in place of a reply, as a scenario's `error:` writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Its kind.
    pub kind: LlmErrorKind,
    /// Its message, when not the provider's usual one.
    pub message: Option<String>,
    /// Broken in the middle of a stream.
    pub mid_stream: bool,
    /// The wait the answer asked for, in ms.
    pub retry_after_ms: Option<u64>,
}

/// Something of the log that is not in the written scenario's scripts, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The line (or place in a list) it comes from.
    pub line: usize,
    /// Why it is not mapped.
    pub reason: String,
}

/// A written scenario.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The scenario file's text.
    pub yaml: String,
    /// What the scripts leave out, each also written as a comment in [`Imported::yaml`].
    pub skipped: Vec<Skip>,
    /// How many exchanges of the log the file answers (replies, faults, stalls).
    pub exchanges: usize,
    /// The agents written.
    pub agents: Vec<String>,
}

/// Input that cannot be imported: where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The input file.
    pub path: PathBuf,
    /// The line (or place in a list, from 1); 0 for the file as a whole.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
        }
    }
}

impl std::error::Error for ImportError {}

impl ImportError {
    fn at(path: &Path, line: usize, message: impl Into<String>) -> ImportError {
        ImportError {
            path: path.to_owned(),
            line,
            message: message.into(),
        }
    }
}

/// Which log an input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// mock-llm's (or record's) journal: one JSON exchange a line.
    Journal,
    /// One provider request body, or a JSON list of them.
    Bodies,
    /// Seed 000's `context.jsonl` (the journal of every session operation).
    Context,
}

/// Which log `bytes` hold: a journal when its first line is a JSON object with an `exchange`
/// number, else provider bodies.
pub fn sniff(bytes: &[u8]) -> Source {
    let first = bytes
        .split(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))
        .unwrap_or_default();
    // A journal's line opens with its exchange number (even a line cut short).
    let trimmed = first.trim_ascii_start();
    if trimmed.starts_with(b"{\"exchange\"") {
        return Source::Journal;
    }
    if context::sniff(first) {
        return Source::Context;
    }
    match serde_json::from_slice::<Value>(first) {
        Ok(v) if v.get("exchange").is_some() => Source::Journal,
        _ => Source::Bodies,
    }
}

/// Imports a log read from `path` into a scenario named `name`.
pub fn import(bytes: &[u8], path: &Path, name: &str) -> Result<Imported, ImportError> {
    import_with_state(bytes, path, None, name)
}

/// Imports a log read from `path` into a scenario named `name`; for seed 000's `context.jsonl`,
/// `state` is its `state.json` (its bytes and path), which must agree with it.
pub fn import_with_state(
    bytes: &[u8],
    path: &Path,
    state: Option<(&[u8], &Path)>,
    name: &str,
) -> Result<Imported, ImportError> {
    import_inner(bytes, path, state, name, &std::collections::BTreeSet::new())
}

/// Imports a log as [`import`] does, the agents named in `skills` written `kind: skill` (the
/// scenario a recording was driven by says which agents are skills; a log does not).
pub fn import_with_skills(
    bytes: &[u8],
    path: &Path,
    name: &str,
    skills: &std::collections::BTreeSet<String>,
) -> Result<Imported, ImportError> {
    import_inner(bytes, path, None, name, skills)
}

fn import_inner(
    bytes: &[u8],
    path: &Path,
    state: Option<(&[u8], &Path)>,
    name: &str,
    given_skills: &std::collections::BTreeSet<String>,
) -> Result<Imported, ImportError> {
    if bytes.len() > MAX_INPUT_BYTES {
        return Err(ImportError::at(
            path,
            0,
            format!(
                "the input is {} bytes, over the {} bytes agentsim import reads",
                bytes.len(),
                MAX_INPUT_BYTES
            ),
        ));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ImportError::at(path, 0, "the input is empty"));
    }
    let source = sniff(bytes);
    if let (Some((_, state_path)), false) = (state, source == Source::Context) {
        return Err(ImportError::at(
            state_path,
            0,
            "a state.json goes with seed 000's context.jsonl only, and the input is not one",
        ));
    }
    let mut skills = given_skills.clone();
    let mut users = Vec::new();
    let (mut exchanges, mut skipped) = match source {
        Source::Journal => journal::read(bytes, path)?,
        Source::Bodies => bodies::read(bytes, path)?,
        Source::Context => context::read(bytes, path, state, &mut skills, &mut users)?,
    };
    assign::addresses(&mut exchanges);
    if !exchanges
        .iter()
        .any(|e| matches!(e.outcome, Outcome::Reply { .. }))
    {
        return Err(ImportError::at(
            path,
            0,
            "the input holds no model reply to script (no answered exchange in a journal, no assistant turn in a body, no `assistant` line in a context.jsonl)",
        ));
    }
    let mut plan = plan::Plan::new(&exchanges, path, &mut skipped)?;
    for a in &mut plan.agents {
        a.skill = skills.contains(&a.name);
    }
    let source = path.display().to_string();
    let (mut yaml, plan) = verify::settle(plan, &exchanges, &skipped, name, &source, path)?;
    if !users.is_empty() {
        if let Some(skip) = with_steps(&mut yaml, &users) {
            if skipped.is_empty() {
                yaml.push_str("# Not in the scripts (also listed on stderr):\n");
            }
            let reason = skip.reason.replace('\n', " ");
            let _ = writeln!(yaml, "#   line {}: {reason}", skip.line);
            skipped.push(skip);
        }
    }
    Ok(Imported {
        yaml,
        skipped,
        exchanges: exchanges
            .iter()
            .filter(|e| e.outcome != Outcome::Unanswered)
            .count(),
        agents: plan.agents.iter().map(|a| a.name.clone()).collect(),
    })
}

/// Adds the user's messages of a `context.jsonl` to `yaml` as `steps`, when the file then runs
/// and passes with agentsim's own runtime (which wrote such journals: its runtime replays them);
/// else leaves them out and says why.
fn with_steps(yaml: &mut String, users: &[context::UserMessage]) -> Option<Skip> {
    let quote = |s: &str| serde_json::to_string(s).expect("a string serialises");
    let mut steps = String::from(
        "# The user's messages, in the order the runtime took them (agentsim's runtime replays them):\nsteps:\n",
    );
    for u in users {
        if u.key == "default" {
            let _ = writeln!(steps, "  - user: {}", quote(&u.text));
        } else {
            let _ = writeln!(
                steps,
                "  - {{ user: {}, key: {} }}",
                quote(&u.text),
                quote(&u.key)
            );
        }
    }
    let candidate = format!("{yaml}{steps}");
    let why = match crate::scenario::parse(&candidate, Path::new("imported.yaml")) {
        Err(e) => e.to_string(),
        Ok(scenario) => {
            let outcome =
                crate::scenario::run::run(&scenario, crate::scenario::run::RunOptions::default());
            match outcome.failure {
                None => {
                    *yaml = candidate;
                    return None;
                }
                Some(f) => f.to_string(),
            }
        }
    };
    Some(Skip {
        line: users[0].line,
        reason: format!(
            "the user's messages are not written as steps: with them, agentsim's runtime does not replay the file (as tried: {})",
            why.lines().next().unwrap_or("")
        ),
    })
}

/// A reply's reasoning (as [`crate::wire::reply::reasoning`] finds it) as the file writes it:
/// what a script cannot send (a redacted block, an item without text) kept without text and
/// listed, what no request can replay (no signature or id) listed and left out. `what` names the
/// reply in the reasons ("exchange 3: its reply").
fn thoughts(
    found: Vec<(usize, crate::wire::Reasoning)>,
    line: usize,
    what: &str,
    skipped: &mut Vec<Skip>,
) -> Vec<Thought> {
    let mut out = Vec::new();
    for (at, r) in found {
        let (id, text) = match (r.id, r.text) {
            (Some(id), Some(text)) => (id, text),
            (_, None) => {
                skipped.push(Skip {
                    line,
                    reason: format!("{what} holds a redacted thinking block, which a script cannot send (served back, the requests go without it)"),
                });
                (String::new(), String::new())
            }
            (None, Some(_)) => {
                skipped.push(Skip {
                    line,
                    reason: format!("{what} holds reasoning without a signature or id, which no request can replay"),
                });
                continue;
            }
        };
        if text.is_empty() && !id.is_empty() {
            skipped.push(Skip {
                line,
                reason: format!("{what} holds reasoning with no text (an encrypted or summary-less item), which a script cannot send (served back, the requests go without it)"),
            });
        }
        out.push(Thought { at, id, text });
    }
    out
}
