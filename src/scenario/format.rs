//! The scenario file format: the types a YAML (or JSON) scenario deserialises into, and the JSON
//! Schema generated from them (`agentsim schema`).
//!
//! Every struct denies unknown keys, so a typo is an error with its line and column, never a
//! silently ignored setting. Shorthands (a string for a text reply or a fixed tool result, a list
//! for per-call tool results) have hand-written visitors so that their errors stay precise too.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use serde_saphyr::Spanned;

/// A duration in virtual time: an integer of milliseconds, or a string such as `150ms`, `2s`,
/// `1.5s`, `2m`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Millis(pub u64);

/// Parses `150ms`, `2s`, `1.5s`, `2m`, `1h` or a bare number of milliseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3_600_000.0)
    } else {
        (s, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("invalid duration `{s}`: expected a number of milliseconds or a string like 150ms, 2s, 1.5s, 2m")
    })?;
    if value.is_nan() {
        return Err(format!("invalid duration `{s}`: not a number"));
    }
    if value < 0.0 {
        return Err(format!(
            "invalid duration `{s}`: a duration cannot be negative"
        ));
    }
    let ms = value * scale;
    if ms > MAX_DURATION_MS as f64 {
        return Err(too_long(s));
    }
    // Virtual time counts whole milliseconds: a fraction of one would be rounded without a word.
    if (ms - ms.round()).abs() > 1e-6 {
        return Err(format!(
            "invalid duration `{s}`: virtual time counts whole milliseconds ({ms} ms is not)"
        ));
    }
    Ok(ms.round() as u64)
}

/// The longest duration a scenario may give: 1e15 ms, about 31,700 years. Longer ones would
/// saturate the virtual clock.
pub const MAX_DURATION_MS: u64 = 1_000_000_000_000_000;

fn too_long(s: &str) -> String {
    format!("invalid duration `{s}`: longer than the {MAX_DURATION_MS} ms (about 31,700 years) a duration may be")
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Millis;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: milliseconds, or a string like 150ms, 2s, 1.5s, 2m")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Millis, E> {
                if v > MAX_DURATION_MS {
                    return Err(E::custom(too_long(&v.to_string())));
                }
                Ok(Millis(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Millis, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom("a duration cannot be negative")),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Millis, E> {
                parse_duration(&v.to_string())
                    .map(Millis)
                    .map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Millis, E> {
                parse_duration(v).map(Millis).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Millis {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl JsonSchema for Millis {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Virtual time: milliseconds, or a string like 150ms, 2s, 1.5s, 2m",
            "oneOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^[0-9.]+(ms|s|m|h)?$"}
            ]
        })
    }
}

/// A key that is present: `Some(None)` for a key written with no value (`user:`), so that the
/// loader can say what is missing instead of taking the key for absent.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A whole scenario file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// The JSON Schema the file is written against (`agentsim schema`), for editors: read by
    /// nothing else.
    #[serde(default, rename = "$schema")]
    pub schema: Option<String>,
    /// What the scenario shows.
    pub name: String,
    /// Longer explanation.
    #[serde(default)]
    pub description: Option<String>,
    /// Seed of the run (ids, tie-breaks). `--seed` and `AGENTSIM_SEED` override it.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The run must break this invariant (a reproduced bug); the scenario passes if it does.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub expect_violation: Option<Spanned<String>>,
    /// Runtime and simulator settings.
    #[serde(default)]
    pub settings: SettingsSpec,
    /// The main agent (`main`), skills and agents, by name.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, AgentSpec>")]
    pub agents: BTreeMap<String, Spanned<AgentSpec>>,
    /// Scripted model replies per agent, consumed in order.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Vec<ReplyEntry>>")]
    pub llm: BTreeMap<String, Spanned<Vec<Spanned<ReplyEntry>>>>,
    /// External tools and their scripted outcomes.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, ToolDef>")]
    pub tools: BTreeMap<String, Spanned<ToolDef>>,
    /// What the user does and what must hold (none: a file only for `agentsim mock-llm`).
    #[serde(default)]
    #[schemars(with = "Vec<StepSpec>")]
    pub steps: Vec<Spanned<StepSpec>>,
}

/// Settings of the run.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsSpec {
    /// Words that unwind an active stack (default: cancel, stop, abort, nevermind, never mind, quit).
    #[serde(default)]
    pub cancel_words: Option<Vec<String>>,
    /// Maximum steps before the run fails (default 100000).
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// Maximum stack depth (default 256).
    #[serde(default)]
    pub max_depth: Option<usize>,
    /// Maximum model calls (default 10000).
    #[serde(default)]
    pub max_llm_calls: Option<u64>,
    /// Run the runtime with this planted bug (see `agentsim explore --help`): for regression files
    /// that show the harness catching it.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub planted_bug: Option<Spanned<String>>,
    /// Emit persistence (`state.json`, `context.jsonl`); on by itself when a step restarts.
    #[serde(default)]
    pub persist: bool,
    /// Model seed 004's activity watchdog and interruptions: a preset and any knob overridden.
    #[serde(default)]
    #[schemars(with = "Option<InterruptionsSpec>")]
    pub interruptions: Option<Spanned<InterruptionsSpec>>,
    /// Who answers `ask_user`: `interactive` (default: the frame waits for the user's next
    /// message) or `none` (answered at once with `No answer from the user.`).
    #[serde(default)]
    pub query_user: Option<QueryUserSpec>,
    /// How long an async question waits for its answer when its agent sets no
    /// `question_timeout` (seed 003's `agent_question_timeout_seconds`; default 1h).
    #[serde(default)]
    pub question_timeout: Option<Millis>,
    /// Where async questions' callbacks are posted when their agent names no
    /// `question_callback` (seed 003's `agent_question_callback_url`; default: none, no
    /// callback).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub question_callback_url: Option<Spanned<String>>,
    /// How callbacks are retried, and (in the simulator) what the callback endpoint replies.
    #[serde(default)]
    pub callbacks: Option<CallbacksSpec>,
    /// How long after its start a session may still wait for an answer (B26; default: no
    /// expiry). A question open when its session expires fails the session.
    #[serde(default)]
    pub session_expiry: Option<Millis>,
}

/// How question callbacks are retried, and what the simulated endpoint replies.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbacksSpec {
    /// Retries after a failed first attempt (default 3).
    #[serde(default)]
    pub retries: Option<u32>,
    /// The wait before the first retry, doubled for each next one (default 1s).
    #[serde(default)]
    pub backoff: Option<Millis>,
    /// How long one attempt may take (default 10s).
    #[serde(default)]
    pub timeout: Option<Millis>,
    /// The simulator's endpoint: what each attempt gets, in order across all callbacks: an HTTP
    /// status (2xx delivers), `refused` or `hang`; past the end, 200.
    #[serde(default)]
    #[schemars(with = "Vec<Value>")]
    pub replies: Vec<Spanned<Value>>,
}

/// Who answers `ask_user`.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum QueryUserSpec {
    /// The user of the conversation.
    Interactive,
    /// Nobody.
    None,
}

/// The watchdog and interruption model: `preset: legacy` (seed 004's runtime) or `preset: fixed`,
/// then any knob to override.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterruptionsSpec {
    /// `legacy` or `fixed` (default `fixed`).
    #[serde(default)]
    pub preset: Option<PresetSpec>,
    /// Inactivity that fires a timeout (preset: 120s).
    #[serde(default)]
    pub timeout: Option<Millis>,
    /// How often the watchdog checks (preset: 10s).
    #[serde(default)]
    pub check_every: Option<Millis>,
    /// What counts as activity.
    #[serde(default)]
    pub activity: Option<ActivitySpec>,
    /// An agent's watchdog pauses while its own tools run.
    #[serde(default)]
    pub pause_for_own_tools: Option<bool>,
    /// A running child pauses a watchdog.
    #[serde(default)]
    pub pause_for_child: Option<bool>,
    /// Whose: `parent` or `main`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub child_pauses: Option<crate::agents::watchdog::PauseTarget>,
    /// `each_send` (released after the child's first send, activity not refreshed) or `delegation`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub parent_resume: Option<crate::agents::watchdog::ParentResume>,
    /// `cleared_per_send` (the seed's flag) or `typed_cause`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub continue_flag: Option<crate::agents::watchdog::ContinueFlag>,
    /// Continuations allowed per send.
    #[serde(default)]
    pub recovery_limit: Option<u32>,
    /// `sentinel` or `typed_error`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub interrupted_returns: Option<crate::agents::watchdog::InterruptedReturn>,
    /// `substring` or `typed`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub tool_recognises: Option<crate::agents::watchdog::Recognition>,
    /// Agents share one model client.
    #[serde(default)]
    pub shared_client: Option<bool>,
    /// `top_frame` or `unwind`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub cancel: Option<crate::agents::watchdog::CancelScope>,
}

/// A preset of the interruption model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PresetSpec {
    /// Seed 004's runtime.
    Legacy,
    /// Its fix.
    Fixed,
}

/// What counts as activity; each omitted key keeps the preset's value.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivitySpec {
    /// A tool starts.
    #[serde(default)]
    pub tool_start: Option<bool>,
    /// A tool succeeds.
    #[serde(default)]
    pub tool_success: Option<bool>,
    /// A streamed token arrives.
    #[serde(default)]
    pub stream_token: Option<bool>,
    /// The model's reply arrives.
    #[serde(default)]
    pub first_output: Option<bool>,
}

impl InterruptionsSpec {
    /// The configuration: the preset with the overrides applied.
    pub fn config(&self) -> crate::agents::watchdog::InterruptionConfig {
        use crate::agents::watchdog::InterruptionConfig;
        let mut c = match self.preset {
            Some(PresetSpec::Legacy) => InterruptionConfig::legacy(),
            Some(PresetSpec::Fixed) | None => InterruptionConfig::fixed(),
        };
        if let Some(t) = self.timeout {
            c.timeout_ms = t.0;
        }
        if let Some(t) = self.check_every {
            c.check_every_ms = t.0;
        }
        if let Some(a) = &self.activity {
            c.activity.tool_start = a.tool_start.unwrap_or(c.activity.tool_start);
            c.activity.tool_success = a.tool_success.unwrap_or(c.activity.tool_success);
            c.activity.stream_token = a.stream_token.unwrap_or(c.activity.stream_token);
            c.activity.first_output = a.first_output.unwrap_or(c.activity.first_output);
        }
        c.pause_for_own_tools = self.pause_for_own_tools.unwrap_or(c.pause_for_own_tools);
        c.pause_for_child = self.pause_for_child.unwrap_or(c.pause_for_child);
        c.child_pauses = self.child_pauses.unwrap_or(c.child_pauses);
        c.parent_resume = self.parent_resume.unwrap_or(c.parent_resume);
        c.continue_flag = self.continue_flag.unwrap_or(c.continue_flag);
        c.recovery_limit = self.recovery_limit.unwrap_or(c.recovery_limit);
        c.interrupted_returns = self.interrupted_returns.unwrap_or(c.interrupted_returns);
        c.tool_recognises = self.tool_recognises.unwrap_or(c.tool_recognises);
        c.shared_client = self.shared_client.unwrap_or(c.shared_client);
        c.cancel = self.cancel.unwrap_or(c.cancel);
        c
    }
}

/// Kind of a declared agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KindSpec {
    /// The main agent (only for the entry named `main`).
    Main,
    /// A skill (`use_skill`).
    Skill,
    /// An agent (`use_agent`).
    Agent,
}

/// A declared agent.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// `skill` or `agent`; required except for `main`.
    #[serde(default)]
    pub kind: Option<KindSpec>,
    /// One-line description.
    #[serde(default)]
    pub description: Option<String>,
    /// System prompt (default: "You are `<frame name>`.").
    #[serde(default)]
    pub system: Option<String>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Iteration limit (default 10 for main, 25 for skills and agents).
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// Whitelist of external tools (default: all declared tools).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Publish stream events.
    #[serde(default)]
    pub stream: bool,
    /// Run the external tools of one reply concurrently.
    #[serde(default)]
    pub parallel_tools: bool,
    /// A passthrough skill: no frame, one external execution with this scripted outcome.
    #[serde(default)]
    pub passthrough: Option<ToolDef>,
    /// Batch delegation (DESIGN §3 item 12): the child runs to completion inside the tool call and
    /// its final text is the result; the value says what an empty final answer becomes:
    /// `accept_empty`, `extract_from_conversation` or `ask_for_summary`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub batch: Option<crate::model::agent::EmptyAnswer>,
    /// For `agentsim mock-llm`: the conditions that route a request to this agent's script (all
    /// that are given must hold). Default: the request's model name equals `model` (or the
    /// agent's name), or its system prompt equals `system`.
    #[serde(default, rename = "match")]
    #[schemars(with = "Option<MatchSpec>")]
    pub route: Option<Spanned<MatchSpec>>,
    /// Offer seed 001's `fork({prompt})` and `wait({handle})`: a fork runs beside its caller with
    /// the caller's definition; its script is `<agent>#<handle>` (`main#1`, `research#2`).
    #[serde(default)]
    pub fork: bool,
    /// Run seed 001's six-step workflow (`six_step`): clarify, blocking questions, subquestions
    /// run by concurrent children, the main execution, a summary. Each decision is a reply of the
    /// agent's script; children's scripts are `<agent>#<n>`.
    #[serde(default)]
    #[schemars(with = "Option<WorkflowSpec>")]
    pub workflow: Option<Spanned<WorkflowSpec>>,
    /// The workflow's depth bound (default 2): an agent at this depth spawns no children (the
    /// agent a user or a tool starts is at depth 0).
    #[serde(default)]
    #[schemars(with = "Option<u32>")]
    pub max_depth: Option<Spanned<u32>>,
    /// In a triggered session (seed 003), `ask_user` persists a question and waits for its
    /// answer through the store; without it, `ask_user` is refused there.
    #[serde(default)]
    pub async_questions: bool,
    /// How long this agent's async questions wait (default: the settings' `question_timeout`).
    #[serde(default)]
    pub question_timeout: Option<Millis>,
    /// Where this agent's questions' callbacks are posted (default: the settings'
    /// `question_callback_url`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub question_callback: Option<Spanned<String>>,
    /// What a question that timed out does: `fail` (default: the session fails) or
    /// `{default_answer: <text>}` (the text is its answer).
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub on_timeout: Option<Spanned<Value>>,
    /// For `agentsim mock-llm`: `shared` (default: the agent's conversations share one script,
    /// handed out turn by turn) or `per_conversation` (each conversation gets the whole script
    /// from its first entry; for load tests and runtimes that start many alike conversations).
    #[serde(default)]
    #[schemars(with = "Option<ScriptMode>")]
    pub script: Option<Spanned<ScriptMode>>,
}

/// A workflow an agent runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowSpec {
    /// Seed 001's six steps.
    SixStep,
}

/// How an agent's script is shared by its conversations (`agentsim mock-llm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScriptMode {
    /// One script for all conversations, turn by turn (as the simulator does).
    Shared,
    /// The whole script for each conversation.
    PerConversation,
}

/// The conditions of an agent's `match:` rule.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    /// The system prompt contains this text.
    #[serde(default)]
    pub system_contains: Option<String>,
    /// The model name is this.
    #[serde(default)]
    pub model: Option<String>,
    /// These HTTP headers have these values (names in any case).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// The tools offered are exactly these, in any order.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The conversation's first user message contains this text: concurrent conversations of
    /// one agent (subagents run in parallel) each get a script of their own, whatever the order
    /// in which their requests arrive.
    #[serde(default)]
    pub first_user_contains: Option<String>,
}

/// One scripted model reply: a string is a text reply; a map states the reply in full.
#[derive(Debug)]
pub enum ReplyEntry {
    /// `- Hello` : a text reply.
    Text(String),
    /// The full form.
    Full(Box<ReplySpec>),
}

impl<'de> Deserialize<'de> for ReplyEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ReplyEntry, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReplyEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reply: a text string, or a map with text, tool_use, use_skill, use_agent, complete, ask_user, empty, error, stall or chunks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ReplyEntry, E> {
                Ok(ReplyEntry::Text(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ReplyEntry, E> {
                // YAML reads an unquoted NO, yes, off, ... as a boolean: a workflow's `NO` is
                // the likeliest way to meet it.
                Err(E::custom(format!(
                    "a reply is text, but YAML read this one as the boolean `{v}` (an unquoted NO, no, yes, off, on, ... is a boolean): quote it, as in `- \"NO\"`"
                )))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ReplyEntry, A::Error> {
                ReplySpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|r| ReplyEntry::Full(Box::new(r)))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ReplyEntry {
    fn schema_name() -> Cow<'static, str> {
        "ReplyEntry".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let full = g.subschema_for::<ReplySpec>();
        json_schema!({
            "description": "A scripted model reply: a string is a text reply",
            "oneOf": [{"type": "string"}, full]
        })
    }
}

/// The full form of a scripted reply. Content keys (`text`, `tool_use`, `use_skill`, `use_agent`,
/// `ask_user`, `complete`) combine into one reply, text first, then tool uses in that key order;
/// `empty`, `error`, `stall` and `chunks` stand alone.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplySpec {
    /// Text.
    #[serde(default)]
    pub text: Option<String>,
    /// One tool use or a list of them.
    #[serde(default)]
    pub tool_use: Option<OneOrMany<ToolUseSpec>>,
    /// Shorthand for `tool_use: {name: use_skill, input: ...}`.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub use_skill: Option<Spanned<Value>>,
    /// Shorthand for `tool_use: {name: use_agent, input: ...}`.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub use_agent: Option<Spanned<Value>>,
    /// Shorthand for `ask_user`: a question string or `{question, options}`.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub ask_user: Option<Spanned<Value>>,
    /// Shorthand for `tool_use: {name: complete, input: {result: ...}}`.
    #[serde(default)]
    pub complete: Option<String>,
    /// An empty reply (`empty: true`).
    #[serde(default)]
    pub empty: Option<bool>,
    /// A failed call: `rate_limit`, `overloaded`, `network`, `other`, or `{kind, message}`.
    #[serde(default)]
    pub error: Option<ErrorSpec>,
    /// The call never answers (`stall: true`).
    #[serde(default)]
    pub stall: Option<bool>,
    /// A streamed reply: text strings, or `{text, after}` / `{tool_use, after}` pieces.
    #[serde(default)]
    pub chunks: Option<Vec<ChunkSpec>>,
    /// Latency before the reply (or its first chunk).
    #[serde(default)]
    pub after: Option<Millis>,
    /// Token usage reported with the reply.
    #[serde(default)]
    pub usage: Option<UsageSpec>,
}

/// Token usage a conversation must have reached: each count given is compared, one left out is
/// not.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageExpect {
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
}

/// Token usage of a scripted reply.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
}

/// One value (a map) or a list of them.
#[derive(Debug)]
pub enum OneOrMany<T> {
    /// A list.
    Many(Vec<T>),
    /// One value.
    One(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OneOrMany<T>, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one map or a list of maps")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrMany<T>, A::Error> {
                Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(OneOrMany::Many)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OneOrMany<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(OneOrMany::One)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<T: JsonSchema> JsonSchema for OneOrMany<T> {
    fn schema_name() -> Cow<'static, str> {
        format!("OneOrMany_{}", T::schema_name()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let one = g.subschema_for::<T>();
        let many = g.subschema_for::<Vec<T>>();
        json_schema!({"oneOf": [one, many]})
    }
}

impl<T> OneOrMany<T> {
    /// The values, in order.
    pub fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        }
    }
}

/// A scripted `tool_use`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolUseSpec {
    /// Tool name.
    pub name: String,
    /// JSON input (default `{}`).
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub input: Option<Spanned<Value>>,
    /// Explicit id (default: generated `toolu_NN`).
    #[serde(default)]
    pub id: Option<String>,
}

/// A scripted model error.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[serde(
    expecting = "an error kind (rate_limit, overloaded, network, other) or {kind, message, mid_stream}"
)]
pub enum ErrorSpec {
    /// Just the kind, with its usual message.
    Kind(ErrorKindSpec),
    /// The full form.
    Full(ErrorFull),
}

/// The full form of a scripted model error.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorFull {
    /// The kind.
    pub kind: ErrorKindSpec,
    /// The message (default: the kind's usual message).
    #[serde(default)]
    pub message: Option<String>,
    /// The error comes in the middle of a stream (`agentsim mock-llm`: a streamed request gets the
    /// first half of the next reply's events, then an error event, or for `network` the stream
    /// ends there); a request that does not stream gets the error as a status. The simulator
    /// treats it as the call failing.
    #[serde(default)]
    pub mid_stream: Option<bool>,
}

/// Kinds of model errors.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKindSpec {
    /// HTTP 429.
    RateLimit,
    /// HTTP 529.
    Overloaded,
    /// Network failure.
    Network,
    /// Anything else.
    Other,
}

/// One piece of a streamed reply.
#[derive(Debug)]
pub enum ChunkSpec {
    /// A text delta with no delay.
    Text(String),
    /// The full form.
    Full(ChunkFull),
}

/// The full form of a stream piece.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkFull {
    /// A text delta.
    #[serde(default)]
    pub text: Option<String>,
    /// A whole tool use.
    #[serde(default)]
    pub tool_use: Option<ToolUseSpec>,
    /// Delay after the previous piece.
    #[serde(default)]
    pub after: Option<Millis>,
}

impl<'de> Deserialize<'de> for ChunkSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChunkSpec, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChunkSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a stream piece: a text string, or {text, after} or {tool_use, after}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ChunkSpec, E> {
                Ok(ChunkSpec::Text(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ChunkSpec, A::Error> {
                ChunkFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ChunkSpec::Full)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ChunkSpec {
    fn schema_name() -> Cow<'static, str> {
        "ChunkSpec".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let full = g.subschema_for::<ChunkFull>();
        json_schema!({"oneOf": [{"type": "string"}, full]})
    }
}

/// An external tool: a string is a fixed result, a list gives one outcome per call, a map gives a
/// fixed outcome (or `calls:`) plus settings such as `timeout`.
#[derive(Debug)]
pub enum ToolDef {
    /// Every call returns this text.
    Fixed(String),
    /// One outcome per call.
    PerCall(Vec<ToolCallSpec>),
    /// The full form.
    Table(Box<ToolTable>),
}

/// The full form of a tool.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolTable {
    /// Fixed result text (without it: a tool with no outcome at all echoes its input; one with only
    /// `after` returns an empty result after that latency).
    #[serde(default)]
    pub result: Option<String>,
    /// The result is an error result.
    #[serde(default)]
    pub is_error: bool,
    /// The tool fails with this message.
    #[serde(default)]
    pub error: Option<String>,
    /// The tool never finishes.
    #[serde(default)]
    pub hang: bool,
    /// Latency.
    #[serde(default)]
    pub after: Option<Millis>,
    /// One outcome per call (instead of a fixed one).
    #[serde(default)]
    pub calls: Option<Vec<ToolCallSpec>>,
    /// Virtual-time timeout (DESIGN §3 item 10).
    #[serde(default)]
    pub timeout: Option<Millis>,
}

/// One call's outcome: a string is a result.
#[derive(Debug)]
pub enum ToolCallSpec {
    /// This result, at once.
    Text(String),
    /// The full form.
    Full(ToolCallFull),
}

/// The full form of one call's outcome.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallFull {
    /// Result text.
    #[serde(default)]
    pub result: Option<String>,
    /// The result is an error result.
    #[serde(default)]
    pub is_error: bool,
    /// The tool fails with this message.
    #[serde(default)]
    pub error: Option<String>,
    /// The tool never finishes.
    #[serde(default)]
    pub hang: bool,
    /// Latency.
    #[serde(default)]
    pub after: Option<Millis>,
}

impl<'de> Deserialize<'de> for ToolCallSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolCallSpec, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolCallSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a tool outcome: a result string, or {result, is_error, error, hang, after}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolCallSpec, E> {
                Ok(ToolCallSpec::Text(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolCallSpec, A::Error> {
                ToolCallFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ToolCallSpec::Full)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ToolCallSpec {
    fn schema_name() -> Cow<'static, str> {
        "ToolCallSpec".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let full = g.subschema_for::<ToolCallFull>();
        json_schema!({"oneOf": [{"type": "string"}, full]})
    }
}

impl<'de> Deserialize<'de> for ToolDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolDef, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolDef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tool: a result string, a list of per-call outcomes, or a map with result, is_error, error, hang, after, calls, timeout")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolDef, E> {
                Ok(ToolDef::Fixed(v.to_owned()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ToolDef, E> {
                Ok(ToolDef::Table(Box::default()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ToolDef, A::Error> {
                Vec::<ToolCallSpec>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(ToolDef::PerCall)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolDef, A::Error> {
                ToolTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|t| ToolDef::Table(Box::new(t)))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ToolDef {
    fn schema_name() -> Cow<'static, str> {
        "ToolDef".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let calls = g.subschema_for::<Vec<ToolCallSpec>>();
        let table = g.subschema_for::<ToolTable>();
        json_schema!({
            "description": "A tool: a fixed result string, a list of per-call outcomes, or a map",
            "oneOf": [{"type": "string"}, {"type": "null"}, calls, table]
        })
    }
}

/// One step: exactly one of `user`, `expect`, `advance`, `run`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// A user message (`Some(None)`: the key was written with no text).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<String>")]
    pub user: Option<Option<String>>,
    /// Session key of the conversation (default `default`).
    #[serde(default)]
    pub key: Option<String>,
    /// After a `user` step, run until every conversation waits for the user (default true).
    #[serde(default)]
    pub wait: Option<bool>,
    /// Expectations about what happened in the step's conversation since the previous `expect` of
    /// that conversation, and the current state.
    #[serde(default)]
    pub expect: Option<ExpectSpec>,
    /// Let virtual time pass, running whatever comes due.
    #[serde(default)]
    pub advance: Option<Millis>,
    /// Take exactly this many simulator steps (fewer if nothing is scheduled): places a later
    /// `user` step between two given steps. Shrunk regression files use it.
    #[serde(default)]
    pub run: Option<u64>,
    /// Restart the runtime from its persisted `state.json` and `context.jsonl` (`restart: true`).
    #[serde(default)]
    pub restart: Option<bool>,
    /// A user intervenes on a live agent (seed 001): delete it, modify its task, comment. Runs
    /// until idle afterwards unless `wait: false`.
    #[serde(default)]
    pub intervene: Option<InterveneSpec>,
    /// The user answers an open question (seed 001) by its agent or its id. Runs until idle
    /// afterwards unless `wait: false`.
    #[serde(default)]
    pub answer: Option<AnswerSpec>,
    /// A webhook triggers a session of an agent (seed 003): `{agent, payload}`. Runs until idle
    /// afterwards unless `wait: false`.
    #[serde(default)]
    pub trigger: Option<TriggerSpec>,
    /// Someone answers an async session's question through the store (seed 003's `POST
    /// /agent/answer/{session}`): `{session, question?, text}`. Runs until idle afterwards
    /// unless `wait: false`.
    #[serde(default)]
    pub async_answer: Option<AsyncAnswerSpec>,
}

/// A trigger step.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// The agent to run (a declared name: `main`, a skill or an agent).
    pub agent: String,
    /// The webhook's JSON payload (default `{}`), read as JSON reads it (`yes` stays text).
    #[serde(default, skip_serializing)]
    #[schemars(with = "Option<Value>")]
    pub payload: Option<Spanned<Value>>,
}

/// An answer through the store of async sessions.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AsyncAnswerSpec {
    /// The session, by the order sessions were triggered: 1 for the first.
    pub session: usize,
    /// The question, by the order the session asked: 1 for the first (default: its latest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<usize>,
    /// The answer.
    pub text: String,
}

/// An answer step: exactly one of `agent` and `question`, and the answer's `text`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerSpec {
    /// The asking agent, named as `intervene` names one (its open question is answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The question's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The answer.
    pub text: String,
}

/// An intervention step.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterveneSpec {
    /// The agent: a frame name (`agent:research`, `fork:main#1`: the latest live one of that
    /// name), a path of names from a main frame (`main/skill:plan/agent:research`), or an agent
    /// id.
    pub agent: String,
    /// `delete`, `modify`, or any other comment (stored, changes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The new task (reaches the agent with `modify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A status to set: `deleted` or `modified` (any other is refused by the runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// What must hold at an `expect` step. Every key is optional; each one given is checked.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectSpec {
    /// Session key (default `default`); `session:N` names the N-th triggered session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Texts sent to the user since the previous `expect`, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Vec<String>>,
    /// Stack depth now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
    /// Frame on top now (`main`, `skill:<name>`, `agent:<name>`, or `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<String>,
    /// The whole stack now, bottom first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<Vec<String>>,
    /// The last `tool_result` an agent's session received since the previous `expect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<ToolResultExpect>,
    /// Every `tool_result` of the conversation since the previous `expect`, in order; each entry
    /// checks the keys it gives (`agent` included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results: Option<Vec<ToolResultExpect>>,
    /// Iterations of frames by name (the live frame, or the last one that ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<BTreeMap<String, u32>>,
    /// Model calls made so far, by agent script name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_calls: Option<BTreeMap<String, usize>>,
    /// The main agent's last response since the previous `expect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ResponseExpect>,
    /// Stream events since the previous `expect`: `text: <delta>`, `tool_start: <name>`,
    /// `tool_finish: <name>` or `tool_error: <name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<Vec<String>>,
    /// Whether every conversation waits for the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<bool>,
    /// Virtual time now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Millis>,
    /// Token usage of the conversation so far (each count given is checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageExpect>,
    /// The live agent tree now (every conversation), in the order the agents started; each
    /// entry checks the keys it gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<Vec<NodeExpect>>,
    /// Agents by name (the latest of that name, live or ended) or path: what each must be now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<BTreeMap<String, NodeExpect>>,
    /// `agent-state` events of the conversation since the previous `expect`, as
    /// `<frame name>: <status>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_states: Option<Vec<String>>,
    /// How the runtime answered the interventions since the previous `expect`: `accepted`,
    /// `not_found`, or `refused: <reason>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interventions: Option<Vec<String>>,
    /// The questions open now, every conversation's, in the order their agents started, as
    /// `<frame name>: <question>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questions: Option<Vec<String>>,
    /// Whether the answers given by question since the previous `expect` were taken:
    /// `accepted` or `not_found`; answers through the store of async sessions may also be
    /// `duplicate_ignored`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<Vec<String>>,
    /// The async sessions in the order they were triggered, as the store has them:
    /// `<agent>: <status>`, followed by `: <result>` once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<String>>,
    /// The store's pending questions in creation order, as `<agent>: <question>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<String>>,
    /// The questions' callbacks sent so far, in order, as `<agent> → <url>: <attempts>`, each
    /// attempt `delivered`, an HTTP status, `refused` or `timed out`, and `, gave up` when no
    /// attempt delivered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callbacks: Option<Vec<String>>,
}

/// What one agent of the tree must be; every key is optional.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeExpect {
    /// Frame name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Status: `running`, `awaiting_user`, `completed`, `error`, `deleted`, `modified`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The parent's frame name (`none` for a main frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Exact result (`none` for no result yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The last comment (`unchanged` when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_comment: Option<String>,
    /// Its task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_content: Option<String>,
    /// Frame names of the agents it started, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<Vec<String>>,
    /// A workflow agent's `metadata.subagents`, each child as `<status>: <result>`, in the
    /// order they started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_subagents: Option<Vec<String>>,
}

/// Expected `tool_result`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultExpect {
    /// Frame name whose session received it (default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Exact content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A substring of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    /// Whether it is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
}

/// Expected `AgentResponse`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseExpect {
    /// The text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Iterations used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
    /// Names of the tool calls, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<String>>,
}

/// The JSON Schema of scenario files.
pub fn schema() -> Schema {
    schemars::schema_for!(ScenarioFile)
}
