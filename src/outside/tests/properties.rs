//! Properties over arbitrary bytes and protocol-like lines: nothing panics, and a `user` line
//! reads back.

use proptest::prelude::*;

use super::example_hello;
use crate::outside::codec::{decode_line, encode_line, ToRuntime, User, MAX_INTEGER, QUOTE_CHARS};
use crate::outside::session::Session;

/// Fragments of protocol lines, so that generated lines reach past the JSON parser.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{".to_owned()),
        Just("}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just(",".to_owned()),
        Just(":".to_owned()),
        Just("\"type\":".to_owned()),
        Just("\"ready\"".to_owned()),
        Just("\"send\"".to_owned()),
        Just("\"tool_call\"".to_owned()),
        Just("\"idle\"".to_owned()),
        Just("\"stack\"".to_owned()),
        Just("\"event\"".to_owned()),
        Just("\"error\"".to_owned()),
        Just("\"seq\":".to_owned()),
        Just("\"frames\":".to_owned()),
        Just("\"ended\":".to_owned()),
        Just("\"conversation\":\"default\"".to_owned()),
        Just("\"kind\":\"tool_result\"".to_owned()),
        Just("\"protocol\":1".to_owned()),
        Just("\"capabilities\":[]".to_owned()),
        Just("null".to_owned()),
        Just("9007199254740992".to_owned()),
        Just("-1".to_owned()),
        Just("1.5".to_owned()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[a-z_]{0,8}".prop_map(|s| format!("\"{s}\"")),
        any::<String>(),
    ]
}

fn cases() -> u32 {
    std::env::var("AGENTSIM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes never make the decoder panic, and an error carries the line's number and a
    /// quote on one line.
    #[test]
    fn decode_line_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400), n in any::<u64>()) {
        if let Err(e) = decode_line(&bytes, n) {
            prop_assert_eq!(e.line, n);
            prop_assert!(!e.text.contains('\n') && !e.text.contains('\r'), "{:?}", e.text);
            prop_assert!(e.text.chars().count() <= QUOTE_CHARS * 10 + 1);
        }
    }

    /// Lines made of protocol fragments reach the field checks; neither the decoder nor a session
    /// that sees them in order panics.
    #[test]
    fn decoding_and_checking_protocol_like_lines_never_panics(lines in proptest::collection::vec(proptest::collection::vec(fragment(), 0..12), 0..8)) {
        let mut s = Session::new();
        s.sent_hello(&example_hello());
        s.sent_user(1, "default");
        for (i, parts) in lines.iter().enumerate() {
            let line = parts.concat();
            let _ = s.receive_line(line.as_bytes(), i as u64 + 1);
        }
    }

    /// Whatever the user types, agentsim's `user` line is one line that reads back the same.
    #[test]
    fn a_user_line_is_one_line_that_reads_back(text in any::<String>(), conversation in any::<String>(), seq in 0..=MAX_INTEGER) {
        let message = ToRuntime::User(User { seq, conversation, text });
        let line = encode_line(&message).unwrap();
        prop_assert_eq!(line.find('\n'), Some(line.len() - 1));
        let back: ToRuntime = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(back, message);
    }
}
