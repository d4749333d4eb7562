//! agentsim's lines: every message round-trips through serde_json, the short messages have the
//! spec's exact lines, and encoding refuses what the protocol's limits forbid.

use serde_json::json;

use super::example_hello;
use crate::outside::codec::{
    encode_line, AgentKind, BatchPolicy, EncodeError, HelloAgent, HelloSettings, HelloTool,
    QueryUser, ToRuntime, ToolResult, User, MAX_INTEGER, MAX_LINE,
};

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
