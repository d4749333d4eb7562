//! Anthropic Messages requests (`POST /v1/messages`): decoding the body and answering a broken
//! request as the API does, with status 400 and
//! `{"type":"error","error":{"type":"invalid_request_error","message":...},"request_id":...}`.
//!
//! Rules applied: the tool-pairing rules, non-empty content and text blocks, results before text in
//! a user message. Not applied, because the first-party API accepts it: a first message from the
//! assistant, consecutive turns of one role (they are merged, as the API reads them), a final
//! assistant message (a prefill) without tool uses, results in another order than the tool uses.
//!
//! The texts of the unanswered-`tool_use` and unexpected-`tool_use_id` errors are the API's own
//! (as quoted in public reports, research B.4). The others (duplicate id, empty id or name, a
//! `tool_result` in an assistant message, and the rest) are written in the API's style; their
//! exact wording is agentsim's.

use serde_json::{json, Value};

use crate::model::transcript::{Block, Message, Role};

use super::pairing::{self, Fault, Rules};
use super::{arguments, push_merged, request_id, text_of, Malformed, Origin, Rejection, Request};

/// What the first-party API enforces.
pub(crate) const RULES: Rules = Rules {
    first_user: false,
    last_user: false,
    alternate: false,
    non_empty: true,
    results_first: true,
    result_order: false,
};

/// Decodes and checks an Anthropic Messages request body.
pub fn validate(body: &Value) -> Result<Request, Rejection> {
    let request =
        decode(body).map_err(|m| reject(body, format!("{}: {}", m.path, m.message), None))?;
    match pairing::check(&request.messages, RULES) {
        Ok(()) => Ok(request),
        Err(fault) => {
            let message = message(&fault, &request.origin);
            Err(reject(body, message, Some(fault)))
        }
    }
}

/// The API's text for a broken rule, with the provider's own positions.
pub fn message(fault: &Fault, origin: &Origin) -> String {
    let at = |m: usize, b: usize| {
        let (m, b) = origin.block(m, b);
        format!("messages.{m}.content.{b}")
    };
    match fault {
        Fault::Unanswered { assistant, ids, .. } => format!(
            "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            origin.message(*assistant),
            join(ids)
        ),
        Fault::OrphanResult { message, block, id } => format!(
            "{}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
            at(*message, *block)
        ),
        Fault::AnsweredTwice { message, block, id } => format!(
            "{}: each tool_use must have a single result. Found multiple `tool_result` blocks with id: {id}",
            at(*message, *block)
        ),
        Fault::DuplicateId { message, block, id } => format!(
            "{}: `tool_use` ids must be unique, found {id} twice",
            at(*message, *block)
        ),
        Fault::EmptyId { message, block } => format!(
            "{}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
            at(*message, *block)
        ),
        Fault::EmptyName { message, block, .. } => format!(
            "{}.tool_use.name: String should have at least 1 character",
            at(*message, *block)
        ),
        Fault::EmptyContent { message } => format!(
            "messages.{}: all messages must have non-empty content except for the optional final assistant message",
            origin.message(*message)
        ),
        Fault::EmptyText { message, block } => format!(
            "{}.text: text content blocks must be non-empty",
            at(*message, *block)
        ),
        Fault::ResultInAssistant { message, block, .. } => format!(
            "{}: `tool_result` blocks are only allowed in user messages",
            at(*message, *block)
        ),
        Fault::UseInUser { message, block, .. } => format!(
            "{}: `tool_use` blocks are only allowed in assistant messages",
            at(*message, *block)
        ),
        Fault::ResultAfterText { message, block, .. } => format!(
            "{}: `tool_result` blocks must come before any other content in a user message",
            at(*message, *block)
        ),
        Fault::NoMessages => "messages: at least one message is required".to_owned(),
        Fault::FirstNotUser => "messages: first message must use the \"user\" role".to_owned(),
        Fault::LastNotUser => "messages: the final message must use the \"user\" role".to_owned(),
        Fault::NotAlternating { .. } => {
            "messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"user\" roles in a row".to_owned()
        }
        Fault::OutOfOrder { message, block, .. } => format!(
            "{}: `tool_result` blocks must follow the order of the `tool_use` blocks",
            at(*message, *block)
        ),
        Fault::Shrank { .. } => fault.to_string(),
    }
}

fn join(ids: &[std::sync::Arc<str>]) -> String {
    ids.iter().map(|id| &**id).collect::<Vec<_>>().join(", ")
}

fn reject(body: &Value, message: String, fault: Option<Fault>) -> Rejection {
    Rejection {
        status: 400,
        body: json!({
            "type": "error",
            "error": { "type": "invalid_request_error", "message": message },
            "request_id": request_id(body),
        }),
        fault,
    }
}

/// Decodes an Anthropic Messages request body.
pub fn decode(body: &Value) -> Result<Request, Malformed> {
    let Some(object) = body.as_object() else {
        return Err(Malformed::new("body", "Input should be a valid dictionary"));
    };
    let Some(list) = object.get("messages") else {
        return Err(Malformed::new("messages", "Field required"));
    };
    let Some(list) = list.as_array() else {
        return Err(Malformed::new("messages", "Input should be a valid list"));
    };
    let system = match object.get("system") {
        None | Some(Value::Null) => None,
        Some(s) => Some(text_of(s, "system")?),
    };
    let mut messages = Vec::with_capacity(list.len());
    let mut origin = Origin::default();
    let mut reasoning = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let path = format!("messages.{i}");
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some(other) => {
                return Err(Malformed::new(
                    format!("{path}.role"),
                    format!("Input should be 'user' or 'assistant', got '{other}'"),
                ))
            }
            None => return Err(Malformed::new(format!("{path}.role"), "Field required")),
        };
        let (content, positions) = match m.get("content") {
            Some(Value::String(text)) => (
                smallvec::smallvec![Block::text(text.as_str())],
                vec![(i, 0)],
            ),
            Some(Value::Array(blocks)) => {
                let mut content = smallvec::SmallVec::new();
                let mut positions = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    if let Some(block) = decode_block(b, &format!("{path}.content.{j}"))? {
                        content.push(block);
                        positions.push((i, j));
                    } else if let Some(r) = thinking(b, format!("{path}.content.{j}")) {
                        reasoning.push(r);
                    }
                }
                // A user turn of blocks the rules do not read (an image, a document) is not
                // empty: it stands as a text naming them, so that no rule sees it as empty.
                if content.is_empty() && role == Role::User && !blocks.is_empty() {
                    let kinds: Vec<&str> = blocks
                        .iter()
                        .filter_map(|b| b.get("type").and_then(Value::as_str))
                        .collect();
                    content.push(Block::text(format!("[{}]", kinds.join(", "))));
                    positions.push((i, 0));
                }
                (content, positions)
            }
            Some(_) => {
                return Err(Malformed::new(
                    format!("{path}.content"),
                    "Input should be a valid string or a list of content blocks",
                ))
            }
            None => return Err(Malformed::new(format!("{path}.content"), "Field required")),
        };
        push_merged(
            &mut messages,
            &mut origin,
            Message { role, content },
            positions,
            i,
            false,
        );
    }
    let mut request = Request::assemble(body, system, messages, origin);
    request.reasoning = reasoning;
    Ok(request)
}

/// A `thinking` or `redacted_thinking` block, kept aside (no rule reads it) to be compared with
/// what the server sent.
fn thinking(b: &Value, path: String) -> Option<super::Reasoning> {
    let text = |name: &str| b.get(name).and_then(Value::as_str).map(str::to_owned);
    match b.get("type").and_then(Value::as_str)? {
        "thinking" => Some(super::Reasoning {
            path,
            id: text("signature"),
            text: Some(text("thinking").unwrap_or_default()),
        }),
        "redacted_thinking" => Some(super::Reasoning {
            path,
            id: None,
            text: None,
        }),
        _ => None,
    }
}

/// One content block; `None` for kinds the rules do not look at (images, documents, thinking).
fn decode_block(b: &Value, path: &str) -> Result<Option<Block>, Malformed> {
    let Some(kind) = b.get("type").and_then(Value::as_str) else {
        return Err(Malformed::new(format!("{path}.type"), "Field required"));
    };
    let str_field = |name: &str| -> Result<&str, Malformed> {
        b.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| Malformed::new(format!("{path}.{kind}.{name}"), "Field required"))
    };
    Ok(Some(match kind {
        "text" => Block::text(str_field("text")?),
        "tool_use" => Block::tool_use(
            str_field("id")?,
            str_field("name")?,
            arguments(b.get("input")),
        ),
        "tool_result" => Block::tool_result(
            str_field("tool_use_id")?,
            match b.get("content") {
                None => String::new(),
                Some(c) => text_of(c, &format!("{path}.tool_result.content"))?,
            },
            b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        ),
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(messages: Value) -> Value {
        json!({ "model": "claude-test", "max_tokens": 100, "messages": messages })
    }

    fn tool_use(id: &str) -> Value {
        json!({ "type": "tool_use", "id": id, "name": "search", "input": { "q": "x" } })
    }

    fn tool_result(id: &str) -> Value {
        json!({ "type": "tool_result", "tool_use_id": id, "content": "ok" })
    }

    #[test]
    fn a_valid_tool_loop_decodes_to_neutral_messages() {
        let b = json!({
            "model": "claude-test",
            "system": [{ "type": "text", "text": "be brief" }],
            "stream": true,
            "tools": [{ "name": "search", "input_schema": {} }],
            "messages": [
                { "role": "user", "content": "find" },
                { "role": "assistant", "content": [{ "type": "text", "text": "looking" }, tool_use("toolu_1"), tool_use("toolu_2")] },
                { "role": "user", "content": [tool_result("toolu_2"), tool_result("toolu_1"), { "type": "text", "text": "thanks" }] }
            ]
        });
        let r = validate(&b).unwrap();
        assert_eq!(r.system.as_deref(), Some("be brief"));
        assert_eq!(r.model.as_deref(), Some("claude-test"));
        assert_eq!(r.tools, ["search"]);
        assert!(r.stream);
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[1].tool_uses().count(), 2);
    }

    #[test]
    fn a_tool_use_without_its_result_gets_the_apis_exact_error() {
        let b = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_b")] },
            { "role": "user", "content": [tool_result("toolu_a")] }
        ]));
        let r = validate(&b).unwrap_err();
        assert_eq!(r.status, 400);
        assert_eq!(
            r.message(),
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_b. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
        );
        assert_eq!(r.body["type"], "error");
        assert_eq!(r.body["error"]["type"], "invalid_request_error");
        assert!(r.body["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_agentsim_"));
        assert_eq!(
            validate(&b).unwrap_err().body,
            r.body,
            "the request id is deterministic"
        );
    }

    #[test]
    fn a_result_without_its_tool_use_names_the_block_in_the_body() {
        let b = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "content": [tool_use("toolu_a")] },
            { "role": "user", "content": [tool_result("toolu_a"), tool_result("toolu_zz")] }
        ]));
        assert_eq!(
            validate(&b).unwrap_err().message(),
            "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_zz. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
        );
    }

    #[test]
    fn a_dangling_tool_use_at_the_end_is_rejected_but_a_text_prefill_is_not() {
        let b = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "content": [tool_use("toolu_a")] }
        ]));
        assert!(matches!(
            validate(&b).unwrap_err().fault,
            Some(Fault::Unanswered { .. })
        ));
        let b = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "content": "Sure," }
        ]));
        assert!(validate(&b).is_ok());
    }

    #[test]
    fn consecutive_user_turns_are_read_as_one() {
        let b = body(json!([
            { "role": "user", "content": "one" },
            { "role": "user", "content": "two" }
        ]));
        let r = validate(&b).unwrap();
        assert_eq!(r.messages.len(), 1);
        assert_eq!(r.origin.block(0, 1), (1, 0));
    }

    #[test]
    fn empty_ids_names_and_texts_duplicates_and_double_results_are_rejected() {
        let cases = [
            (
                json!([{ "role": "user", "content": "go" }, { "role": "assistant", "content": [tool_use("")] }, { "role": "user", "content": [tool_result("")] }]),
                "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
            ),
            (
                json!([{ "role": "user", "content": "go" }, { "role": "assistant", "content": [{ "type": "tool_use", "id": "toolu_a", "name": "", "input": {} }] }, { "role": "user", "content": [tool_result("toolu_a")] }]),
                "messages.1.content.0.tool_use.name: String should have at least 1 character",
            ),
            (
                json!([{ "role": "user", "content": [{ "type": "text", "text": "" }] }]),
                "messages.0.content.0.text: text content blocks must be non-empty",
            ),
            (
                json!([{ "role": "user", "content": [] }]),
                "messages.0: all messages must have non-empty content except for the optional final assistant message",
            ),
            (
                json!([{ "role": "user", "content": "go" }, { "role": "assistant", "content": [tool_use("toolu_a"), tool_use("toolu_a")] }, { "role": "user", "content": [tool_result("toolu_a")] }]),
                "messages.1.content.1: `tool_use` ids must be unique, found toolu_a twice",
            ),
            (
                json!([{ "role": "user", "content": "go" }, { "role": "assistant", "content": [tool_use("toolu_a")] }, { "role": "user", "content": [tool_result("toolu_a"), tool_result("toolu_a")] }]),
                "messages.2.content.1: each tool_use must have a single result. Found multiple `tool_result` blocks with id: toolu_a",
            ),
        ];
        for (messages, want) in cases {
            assert_eq!(validate(&body(messages)).unwrap_err().message(), want);
        }
    }

    #[test]
    fn a_malformed_body_is_a_located_400_not_a_panic() {
        for (b, want) in [
            (json!([1, 2]), "body: Input should be a valid dictionary"),
            (json!({ "model": "m" }), "messages: Field required"),
            (
                json!({ "messages": {} }),
                "messages: Input should be a valid list",
            ),
            (
                json!({ "messages": [{ "role": "system", "content": "x" }] }),
                "messages.0.role: Input should be 'user' or 'assistant', got 'system'",
            ),
            (
                json!({ "messages": [{ "role": "user", "content": [{ "text": "x" }] }] }),
                "messages.0.content.0.type: Field required",
            ),
            (
                json!({ "messages": [{ "role": "user", "content": [{ "type": "tool_result" }] }] }),
                "messages.0.content.0.tool_result.tool_use_id: Field required",
            ),
        ] {
            let r = validate(&b).unwrap_err();
            assert_eq!((r.status, r.message()), (400, want));
            assert_eq!(r.fault, None);
        }
    }
}
