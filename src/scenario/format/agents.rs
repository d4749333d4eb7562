//! The `agents` of a scenario file: each agent's kind, tools and limits, its workflow, and how
//! `agentsim mock-llm` recognises its requests.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

use super::duration::Millis;
use super::tools::ToolDef;

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
    /// For `agentsim mock-llm`: how the history a request replays is held to what the server
    /// sent (default: the file's `history`, or `exact`).
    #[serde(default)]
    pub history: Option<HistoryPolicy>,
}

/// How `agentsim mock-llm` holds the history a request replays to what it sent (`history:`, per
/// agent or for the whole file). Read by a visitor of its own, so that any bad value (a list, a
/// number, an unknown name) is an error that names the three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryPolicy {
    /// A conversation is the agent's own: every assistant turn a request replays must be one the
    /// server sent to that agent, in that conversation, in order (the default).
    #[default]
    Exact,
    /// Agents share histories: a request that continues the turns the server sent, whichever
    /// agents they were sent to, continues that conversation; assistant messages the client wrote
    /// itself are allowed where they do not claim to be the server's.
    Continuation,
    /// For runtimes that compact, trim or summarise: only the request's tool pairing is checked;
    /// the history is not compared with what the server sent.
    Lenient,
}

impl<'de> Deserialize<'de> for HistoryPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HistoryPolicy;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("one of `exact`, `continuation`, `lenient`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HistoryPolicy, E> {
                match v {
                    "exact" => Ok(HistoryPolicy::Exact),
                    "continuation" => Ok(HistoryPolicy::Continuation),
                    "lenient" => Ok(HistoryPolicy::Lenient),
                    other => Err(E::custom(format!(
                        "unknown history policy `{other}`, expected one of `exact`, `continuation`, `lenient`"
                    ))),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl HistoryPolicy {
    /// The name written in a scenario file.
    pub fn name(self) -> &'static str {
        match self {
            HistoryPolicy::Exact => "exact",
            HistoryPolicy::Continuation => "continuation",
            HistoryPolicy::Lenient => "lenient",
        }
    }
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
    /// The tools offered include these (and may hold more), in any order.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub tools_include: Option<Spanned<Vec<String>>>,
    /// The tools offered include this one.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub tool: Option<Spanned<String>>,
    /// The conversation's first user message contains this text: concurrent conversations of
    /// one agent (subagents run in parallel) each get a script of their own, whatever the order
    /// in which their requests arrive.
    #[serde(default)]
    pub first_user_contains: Option<String>,
}
