//! OpenAI Chat Completions requests (`POST /v1/chat/completions`): decoding the body and answering
//! a broken request as the API does, with status 400 and
//! `{"error":{"message":...,"type":"invalid_request_error","param":...,"code":null}}`.
//!
//! Decoding: `system` and `developer` messages make the system prompt; `user` messages are user
//! turns; an `assistant` message's `tool_calls` are `tool_use` blocks (their `arguments` JSON text
//! parsed); each `tool` message is a `tool_result` of the user turn that follows the assistant.
//!
//! Rules applied: the tool-pairing rules only. The API accepts empty contents, consecutive turns of
//! one role, any first and last message, and tool messages in any order, so none of those is a
//! fault here.
//!
//! The texts of the unanswered-`tool_calls` and orphan-`tool`-message errors are the API's own
//! (research B.4; "preceeding" is the API's spelling). The others are written in the API's style;
//! their exact wording is agentsim's.

use serde_json::{json, Value};

use crate::model::transcript::{Block, Message, Role};

use super::pairing::{self, Fault, Rules};
use super::{arguments, push_merged, text_of, Malformed, Origin, Rejection, Request};

/// What the API enforces.
pub(crate) const RULES: Rules = Rules {
    first_user: false,
    last_user: false,
    alternate: false,
    non_empty: false,
    results_first: false,
    result_order: false,
};

/// Decodes and checks a Chat Completions request body.
pub fn validate(body: &Value) -> Result<Request, Rejection> {
    let request = decode(body).map_err(|m| reject(m.message, Some(m.path), None))?;
    match pairing::check(&request.messages, RULES) {
        Ok(()) => Ok(request),
        Err(fault) => {
            let (message, param) = message(&fault, &request.origin);
            Err(reject(message, param, Some(fault)))
        }
    }
}

/// The API's text and `param` for a broken rule, with the provider's own positions.
pub fn message(fault: &Fault, origin: &Origin) -> (String, Option<String>) {
    let role = |m: usize| Some(format!("messages.[{}].role", origin.message(m)));
    let at = |m: usize, b: usize| origin.block(m, b).0;
    match fault {
        Fault::Unanswered { message, ids, .. } => (
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                ids.iter().map(|id| &**id).collect::<Vec<_>>().join(", ")
            ),
            role(*message),
        ),
        Fault::OrphanResult { message, block, .. } => (
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".to_owned(),
            Some(format!("messages.[{}].role", at(*message, *block))),
        ),
        Fault::AnsweredTwice { message, block, id } => (
            format!("Invalid parameter: more than one tool message responds to tool_call_id {id}."),
            Some(format!("messages.[{}].tool_call_id", at(*message, *block))),
        ),
        Fault::DuplicateId { message, block, id } => (
            format!("Invalid parameter: duplicate tool_call id {id} in 'tool_calls'."),
            Some(format!("messages.[{}].tool_calls", at(*message, *block))),
        ),
        Fault::EmptyId { message, block } => (
            "Invalid 'tool_calls.id': empty string. Expected a string with minimum length 1.".to_owned(),
            Some(format!("messages.[{}].tool_calls", at(*message, *block))),
        ),
        Fault::EmptyName { message, block, .. } => (
            "Invalid 'tool_calls.function.name': empty string. Expected a string with minimum length 1.".to_owned(),
            Some(format!("messages.[{}].tool_calls", at(*message, *block))),
        ),
        Fault::NoMessages => (
            "Invalid 'messages': empty array. Expected an array with minimum length 1.".to_owned(),
            Some("messages".to_owned()),
        ),
        other => (other.to_string(), Some("messages".to_owned())),
    }
}

/// OpenAI's 400 envelope (Chat Completions and Responses share it).
pub(super) fn reject(message: String, param: Option<String>, fault: Option<Fault>) -> Rejection {
    Rejection {
        status: 400,
        body: json!({
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": null,
            }
        }),
        fault,
    }
}

/// Decodes a Chat Completions request body.
pub fn decode(body: &Value) -> Result<Request, Malformed> {
    let Some(object) = body.as_object() else {
        return Err(Malformed::new("body", "Invalid body: expected an object."));
    };
    let Some(list) = object.get("messages") else {
        return Err(Malformed::new(
            "messages",
            "Missing required parameter: 'messages'.",
        ));
    };
    let Some(list) = list.as_array() else {
        return Err(Malformed::new(
            "messages",
            "Invalid type for 'messages': expected an array.",
        ));
    };
    let mut system: Vec<String> = Vec::new();
    let mut messages = Vec::with_capacity(list.len());
    let mut origin = Origin::default();
    for (i, m) in list.iter().enumerate() {
        let path = format!("messages[{i}]");
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            return Err(Malformed::new(
                format!("{path}.role"),
                format!("Missing required parameter: '{path}.role'."),
            ));
        };
        let text = |field: &str| -> Result<String, Malformed> {
            match m.get(field) {
                None => Ok(String::new()),
                Some(v) => text_of(v, &format!("{path}.{field}")).map_err(|e| {
                    Malformed::new(e.path.clone(), format!("Invalid type for '{}'.", e.path))
                }),
            }
        };
        let (message, positions) = match role {
            "system" | "developer" => {
                system.push(text("content")?);
                continue;
            }
            "user" => (
                Message {
                    role: Role::User,
                    content: smallvec::smallvec![Block::text(text("content")?)],
                },
                vec![(i, 0)],
            ),
            "assistant" => {
                let mut content = smallvec::SmallVec::new();
                let mut positions = Vec::new();
                let said = text("content")?;
                if !said.is_empty() {
                    content.push(Block::text(said));
                    positions.push((i, 0));
                }
                if let Some(calls) = m.get("tool_calls") {
                    let Some(calls) = calls.as_array() else {
                        return Err(Malformed::new(
                            format!("{path}.tool_calls"),
                            format!("Invalid type for '{path}.tool_calls': expected an array."),
                        ));
                    };
                    for (j, call) in calls.iter().enumerate() {
                        // `get` chains, not `pointer`: a pointer allocates for each of its parts.
                        let function = call.get("function");
                        let id = call.get("id").and_then(Value::as_str);
                        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
                        let (Some(id), Some(name)) = (id, name) else {
                            return Err(Malformed::new(
                                format!("{path}.tool_calls[{j}]"),
                                format!(
                                    "Missing required parameter: '{path}.tool_calls[{j}].id' or '.function.name'."
                                ),
                            ));
                        };
                        content.push(Block::tool_use(
                            id,
                            name,
                            arguments(function.and_then(|f| f.get("arguments"))),
                        ));
                        positions.push((i, j));
                    }
                }
                (
                    Message {
                        role: Role::Assistant,
                        content,
                    },
                    positions,
                )
            }
            "tool" => {
                let Some(id) = m.get("tool_call_id").and_then(Value::as_str) else {
                    return Err(Malformed::new(
                        format!("{path}.tool_call_id"),
                        format!("Missing required parameter: '{path}.tool_call_id'."),
                    ));
                };
                (
                    Message {
                        role: Role::User,
                        content: smallvec::smallvec![Block::tool_result(
                            id,
                            text("content")?,
                            false
                        )],
                    },
                    vec![(i, 0)],
                )
            }
            other => {
                return Err(Malformed::new(
                    format!("{path}.role"),
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'."
                    ),
                ))
            }
        };
        push_merged(&mut messages, &mut origin, message, positions, i, false);
    }
    Ok(Request::assemble(
        body,
        (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        origin,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Value {
        json!({ "id": id, "type": "function", "function": { "name": "search", "arguments": "{\"q\":\"x\"}" } })
    }

    fn body(messages: Value) -> Value {
        json!({ "model": "gpt-test", "messages": messages })
    }

    #[test]
    fn a_valid_tool_loop_decodes_with_tool_messages_as_results() {
        let b = json!({
            "model": "gpt-test",
            "stream": true,
            "tools": [{ "type": "function", "function": { "name": "search" } }],
            "messages": [
                { "role": "system", "content": "be brief" },
                { "role": "user", "content": [{ "type": "text", "text": "find" }] },
                { "role": "assistant", "content": null, "tool_calls": [call("call_1"), call("call_2")] },
                { "role": "tool", "tool_call_id": "call_2", "content": "two" },
                { "role": "tool", "tool_call_id": "call_1", "content": "one" },
                { "role": "user", "content": "thanks" }
            ]
        });
        let r = validate(&b).unwrap();
        assert_eq!(r.system.as_deref(), Some("be brief"));
        assert_eq!(r.tools, ["search"]);
        assert!(r.stream);
        assert_eq!(
            r.messages.len(),
            3,
            "the tool messages and the user text are one turn"
        );
        let input = r.messages[1].tool_uses().next().unwrap().input.clone();
        assert_eq!(*input, json!({ "q": "x" }));
    }

    #[test]
    fn unanswered_tool_calls_get_the_apis_exact_error() {
        let b = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "tool_calls": [call("call_a"), call("call_b")] },
            { "role": "tool", "tool_call_id": "call_a", "content": "ok" },
            { "role": "user", "content": "and?" }
        ]));
        let r = validate(&b).unwrap_err();
        assert_eq!(
            r.body,
            json!({ "error": {
                "message": "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_b",
                "type": "invalid_request_error",
                "param": "messages.[2].role",
                "code": null
            }})
        );
    }

    #[test]
    fn a_tool_message_without_a_preceding_call_gets_the_apis_exact_error() {
        let b = body(json!([
            { "role": "user", "content": "go" },
            { "role": "tool", "tool_call_id": "call_x", "content": "ok" }
        ]));
        let r = validate(&b).unwrap_err();
        assert_eq!(
            r.message(),
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
        );
        assert_eq!(r.body["error"]["param"], "messages.[1].role");
    }

    #[test]
    fn what_the_api_accepts_passes() {
        // Consecutive user messages, an empty user content, a final assistant message.
        let b = body(json!([
            { "role": "user", "content": "" },
            { "role": "user", "content": "again" },
            { "role": "assistant", "content": "hi" }
        ]));
        assert!(validate(&b).is_ok());
    }

    #[test]
    fn empty_ids_and_names_and_duplicates_are_rejected() {
        let empty_id = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "tool_calls": [call("")] },
            { "role": "tool", "tool_call_id": "", "content": "ok" }
        ]));
        assert!(matches!(
            validate(&empty_id).unwrap_err().fault,
            Some(Fault::EmptyId { .. })
        ));
        let empty_name = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "tool_calls": [{ "id": "call_a", "function": { "name": "", "arguments": "{}" } }] },
            { "role": "tool", "tool_call_id": "call_a", "content": "ok" }
        ]));
        assert!(matches!(
            validate(&empty_name).unwrap_err().fault,
            Some(Fault::EmptyName { .. })
        ));
        let duplicate = body(json!([
            { "role": "user", "content": "go" },
            { "role": "assistant", "tool_calls": [call("call_a"), call("call_a")] },
            { "role": "tool", "tool_call_id": "call_a", "content": "ok" }
        ]));
        assert!(matches!(
            validate(&duplicate).unwrap_err().fault,
            Some(Fault::DuplicateId { .. })
        ));
    }

    #[test]
    fn a_malformed_body_is_a_located_400_not_a_panic() {
        for (b, param) in [
            (json!("x"), "body"),
            (json!({}), "messages"),
            (
                json!({ "messages": [{ "content": "x" }] }),
                "messages[0].role",
            ),
            (
                json!({ "messages": [{ "role": "robot" }] }),
                "messages[0].role",
            ),
            (
                json!({ "messages": [{ "role": "tool", "content": "x" }] }),
                "messages[0].tool_call_id",
            ),
            (
                json!({ "messages": [{ "role": "assistant", "tool_calls": [{ "id": "a" }] }] }),
                "messages[0].tool_calls[0]",
            ),
            (
                json!({ "messages": [{ "role": "user", "content": 7 }] }),
                "messages[0].content",
            ),
        ] {
            let r = validate(&b).unwrap_err();
            assert_eq!(r.status, 400);
            assert_eq!(r.body["error"]["param"], param, "{b}");
            assert_eq!(r.fault, None);
        }
    }
}
