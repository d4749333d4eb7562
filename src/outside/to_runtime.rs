//! agentsim's lines (`docs`: the runtime protocol, sections 2 and 3): the messages agentsim
//! writes to the runtime's stdin ([`ToRuntime`]) and their encoding ([`encode_line`]), which
//! refuses any line the protocol forbids.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::limits::{MAX_INTEGER, MAX_LINE};

/// A message agentsim writes to the runtime's stdin.
///
/// `Deserialize` is derived for tests and for tools that read agentsim's side of a transcript; it
/// is serde's usual leniency, not the strict decoding [`decode_line`] gives the runtime's lines.
///
/// [`decode_line`]: super::decode_line
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRuntime {
    /// The first line of every process: the run's description.
    Hello(Hello),
    /// A message from the user to a conversation.
    User(User),
    /// The outcome of a `tool_call`.
    ToolResult(ToolResult),
    /// Forget everything; the next line is a `hello` (capability `reset`).
    Reset,
    /// The run is over: stop, flush, exit 0.
    Shutdown,
}

/// `hello`: the run, its agents, its tools and its settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol version, [`PROTOCOL_VERSION`].
    ///
    /// [`PROTOCOL_VERSION`]: super::codec::PROTOCOL_VERSION
    pub protocol: u64,
    /// A name for this run (scenario and seed), for the runtime's logs.
    pub run: String,
    /// The run's seed. It must not exceed [`MAX_INTEGER`]: [`encode_line`] refuses a larger one,
    /// and the caller decides how to bring a 64-bit seed into range.
    pub seed: u64,
    /// The run's state directory (`AGENTSIM_STATE_DIR`).
    pub state_dir: String,
    /// How many times this run's runtime was started before this process.
    pub restarts: u64,
    /// After a restart: the `seq` whose `idle` the killed process owed; `null` otherwise.
    pub awaiting_idle: Option<u64>,
    /// Real seconds per scripted second. Must be finite: [`encode_line`] refuses NaN and the
    /// infinities, which JSON cannot carry.
    pub time_scale: f64,
    /// Every agent of the scenario, `main` first, then by name.
    pub agents: Vec<HelloAgent>,
    /// The scenario's external tools, by name.
    pub tools: Vec<HelloTool>,
    /// The scenario's settings the runtime needs.
    pub settings: HelloSettings,
}

/// One agent of `hello.agents`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloAgent {
    /// The agent's name in the scenario (the value of `tool_call.agent`).
    pub name: String,
    /// How it is spawned.
    pub kind: AgentKind,
    /// Its frame name: `main`, `skill:<name>`, `agent:<name>`.
    pub frame: String,
    /// Its system prompt.
    pub system: String,
    /// The model name to request.
    pub model: String,
    /// Its iteration limit.
    pub max_iterations: u64,
    /// The external tools it may call.
    pub tools: Vec<String>,
    /// The tools of one reply run concurrently (capability `parallel-tools`).
    pub parallel_tools: bool,
    /// It publishes stream events (capability `stream`).
    pub stream: bool,
    /// A passthrough skill: its `use_skill` runs one `tool_call` named after its frame.
    pub passthrough: bool,
    /// Its batch policy; `None` (`null`) for an interactive agent.
    pub batch: Option<BatchPolicy>,
    /// The scenario's one-line description, if any.
    pub description: Option<String>,
}

/// `hello.agents[].kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// The main agent.
    Main,
    /// A skill, spawned with `use_skill`.
    Skill,
    /// A sub-agent, spawned with `use_agent`.
    Agent,
}

/// `hello.agents[].batch`: batch delegation and its empty-answer policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchPolicy {
    /// An empty answer is the result.
    AcceptEmpty,
    /// An empty answer is replaced by text taken from the child's conversation.
    ExtractFromConversation,
    /// An empty answer makes the parent ask the child for a summary.
    AskForSummary,
}

/// One tool of `hello.tools`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloTool {
    /// The name the model calls it by.
    pub name: String,
    /// The scenario's description, or `""`.
    pub description: String,
    /// A JSON Schema for its input (`{"type":"object"}` when the scenario gives none).
    pub input_schema: Value,
    /// The per-tool timeout in scripted milliseconds (capability `tool-timeouts`).
    pub timeout_ms: Option<u64>,
}

/// `hello.settings`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloSettings {
    /// The words that unwind an active stack (capability `cancel-words`).
    pub cancel_words: Vec<String>,
    /// How `ask_user` is answered.
    pub query_user: QueryUser,
    /// The deepest stack the scenario allows.
    pub max_depth: u64,
}

/// `hello.settings.query_user`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryUser {
    /// `ask_user` waits for the user's next message.
    Interactive,
    /// `ask_user` is answered at once with `No answer from the user.`.
    None,
}

/// `user`: a message from the user to a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// 1 for the first `user` of the run, then +1 for each.
    pub seq: u64,
    /// The conversation (a scenario's session key).
    pub conversation: String,
    /// What the user typed.
    pub text: String,
}

/// `tool_result`: the outcome of a `tool_call`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The `call` of the runtime's `tool_call`.
    pub call: String,
    /// The result text (for `failed`: the failure's message).
    pub content: String,
    /// The result is an error result.
    pub is_error: bool,
    /// The tool failed rather than returned. Optional on the wire: written only when `true`, as
    /// the spec's examples omit it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub failed: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Why agentsim could not encode one of its own messages (a bug or an out-of-range input of the
/// caller's, never the runtime's fault).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EncodeError {
    /// The encoded line would exceed [`MAX_LINE`].
    #[error("the `{kind}` line would hold {bytes} bytes, over the protocol's limit of {MAX_LINE}")]
    Oversize {
        /// The message's `type`.
        kind: &'static str,
        /// The encoded length, without the `\n`.
        bytes: usize,
    },
    /// An integer field exceeds [`MAX_INTEGER`].
    #[error("`{field}` is {value}, over the protocol's largest integer 2^53-1")]
    IntegerOutOfRange {
        /// The field's path (`hello.seed`).
        field: String,
        /// Its value.
        value: u64,
    },
    /// A number field is NaN or infinite, which JSON cannot carry.
    #[error("`{field}` is {value}, which JSON cannot carry")]
    NotFinite {
        /// The field's path (`hello.time_scale`).
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// serde_json failed (not expected for these types).
    #[error("cannot encode the `{kind}` line: {message}")]
    Json {
        /// The message's `type`.
        kind: &'static str,
        /// serde_json's message.
        message: String,
    },
}

impl ToRuntime {
    /// The message's `type` on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            ToRuntime::Hello(_) => "hello",
            ToRuntime::User(_) => "user",
            ToRuntime::ToolResult(_) => "tool_result",
            ToRuntime::Reset => "reset",
            ToRuntime::Shutdown => "shutdown",
        }
    }

    /// Checks the values the protocol bounds (integers up to 2^53 − 1, finite numbers).
    fn check_range(&self) -> Result<(), EncodeError> {
        fn int(field: impl Into<String>, value: u64) -> Result<(), EncodeError> {
            if value > MAX_INTEGER {
                return Err(EncodeError::IntegerOutOfRange {
                    field: field.into(),
                    value,
                });
            }
            Ok(())
        }
        match self {
            ToRuntime::Hello(h) => {
                int("hello.protocol", h.protocol)?;
                int("hello.seed", h.seed)?;
                int("hello.restarts", h.restarts)?;
                if let Some(seq) = h.awaiting_idle {
                    int("hello.awaiting_idle", seq)?;
                }
                if !h.time_scale.is_finite() {
                    return Err(EncodeError::NotFinite {
                        field: "hello.time_scale",
                        value: h.time_scale,
                    });
                }
                for (i, a) in h.agents.iter().enumerate() {
                    int(
                        format!("hello.agents[{i}].max_iterations"),
                        a.max_iterations,
                    )?;
                }
                for (i, t) in h.tools.iter().enumerate() {
                    if let Some(ms) = t.timeout_ms {
                        int(format!("hello.tools[{i}].timeout_ms"), ms)?;
                    }
                }
                int("hello.settings.max_depth", h.settings.max_depth)
            }
            ToRuntime::User(u) => int("user.seq", u.seq),
            ToRuntime::ToolResult(_) | ToRuntime::Reset | ToRuntime::Shutdown => Ok(()),
        }
    }
}

/// Encodes one message as one line: compact JSON (serde_json escapes every newline inside a
/// string, so the line holds none) followed by `\n`.
///
/// Refuses, with an [`EncodeError`], a line over [`MAX_LINE`], an integer over [`MAX_INTEGER`]
/// and a non-finite `time_scale`: agentsim never writes a line the protocol forbids. The integers
/// inside `hello.tools[].input_schema` are the scenario's JSON and are passed as they are.
pub fn encode_line(message: &ToRuntime) -> Result<String, EncodeError> {
    message.check_range()?;
    let mut line = serde_json::to_string(message).map_err(|e| EncodeError::Json {
        kind: message.kind(),
        message: e.to_string(),
    })?;
    if line.len() > MAX_LINE {
        return Err(EncodeError::Oversize {
            kind: message.kind(),
            bytes: line.len(),
        });
    }
    debug_assert!(!line.contains('\n'), "serde_json escapes newlines");
    line.push('\n');
    Ok(line)
}
