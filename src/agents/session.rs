//! Seed 003's async sessions (DESIGN §9), as data: a conversation a trigger started, the webhook
//! envelope its agent gets as its first message, and the texts of its questions' outcomes.
//!
//! A triggered session runs one agent to completion with no user attached: its key is the
//! session's uuid, its agent runs as the conversation's main agent, and an `ask_user` either
//! persists a question (agents declared `async_questions`) or is refused. The store that keeps
//! sessions and questions is the driver's (`crate::store::QuestionStore`); the runtime tells it
//! what happened through [`crate::protocol::SessionOp`] effects.

use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::model::agent::{AgentDef, AgentKind};

/// What an agent without `async_questions` gets for `ask_user` in a triggered session (B08, B13).
pub(crate) const ASK_USER_IN_ASYNC: &str = "Tool 'ask_user' is not available in async mode";
/// What a fork gets for `ask_user` in a triggered session: only the session's stack asks, so
/// that one question at most is open (B23).
pub(crate) const FORK_ASK_IN_ASYNC: &str =
    "Tool 'ask_user' is not available to a fork in async mode: only the session's agent asks";
/// The error result of an `ask_user` whose question timed out under the `fail` policy.
pub(crate) const QUESTION_TIMED_OUT: &str = "The question timed out: the session failed.";

/// The error result of an `ask_user` whose session expired (B26) before its answer came.
pub(crate) const SESSION_EXPIRED: &str = "The session expired: nobody will answer.";

/// A conversation a trigger started.
#[derive(Clone, Debug, PartialEq)]
pub struct AsyncSession {
    /// The session's id (its conversation's key, as text).
    pub id: Uuid,
    /// The agent it runs, as the conversation's main agent.
    pub agent: Arc<AgentDef>,
    /// Whether it ended (completed or failed): a session runs once.
    pub ended: bool,
    /// Whether it failed while its agent still ran (a question timed out under the `fail`
    /// policy): the store has it failed; the agent is told and its run goes on to its end.
    pub failed: bool,
    /// When it expires (B26), in the driver's ms: a question open then fails it.
    pub expires_at: Option<u64>,
    /// The webhook envelope it started with, as JSON text (the store's `original_payload`).
    pub payload: Arc<str>,
    /// How it ended, once it did by its agent's end: completed or not, and the final text or
    /// why it failed (what the store must hold; a driver restarted after a crash compares).
    pub outcome: Option<(bool, Arc<str>)>,
}

/// The definition a triggered agent runs under: its own, as the main agent of its conversation
/// (frame name `main`; its script stays its own name's). What only a child can be is dropped:
/// a batch agent's delegation (there is no parent to hand an answer to) and a passthrough
/// skill's single external call (a session's agent runs its model).
pub(crate) fn main_def(def: &AgentDef) -> Arc<AgentDef> {
    Arc::new(AgentDef {
        kind: AgentKind::Main,
        frame_name: "main".into(),
        batch: None,
        passthrough: false,
        ..def.clone()
    })
}

/// A webhook request as `agentsim serve` received it: what the envelope tells the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WebhookRequest {
    /// The `Content-Type` header as sent (empty without one).
    pub content_type: String,
    /// The headers, names lower-cased, in order of name; secrets are redacted
    /// ([`REDACTED_HEADERS`]).
    pub headers: Vec<(String, String)>,
    /// The body's bytes.
    pub body: Vec<u8>,
}

/// Headers whose values never reach the agent's conversation (the model would see them): they
/// are listed in the envelope as `[redacted]`.
pub(crate) const REDACTED_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "x-ingress-secret",
    "idempotency-key",
];

/// The webhook envelope of a request as received (B06): the request as JSON, with the body as
/// `json` when the content type is JSON and it parses (`_non_object_json` when it is not an
/// object), `parse_error` and `raw_body_base64` when it does not parse, and `raw_body_base64`
/// for any other content type.
pub(crate) fn envelope_of(agent: &str, request: &WebhookRequest) -> Value {
    let headers: serde_json::Map<String, Value> = request
        .headers
        .iter()
        .map(|(k, v)| {
            let value = if REDACTED_HEADERS.contains(&k.as_str()) {
                "[redacted]".to_owned()
            } else {
                v.clone()
            };
            (k.clone(), Value::String(value))
        })
        .collect();
    let mut envelope = json!({
        "agent_name": agent,
        "method": "POST",
        "path": format!("/webhook/{agent}"),
        "content_type": request.content_type,
        "headers": headers,
    });
    let media = request
        .content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if media == "application/json" || media.ends_with("+json") {
        match serde_json::from_slice::<Value>(&request.body) {
            Ok(payload) => {
                if !payload.is_object() {
                    envelope["_non_object_json"] = json!(true);
                }
                envelope["json"] = payload;
            }
            Err(e) => {
                envelope["parse_error"] = json!(e.to_string());
                envelope["raw_body_base64"] = json!(base64(&request.body));
            }
        }
    } else {
        envelope["raw_body_base64"] = json!(base64(&request.body));
    }
    envelope
}

/// Standard base64 with padding (RFC 4648, section 4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The webhook envelope the agent gets as its first message (B06) for a JSON payload (a
/// scenario's `trigger` step): the request as JSON, its payload under `json` (with
/// `_non_object_json` when it is not an object).
pub fn envelope(agent: &str, payload: &Value) -> Value {
    let mut envelope = json!({
        "agent_name": agent,
        "method": "POST",
        "path": format!("/webhook/{agent}"),
        "content_type": "application/json",
        "headers": {},
        "json": payload,
    });
    if !payload.is_object() {
        envelope["_non_object_json"] = json!(true);
    }
    envelope
}

/// The header that names the session on a question's callback (B20).
pub(crate) const CALLBACK_SESSION_HEADER: &str = "X-Agent-Session";

/// How a question's callback goes out (B20, DESIGN §9): one POST, and when an attempt fails
/// (the connection refused, no reply within `timeout_ms`, a status other than 2xx) up to
/// `retries` more, the n-th after `backoff_ms · 2^(n-1)`. The question stays listed either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallbackPolicy {
    /// Attempts after the first.
    pub retries: u32,
    /// The wait before the first retry; each further one doubles it.
    pub backoff_ms: u64,
    /// How long one attempt may take.
    pub timeout_ms: u64,
}

impl Default for CallbackPolicy {
    fn default() -> CallbackPolicy {
        CallbackPolicy {
            retries: 3,
            backoff_ms: 1_000,
            timeout_ms: 10_000,
        }
    }
}

impl CallbackPolicy {
    /// The wait before retry `n` (1 for the first retry).
    pub(crate) fn backoff_before(&self, n: u32) -> u64 {
        self.backoff_ms
            .saturating_mul(1u64 << n.saturating_sub(1).min(32))
    }
}

/// Where a question's callback goes and how (the agent's `question_callback`, else the
/// settings' `question_callback_url`; none: no callback, B21).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Callbacks {
    /// The URL every async agent's questions are posted to unless it names its own.
    pub url: Option<Arc<str>>,
    /// Retries, backoff and timeout.
    pub policy: CallbackPolicy,
}

/// What one attempt of a callback got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallbackReply {
    /// A reply with this HTTP status (2xx delivers it).
    Status(u16),
    /// The connection was refused (or could not be made).
    Refused,
    /// No reply within the policy's timeout.
    Hang,
}

impl CallbackReply {
    /// Whether the callback was delivered.
    pub fn delivered(self) -> bool {
        matches!(self, CallbackReply::Status(s) if (200..300).contains(&s))
    }

    /// How long the attempt took in virtual time (a hang waits out the timeout).
    pub(crate) fn took_ms(self, policy: &CallbackPolicy) -> u64 {
        match self {
            CallbackReply::Hang => policy.timeout_ms,
            _ => 0,
        }
    }
}

impl std::fmt::Display for CallbackReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallbackReply::Status(s) if (200..300).contains(s) => write!(f, "delivered"),
            CallbackReply::Status(s) => write!(f, "{s}"),
            CallbackReply::Refused => f.write_str("refused"),
            CallbackReply::Hang => f.write_str("timed out"),
        }
    }
}

/// Plays a callback's attempts by `policy` with each attempt's reply from `reply`: each attempt
/// with its start, in ms after the question opened. Stops at the first delivery or after the
/// last retry.
pub(crate) fn callback_attempts(
    policy: &CallbackPolicy,
    mut reply: impl FnMut() -> CallbackReply,
) -> Vec<(u64, CallbackReply)> {
    let mut at = 0u64;
    let mut attempts = Vec::new();
    for n in 0..=policy.retries {
        if n > 0 {
            at = at.saturating_add(policy.backoff_before(n));
        }
        let got = reply();
        attempts.push((at, got));
        if got.delivered() {
            break;
        }
        at = at.saturating_add(got.took_ms(policy));
    }
    attempts
}

/// The body of a question's callback (B20): `{event: "question_pending", session_id,
/// agent_name, question: {id, text, options, context}, answer_url}`, the answer URL under
/// `base` (the service's public address). `context` is the question's stored context (JSON
/// text with `options` and `context`, as the runtime writes it); the body's `question.context`
/// is its `context`, or the whole stored context when the agent gave none.
pub(crate) fn callback_body(
    session: Uuid,
    agent: &str,
    question: Uuid,
    text: &str,
    context: Option<&str>,
    base: &str,
) -> Value {
    let context: Value = context
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or(Value::Null);
    json!({
        "event": "question_pending",
        "session_id": session.to_string(),
        "agent_name": agent,
        "question": {
            "id": question.to_string(),
            "text": text,
            "options": context.get("options").cloned().unwrap_or(Value::Null),
            // The agent's own context; without one, the question's context as the pending list
            // shows it (its options): a receiver never sees null where the list shows something.
            "context": context.get("context").cloned().unwrap_or(context.clone()),
        },
        "answer_url": format!("{}/agent/answer/{session}", base.trim_end_matches('/')),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_envelope_keeps_the_content_type_and_headers_and_any_body() {
        let req = |ct: &str, body: &[u8]| WebhookRequest {
            content_type: ct.to_owned(),
            headers: vec![
                ("authorization".to_owned(), "Bearer sk-secret".to_owned()),
                ("x-github-event".to_owned(), "issues".to_owned()),
            ],
            body: body.to_vec(),
        };
        let e = envelope_of(
            "triage",
            &req("application/json; charset=utf-8", b"{\"a\":1}"),
        );
        assert_eq!(e["json"], json!({"a": 1}));
        assert_eq!(e["content_type"], "application/json; charset=utf-8");
        assert_eq!(e["headers"]["x-github-event"], "issues");
        assert_eq!(e["headers"]["authorization"], "[redacted]");
        assert!(!e.to_string().contains("sk-secret"));
        let e = envelope_of("triage", &req("text/plain", b"hi!"));
        assert_eq!(e["raw_body_base64"], "aGkh");
        assert!(e.get("json").is_none());
        let e = envelope_of("triage", &req("application/json", b"{oops"));
        assert!(e["parse_error"].as_str().is_some());
        assert_eq!(e["raw_body_base64"], "e29vcHM=");
        let e = envelope_of("triage", &req("application/vnd.api+json", b"[1]"));
        assert_eq!(e["_non_object_json"], true);
        for (bytes, want) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
        ] {
            assert_eq!(base64(bytes), want);
        }
    }

    #[test]
    fn the_envelope_names_the_agent_and_marks_non_object_payloads() {
        let e = envelope("triage", &json!({"issue": 7}));
        assert_eq!(e["path"], "/webhook/triage");
        assert_eq!(e["json"]["issue"], 7);
        assert!(e.get("_non_object_json").is_none());
        let e = envelope("triage", &json!([1, 2]));
        assert_eq!(e["_non_object_json"], true);
    }

    #[test]
    fn a_callback_retries_with_doubling_backoff_until_delivered_or_out_of_retries() {
        let policy = CallbackPolicy::default();
        let mut replies = [
            CallbackReply::Refused,
            CallbackReply::Hang,
            CallbackReply::Status(200),
        ]
        .into_iter();
        let attempts = callback_attempts(&policy, || replies.next().unwrap());
        // Refused at 0; a retry 1 s later hangs 10 s; the next 2 s after that delivers.
        assert_eq!(
            attempts,
            vec![
                (0, CallbackReply::Refused),
                (1_000, CallbackReply::Hang),
                (13_000, CallbackReply::Status(200)),
            ]
        );
        let attempts = callback_attempts(&policy, || CallbackReply::Status(500));
        let starts: Vec<u64> = attempts.iter().map(|a| a.0).collect();
        assert_eq!(starts, vec![0, 1_000, 3_000, 7_000]);
        let once = callback_attempts(
            &CallbackPolicy {
                retries: 0,
                ..policy
            },
            || CallbackReply::Refused,
        );
        assert_eq!(once.len(), 1);
        assert_eq!(CallbackReply::Status(204).to_string(), "delivered");
        assert_eq!(CallbackReply::Status(503).to_string(), "503");
    }

    #[test]
    fn the_callback_body_is_the_seeds() {
        let (s, q) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let ctx = r#"{"options":["a","b"],"context":{"pr":7}}"#;
        let b = callback_body(
            s,
            "triage",
            q,
            "Which?",
            Some(ctx),
            "http://127.0.0.1:8080/",
        );
        assert_eq!(b["event"], "question_pending");
        assert_eq!(b["session_id"], s.to_string());
        assert_eq!(b["agent_name"], "triage");
        assert_eq!(b["question"]["id"], q.to_string());
        assert_eq!(b["question"]["text"], "Which?");
        assert_eq!(b["question"]["options"], json!(["a", "b"]));
        assert_eq!(b["question"]["context"]["pr"], 7);
        assert_eq!(
            b["answer_url"],
            format!("http://127.0.0.1:8080/agent/answer/{s}")
        );
        // Options alone: the context is what the pending list shows, not null.
        let b = callback_body(
            s,
            "t",
            q,
            "Which?",
            Some(r#"{"options":["a"]}"#),
            "http://h",
        );
        assert_eq!(b["question"]["context"], json!({ "options": ["a"] }));
        let b = callback_body(s, "triage", q, "Which?", None, "http://h");
        assert!(b["question"]["options"].is_null() && b["question"]["context"].is_null());
    }
}
