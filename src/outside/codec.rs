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

pub use super::decode::decode_line;
pub use super::error::{quote_line, ProtocolError, ProtocolErrorKind};
pub use super::from_runtime::{
    EndReason, EndedFrame, Event, EventBody, FromRuntime, Idle, Ready, RuntimeError, SendText,
    Stack, StackFrame, ToolCall,
};
pub use super::limits::{MAX_INTEGER, MAX_LINE, MAX_LINES_PER_RUN, PROTOCOL_VERSION, QUOTE_CHARS};
pub use super::to_runtime::{
    encode_line, AgentKind, BatchPolicy, EncodeError, Hello, HelloAgent, HelloSettings, HelloTool,
    QueryUser, ToRuntime, ToolResult, User,
};
