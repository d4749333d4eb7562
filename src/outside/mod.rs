//! agentsim's side of the runtime protocol (issue 39): how agentsim talks to a user's agent
//! runtime that it runs as a child process, speaking JSON lines on stdin and stdout.
//!
//! This first part is pure (no IO, no async runtime, no clock):
//! - [`codec`]: the messages of protocol 1, encoding agentsim's lines and strictly decoding the
//!   runtime's, with located [`ProtocolError`]s.
//! - [`session`]: the order of an exchange, the sequence errors a line commits given what agentsim
//!   wrote before it.

pub mod codec;
pub mod session;

pub use codec::{
    decode_line, encode_line, quote_line, EncodeError, FromRuntime, Hello, ProtocolError,
    ProtocolErrorKind, ToRuntime, MAX_LINE, PROTOCOL_VERSION,
};
pub use session::Session;

#[cfg(test)]
mod tests;
