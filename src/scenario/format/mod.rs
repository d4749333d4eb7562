//! The scenario file format: the types a YAML (or JSON) scenario deserialises into, and the JSON
//! Schema generated from them (`agentsim schema`).
//!
//! Every struct denies unknown keys, so a typo is an error with its line and column, never a
//! silently ignored setting. Shorthands (a string for a text reply or a fixed tool result, a list
//! for per-call tool results) have hand-written visitors so that their errors stay precise too.
//!
//! This file holds the whole file's type and the schema; each top-level key's types are a file of
//! their own (`settings.rs`, `agents.rs`, `replies.rs` for `llm`, `tools.rs`, `steps.rs`), and
//! durations (`duration.rs`) are shared by all of them. Every type is re-exported here.

mod agents;
mod duration;
mod replies;
mod settings;
mod steps;
mod tools;

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema};
use serde::Deserialize;
use serde_saphyr::Spanned;

pub use agents::{AgentSpec, HistoryPolicy, KindSpec, MatchSpec, ScriptMode, WorkflowSpec};
pub use duration::{parse_duration, Millis, MAX_DURATION_MS};
pub use replies::{
    ChunkFull, ChunkSpec, ErrorFull, ErrorKindSpec, ErrorSpec, OneOrMany, ReplyEntry, ReplySpec,
    TimesSpec, ToolUseSpec, UsageSpec,
};
pub use settings::{
    ActivitySpec, CallbacksSpec, InterruptionsSpec, PresetSpec, QueryUserSpec, SettingsSpec,
};
pub use steps::{
    AnswerSpec, AsyncAnswerSpec, ExpectSpec, InterveneSpec, NodeExpect, ResponseExpect, StepSpec,
    ToolResultExpect, TriggerSpec, UsageExpect,
};
pub use tools::{ToolCallFull, ToolCallSpec, ToolDef, ToolTable};

/// A whole scenario file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScenarioFile {
    /// The JSON Schema the file is written against (`agentsim schema`), for editors: read by
    /// nothing else.
    #[serde(default, rename = "$schema")]
    #[allow(dead_code)] // accepted (the file denies unknown fields), never read
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
    /// For `agentsim mock-llm`: how the history a request replays is held to what the server
    /// sent, for every agent that sets no `history` of its own: `exact` (default),
    /// `continuation` or `lenient`.
    #[serde(default)]
    pub history: Option<HistoryPolicy>,
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

/// The JSON Schema of scenario files.
pub fn schema() -> Schema {
    schemars::schema_for!(ScenarioFile)
}
