//! The example exchange of section 10 of the runtime protocol, line for line: agentsim's lines
//! encode byte for byte, the runtime's decode and are in order.

use serde_json::json;

use super::{ok, EXAMPLE};
use crate::outside::codec::{encode_line, EndReason, FromRuntime, ToRuntime};
use crate::outside::session::Session;

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
