//! The `steps` of a scenario file: what the user (or a trigger, or time) does, and the
//! expectations that must hold.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_saphyr::Spanned;

use super::duration::Millis;

/// A key that is present: `Some(None)` for a key written with no value (`user:`), so that the
/// loader can say what is missing instead of taking the key for absent.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
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
