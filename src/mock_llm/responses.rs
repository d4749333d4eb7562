//! What the server keeps of the OpenAI Responses it sent, as the API does for `store: true` (its
//! default): each output item by its id, for `{"type": "item_reference", "id": ...}` in a later
//! input (the Vercel AI SDK's default replays earlier output so), and each response's history, for
//! `previous_response_id` (the request continues that response: its input is appended to that
//! response's input and output, back along the responses it continued). Pure: no IO, no clock.
//!
//! An id the server never sent gets the API's own error: 404 `Item with id 'x' not found.`
//! (`param: input`), or 400 `Previous response with id 'x' not found.` (`param:
//! previous_response_id`, `code: previous_response_not_found`).

use std::collections::{HashMap, VecDeque};

use serde_json::{json, Value};

use crate::wire::reply::ErrorReply;

/// A response the server sent: the response it continued, the request's own input items
/// (references resolved), and its output items.
#[derive(Clone, Debug)]
struct Kept {
    previous: Option<String>,
    input: Vec<Value>,
    output: Vec<Value>,
}

/// How many responses the server keeps by default: the newest, so that its memory stays bounded
/// under load (a benchmark's every request is a new stored response); what is let go is counted,
/// and an id of it is explained as such.
pub const KEPT: usize = 100_000;

/// The items and responses sent (lookups by id only, never iterated).
#[derive(Clone, Debug)]
pub struct Responses {
    items: HashMap<String, Value>,
    responses: HashMap<String, Kept>,
    /// The responses kept, oldest first.
    order: VecDeque<String>,
    /// How many responses it keeps.
    limit: usize,
    /// How many it has let go.
    dropped: u64,
}

impl Default for Responses {
    fn default() -> Responses {
        Responses::with_limit(KEPT)
    }
}

/// What a request adds to the history, kept with its response once that is sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    /// `store` is not `false`.
    store: bool,
    /// The response it continues.
    previous: Option<String>,
    /// The request's own input items, references resolved.
    input: Vec<Value>,
}

/// An id the server never sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// An `item_reference`'s id, at `input[index]`.
    Item {
        /// The id.
        id: String,
        /// Where in `input`.
        index: usize,
    },
    /// A reference with no string `id`, at `input[index]`.
    NoId {
        /// Where in `input`.
        index: usize,
    },
    /// The `previous_response_id`.
    Previous(String),
}

impl Unknown {
    /// The API's error for it.
    pub fn error(&self) -> ErrorReply {
        let (status, message, param, code) = match self {
            Unknown::Item { id, .. } => (
                404,
                format!("Item with id '{id}' not found."),
                "input".to_owned(),
                Value::Null,
            ),
            Unknown::NoId { index } => (
                400,
                format!("Missing required parameter: 'input[{index}].id'."),
                format!("input[{index}].id"),
                json!("missing_required_parameter"),
            ),
            Unknown::Previous(id) => (
                400,
                format!("Previous response with id '{id}' not found."),
                "previous_response_id".to_owned(),
                json!("previous_response_not_found"),
            ),
        };
        ErrorReply {
            status,
            body: json!({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": code}}),
        }
    }

    /// What the report says: the runtime replays what the server never sent.
    pub fn explain(&self) -> String {
        match self {
            Unknown::Item { id, index } => format!(
                "input[{index}] is an item_reference to '{id}', an item the server never sent (or sent in a response with `store: false`)"
            ),
            Unknown::NoId { index } => {
                format!("input[{index}] is an item_reference without an `id`")
            }
            Unknown::Previous(id) => format!(
                "previous_response_id '{id}' names no response the server sent (with `store` left on)"
            ),
        }
    }
}

/// Whether a Responses body needs resolving (references or a previous response), cheaply.
pub fn refers(body: &Value) -> bool {
    body.get("previous_response_id")
        .is_some_and(|p| !p.is_null())
        || body
            .get("input")
            .and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(is_reference))
}

fn is_reference(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("item_reference")
}

impl Responses {
    /// An empty store that keeps the newest [`KEPT`] responses.
    pub fn new() -> Responses {
        Responses::default()
    }

    /// An empty store that keeps the newest `limit` responses (at least one).
    pub fn with_limit(limit: usize) -> Responses {
        Responses {
            items: HashMap::new(),
            responses: HashMap::new(),
            order: VecDeque::new(),
            limit: limit.max(1),
            dropped: 0,
        }
    }

    /// What to add to an unknown id's explanation once responses were let go: that the id may be
    /// of one of them.
    pub fn dropped_note(&self) -> String {
        if self.dropped == 0 {
            return String::new();
        }
        format!(
            "; the server keeps the newest {} responses and has let {} older ones go, which may hold it",
            self.limit, self.dropped
        )
    }

    /// Resolves a Responses request `body`: the body the validator reads when it held item
    /// references or a previous response (the whole history as `input`, no
    /// `previous_response_id`), `None` when it is read as it is; and what the request adds.
    pub fn resolve(&self, body: &Value) -> Result<(Option<Value>, Pending), Unknown> {
        let store = body.get("store") != Some(&Value::Bool(false));
        let previous = match body.get("previous_response_id") {
            Some(Value::String(id)) => Some(id.clone()),
            // Absent, null or not a string (which the API refuses and the validator ignores).
            _ => None,
        };
        let input: Vec<Value> = match body.get("input") {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    if !is_reference(item) {
                        return Ok(item.clone());
                    }
                    let id = item
                        .get("id")
                        .and_then(Value::as_str)
                        .ok_or(Unknown::NoId { index })?;
                    self.items.get(id).cloned().ok_or(Unknown::Item {
                        id: id.to_owned(),
                        index,
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
            // The validator says what is wrong with the rest.
            _ => Vec::new(),
        };
        let replaced = if refers(body) {
            let mut history: Vec<Value> = Vec::new();
            if let Some(first) = &previous {
                // Back along the responses continued, then in order; a walk no longer than the
                // responses kept (ids are the server's, so no cycle, but never trust that).
                let mut chain = Vec::new();
                let mut at = Some(first.as_str());
                while let Some(id) = at {
                    let kept = self
                        .responses
                        .get(id)
                        .ok_or_else(|| Unknown::Previous(id.to_owned()))?;
                    chain.push(kept);
                    if chain.len() > self.responses.len() {
                        break;
                    }
                    at = kept.previous.as_deref();
                }
                for kept in chain.iter().rev() {
                    history.extend(kept.input.iter().cloned());
                    history.extend(kept.output.iter().cloned());
                }
            }
            history.extend(input.iter().cloned());
            let mut resolved = body.clone();
            if let Some(object) = resolved.as_object_mut() {
                object.remove("previous_response_id");
                object.insert("input".into(), Value::Array(history));
            }
            Some(resolved)
        } else {
            None
        };
        Ok((
            replaced,
            Pending {
                store,
                previous,
                input,
            },
        ))
    }

    /// Keeps the response object `response` sent (its `id` and `output`) to the request that
    /// added `pending`, unless that request said `store: false`.
    pub fn keep(&mut self, pending: Pending, response: &Value) {
        if !pending.store {
            return;
        }
        let Some(id) = response.get("id").and_then(Value::as_str) else {
            return;
        };
        let output: Vec<Value> = response
            .get("output")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for item in &output {
            if let Some(item_id) = item.get("id").and_then(Value::as_str) {
                self.items.insert(item_id.to_owned(), item.clone());
            }
        }
        let kept = Kept {
            previous: pending.previous,
            input: pending.input,
            output,
        };
        if self.responses.insert(id.to_owned(), kept).is_none() {
            self.order.push_back(id.to_owned());
        }
        while self.order.len() > self.limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(kept) = self.responses.remove(&old) {
                for item in &kept.output {
                    if let Some(item_id) = item.get("id").and_then(Value::as_str) {
                        self.items.remove(item_id);
                    }
                }
            }
            self.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(id: &str, output: Value) -> Value {
        json!({"id": id, "object": "response", "output": output})
    }

    fn message(id: &str, text: &str) -> Value {
        json!({"id": id, "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]})
    }

    fn call(id: &str, call_id: &str) -> Value {
        json!({"id": id, "type": "function_call", "status": "completed", "call_id": call_id,
               "name": "search", "arguments": "{}"})
    }

    #[test]
    fn the_store_keeps_the_newest_responses_and_says_what_it_let_go() {
        let mut kept = Responses::with_limit(2);
        for n in 1..=3 {
            let (_, pending) = kept.resolve(&json!({"model": "m", "input": "hi"})).unwrap();
            let msg = format!("msg_{n}");
            kept.keep(
                pending.clone(),
                &response(&format!("resp_{n}"), json!([message(&msg, "x")])),
            );
            // The same response kept again (a retry's reply) takes no second place.
            kept.keep(
                pending,
                &response(&format!("resp_{n}"), json!([message(&msg, "x")])),
            );
        }
        assert_eq!(kept.responses.len(), 2);
        assert_eq!(kept.items.len(), 2);
        let refer =
            |id: &str| json!({"model": "m", "input": [{"type": "item_reference", "id": id}]});
        assert!(kept.resolve(&refer("msg_2")).is_ok());
        assert!(kept.resolve(&refer("msg_3")).is_ok());
        assert!(
            kept.resolve(&refer("msg_1")).is_err(),
            "the oldest was let go"
        );
        let previous = json!({"model": "m", "previous_response_id": "resp_1", "input": "more"});
        assert_eq!(
            kept.resolve(&previous).unwrap_err(),
            Unknown::Previous("resp_1".into())
        );
        assert_eq!(
            kept.dropped_note(),
            "; the server keeps the newest 2 responses and has let 1 older ones go, which may hold it"
        );
        assert_eq!(Responses::new().dropped_note(), "");
    }

    #[test]
    fn references_resolve_to_the_items_sent_and_unknown_ones_get_the_apis_404() {
        let mut kept = Responses::new();
        let first = json!({"model": "m", "input": "hi"});
        let (replaced, pending) = kept.resolve(&first).unwrap();
        assert_eq!(replaced, None, "nothing to resolve");
        kept.keep(
            pending,
            &response(
                "resp_1",
                json!([message("msg_1", "Let me look."), call("fc_1", "call_1")]),
            ),
        );
        let next = json!({"model": "m", "input": [
            {"role": "user", "content": "hi"},
            {"type": "item_reference", "id": "msg_1"},
            {"type": "item_reference", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "ok"}]});
        let body = kept.resolve(&next).unwrap().0.unwrap();
        assert_eq!(body["input"][1], message("msg_1", "Let me look."));
        assert_eq!(body["input"][2]["call_id"], "call_1");
        let request = crate::wire::openai_responses::validate(&body).expect("valid");
        assert_eq!(
            request.messages.len(),
            3,
            "user, assistant (text and call), result"
        );
        let unknown = json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_x"}]});
        let e = kept.resolve(&unknown).unwrap_err();
        assert_eq!(
            e,
            Unknown::Item {
                id: "msg_x".into(),
                index: 0
            }
        );
        let error = e.error();
        assert_eq!(error.status, 404);
        assert_eq!(
            error.body,
            json!({"error": {"message": "Item with id 'msg_x' not found.",
                             "type": "invalid_request_error", "param": "input", "code": null}})
        );
        let no_id = json!({"model": "m", "input": [{"type": "item_reference"}]});
        assert_eq!(kept.resolve(&no_id), Err(Unknown::NoId { index: 0 }));
        assert_eq!(Unknown::NoId { index: 0 }.error().status, 400);
    }

    #[test]
    fn a_previous_response_id_prepends_that_responses_history_back_to_the_first() {
        let mut kept = Responses::new();
        let first = json!({"model": "m", "input": "hi", "instructions": "be brief"});
        let (_, pending) = kept.resolve(&first).unwrap();
        kept.keep(
            pending,
            &response("resp_1", json!([call("fc_1", "call_1")])),
        );
        let second = json!({"model": "m", "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "ok"}]});
        let (body, pending) = kept.resolve(&second).unwrap();
        let body = body.unwrap();
        assert_eq!(body.get("previous_response_id"), None);
        assert_eq!(
            body["input"],
            json!([{"role": "user", "content": "hi"}, call("fc_1", "call_1"),
                   {"type": "function_call_output", "call_id": "call_1", "output": "ok"}])
        );
        kept.keep(
            pending,
            &response("resp_2", json!([message("msg_2", "Done.")])),
        );
        let third = json!({"model": "m", "previous_response_id": "resp_2", "input": "thanks"});
        let body = kept.resolve(&third).unwrap().0.unwrap();
        let input = body["input"].as_array().unwrap();
        assert_eq!(input.len(), 5, "{input:?}");
        assert_eq!(input[3], message("msg_2", "Done."));
        assert_eq!(input[4], json!({"role": "user", "content": "thanks"}));
        let e = kept
            .resolve(&json!({"model": "m", "previous_response_id": "resp_9", "input": "x"}))
            .unwrap_err();
        assert_eq!(e, Unknown::Previous("resp_9".into()));
        let error = e.error();
        assert_eq!(error.status, 400);
        assert_eq!(
            error.body,
            json!({"error": {"message": "Previous response with id 'resp_9' not found.",
                             "type": "invalid_request_error", "param": "previous_response_id",
                             "code": "previous_response_not_found"}})
        );
    }

    #[test]
    fn a_response_with_store_false_is_not_kept() {
        let mut kept = Responses::new();
        let body = json!({"model": "m", "input": "hi", "store": false});
        let (_, pending) = kept.resolve(&body).unwrap();
        kept.keep(pending, &response("resp_1", json!([message("msg_1", "x")])));
        let next = json!({"model": "m", "previous_response_id": "resp_1", "input": "y"});
        assert_eq!(kept.resolve(&next), Err(Unknown::Previous("resp_1".into())));
        let next = json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]});
        assert!(matches!(kept.resolve(&next), Err(Unknown::Item { .. })));
    }
}
