//! agentsim's side of the runtime protocol (issue 39): how agentsim talks to a user's agent
//! runtime that it runs as a child process, speaking JSON lines on stdin and stdout.
//!
//! This first part is pure (no IO, no async runtime, no clock):
//! - [`codec`]: the messages of protocol 1, encoding agentsim's lines and strictly decoding the
//!   runtime's, with located [`ProtocolError`]s. Its items live in private modules, one per
//!   concept (agentsim's lines, the runtime's lines, decoding, errors), and are re-exported there.
//! - [`session`]: the order of an exchange, the sequence errors a line commits given what agentsim
//!   wrote before it.
//! - [`inferred`]: the stack, the tool results and the checks `routing`, `complete-delivery`,
//!   `error-cascade` and `iteration-limit`, read from the runtime's model requests.
//! - [`conversations`]: one inference per conversation, each fed the requests that name it (or
//!   every request, in a scenario of one conversation).

pub mod codec;
pub mod conversations;
mod decode;
mod error;
mod from_runtime;
pub mod inferred;
mod limits;
pub mod session;
mod to_runtime;

pub use codec::{
    decode_line, encode_line, quote_line, EncodeError, FromRuntime, Hello, ProtocolError,
    ProtocolErrorKind, ToRuntime, MAX_LINE, PROTOCOL_VERSION,
};
pub use session::Session;

#[cfg(test)]
mod tests;
