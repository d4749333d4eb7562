//! OpenAI Responses requests (`POST /v1/responses`, the OpenAI Agents SDK's default): decoding the
//! body and answering a broken request as the API does, with status 400 and
//! `{"error":{"message":...,"type":"invalid_request_error","param":"input","code":null}}`.
//!
//! Decoding: `instructions` and `system`/`developer` items make the system prompt; `input` is a
//! string (one user message) or a list of items: messages (`role` with a string or
//! `input_text`/`output_text` parts), `function_call` (an assistant `tool_use`, its `arguments`
//! parsed) and `function_call_output` (a `tool_result`); other items (reasoning) are skipped.
//!
//! Rules applied: the tool-pairing rules only (every `function_call` answered by a
//! `function_call_output` with its `call_id` in the next turn, and no output without its call).
//!
//! The texts of the two pairing errors are the API's own (research B.4); the others are written in
//! the API's style.

use serde_json::Value;

use crate::model::transcript::{Block, Message, Role};

use super::pairing::{self, Fault};
use super::{arguments, push_merged, text_of, Malformed, Origin, Rejection, Request};

/// Decodes and checks a Responses request body.
pub fn validate(body: &Value) -> Result<Request, Rejection> {
    let request = decode(body).map_err(|m| reject(m.message, m.path, None))?;
    match pairing::check(&request.messages, super::openai_chat::RULES) {
        Ok(()) => Ok(request),
        Err(fault) => Err(reject(
            message(&fault, &request.origin),
            "input".into(),
            Some(fault),
        )),
    }
}

/// The API's text for a broken rule.
pub fn message(fault: &Fault, origin: &Origin) -> String {
    match fault {
        Fault::Unanswered { ids, .. } => format!(
            "No tool output found for function call {}.",
            ids.first().map_or("", |id| &**id)
        ),
        Fault::OrphanResult { id, .. } => {
            format!("No tool call found for function call output with call_id {id}.")
        }
        Fault::AnsweredTwice { id, .. } => {
            format!("Duplicate function call output for call_id {id}.")
        }
        Fault::DuplicateId { id, .. } => format!("Duplicate function call with call_id {id}."),
        Fault::EmptyId { message, block } => format!(
            "Invalid 'input[{}].call_id': empty string. Expected a string with minimum length 1.",
            origin.block(*message, *block).0
        ),
        Fault::EmptyName { message, block, .. } => format!(
            "Invalid 'input[{}].name': empty string. Expected a string with minimum length 1.",
            origin.block(*message, *block).0
        ),
        other => other.to_string(),
    }
}

fn reject(message: String, param: String, fault: Option<Fault>) -> Rejection {
    super::openai_chat::reject(message, Some(param), fault)
}

/// Decodes a Responses request body.
pub fn decode(body: &Value) -> Result<Request, Malformed> {
    let Some(object) = body.as_object() else {
        return Err(Malformed::new("body", "Invalid body: expected an object."));
    };
    let mut system: Vec<String> = Vec::new();
    if let Some(instructions) = object.get("instructions").and_then(Value::as_str) {
        system.push(instructions.to_owned());
    }
    let mut messages = Vec::new();
    let mut origin = Origin::default();
    let mut reasoning = Vec::new();
    match object.get("input") {
        None => {
            return Err(Malformed::new(
                "input",
                "Missing required parameter: 'input'.",
            ))
        }
        Some(Value::String(text)) => push_merged(
            &mut messages,
            &mut origin,
            Message {
                role: Role::User,
                content: smallvec::smallvec![Block::text(text.as_str())],
            },
            vec![(0, 0)],
            0,
            true,
        ),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("input[{i}]");
                let str_field = |name: &str| -> Result<&str, Malformed> {
                    item.get(name).and_then(Value::as_str).ok_or_else(|| {
                        Malformed::new(
                            format!("{path}.{name}"),
                            format!("Missing required parameter: '{path}.{name}'."),
                        )
                    })
                };
                let kind = item.get("type").and_then(Value::as_str);
                let message = match kind {
                    Some("function_call") => Message {
                        role: Role::Assistant,
                        content: smallvec::smallvec![Block::tool_use(
                            str_field("call_id")?,
                            str_field("name")?,
                            arguments(item.get("arguments")),
                        )],
                    },
                    Some("function_call_output") => Message {
                        role: Role::User,
                        content: smallvec::smallvec![Block::tool_result(
                            str_field("call_id")?,
                            match item.get("output") {
                                None => String::new(),
                                Some(v) => text_of(v, &format!("{path}.output"))?,
                            },
                            false
                        )],
                    },
                    None | Some("message") => {
                        let text = match item.get("content") {
                            None => String::new(),
                            Some(c) => text_of(c, &format!("{path}.content"))?,
                        };
                        match str_field("role")? {
                            "system" | "developer" => {
                                system.push(text);
                                continue;
                            }
                            "user" => Message {
                                role: Role::User,
                                content: smallvec::smallvec![Block::text(text)],
                            },
                            "assistant" => Message {
                                role: Role::Assistant,
                                content: smallvec::smallvec![Block::text(text)],
                            },
                            other => {
                                return Err(Malformed::new(
                                    format!("{path}.role"),
                                    format!(
                                        "Invalid value: '{other}'. Supported values are: 'user', 'assistant', 'system' and 'developer'."
                                    ),
                                ))
                            }
                        }
                    }
                    // A reasoning item carries nothing the rules look at; it is kept aside, to be
                    // compared with what the server sent.
                    Some("reasoning") => {
                        let summary = item.get("summary").and_then(Value::as_array);
                        reasoning.push(super::Reasoning {
                            path,
                            id: item.get("id").and_then(Value::as_str).map(str::to_owned),
                            text: Some(
                                summary
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                                    .collect(),
                            ),
                        });
                        continue;
                    }
                    // Other items carry nothing the rules look at.
                    Some(_) => continue,
                };
                push_merged(&mut messages, &mut origin, message, vec![(i, 0)], i, true);
            }
        }
        Some(_) => {
            return Err(Malformed::new(
                "input",
                "Invalid type for 'input': expected a string or an array.",
            ))
        }
    }
    let mut request = Request::assemble(
        body,
        (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        origin,
    );
    request.reasoning = reasoning;
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({ "type": "function_call", "call_id": id, "name": "search", "arguments": "{}" })
    }

    fn output(id: &str) -> Value {
        json!({ "type": "function_call_output", "call_id": id, "output": "ok" })
    }

    fn body(input: Value) -> Value {
        json!({ "model": "gpt-test", "input": input })
    }

    #[test]
    fn a_string_input_and_a_tool_loop_decode() {
        let r =
            validate(&json!({ "model": "m", "instructions": "be brief", "input": "hi" })).unwrap();
        assert_eq!(r.system.as_deref(), Some("be brief"));
        assert_eq!(r.messages.len(), 1);
        let r = validate(&body(json!([
            { "role": "user", "content": [{ "type": "input_text", "text": "find" }] },
            { "type": "reasoning", "summary": [] },
            call("call_1"),
            call("call_2"),
            output("call_1"),
            output("call_2"),
            { "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "done" }] }
        ])))
        .unwrap();
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.messages[1].tool_uses().count(), 2);
    }

    #[test]
    fn the_two_pairing_errors_are_the_apis_own() {
        let r = validate(&body(
            json!([{ "role": "user", "content": "go" }, call("call_a")]),
        ))
        .unwrap_err();
        assert_eq!(
            r.message(),
            "No tool output found for function call call_a."
        );
        assert_eq!(r.body["error"]["param"], "input");
        assert_eq!(r.body["error"]["type"], "invalid_request_error");
        let r = validate(&body(
            json!([{ "role": "user", "content": "go" }, output("call_z")]),
        ))
        .unwrap_err();
        assert_eq!(
            r.message(),
            "No tool call found for function call output with call_id call_z."
        );
    }

    #[test]
    fn empty_call_ids_and_names_are_rejected() {
        let r = validate(&body(
            json!([{ "role": "user", "content": "go" }, call(""), output("")]),
        ))
        .unwrap_err();
        assert!(matches!(r.fault, Some(Fault::EmptyId { .. })), "{r:?}");
        assert_eq!(
            r.message(),
            "Invalid 'input[1].call_id': empty string. Expected a string with minimum length 1."
        );
    }

    #[test]
    fn a_malformed_body_is_a_located_400_not_a_panic() {
        for (b, param) in [
            (json!(null), "body"),
            (json!({ "model": "m" }), "input"),
            (json!({ "input": 3 }), "input"),
            (
                json!({ "input": [{ "type": "function_call", "name": "x" }] }),
                "input[0].call_id",
            ),
            (json!({ "input": [{ "content": "x" }] }), "input[0].role"),
            (
                json!({ "input": [{ "role": "tool", "content": "x" }] }),
                "input[0].role",
            ),
        ] {
            let r = validate(&b).unwrap_err();
            assert_eq!(
                (r.status, r.body["error"]["param"].as_str()),
                (400, Some(param)),
                "{b}"
            );
        }
    }
}
