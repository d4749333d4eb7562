//! Decoding the runtime's lines: blank lines, line endings and unknown fields, then every error
//! kind a line alone shows, each with a line that commits it.

use serde_json::json;

use super::{decode_err, decoded};
use crate::outside::codec::{
    decode_line, EndReason, EventBody, FromRuntime, Idle, ProtocolErrorKind, MAX_LINE,
};

use ProtocolErrorKind as K;

// --- decoding: blank lines, line endings, unknown fields -------------------------------------

#[test]
fn blank_lines_decode_to_nothing() {
    for line in ["", "\n", "\r\n", "   ", " \t \r\n", "\u{a0}\u{3000}\n"] {
        assert_eq!(decode_line(line.as_bytes(), 1), Ok(None), "{line:?}");
    }
}

#[test]
fn a_crlf_line_decodes_without_its_cr() {
    let m = decoded("{\"type\":\"send\",\"conversation\":\"default\",\"text\":\"hi\"}\r\n");
    let FromRuntime::Send(send) = m else {
        panic!("{m:?}")
    };
    assert_eq!(send.text, "hi");
    // Without the newline, a lone trailing `\r` is tolerated too.
    assert_eq!(decoded("{\"type\":\"idle\",\"seq\":3}\r").kind(), "idle");
}

#[test]
fn unknown_fields_are_ignored_at_every_level() {
    let m = decoded(
        r#"{"type":"stack","v":2,"conversation":"c","frames":[{"name":"main","color":"red"}],"ended":[{"name":"x","reason":"error","why":null}],"extra":{"a":[1,2]}}"#,
    );
    let FromRuntime::Stack(stack) = m else {
        panic!("{m:?}")
    };
    assert_eq!(stack.frames[0].name, "main");
    assert_eq!(stack.frames[0].iterations, None);
    assert_eq!(stack.ended[0].reason, EndReason::Error);
    let m = decoded(r#"{"type":"ready","protocol":1,"capabilities":["stack","teleport"],"x":1}"#);
    let FromRuntime::Ready(ready) = m else {
        panic!("{m:?}")
    };
    assert_eq!(ready.capabilities, ["stack", "teleport"]);
    assert_eq!(ready.name, None);
    // Of a key written twice, the last counts.
    assert_eq!(
        decoded(r#"{"type":"idle","seq":"x","seq":2}"#),
        FromRuntime::Idle(Idle { seq: 2 })
    );
}

#[test]
fn every_message_type_decodes_with_its_fields() {
    let m =
        decoded(r#"{"type":"error","message":"line 3: unknown message type \"resume\"","line":3}"#);
    let FromRuntime::Error(e) = m else {
        panic!("{m:?}")
    };
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("\"resume\""));
    let m = decoded(
        r#"{"type":"tool_call","call":"c","conversation":"d","agent":"main","name":"t","input":null}"#,
    );
    let FromRuntime::ToolCall(call) = m else {
        panic!("{m:?}")
    };
    assert_eq!(call.input, serde_json::Value::Null);
    for (line, kind) in [
        (
            r#"{"type":"event","conversation":"d","kind":"text","text":"He"}"#,
            "text",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"tool_start","name":"echo"}"#,
            "tool_start",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"tool_finish","name":"echo"}"#,
            "tool_finish",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"tool_error","name":"echo"}"#,
            "tool_error",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"thinking","frame":"main","text":5}"#,
            "thinking",
        ),
    ] {
        let FromRuntime::Event(event) = decoded(line) else {
            panic!("{line}")
        };
        assert_eq!(event.body.kind(), kind);
    }
    let FromRuntime::Event(event) =
        decoded(r#"{"type":"event","conversation":"d","kind":"thinking","frame":"main","text":5}"#)
    else {
        unreachable!()
    };
    assert_eq!(event.frame.as_deref(), Some("main"));
    let EventBody::Other { fields, .. } = event.body else {
        panic!("{:?}", event.body)
    };
    assert_eq!(serde_json::Value::Object(fields), json!({"text": 5}));
    let FromRuntime::Event(event) = decoded(
        r#"{"type":"event","conversation":"d","kind":"response","text":"Done.","iterations":2,"tool_calls":["use_skill","echo"]}"#,
    ) else {
        unreachable!()
    };
    assert_eq!(
        event.body,
        EventBody::Response {
            text: "Done.".into(),
            iterations: 2,
            tool_calls: vec!["use_skill".into(), "echo".into()]
        }
    );
    let FromRuntime::Event(event) = decoded(
        r#"{"type":"event","conversation":"d","kind":"usage","input_tokens":460,"output_tokens":65}"#,
    ) else {
        unreachable!()
    };
    assert_eq!(
        event.body,
        EventBody::Usage {
            input_tokens: 460,
            output_tokens: 65
        }
    );
    assert_eq!(event.body.kind(), "usage");
}

// --- decoding: every error kind a line alone shows ------------------------------------------

#[test]
fn malformed_json_is_a_line_that_is_not_json_or_not_an_object() {
    for line in [
        "Hello from my runtime!",
        "{\"type\":\"idle\",\"seq\":1",
        "{\"type\":\"idle\",\"seq\":1}}",
        "[{\"type\":\"idle\",\"seq\":1}]",
        "\"idle\"",
        "null",
        "42",
        "{'type':'idle'}",
    ] {
        assert_eq!(decode_err(line.as_bytes()).kind, K::MalformedJson, "{line}");
    }
    let e = decode_err(b"[1]");
    assert!(e.message.contains("array"), "{e}");
    // Nesting deeper than serde_json's recursion limit is an error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(decode_err(deep.as_bytes()).kind, K::MalformedJson);
}

#[test]
fn unknown_type_is_a_missing_non_string_or_unknown_type() {
    for line in [
        r#"{"seq":1}"#,
        r#"{"type":null}"#,
        r#"{"type":3}"#,
        r#"{"type":["idle"]}"#,
        r#"{"type":"resume"}"#,
        r#"{"type":"IDLE","seq":1}"#,
        r#"{"type":"hello","protocol":1}"#,
    ] {
        assert_eq!(decode_err(line.as_bytes()).kind, K::UnknownType, "{line}");
    }
    let e = decode_err(br#"{"type":"resume"}"#);
    assert!(e.message.contains("\"resume\""), "{e}");
}

#[test]
fn bad_field_names_the_missing_or_mistyped_field() {
    for (line, field) in [
        (r#"{"type":"idle","seq":"2"}"#, "`seq`"),
        (r#"{"type":"idle"}"#, "`seq`"),
        (r#"{"type":"idle","seq":null}"#, "`seq`"),
        (
            r#"{"type":"stack","conversation":"c","frames":{}}"#,
            "`frames`",
        ),
        (
            r#"{"type":"stack","conversation":"c","frames":[{"name":"main"},"x"]}"#,
            "`frames[1]`",
        ),
        (
            r#"{"type":"stack","conversation":"c","frames":[{"name":"main"},{"name":"s","iterations":-1}]}"#,
            "`frames[1].iterations`",
        ),
        (
            r#"{"type":"stack","conversation":"c","frames":[],"ended":[{"name":"s","reason":"vanished"}]}"#,
            "`ended[0].reason`",
        ),
        (
            r#"{"type":"stack","conversation":"c","frames":[],"ended":[{"name":"s"}]}"#,
            "`ended[0].reason`",
        ),
        (
            r#"{"type":"stack","conversation":"c","frames":[],"ended":null}"#,
            "`ended`",
        ),
        (
            r#"{"type":"ready","protocol":1,"capabilities":["stack",7]}"#,
            "`capabilities[1]`",
        ),
        (
            r#"{"type":"ready","protocol":1,"capabilities":"stack"}"#,
            "`capabilities`",
        ),
        (
            r#"{"type":"ready","protocol":1,"capabilities":[],"name":null}"#,
            "`name`",
        ),
        (r#"{"type":"ready","capabilities":[]}"#, "`protocol`"),
        (r#"{"type":"send","conversation":"c"}"#, "`text`"),
        (
            r#"{"type":"send","conversation":1,"text":"x"}"#,
            "`conversation`",
        ),
        (
            r#"{"type":"tool_call","call":"c","conversation":"d","agent":"main","name":"t"}"#,
            "`input`",
        ),
        (
            r#"{"type":"tool_call","call":7,"conversation":"d","agent":"main","name":"t","input":{}}"#,
            "`call`",
        ),
        (r#"{"type":"event","conversation":"d"}"#, "`kind`"),
        (
            r#"{"type":"event","conversation":"d","kind":"tool_result","tool_use_id":"t","content":"x","is_error":"false"}"#,
            "`is_error`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"text"}"#,
            "`text`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"response","text":"t","iterations":1}"#,
            "`tool_calls`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"response","text":"t","iterations":1,"tool_calls":["a",2]}"#,
            "`tool_calls[1]`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"response","text":"t","iterations":-1,"tool_calls":[]}"#,
            "`iterations`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"tool_start","name":null}"#,
            "`name`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"usage","input_tokens":5}"#,
            "`output_tokens`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"usage","input_tokens":1.5,"output_tokens":2}"#,
            "`input_tokens`",
        ),
        (
            r#"{"type":"event","conversation":"d","kind":"x","frame":1}"#,
            "`frame`",
        ),
        (r#"{"type":"error"}"#, "`message`"),
        (r#"{"type":"error","message":"m","line":"3"}"#, "`line`"),
    ] {
        let e = decode_err(line.as_bytes());
        assert_eq!(e.kind, K::BadField, "{line}: {e}");
        assert!(e.message.contains(field), "{line}: {e} should name {field}");
    }
}

#[test]
fn integers_are_whole_numbers_from_0_to_2_pow_53_minus_1() {
    for good in ["0", "1", "9007199254740991"] {
        let line = format!(r#"{{"type":"idle","seq":{good}}}"#);
        assert_eq!(decoded(&line).kind(), "idle", "{good}");
    }
    for bad in [
        "9007199254740992",
        "18446744073709551616",
        "-1",
        "1.0",
        "1e2",
        "0.5",
        "true",
    ] {
        let line = format!(r#"{{"type":"idle","seq":{bad}}}"#);
        let e = decode_err(line.as_bytes());
        assert_eq!(e.kind, K::BadField, "{bad}: {e}");
        assert!(e.message.contains("2^53-1"), "{e}");
    }
}

#[test]
fn protocol_mismatch_is_a_ready_for_another_protocol() {
    for line in [
        r#"{"type":"ready","protocol":2,"capabilities":[]}"#,
        r#"{"type":"ready","protocol":0,"capabilities":[]}"#,
    ] {
        let e = decode_err(line.as_bytes());
        assert_eq!(e.kind, K::ProtocolMismatch, "{line}");
    }
    // Another protocol's `ready` is a mismatch even if its other fields differ from protocol 1's.
    let e = decode_err(br#"{"type":"ready","protocol":2,"capabilities":{"stack":true}}"#);
    assert_eq!(e.kind, K::ProtocolMismatch);
    assert!(e.message.contains("protocol 2"), "{e}");
    // A mistyped protocol is a bad field, not another protocol.
    let e = decode_err(br#"{"type":"ready","protocol":"1","capabilities":[]}"#);
    assert_eq!(e.kind, K::BadField);
}

#[test]
fn invalid_utf8_gives_the_byte_offset_and_quotes_the_bytes() {
    let line = b"{\"type\":\"send\",\"conversation\":\"c\",\"text\":\"caf\xe9\"}\n";
    let e = decode_err(line);
    assert_eq!(e.kind, K::InvalidUtf8);
    assert!(e.message.contains("byte offset 45"), "{e}");
    assert!(e.text.contains("caf\\xe9"), "{}", e.text);
    assert!(!e.text.contains('\n'));
    // A blank line that is not UTF-8 is not blank.
    assert_eq!(decode_err(b"  \xff  ").kind, K::InvalidUtf8);
}

#[test]
fn a_line_of_1_mib_plus_1_is_oversize_and_1_mib_is_not() {
    let body = r#"{"type":"idle","seq":1}"#;
    let exact = format!("{body}{}", " ".repeat(MAX_LINE - body.len()));
    assert_eq!(exact.len(), MAX_LINE);
    assert_eq!(decoded(&exact).kind(), "idle");
    assert_eq!(decoded(&format!("{exact}\r\n")).kind(), "idle");
    let over = format!("{exact} ");
    let e = decode_err(over.as_bytes());
    assert_eq!(e.kind, K::OversizeLine);
    assert!(e.text.starts_with(body), "{}", e.text);
    assert!(e.text.ends_with('…'), "clipped");
    // Oversize wins over every other fault: a reader may pass just the first MAX_LINE + 1 bytes.
    assert_eq!(decode_err(&vec![0xff; MAX_LINE + 1]).kind, K::OversizeLine);
    assert_eq!(decode_err(&vec![b' '; MAX_LINE + 1]).kind, K::OversizeLine);
}
