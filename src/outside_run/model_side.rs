//! What the mock server's journal shows of the model side: the `no-display-leak` check on the
//! requests' tool results.

use serde_json::Value;

use crate::model::messages;

/// The texts meant only for the user's display: seed 004's interruption sentinel and the
/// banners of a cancel, a step limit and a deletion.
const DISPLAY_ONLY: [&str; 4] = [
    messages::INTERRUPTED_SENTINEL,
    messages::USER_MAX_STEPS,
    messages::USER_CANCELLED,
    messages::USER_AGENT_DELETED,
];

/// The first exchange whose request carries a display-only text as a tool result (the
/// sentinel anywhere in one, a banner as the whole of one), and the text.
pub(super) fn display_leak(exchanges: &[Value]) -> Option<(u64, &'static str)> {
    for x in exchanges {
        let Some(request) = x.get("request") else {
            continue;
        };
        let mut found = None;
        visit_results(request, &mut |text| {
            if found.is_none() {
                found = DISPLAY_ONLY.iter().copied().find(|d| {
                    text == *d || (*d == messages::INTERRUPTED_SENTINEL && text.contains(*d))
                });
            }
        });
        if let Some(leak) = found {
            return Some((x.get("exchange").and_then(Value::as_u64).unwrap_or(0), leak));
        }
    }
    None
}

/// Calls `f` with the text of every tool result a request carries, in any of the three wire
/// formats (Anthropic `tool_result` blocks, OpenAI Chat `tool` messages, Responses
/// `function_call_output` items).
fn visit_results(request: &Value, f: &mut impl FnMut(&str)) {
    let text_of = |v: &Value, f: &mut dyn FnMut(&str)| match v {
        Value::String(s) => f(s),
        Value::Array(parts) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    f(t);
                }
            }
        }
        _ => {}
    };
    if let Some(messages) = request.get("messages").and_then(Value::as_array) {
        for m in messages {
            if m.get("role").and_then(Value::as_str) == Some("tool") {
                if let Some(c) = m.get("content") {
                    text_of(c, f);
                }
            }
            if let Some(blocks) = m.get("content").and_then(Value::as_array) {
                for b in blocks {
                    if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                        if let Some(c) = b.get("content") {
                            text_of(c, f);
                        }
                    }
                }
            }
        }
    }
    if let Some(items) = request.get("input").and_then(Value::as_array) {
        for item in items {
            if item.get("type").and_then(Value::as_str) == Some("function_call_output") {
                if let Some(c) = item.get("output") {
                    text_of(c, f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_display_only_text_in_a_tool_result_of_any_format_is_a_leak() {
        let anthropic = json!({"exchange": 3, "request": {"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
             "content": [{"type": "text", "text": "x Interrupted. Tell Ally what to do instead."}]}]}]}});
        let chat = json!({"exchange": 4, "request": {"messages": [
            {"role": "tool", "tool_call_id": "t", "content": "Cancelled."}]}});
        let responses = json!({"exchange": 5, "request": {"input": [
            {"type": "function_call_output", "call_id": "t", "output": "Agent reached maximum steps."}]}});
        let clean = json!({"exchange": 1, "request": {"messages": [
            {"role": "user", "content": "Cancelled."},
            {"role": "tool", "tool_call_id": "t", "content": "Cancelled by user."}]}});
        assert_eq!(display_leak(std::slice::from_ref(&clean)), None);
        assert_eq!(
            display_leak(&[clean.clone(), anthropic]),
            Some((3, messages::INTERRUPTED_SENTINEL))
        );
        assert_eq!(display_leak(&[chat]), Some((4, "Cancelled.")));
        assert_eq!(
            display_leak(&[responses]),
            Some((5, "Agent reached maximum steps."))
        );
    }
}
