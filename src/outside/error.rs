//! The located errors a runtime's line commits (`docs`: the runtime protocol, section 9):
//! [`ProtocolError`], its [`ProtocolErrorKind`]s, and [`quote_line`], how it quotes the line.

use std::fmt;

use super::limits::QUOTE_CHARS;

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
    /// `flood`: more than [`MAX_LINES_PER_RUN`](super::codec::MAX_LINES_PER_RUN) lines in one run
    /// (counted by the driver).
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
pub(super) fn strip_line_ending(raw: &[u8]) -> &[u8] {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    raw.strip_suffix(b"\r").unwrap_or(raw)
}
