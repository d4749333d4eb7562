//! Tests of the runtime protocol's codec and sequence checks: every error kind with a line that
//! commits it, the spec's example exchange, the limits, and properties over arbitrary bytes.

use proptest::prelude::*;
use serde_json::json;

use super::codec::{
    decode_line, encode_line, quote_line, AgentKind, BatchPolicy, EncodeError, EndReason,
    EventBody, FromRuntime, Hello, HelloAgent, HelloSettings, HelloTool, ProtocolError,
    ProtocolErrorKind, QueryUser, ToRuntime, ToolResult, User, MAX_INTEGER, MAX_LINE, QUOTE_CHARS,
};
use super::session::Session;

use ProtocolErrorKind as K;

/// Section 10 of the runtime protocol, as written there (`→` agentsim to the runtime, `←` the
/// runtime to agentsim).
const EXAMPLE: &str = r#"→ {"type":"hello","protocol":1,"run":"a skill asks the user, then completes#0","seed":0,"state_dir":"/tmp/agentsim-run-7/state","restarts":0,"awaiting_idle":null,"time_scale":0.1,"agents":[{"name":"main","kind":"main","frame":"main","system":"You are main.","model":"main","max_iterations":10,"tools":["web_search"],"parallel_tools":false,"stream":false,"passthrough":false,"batch":null,"description":null},{"name":"research","kind":"skill","frame":"skill:research","system":"You are skill:research.","model":"research","max_iterations":25,"tools":["web_search"],"parallel_tools":false,"stream":false,"passthrough":false,"batch":null,"description":null}],"tools":[{"name":"web_search","description":"","input_schema":{"type":"object"},"timeout_ms":null}],"settings":{"cancel_words":["cancel","stop","abort","nevermind","never mind","quit"],"query_user":"interactive","max_depth":256}}
← {"type":"ready","protocol":1,"capabilities":["stack","tool-results","ask-user","cancel-words"],"name":"reference-python 1"}
→ {"type":"user","seq":1,"conversation":"default","text":"research Python async APIs"}
← {"type":"send","conversation":"default","text":"Which Python version?"}
← {"type":"stack","conversation":"default","frames":[{"name":"main","iterations":1},{"name":"skill:research","iterations":1}]}
← {"type":"idle","seq":1}
→ {"type":"user","seq":2,"conversation":"default","text":"3.13"}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"skill:research","tool_use_id":"toolu_b","content":"3.13","is_error":false}
← {"type":"tool_call","call":"toolu_c","conversation":"default","agent":"research","name":"web_search","input":{"q":"3.13 async"}}
→ {"type":"tool_result","call":"toolu_c","content":"3 results","is_error":false}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"skill:research","tool_use_id":"toolu_c","content":"3 results","is_error":false}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"skill:research","tool_use_id":"toolu_d","content":"3 APIs","is_error":false}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"main","tool_use_id":"toolu_a","content":"3 APIs","is_error":false}
← {"type":"send","conversation":"default","text":"Here is what research found: 3 APIs."}
← {"type":"stack","conversation":"default","frames":[],"ended":[{"name":"skill:research","iterations":3,"reason":"completed"},{"name":"main","iterations":2,"reason":"answered"}]}
← {"type":"idle","seq":2}
→ {"type":"shutdown"}"#;

/// The example's `hello`.
fn example_hello() -> Hello {
    let line = EXAMPLE.lines().next().unwrap().strip_prefix("→ ").unwrap();
    match serde_json::from_str(line).unwrap() {
        ToRuntime::Hello(hello) => hello,
        other => panic!("the example starts with {other:?}"),
    }
}

/// The example's hello with a passthrough skill `lookup` added.
fn hello_with_passthrough() -> Hello {
    let mut hello = example_hello();
    let mut lookup = hello.agents[1].clone();
    lookup.name = "lookup".into();
    lookup.frame = "skill:lookup".into();
    lookup.passthrough = true;
    hello.agents.push(lookup);
    hello
}

/// A session after `hello`, `ready` (line 1) and a `user` seq 1 for `default`.
fn started() -> Session {
    let mut s = Session::new();
    s.sent_hello(&hello_with_passthrough());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        1,
    );
    s.sent_user(1, "default");
    s
}

fn ok(s: &mut Session, line: &str, n: u64) -> FromRuntime {
    match s.receive_line(line.as_bytes(), n) {
        Ok(Some(m)) => m,
        other => panic!("line {n} `{line}`: {other:?}"),
    }
}

fn seq_err(s: &mut Session, line: &str, n: u64) -> ProtocolError {
    match s.receive_line(line.as_bytes(), n) {
        Err(e) => {
            assert_eq!(e.line, n);
            e
        }
        other => panic!("line {n} `{line}` was accepted: {other:?}"),
    }
}

fn decode_err(line: &[u8]) -> ProtocolError {
    match decode_line(line, 7) {
        Err(e) => {
            assert_eq!(e.line, 7, "{e}");
            e
        }
        Ok(m) => panic!("{:?} decoded as {m:?}", String::from_utf8_lossy(line)),
    }
}

fn decoded(line: &str) -> FromRuntime {
    match decode_line(line.as_bytes(), 1) {
        Ok(Some(m)) => m,
        other => panic!("`{line}`: {other:?}"),
    }
}

// --- the example and the round trips ---------------------------------------------------------

#[test]
fn the_example_exchange_of_section_10_decodes_and_is_in_order_and_agentsims_lines_encode_byte_for_byte(
) {
    let mut s = Session::new();
    let mut runtime_line = 0;
    let mut received = Vec::new();
    for line in EXAMPLE.lines() {
        if let Some(ours) = line.strip_prefix("→ ") {
            let message: ToRuntime = serde_json::from_str(ours).unwrap();
            assert_eq!(encode_line(&message).unwrap(), format!("{ours}\n"));
            s.sent(&message);
        } else {
            let theirs = line.strip_prefix("← ").unwrap();
            runtime_line += 1;
            received.push(ok(&mut s, &format!("{theirs}\n"), runtime_line));
        }
    }
    let kinds: Vec<_> = received.iter().map(FromRuntime::kind).collect();
    assert_eq!(
        kinds,
        [
            "ready",
            "send",
            "stack",
            "idle",
            "event",
            "tool_call",
            "event",
            "event",
            "event",
            "send",
            "stack",
            "idle"
        ]
    );
    assert_eq!(s.last_idle(), Some(2));
    let FromRuntime::Stack(last) = &received[10] else {
        panic!("{:?}", received[10]);
    };
    assert!(last.frames.is_empty());
    assert_eq!(last.ended[0].reason, EndReason::Completed);
    assert_eq!(last.ended[1].iterations, Some(2));
    let FromRuntime::ToolCall(call) = &received[5] else {
        panic!("{:?}", received[5]);
    };
    assert_eq!(call.input, json!({"q": "3.13 async"}));
}

#[test]
fn every_message_agentsim_writes_round_trips_through_serde_json() {
    let mut hello = example_hello();
    hello.seed = MAX_INTEGER;
    hello.restarts = 2;
    hello.awaiting_idle = Some(4);
    hello.time_scale = 0.25;
    hello.agents.push(HelloAgent {
        name: "fetch".into(),
        kind: AgentKind::Agent,
        frame: "agent:fetch".into(),
        system: "Fetch.\nLine two \u{202e} \"quoted\"".into(),
        model: "fetch".into(),
        max_iterations: 3,
        tools: vec![],
        parallel_tools: true,
        stream: true,
        passthrough: false,
        batch: Some(BatchPolicy::ExtractFromConversation),
        description: Some("Fetches.".into()),
    });
    hello.tools.push(HelloTool {
        name: "slow".into(),
        description: "takes time".into(),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        timeout_ms: Some(1500),
    });
    hello.settings = HelloSettings {
        cancel_words: vec!["stop".into()],
        query_user: QueryUser::None,
        max_depth: 3,
    };
    let messages = [
        ToRuntime::Hello(hello),
        ToRuntime::User(User {
            seq: 3,
            conversation: "telegram_1".into(),
            text: "two\nlines\r\n and a tab\t".into(),
        }),
        ToRuntime::User(User {
            seq: 4,
            conversation: "default".into(),
            text: String::new(),
        }),
        ToRuntime::ToolResult(ToolResult {
            call: "c7".into(),
            content: "3 results".into(),
            is_error: false,
            failed: false,
        }),
        ToRuntime::ToolResult(ToolResult {
            call: "c8".into(),
            content: "boom".into(),
            is_error: true,
            failed: true,
        }),
        ToRuntime::Reset,
        ToRuntime::Shutdown,
    ];
    for message in messages {
        let line = encode_line(&message).unwrap();
        assert!(line.ends_with('\n'), "{line}");
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        assert!(line.starts_with(&format!("{{\"type\":\"{}\"", message.kind())));
        let back: ToRuntime = serde_json::from_str(&line).unwrap();
        assert_eq!(back, message);
    }
}

#[test]
fn the_short_messages_have_the_specs_exact_lines() {
    assert_eq!(
        encode_line(&ToRuntime::Reset).unwrap(),
        "{\"type\":\"reset\"}\n"
    );
    assert_eq!(
        encode_line(&ToRuntime::Shutdown).unwrap(),
        "{\"type\":\"shutdown\"}\n"
    );
    let failed = ToRuntime::ToolResult(ToolResult {
        call: "c1".into(),
        content: "no".into(),
        is_error: true,
        failed: true,
    });
    assert_eq!(
        encode_line(&failed).unwrap(),
        "{\"type\":\"tool_result\",\"call\":\"c1\",\"content\":\"no\",\"is_error\":true,\"failed\":true}\n"
    );
}

// --- encoding limits -------------------------------------------------------------------------

fn user(text: String) -> ToRuntime {
    ToRuntime::User(User {
        seq: 1,
        conversation: "c".into(),
        text,
    })
}

#[test]
fn encoding_accepts_a_line_of_exactly_1_mib_and_refuses_one_byte_more() {
    let overhead = encode_line(&user(String::new())).unwrap().len() - 1;
    let exact = encode_line(&user("a".repeat(MAX_LINE - overhead))).unwrap();
    assert_eq!(exact.len(), MAX_LINE + 1, "1 MiB and the newline");
    assert_eq!(
        encode_line(&user("a".repeat(MAX_LINE - overhead + 1))),
        Err(EncodeError::Oversize {
            kind: "user",
            bytes: MAX_LINE + 1
        })
    );
    // Escapes count: a newline is two bytes on the wire.
    assert!(matches!(
        encode_line(&user("\n".repeat(MAX_LINE / 2))),
        Err(EncodeError::Oversize { .. })
    ));
}

#[test]
fn encoding_refuses_integers_over_2_pow_53_minus_1_and_a_non_finite_time_scale() {
    let mut hello = example_hello();
    hello.seed = MAX_INTEGER + 1;
    let e = encode_line(&ToRuntime::Hello(hello.clone())).unwrap_err();
    assert_eq!(
        e,
        EncodeError::IntegerOutOfRange {
            field: "hello.seed".into(),
            value: MAX_INTEGER + 1
        }
    );
    assert!(e.to_string().contains("hello.seed"), "{e}");
    hello.seed = 0;
    hello.tools[0].timeout_ms = Some(u64::MAX);
    assert!(matches!(
        encode_line(&ToRuntime::Hello(hello.clone())),
        Err(EncodeError::IntegerOutOfRange { field, .. }) if field == "hello.tools[0].timeout_ms"
    ));
    hello.tools[0].timeout_ms = None;
    hello.time_scale = f64::NAN;
    assert!(matches!(
        encode_line(&ToRuntime::Hello(hello)),
        Err(EncodeError::NotFinite {
            field: "hello.time_scale",
            ..
        })
    ));
    let ToRuntime::User(mut u) = user(String::new()) else {
        unreachable!()
    };
    u.seq = u64::MAX;
    assert!(encode_line(&ToRuntime::User(u)).is_err());
}

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
        FromRuntime::Idle(super::codec::Idle { seq: 2 })
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
            r#"{"type":"event","conversation":"d","kind":"tool_start","name":null}"#,
            "`name`",
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

// --- the session: sequence errors -------------------------------------------------------------

#[test]
fn not_ready_is_a_line_before_ready_or_a_second_ready() {
    let mut s = Session::new();
    s.sent_hello(&example_hello());
    s.sent_user(1, "default");
    let e = seq_err(
        &mut s,
        r#"{"type":"send","conversation":"default","text":"hi"}"#,
        1,
    );
    assert_eq!(e.kind, K::NotReady);
    assert!(e.message.contains("`send`"), "{e}");
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":1}"#, 2).kind,
        K::NotReady
    );
    assert!(!s.is_ready());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        3,
    );
    assert!(s.is_ready());
    let e = seq_err(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        4,
    );
    assert_eq!(e.kind, K::NotReady);
    assert!(e.message.contains("second"), "{e}");
}

#[test]
fn an_error_line_is_a_runtime_error_before_ready_and_after() {
    let mut s = Session::new();
    s.sent_hello(&example_hello());
    let e = seq_err(
        &mut s,
        r#"{"type":"error","message":"protocol 1 unsupported","line":1}"#,
        1,
    );
    assert_eq!(e.kind, K::RuntimeError);
    assert!(e.message.contains("protocol 1 unsupported"), "{e}");
    assert!(e.message.contains("agentsim's line 1"), "{e}");
    let mut s = started();
    assert_eq!(
        seq_err(&mut s, r#"{"type":"error","message":"boom"}"#, 2).kind,
        K::RuntimeError
    );
}

#[test]
fn unknown_conversation_for_send_tool_call_stack_and_event() {
    for line in [
        r#"{"type":"send","conversation":"telegram_1","text":"hi"}"#,
        r#"{"type":"tool_call","call":"c1","conversation":"telegram_1","agent":"main","name":"web_search","input":{}}"#,
        r#"{"type":"stack","conversation":"telegram_1","frames":[]}"#,
        r#"{"type":"event","conversation":"telegram_1","kind":"note"}"#,
    ] {
        let mut s = started();
        let e = seq_err(&mut s, line, 2);
        assert_eq!(e.kind, K::UnknownConversation, "{line}");
        assert!(e.message.contains("\"telegram_1\""), "{e}");
        assert_eq!(e.text, line);
        s.sent_user(2, "telegram_1");
        ok(&mut s, line, 3);
    }
}

#[test]
fn unknown_agent_and_unknown_tool_in_a_tool_call() {
    let mut s = started();
    let e = seq_err(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"ghost","name":"web_search","input":{}}"#,
        2,
    );
    assert_eq!(e.kind, K::UnknownAgent);
    assert!(e.message.contains("\"ghost\""), "{e}");
    let e = seq_err(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"rm_rf","input":{}}"#,
        3,
    );
    assert_eq!(e.kind, K::UnknownTool);
    // A built-in is never a tool_call, and a plain skill's frame is no tool.
    for name in ["use_skill", "skill:research"] {
        let line = format!(
            r#"{{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"{name}","input":{{}}}}"#
        );
        assert_eq!(seq_err(&mut s, &line, 4).kind, K::UnknownTool, "{name}");
    }
    // A passthrough skill's frame name is a tool.
    ok(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"skill:lookup","input":{"skill":"lookup","message":"x"}}"#,
        5,
    );
}

#[test]
fn a_tool_call_before_any_hello_names_an_unknown_agent() {
    let mut s = Session::new();
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        1,
    );
    s.sent_user(1, "default");
    let e = seq_err(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"web_search","input":{}}"#,
        2,
    );
    assert_eq!(e.kind, K::UnknownAgent);
}

const CALL_C1: &str = r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"research","name":"web_search","input":{}}"#;

#[test]
fn duplicate_call_within_a_process_even_across_a_reset_but_not_after_a_restart() {
    let mut s = started();
    ok(&mut s, CALL_C1, 2);
    let e = seq_err(&mut s, CALL_C1, 3);
    assert_eq!(e.kind, K::DuplicateCall);
    assert!(e.message.contains("\"c1\""), "{e}");

    // A reset keeps the process, so its ids stay used.
    let mut s = started();
    ok(&mut s, CALL_C1, 2);
    s.sent(&ToRuntime::Reset);
    s.sent_hello(&example_hello());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        3,
    );
    s.sent_user(1, "default");
    assert_eq!(seq_err(&mut s, CALL_C1, 4).kind, K::DuplicateCall);

    // A restart is a new process, whose ids start afresh.
    let mut s = started();
    ok(&mut s, CALL_C1, 2);
    s.sent_hello(&hello_with_passthrough());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        1,
    );
    ok(&mut s, CALL_C1, 2);
}

#[test]
fn unknown_seq_is_an_idle_never_sent_or_decreasing() {
    let mut s = started();
    let e = seq_err(&mut s, r#"{"type":"idle","seq":2}"#, 2);
    assert_eq!(e.kind, K::UnknownSeq);
    assert!(e.message.contains("the last `seq` sent is 1"), "{e}");
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":0}"#, 3).kind,
        K::UnknownSeq
    );
    s.sent_user(2, "default");
    s.sent_user(3, "default");
    // An idle for an earlier seq is accepted (a message arrived while finishing the one before).
    ok(&mut s, r#"{"type":"idle","seq":2}"#, 4);
    ok(&mut s, r#"{"type":"idle","seq":2}"#, 5);
    let e = seq_err(&mut s, r#"{"type":"idle","seq":1}"#, 6);
    assert_eq!(e.kind, K::UnknownSeq);
    assert!(e.message.contains("never decreases"), "{e}");
    ok(&mut s, r#"{"type":"idle","seq":3}"#, 7);
    assert_eq!(s.last_idle(), Some(3));
}

#[test]
fn a_restart_keeps_the_runs_conversations_and_seqs_and_a_reset_forgets_them() {
    let mut s = started();
    s.sent_user(2, "telegram_1");
    // The process is killed before its idle; the new one restores and resumes.
    let mut hello = hello_with_passthrough();
    hello.restarts = 1;
    hello.awaiting_idle = Some(2);
    s.sent(&ToRuntime::Hello(hello));
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":2}"#, 1).kind,
        K::NotReady
    );
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":["restart"]}"#,
        2,
    );
    ok(
        &mut s,
        r#"{"type":"stack","conversation":"telegram_1","frames":[{"name":"main"}]}"#,
        3,
    );
    ok(&mut s, r#"{"type":"idle","seq":2}"#, 4);

    s.sent(&ToRuntime::Reset);
    s.sent_hello(&example_hello());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":["reset"]}"#,
        5,
    );
    let e = seq_err(
        &mut s,
        r#"{"type":"stack","conversation":"telegram_1","frames":[]}"#,
        6,
    );
    assert_eq!(e.kind, K::UnknownConversation);
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":1}"#, 7).kind,
        K::UnknownSeq
    );
    s.sent_user(1, "default");
    ok(&mut s, r#"{"type":"idle","seq":1}"#, 8);
}

#[test]
fn after_shutdown_only_an_error_is_judged() {
    let mut s = started();
    s.sent(&ToRuntime::Shutdown);
    ok(
        &mut s,
        r#"{"type":"send","conversation":"nowhere","text":"bye"}"#,
        2,
    );
    ok(&mut s, r#"{"type":"idle","seq":99}"#, 3);
    assert_eq!(
        seq_err(&mut s, r#"{"type":"error","message":"late"}"#, 4).kind,
        K::RuntimeError
    );
}

#[test]
fn receive_line_reports_decoding_errors_and_skips_blank_lines() {
    let mut s = started();
    assert_eq!(s.receive_line(b"  \r\n", 2), Ok(None));
    assert_eq!(seq_err(&mut s, "DEBUG: starting", 3).kind, K::MalformedJson);
}

// --- properties -------------------------------------------------------------------------------

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
