//! The located errors: how a line is quoted, and the names of the error kinds.

use super::decode_err;
use crate::outside::codec::{quote_line, ProtocolErrorKind, QUOTE_CHARS};

use ProtocolErrorKind as K;

#[test]
fn the_quoted_line_is_clipped_to_200_characters_and_escaped() {
    let long = format!("\u{1b}[31m{}\u{202e}", "é".repeat(300));
    let quoted = quote_line(long.as_bytes());
    assert!(quoted.starts_with("\\u{1b}[31m"), "{quoted}");
    assert_eq!(
        quoted.chars().filter(|&c| c == 'é').count(),
        QUOTE_CHARS - 5
    );
    assert!(quoted.ends_with('…'));
    assert!(!quoted.contains('\u{202e}'));
    assert_eq!(quote_line(b"a\tb\"c\\d\n"), "a\\tb\"c\\d");
    assert_eq!(quote_line("x\u{202e}y\r\n".as_bytes()), "x\\u{202e}y");
    let e = decode_err(b"garbage\x07 here");
    assert_eq!(e.kind, K::MalformedJson);
    assert_eq!(e.text, "garbage\\u{7} here");
    let shown = e.to_string();
    assert!(
        shown.starts_with("runtime line 7: malformed-json: not JSON"),
        "{shown}"
    );
}

#[test]
fn the_kind_names_are_the_specs() {
    let names: Vec<_> = [
        K::MalformedJson,
        K::UnknownType,
        K::BadField,
        K::NotReady,
        K::ProtocolMismatch,
        K::UnknownConversation,
        K::UnknownAgent,
        K::UnknownTool,
        K::DuplicateCall,
        K::UnknownSeq,
        K::OversizeLine,
        K::InvalidUtf8,
        K::Flood,
        K::RuntimeError,
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    assert_eq!(
        names,
        [
            "malformed-json",
            "unknown-type",
            "bad-field",
            "not-ready",
            "protocol-mismatch",
            "unknown-conversation",
            "unknown-agent",
            "unknown-tool",
            "duplicate-call",
            "unknown-seq",
            "oversize-line",
            "invalid-utf8",
            "flood",
            "runtime-error"
        ]
    );
}
