//! The runtime's lines (`docs`: the runtime protocol, sections 2 and 4): the messages a runtime
//! writes on its stdout ([`FromRuntime`]), as [`super::decode_line`] accepted them.

use serde_json::{Map, Value};

/// A message the runtime writes on its stdout, as [`decode_line`] accepted it.
///
/// [`decode_line`]: super::decode_line
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
    ///
    /// [`PROTOCOL_VERSION`]: super::codec::PROTOCOL_VERSION
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

    pub(super) fn from_name(name: &str) -> Option<EndReason> {
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
    /// `response`: the main frame left the stack, ending its turn (capability `response`).
    Response {
        /// What it sent the user last (the limit or error notice when the turn failed).
        text: String,
        /// The iterations the main frame used.
        iterations: u64,
        /// The names of the tools it called, in order (built-ins such as `use_skill` included).
        tool_calls: Vec<String>,
    },
    /// `usage`: the conversation's token usage so far, summed over every model reply of it
    /// (capability `usage`).
    Usage {
        /// Input (prompt) tokens.
        input_tokens: u64,
        /// Output (completion) tokens.
        output_tokens: u64,
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
            EventBody::Response { .. } => "response",
            EventBody::Usage { .. } => "usage",
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
