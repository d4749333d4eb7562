//! The lines of protocol 1 (`docs`: the runtime protocol, sections 2 to 4 and 9): the messages
//! agentsim writes ([`ToRuntime`], encoded by [`encode_line`]) and the messages a runtime writes
//! ([`FromRuntime`], decoded strictly by [`decode_line`]), with the located [`ProtocolError`] a
//! bad line gives.
//!
//! A runtime's lines are untrusted input, so [`decode_line`] is written by hand over
//! `serde_json::Value` rather than derived: every fault names the field it is about
//! (`frames[1].iterations`), and no input makes it panic. The messages agentsim writes are derived
//! serde types, so their JSON has the spec's field order.
//!
//! Choices where the specification leaves room (each also noted where it applies):
//! - A line's 1 MiB limit counts its bytes without the line ending (`\n` or `\r\n`); a line over
//!   it is `oversize-line` before anything else is looked at, so a reader that stops reading at
//!   [`MAX_LINE`] + 1 bytes may pass just that prefix to [`decode_line`].
//! - "Only whitespace" is Unicode white space (`str::trim`), as Python's `str.strip` sees it.
//! - An optional field may be absent but is never `null`, unless its table says `null`
//!   (section 2: "`null` is only allowed where a field says so"); `tool_call.input`, "any JSON
//!   value", may be `null`.
//! - `stack.ended[].iterations` is optional, as `frames[].iterations` is ("as for `frames`").
//! - `stack.ended[].reason` is one of the five names of the spec; another is `bad-field`.
//! - The judged `event` kinds (`text`, `tool_start`, `tool_finish`, `tool_error`, `tool_result`)
//!   must carry their fields, whatever capabilities the runtime offered; other kinds carry anything.
//! - Of a key written twice in one object, the last is taken (serde_json's reading).
//! - `ready` with a `protocol` other than 1 is `protocol-mismatch`, found by the decoder (a line
//!   alone shows it) before `ready`'s other fields are looked at. An `error` line decodes without error; [`super::Session`] turns it into
//!   `runtime-error`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version this module speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// The most bytes a line may hold, not counting its line ending (1 MiB).
pub const MAX_LINE: usize = 1 << 20;

/// The largest integer a line may carry: 2^53 − 1, the largest that every JSON reader holds
/// exactly.
pub const MAX_INTEGER: u64 = (1 << 53) - 1;

/// The most lines a runtime may write in one run before it is a `flood` (counted by the driver,
/// across the run's processes).
pub const MAX_LINES_PER_RUN: u64 = 100_000;

/// How many characters of an offending line a [`ProtocolError`] quotes.
pub const QUOTE_CHARS: usize = 200;

// ---------------------------------------------------------------------------------------------
// agentsim → runtime
// ---------------------------------------------------------------------------------------------

/// A message agentsim writes to the runtime's stdin.
///
/// `Deserialize` is derived for tests and for tools that read agentsim's side of a transcript; it
/// is serde's usual leniency, not the strict decoding [`decode_line`] gives the runtime's lines.
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

// ---------------------------------------------------------------------------------------------
// runtime → agentsim
// ---------------------------------------------------------------------------------------------

/// A message the runtime writes on its stdout, as [`decode_line`] accepted it.
#[derive(Clone, Debug, PartialEq)]
pub enum FromRuntime {
    /// `ready`: the answer to `hello`.
    Ready(Ready),
    /// `send`: text for the user of a conversation.
    Send(SendText),
    /// `tool_call`: the runtime runs one of the scenario's external tools.
    ToolCall(ToolCall),
    /// `idle`: every `user` up to `seq` is handled and nothing is in flight.
    Idle(Idle),
    /// `stack`: the runtime's own view of a conversation's stack (capability `stack`).
    Stack(Stack),
    /// `event`: anything else for the transcript; a few kinds are judged.
    Event(Event),
    /// `error`: the runtime cannot go on.
    Error(RuntimeError),
}

impl FromRuntime {
    /// The message's `type` on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            FromRuntime::Ready(_) => "ready",
            FromRuntime::Send(_) => "send",
            FromRuntime::ToolCall(_) => "tool_call",
            FromRuntime::Idle(_) => "idle",
            FromRuntime::Stack(_) => "stack",
            FromRuntime::Event(_) => "event",
            FromRuntime::Error(_) => "error",
        }
    }

    /// The conversation the message names, for the four types that name one.
    pub fn conversation(&self) -> Option<&str> {
        match self {
            FromRuntime::Send(m) => Some(&m.conversation),
            FromRuntime::ToolCall(m) => Some(&m.conversation),
            FromRuntime::Stack(m) => Some(&m.conversation),
            FromRuntime::Event(m) => Some(&m.conversation),
            FromRuntime::Ready(_) | FromRuntime::Idle(_) | FromRuntime::Error(_) => None,
        }
    }
}

/// `ready`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready {
    /// The protocol version; always [`PROTOCOL_VERSION`] once decoded (another is
    /// `protocol-mismatch`).
    pub protocol: u64,
    /// The capabilities offered, as written (unknown names are the driver's warning to give).
    pub capabilities: Vec<String>,
    /// The runtime's name and version, if given.
    pub name: Option<String>,
}

/// `send`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendText {
    /// The conversation.
    pub conversation: String,
    /// The text, exactly as the user sees it.
    pub text: String,
}

/// `tool_call`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The runtime's id for the call, unique within the process's life.
    pub call: String,
    /// The conversation whose turn runs the tool.
    pub conversation: String,
    /// The agent whose model asked for it.
    pub agent: String,
    /// The tool (or a passthrough skill's frame name).
    pub name: String,
    /// The tool's input, any JSON value (`null` included).
    pub input: Value,
}

/// `idle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Idle {
    /// The highest `seq` handled.
    pub seq: u64,
}

/// `stack`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// The conversation.
    pub conversation: String,
    /// The frames now, bottom first.
    pub frames: Vec<StackFrame>,
    /// Frames popped since the previous `stack` of this conversation, in the order they ended
    /// (empty when the field is absent).
    pub ended: Vec<EndedFrame>,
}

/// One frame of `stack.frames`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackFrame {
    /// Its frame name (`main`, `skill:<name>`, `agent:<name>`).
    pub name: String,
    /// The iterations it has used, if given.
    pub iterations: Option<u64>,
}

/// One frame of `stack.ended`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedFrame {
    /// Its frame name.
    pub name: String,
    /// The iterations it used, if given (optional, as for `frames`).
    pub iterations: Option<u64>,
    /// Why it ended.
    pub reason: EndReason,
}

/// `stack.ended[].reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// `completed`.
    Completed,
    /// `answered`: a main frame that answered the user.
    Answered,
    /// `max_iterations`.
    MaxIterations,
    /// `error`.
    Error,
    /// `cancelled`.
    Cancelled,
}

impl EndReason {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Completed => "completed",
            EndReason::Answered => "answered",
            EndReason::MaxIterations => "max_iterations",
            EndReason::Error => "error",
            EndReason::Cancelled => "cancelled",
        }
    }

    fn from_name(name: &str) -> Option<EndReason> {
        [
            EndReason::Completed,
            EndReason::Answered,
            EndReason::MaxIterations,
            EndReason::Error,
            EndReason::Cancelled,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

/// `event`.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The conversation.
    pub conversation: String,
    /// The frame it concerns, if given.
    pub frame: Option<String>,
    /// Its kind and the kind's fields.
    pub body: EventBody,
}

/// The kind of an `event` and its fields. The judged kinds have their fields checked; any other
/// kind is kept as written.
#[derive(Clone, Debug, PartialEq)]
pub enum EventBody {
    /// `text`: a streamed text delta.
    Text {
        /// The delta.
        text: String,
    },
    /// `tool_start`.
    ToolStart {
        /// The tool.
        name: String,
    },
    /// `tool_finish`.
    ToolFinish {
        /// The tool.
        name: String,
    },
    /// `tool_error`.
    ToolError {
        /// The tool.
        name: String,
    },
    /// `tool_result`: a result the runtime appended to the frame's session.
    ToolResult {
        /// The tool use it answers.
        tool_use_id: String,
        /// The result text.
        content: String,
        /// It is an error result.
        is_error: bool,
    },
    /// Any other kind, shown in the transcript as it is.
    Other {
        /// The kind.
        kind: String,
        /// The line's other fields (all but `type`, `conversation`, `kind` and `frame`).
        fields: Map<String, Value>,
    },
}

impl EventBody {
    /// The event's `kind` on the wire.
    pub fn kind(&self) -> &str {
        match self {
            EventBody::Text { .. } => "text",
            EventBody::ToolStart { .. } => "tool_start",
            EventBody::ToolFinish { .. } => "tool_finish",
            EventBody::ToolError { .. } => "tool_error",
            EventBody::ToolResult { .. } => "tool_result",
            EventBody::Other { kind, .. } => kind,
        }
    }
}

/// `error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeError {
    /// What went wrong, for a person.
    pub message: String,
    /// The number (from 1) of agentsim's line it is about, if given.
    pub line: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// The named protocol errors of section 9 that a line of the runtime can commit. The others
/// (`unexpected-exit`, `timeout`) are not about a line and belong to the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolErrorKind {
    /// `malformed-json`: not JSON, or not a JSON object.
    MalformedJson,
    /// `unknown-type`: `type` missing, not a string, or not a type of protocol 1.
    UnknownType,
    /// `bad-field`: a required field missing, or a field of the wrong JSON type or value.
    BadField,
    /// `not-ready`: a line other than `ready`/`error` before `ready`, or a second `ready`.
    NotReady,
    /// `protocol-mismatch`: `ready.protocol` is not 1.
    ProtocolMismatch,
    /// `unknown-conversation`: a conversation agentsim never sent a `user` for.
    UnknownConversation,
    /// `unknown-agent`: `tool_call.agent` not in `hello.agents`.
    UnknownAgent,
    /// `unknown-tool`: `tool_call.name` not in `hello.tools` nor a passthrough skill's frame.
    UnknownTool,
    /// `duplicate-call`: `tool_call.call` already used by this process.
    DuplicateCall,
    /// `unknown-seq`: `idle.seq` never sent, or lower than a previous `idle`'s.
    UnknownSeq,
    /// `oversize-line`: a line over 1 MiB.
    OversizeLine,
    /// `invalid-utf8`: a line that is not UTF-8.
    InvalidUtf8,
    /// `flood`: more than [`MAX_LINES_PER_RUN`] lines in one run (counted by the driver).
    Flood,
    /// `runtime-error`: the runtime wrote `error`.
    RuntimeError,
}

impl ProtocolErrorKind {
    /// The name the specification and the reports use (`malformed-json`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolErrorKind::MalformedJson => "malformed-json",
            ProtocolErrorKind::UnknownType => "unknown-type",
            ProtocolErrorKind::BadField => "bad-field",
            ProtocolErrorKind::NotReady => "not-ready",
            ProtocolErrorKind::ProtocolMismatch => "protocol-mismatch",
            ProtocolErrorKind::UnknownConversation => "unknown-conversation",
            ProtocolErrorKind::UnknownAgent => "unknown-agent",
            ProtocolErrorKind::UnknownTool => "unknown-tool",
            ProtocolErrorKind::DuplicateCall => "duplicate-call",
            ProtocolErrorKind::UnknownSeq => "unknown-seq",
            ProtocolErrorKind::OversizeLine => "oversize-line",
            ProtocolErrorKind::InvalidUtf8 => "invalid-utf8",
            ProtocolErrorKind::Flood => "flood",
            ProtocolErrorKind::RuntimeError => "runtime-error",
        }
    }
}

impl fmt::Display for ProtocolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A located protocol error: the runtime's line number, the error's name, what is wrong, and the
/// line itself, clipped and escaped ([`quote_line`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("runtime line {line}: {kind}: {message}: {text}")]
pub struct ProtocolError {
    /// The line's number on the runtime's stdout, from 1, counting every line of the process.
    pub line: u64,
    /// The error's name.
    pub kind: ProtocolErrorKind,
    /// What is wrong, for a person (names the field for `bad-field`, the byte offset for
    /// `invalid-utf8`).
    pub message: String,
    /// The offending line, clipped to [`QUOTE_CHARS`] characters and escaped.
    pub text: String,
}

impl ProtocolError {
    /// An error of `kind` about the line `raw`, number `line`.
    pub fn new(
        kind: ProtocolErrorKind,
        line: u64,
        message: impl Into<String>,
        raw: &[u8],
    ) -> ProtocolError {
        ProtocolError {
            line,
            kind,
            message: message.into(),
            text: quote_line(raw),
        }
    }
}

/// The first [`QUOTE_CHARS`] characters of a line, printable on one terminal line: control
/// characters and the bidirectional-text controls are written as Rust escapes (`\n`, `\u{1b}`,
/// `\u{202e}`), bytes that are not UTF-8 as `\xNN` (each counting as one character), and a clipped
/// line ends with `…`. Quotes and backslashes are left as they are, so a JSON line stays readable.
/// A line ending (`\n`, `\r\n`) is not quoted.
pub fn quote_line(raw: &[u8]) -> String {
    let raw = strip_line_ending(raw);
    let mut out = String::new();
    let mut count = 0;
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            if count == QUOTE_CHARS {
                out.push('…');
                return out;
            }
            count += 1;
            if c.is_control() || is_bidi_control(c) {
                out.extend(c.escape_debug());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            if count == QUOTE_CHARS {
                out.push('…');
                return out;
            }
            count += 1;
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// The line without one trailing `\n` and then one trailing `\r`.
fn strip_line_ending(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.strip_suffix(b"\r").unwrap_or(raw)
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

/// Decodes one line of the runtime's stdout, number `line_no` (from 1).
///
/// `bytes` is the line with or without its ending: one trailing `\n`, and a `\r` before it, are
/// dropped. A line of only white space gives `Ok(None)`. Otherwise the checks run in this order,
/// the first that fails giving the error: `oversize-line` (over [`MAX_LINE`] bytes; a prefix of
/// [`MAX_LINE`] + 1 bytes is enough), `invalid-utf8` (with the byte offset), `malformed-json`,
/// `unknown-type`, `bad-field` (naming the field), `protocol-mismatch`. Unknown fields are
/// ignored. Integers must be JSON numbers without fraction or exponent, from 0 to
/// [`MAX_INTEGER`].
///
/// The checks that need what came before (`not-ready`, `unknown-conversation`, ...) are
/// [`super::Session`]'s.
pub fn decode_line(bytes: &[u8], line_no: u64) -> Result<Option<FromRuntime>, ProtocolError> {
    let raw = strip_line_ending(bytes);
    let err = |kind, message: String| ProtocolError::new(kind, line_no, message, raw);
    if raw.len() > MAX_LINE {
        return Err(err(
            ProtocolErrorKind::OversizeLine,
            format!(
                "the line holds more than {MAX_LINE} bytes ({} read)",
                raw.len()
            ),
        ));
    }
    let text = match std::str::from_utf8(raw) {
        Ok(text) => text,
        Err(e) => {
            return Err(err(
                ProtocolErrorKind::InvalidUtf8,
                format!("the line is not UTF-8 at byte offset {}", e.valid_up_to()),
            ))
        }
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(err(
                ProtocolErrorKind::MalformedJson,
                format!("not JSON: {e}"),
            ))
        }
    };
    let Value::Object(object) = value else {
        return Err(err(
            ProtocolErrorKind::MalformedJson,
            format!("a JSON {}, not an object", json_type(&value)),
        ));
    };
    decode_object(&object).map(Some).map_err(|e| match e {
        Fault::Type(message) => err(ProtocolErrorKind::UnknownType, message),
        Fault::Field(message) => err(ProtocolErrorKind::BadField, message),
        Fault::Protocol(message) => err(ProtocolErrorKind::ProtocolMismatch, message),
    })
}

/// What is wrong with a JSON object, before it is located.
enum Fault {
    Type(String),
    Field(String),
    Protocol(String),
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number with a fraction or exponent",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

const TYPES: &str = "ready, send, tool_call, idle, stack, event, error";

fn decode_object(o: &Map<String, Value>) -> Result<FromRuntime, Fault> {
    let kind = match o.get("type") {
        None => return Err(Fault::Type(format!("no `type` field (one of {TYPES})"))),
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(Fault::Type(format!(
                "`type` is a {}, not a string (one of {TYPES})",
                json_type(other)
            )))
        }
    };
    let f = Fields {
        o,
        path: String::new(),
    };
    Ok(match kind {
        "ready" => {
            // The protocol first: another protocol's `ready` may shape its other fields
            // differently, and the mismatch is the error that explains it.
            let protocol = f.integer("protocol")?;
            if protocol != PROTOCOL_VERSION {
                return Err(Fault::Protocol(format!(
                    "the runtime speaks protocol {protocol}; agentsim speaks protocol {PROTOCOL_VERSION}"
                )));
            }
            FromRuntime::Ready(Ready {
                protocol,
                capabilities: f.strings("capabilities")?,
                name: f.opt_string("name")?,
            })
        }
        "send" => FromRuntime::Send(SendText {
            conversation: f.string("conversation")?,
            text: f.string("text")?,
        }),
        "tool_call" => FromRuntime::ToolCall(ToolCall {
            call: f.string("call")?,
            conversation: f.string("conversation")?,
            agent: f.string("agent")?,
            name: f.string("name")?,
            input: f.any("input")?,
        }),
        "idle" => FromRuntime::Idle(Idle {
            seq: f.integer("seq")?,
        }),
        "stack" => {
            let conversation = f.string("conversation")?;
            let frames = f
                .objects("frames")?
                .into_iter()
                .map(|frame| {
                    Ok(StackFrame {
                        name: frame.string("name")?,
                        iterations: frame.opt_integer("iterations")?,
                    })
                })
                .collect::<Result<_, Fault>>()?;
            let ended = match f.opt_objects("ended")? {
                None => Vec::new(),
                Some(ended) => ended
                    .into_iter()
                    .map(|frame| {
                        let reason = frame.string("reason")?;
                        Ok(EndedFrame {
                            name: frame.string("name")?,
                            iterations: frame.opt_integer("iterations")?,
                            reason: EndReason::from_name(&reason).ok_or_else(|| {
                                Fault::Field(format!(
                                    "`{}` is \"{}\", not one of completed, answered, max_iterations, error, cancelled",
                                    frame.name("reason"),
                                    reason.escape_debug()
                                ))
                            })?,
                        })
                    })
                    .collect::<Result<_, Fault>>()?,
            };
            FromRuntime::Stack(Stack {
                conversation,
                frames,
                ended,
            })
        }
        "event" => {
            let conversation = f.string("conversation")?;
            let kind = f.string("kind")?;
            let frame = f.opt_string("frame")?;
            let body = match kind.as_str() {
                "text" => EventBody::Text {
                    text: f.string("text")?,
                },
                "tool_start" => EventBody::ToolStart {
                    name: f.string("name")?,
                },
                "tool_finish" => EventBody::ToolFinish {
                    name: f.string("name")?,
                },
                "tool_error" => EventBody::ToolError {
                    name: f.string("name")?,
                },
                "tool_result" => EventBody::ToolResult {
                    tool_use_id: f.string("tool_use_id")?,
                    content: f.string("content")?,
                    is_error: f.boolean("is_error")?,
                },
                _ => {
                    let mut fields = o.clone();
                    for key in ["type", "conversation", "kind", "frame"] {
                        fields.remove(key);
                    }
                    EventBody::Other { kind, fields }
                }
            };
            FromRuntime::Event(Event {
                conversation,
                frame,
                body,
            })
        }
        "error" => FromRuntime::Error(RuntimeError {
            message: f.string("message")?,
            line: f.opt_integer("line")?,
        }),
        other => {
            return Err(Fault::Type(format!(
                "unknown type \"{}\" (one of {TYPES})",
                other.escape_debug()
            )))
        }
    })
}

/// The fields of one JSON object, at a path (`""` for the message, `frames[1].` inside it).
struct Fields<'a> {
    o: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.path)
    }

    fn missing(&self, key: &str, expected: &str) -> Fault {
        Fault::Field(format!("`{}` is missing ({expected})", self.name(key)))
    }

    fn wrong(&self, key: &str, expected: &str, found: &Value) -> Fault {
        Fault::Field(format!(
            "`{}` is a {}, not {expected}",
            self.name(key),
            json_type(found)
        ))
    }

    /// The field's value if present; `null` counts as present (and as the wrong type wherever a
    /// type is expected).
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.o.get(key)
    }

    fn any(&self, key: &str) -> Result<Value, Fault> {
        self.get(key)
            .cloned()
            .ok_or_else(|| self.missing(key, "any JSON value"))
    }

    fn string(&self, key: &str) -> Result<String, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "a string")),
            Some(v) => self.as_string(key, v),
        }
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>, Fault> {
        self.get(key).map(|v| self.as_string(key, v)).transpose()
    }

    fn as_string(&self, key: &str, v: &Value) -> Result<String, Fault> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(self.wrong(key, "a string", other)),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "a boolean")),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.wrong(key, "a boolean", other)),
        }
    }

    fn integer(&self, key: &str) -> Result<u64, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "an integer")),
            Some(v) => self.as_integer(key, v),
        }
    }

    fn opt_integer(&self, key: &str) -> Result<Option<u64>, Fault> {
        self.get(key).map(|v| self.as_integer(key, v)).transpose()
    }

    fn as_integer(&self, key: &str, v: &Value) -> Result<u64, Fault> {
        const EXPECTED: &str = "an integer from 0 to 2^53-1";
        match v {
            Value::Number(n) => match n.as_u64() {
                Some(i) if i <= MAX_INTEGER => Ok(i),
                _ => Err(Fault::Field(format!(
                    "`{}` is {n}, not {EXPECTED}",
                    self.name(key)
                ))),
            },
            other => Err(self.wrong(key, EXPECTED, other)),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "an array of strings")),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.wrong(&format!("{key}[{i}]"), "a string", other)),
                })
                .collect(),
            Some(other) => Err(self.wrong(key, "an array of strings", other)),
        }
    }

    /// The objects of an array field, each as `Fields` at its path (`frames[1].`).
    fn objects(&self, key: &str) -> Result<Vec<Fields<'a>>, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "an array of objects")),
            Some(v) => self.as_objects(key, v),
        }
    }

    fn opt_objects(&self, key: &str) -> Result<Option<Vec<Fields<'a>>>, Fault> {
        self.get(key).map(|v| self.as_objects(key, v)).transpose()
    }

    fn as_objects(&self, key: &str, v: &'a Value) -> Result<Vec<Fields<'a>>, Fault> {
        let Value::Array(items) = v else {
            return Err(self.wrong(key, "an array of objects", v));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(o) => Ok(Fields {
                    o,
                    path: format!("{}{key}[{i}].", self.path),
                }),
                other => Err(self.wrong(&format!("{key}[{i}]"), "an object", other)),
            })
            .collect()
    }
}
