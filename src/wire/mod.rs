//! Provider wire formats, pure: the requests of the Anthropic Messages API, OpenAI Chat
//! Completions and OpenAI Responses decoded into agentsim's neutral messages, and the public
//! `tool-pairing` validator that answers a broken request the way that provider does.
//!
//! - [`pairing`]: the rules, shared with the observer.
//! - [`anthropic`], [`openai_chat`], [`openai_responses`]: decoding each provider's request body,
//!   and each provider's status and error body for a broken rule.
//! - [`encode`]: agentsim's conversation as each provider's request body.
//! - [`reply`]: replies, event streams and error envelopes, and reply bodies read back.

pub mod anthropic;
pub mod encode;
pub mod openai_chat;
pub mod openai_responses;
pub mod pairing;
pub mod reply;

use serde_json::Value;

use crate::model::transcript::Message;

pub use pairing::{Fault, Rules};

/// A provider's request format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    OpenAiChat,
    /// OpenAI Responses, `POST /v1/responses`.
    OpenAiResponses,
}

impl Provider {
    /// Every provider.
    pub const ALL: [Provider; 3] = [
        Provider::Anthropic,
        Provider::OpenAiChat,
        Provider::OpenAiResponses,
    ];

    /// The path its requests are posted to.
    pub fn path(self) -> &'static str {
        match self {
            Provider::Anthropic => "/v1/messages",
            Provider::OpenAiChat => "/v1/chat/completions",
            Provider::OpenAiResponses => "/v1/responses",
        }
    }

    /// The provider whose requests are posted to `path`.
    pub fn from_path(path: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.path() == path)
    }
}

/// A request decoded into agentsim's terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// The model name.
    pub model: Option<String>,
    /// The system prompt (Anthropic `system`, OpenAI `system`/`developer` messages, Responses
    /// `instructions`), texts joined by blank lines.
    pub system: Option<String>,
    /// The conversation: consecutive turns of one role merged, a provider's tool messages and
    /// function call outputs as `tool_result` blocks of a user message.
    pub messages: Vec<Message>,
    /// The names of the tools offered.
    pub tools: Vec<String>,
    /// Whether a server-sent-event stream was asked for.
    pub stream: bool,
    /// Where each neutral message and block came from in the provider's body.
    pub origin: Origin,
    /// The reasoning the request replays, in order (not part of `messages`: no rule reads it).
    pub reasoning: Vec<Reasoning>,
}

/// A reasoning block a request replays: an Anthropic `thinking` or `redacted_thinking` block,
/// an OpenAI Responses `reasoning` item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reasoning {
    /// Where it is in the body (`messages.1.content.0`, `input[2]`).
    pub path: String,
    /// Its `signature` (Anthropic) or `id` (Responses), when it has one.
    pub id: Option<String>,
    /// Its text: a thinking block's `thinking`, a reasoning item's summary texts joined;
    /// `None` for a redacted block.
    pub text: Option<String>,
}

/// Where neutral messages and blocks came from in a provider's body, so that a fault names the
/// provider's own positions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// For each neutral message: the provider's index of each of its blocks (message or item
    /// index, and block index within it).
    pub blocks: Vec<Vec<(usize, usize)>>,
    /// For each neutral message: the provider's index of the message or item it starts with.
    pub messages: Vec<usize>,
}

impl Origin {
    /// The provider's position of block `block` of neutral message `message`.
    pub fn block(&self, message: usize, block: usize) -> (usize, usize) {
        self.blocks
            .get(message)
            .and_then(|b| b.get(block))
            .copied()
            .unwrap_or((self.message(message), block))
    }

    /// The provider's index of neutral message `message` (one past the last for the end).
    pub fn message(&self, message: usize) -> usize {
        match self.messages.get(message) {
            Some(&i) => i,
            None => self.messages.last().map_or(0, |&i| i + 1),
        }
    }
}

impl Request {
    /// A decoded request: the conversation and system prompt a decoder read, with the model, the
    /// tool names and the stream flag read from `body` the same way for every provider.
    fn assemble(
        body: &Value,
        system: Option<String>,
        messages: Vec<Message>,
        origin: Origin,
    ) -> Request {
        Request {
            model: body.get("model").and_then(Value::as_str).map(str::to_owned),
            system,
            messages,
            tools: tool_names(body),
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            origin,
            reasoning: Vec::new(),
        }
    }
}

/// A request the provider would reject.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// The HTTP status (400).
    pub status: u16,
    /// The provider's error body.
    pub body: Value,
    /// The broken rule, or `None` for a body that is not a request of this format at all.
    pub fault: Option<Fault>,
}

impl Rejection {
    /// The provider's error message.
    pub fn message(&self) -> &str {
        self.body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// Decodes a request body of `provider` and checks it with that provider's `tool-pairing` rules:
/// the decoded request, or the provider's status and error body.
pub fn validate(provider: Provider, body: &Value) -> Result<Request, Rejection> {
    match provider {
        Provider::Anthropic => anthropic::validate(body),
        Provider::OpenAiChat => openai_chat::validate(body),
        Provider::OpenAiResponses => openai_responses::validate(body),
    }
}

/// Decodes a request body of `provider` without judging it (a request that breaks a rule still
/// decodes): what a journal or transcript shows of it.
pub fn decode(provider: Provider, body: &Value) -> Result<Request, Malformed> {
    match provider {
        Provider::Anthropic => anthropic::decode(body),
        Provider::OpenAiChat => openai_chat::decode(body),
        Provider::OpenAiResponses => openai_responses::decode(body),
    }
}

/// A malformed body: where (a dotted path into the body) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The path, e.g. `messages.3.content.0.type`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Malformed {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Malformed {
        Malformed {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A deterministic request id from the body, for error envelopes (`req_agentsim_<hex>`): no
/// clock, no randomness, the same body gives the same id.
pub(crate) fn request_id(body: &Value) -> String {
    request_id_of_bytes(body.to_string().as_bytes())
}

/// [`request_id`] of a body as it was received (the same bytes give the same id).
pub(crate) fn request_id_of_bytes(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("req_agentsim_{h:016x}")
}

/// Text of a JSON value that should be a string, or of a list of text parts.
fn text_of(value: &Value, path: &str) -> Result<String, Malformed> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (i, part) in parts.iter().enumerate() {
                match part.get("text").and_then(Value::as_str) {
                    Some(t) => out.push_str(t),
                    None if part.is_object() => {}
                    None => {
                        return Err(Malformed::new(
                            format!("{path}.{i}"),
                            "Input should be a valid dictionary",
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(Malformed::new(path, "Input should be a valid string")),
    }
}

/// Appends `message` to `out`, merging it into the previous message when both are of one role and
/// the previous has no `tool_use` (providers accept consecutive turns of one role and read them as
/// one; a tool use must be answered by the very next turn, so it is never merged past), or when
/// `past_tool_uses` (the items of one Responses turn: each function call is an item of its own).
fn push_merged(
    out: &mut Vec<Message>,
    origin: &mut Origin,
    message: Message,
    positions: Vec<(usize, usize)>,
    index: usize,
    past_tool_uses: bool,
) {
    if let Some(last) = out.last_mut() {
        let mergeable =
            last.role == message.role && (past_tool_uses || last.tool_uses().next().is_none());
        // In a user message, results come first: merging text before results would break that.
        let user_results_after_text = message.role == crate::model::transcript::Role::User
            && message
                .content
                .iter()
                .any(|b| matches!(b, crate::model::transcript::Block::ToolResult { .. }))
            && last
                .content
                .iter()
                .any(|b| matches!(b, crate::model::transcript::Block::Text { .. }));
        if mergeable && !user_results_after_text {
            last.content.extend(message.content);
            origin
                .blocks
                .last_mut()
                .expect("one per message")
                .extend(positions);
            return;
        }
    }
    out.push(message);
    origin.messages.push(index);
    origin.blocks.push(positions);
}

/// The names in a `tools` array: `name` (Anthropic, Responses) or `function.name` (Chat).
fn tool_names(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| {
                    t.get("name")
                        .or_else(|| t.get("function").and_then(|f| f.get("name")))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A function call's `arguments`: the JSON text parsed, or the text itself when it is not JSON.
fn arguments(value: Option<&Value>) -> Value {
    match value {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Object(Default::default()),
    }
}
