//! Model clients over HTTP (feature `http-model`): a conversation sent to an Anthropic Messages
//! or OpenAI Chat Completions endpoint (a provider, or `agentsim mock-llm`) with reqwest, its
//! reply read back into agentsim's blocks, streamed or not. The request bodies are
//! [`crate::wire::encode`]'s; plain replies are read by [`crate::wire::reply::decode`]; streams
//! are read event by event here, each text piece handed to the caller as it arrives.
//!
//! Errors are sorted as the runtime's model errors: 429 a rate limit, 529 and 503 an overload,
//! a connection that fails or ends early the network, anything else `other` with the provider's
//! message; an error event in the middle of a stream is an error of its kind.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::transcript::Block;
use crate::wire::encode::{request, Outgoing};
use crate::wire::{reply, Provider};

/// A model's reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelReply {
    /// Text and tool uses, in order.
    pub blocks: Vec<Block>,
    /// Token usage.
    pub usage: Usage,
}

/// A failed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelError {
    /// Its kind, as the runtime sorts model errors.
    pub kind: LlmErrorKind,
    /// The HTTP status, if an answer came.
    pub status: Option<u16>,
    /// What the provider (or the connection) said.
    pub message: String,
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "{s}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ModelError {}

fn network(message: impl std::fmt::Display) -> ModelError {
    ModelError {
        kind: LlmErrorKind::Network,
        status: None,
        message: message.to_string(),
    }
}

/// The kind of an error status.
pub(crate) fn kind_of_status(status: u16) -> LlmErrorKind {
    match status {
        429 => LlmErrorKind::RateLimit,
        503 | 529 => LlmErrorKind::Overloaded,
        _ => LlmErrorKind::Other,
    }
}

/// The kind of a provider's error object in a stream: its type or code (`rate_limit_error`,
/// `overloaded_error`, `rate_limit_exceeded`), or for OpenAI, whose overload is a
/// `server_error`, its message saying the server is overloaded.
fn kind_of_error(error: &Value) -> LlmErrorKind {
    let field = |k: &str| {
        error
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    let (kind, code, message) = (field("type"), field("code"), field("message"));
    if kind.contains("rate_limit") || code.contains("rate_limit") {
        LlmErrorKind::RateLimit
    } else if kind.contains("overloaded")
        || code.contains("unavailable")
        || message.contains("overloaded")
    {
        LlmErrorKind::Overloaded
    } else {
        LlmErrorKind::Other
    }
}

/// A client of one endpoint.
#[derive(Clone, Debug)]
pub struct HttpModel {
    provider: Provider,
    url: String,
    api_key: String,
    client: reqwest::Client,
}

impl HttpModel {
    /// A client of `provider` at `base_url`, the server's root (`https://api.anthropic.com`,
    /// `https://api.openai.com`, `http://127.0.0.1:8080` for `agentsim mock-llm`); a trailing
    /// `/v1` is accepted. `timeout` bounds each whole call.
    pub fn new(
        provider: Provider,
        base_url: &str,
        api_key: &str,
        timeout: Duration,
    ) -> Result<HttpModel, ModelError> {
        if provider == Provider::OpenAiResponses {
            return Err(ModelError {
                kind: LlmErrorKind::Other,
                status: None,
                message:
                    "the HTTP model client speaks Anthropic Messages and OpenAI Chat Completions"
                        .into(),
            });
        }
        let root = base_url.trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        let path = provider.path();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(network)?;
        Ok(HttpModel {
            provider,
            url: format!("{root}{path}"),
            api_key: api_key.to_owned(),
            client,
        })
    }

    /// The API it speaks.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Sends `out` and reads the whole reply; when `out.stream` asks for a stream, each text
    /// piece goes to `on_text` as it arrives.
    pub async fn call(
        &self,
        out: &Outgoing<'_>,
        on_text: impl FnMut(&str),
    ) -> Result<ModelReply, ModelError> {
        self.send(request(self.provider, out), on_text).await
    }

    /// Sends a body already encoded for this client's API ([`request`]) and reads the reply, as
    /// [`HttpModel::call`] does (a body that asks for a stream is read as one).
    pub async fn send(
        &self,
        body: Value,
        mut on_text: impl FnMut(&str),
    ) -> Result<ModelReply, ModelError> {
        let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
        let mut req = self.client.post(&self.url).json(&body);
        req = match self.provider {
            Provider::Anthropic => req
                .header("x-api-key", &self.api_key)
                .header("anthropic-version", "2023-06-01"),
            _ => req.bearer_auth(&self.api_key),
        };
        let response = req.send().await.map_err(network)?;
        let status = response.status().as_u16();
        if status != 200 {
            let text = response.text().await.unwrap_or_default();
            let parsed: Option<Value> = serde_json::from_str(&text).ok();
            let message = parsed
                .as_ref()
                .and_then(|v| v.pointer("/error/message"))
                .and_then(Value::as_str)
                .map_or(text.clone(), str::to_owned);
            return Err(ModelError {
                kind: kind_of_status(status),
                status: Some(status),
                message,
            });
        }
        if !stream {
            let text = response.text().await.map_err(network)?;
            let value: Value = serde_json::from_str(&text)
                .map_err(|e| malformed(format!("the reply is not JSON: {e}")))?;
            let (blocks, usage) = reply::decode(self.provider, &value)
                .map_err(|e| malformed(format!("{}: {}", e.path, e.message)))?;
            return Ok(ModelReply { blocks, usage });
        }
        let mut events = response.bytes_stream();
        let mut buffer: Vec<u8> = Vec::new();
        let mut acc = Accumulator::default();
        while let Some(chunk) = events.next().await {
            let chunk = chunk.map_err(network)?;
            buffer.extend_from_slice(&chunk);
            while let Some(end) = find_event_end(&buffer) {
                let event: Vec<u8> = buffer.drain(..end).collect();
                let text = String::from_utf8_lossy(&event);
                for data in text.lines().filter_map(|l| l.strip_prefix("data:")) {
                    acc.feed(self.provider, data.trim(), &mut on_text)?;
                }
            }
            if acc.done {
                break;
            }
        }
        acc.finish()
    }
}

/// A whole event stream of `provider` (the bytes of a streamed answer, as received) read into
/// the reply it streamed: Anthropic's and OpenAI Chat's events assembled as [`HttpModel`] reads
/// them, an OpenAI Responses stream by its `response.completed` event. An error event is an
/// error of its kind; a stream that ends before it says it is complete is a network error.
pub(crate) fn read_stream(provider: Provider, bytes: &[u8]) -> Result<ModelReply, ModelError> {
    let text = String::from_utf8_lossy(bytes);
    let data = text
        .split("\n\n")
        .flat_map(|event| event.lines())
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data:"))
        .map(str::trim);
    if provider == Provider::OpenAiResponses {
        for d in data {
            let Ok(v) = serde_json::from_str::<Value>(d) else {
                continue;
            };
            match v.get("type").and_then(Value::as_str) {
                Some("response.completed") => {
                    let response = v.get("response").unwrap_or(&Value::Null);
                    let (blocks, usage) = reply::decode(provider, response)
                        .map_err(|e| malformed(format!("{}: {}", e.path, e.message)))?;
                    return Ok(ModelReply { blocks, usage });
                }
                Some("error" | "response.failed") => {
                    let error = v.get("error").or_else(|| v.pointer("/response/error"));
                    return Err(ModelError {
                        kind: error.map_or(LlmErrorKind::Other, kind_of_error),
                        status: Some(200),
                        message: error
                            .and_then(|e| e.get("message"))
                            .and_then(Value::as_str)
                            .unwrap_or("the stream failed")
                            .to_owned(),
                    });
                }
                _ => {}
            }
        }
        return Err(network("the stream ended before the reply was complete"));
    }
    let mut acc = Accumulator::default();
    for d in data {
        acc.feed(provider, d, &mut |_| {})?;
    }
    acc.finish()
}

fn malformed(message: String) -> ModelError {
    ModelError {
        kind: LlmErrorKind::Other,
        status: Some(200),
        message,
    }
}

/// The end (past the blank line) of the first complete event in `buf`.
fn find_event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A tool use being streamed: its id, name and the fragments of its input.
#[derive(Debug, Default)]
struct Partial {
    id: String,
    name: String,
    json: String,
}

/// A reply assembled from its events.
#[derive(Debug, Default)]
struct Accumulator {
    /// Blocks by index: text, or a tool use in pieces.
    text: Vec<(usize, String)>,
    tools: Vec<(usize, Partial)>,
    usage: Usage,
    /// The stream said it is complete.
    done: bool,
}

impl Accumulator {
    fn text_at(&mut self, index: usize) -> &mut String {
        if let Some(i) = self.text.iter().position(|(x, _)| *x == index) {
            return &mut self.text[i].1;
        }
        self.text.push((index, String::new()));
        &mut self.text.last_mut().expect("just pushed").1
    }

    fn tool_at(&mut self, index: usize) -> &mut Partial {
        if let Some(i) = self.tools.iter().position(|(x, _)| *x == index) {
            return &mut self.tools[i].1;
        }
        self.tools.push((index, Partial::default()));
        &mut self.tools.last_mut().expect("just pushed").1
    }

    fn feed(
        &mut self,
        provider: Provider,
        data: &str,
        on_text: &mut impl FnMut(&str),
    ) -> Result<(), ModelError> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| malformed(format!("a stream event is not JSON ({e}): {data}")))?;
        let str_at = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
        if let Some(error) = v.get("error") {
            let kind = kind_of_error(error);
            return Err(ModelError {
                kind,
                status: Some(200),
                message: str_at(error, "/message").unwrap_or_else(|| error.to_string()),
            });
        }
        let index = |v: &Value| v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match provider {
            Provider::Anthropic => match v.get("type").and_then(Value::as_str) {
                Some("message_start") => {
                    if let Some(n) = v
                        .pointer("/message/usage/input_tokens")
                        .and_then(Value::as_u64)
                    {
                        self.usage.input_tokens = n;
                    }
                }
                Some("content_block_start") => {
                    let i = index(&v);
                    match v.pointer("/content_block/type").and_then(Value::as_str) {
                        Some("tool_use") => {
                            let t = self.tool_at(i);
                            t.id = str_at(&v, "/content_block/id").unwrap_or_default();
                            t.name = str_at(&v, "/content_block/name").unwrap_or_default();
                        }
                        _ => {
                            self.text_at(i);
                        }
                    }
                }
                Some("content_block_delta") => {
                    let i = index(&v);
                    if let Some(t) = str_at(&v, "/delta/text") {
                        on_text(&t);
                        self.text_at(i).push_str(&t);
                    } else if let Some(j) = str_at(&v, "/delta/partial_json") {
                        self.tool_at(i).json.push_str(&j);
                    }
                }
                Some("message_delta") => {
                    if let Some(n) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                        self.usage.output_tokens = n;
                    }
                }
                Some("message_stop") => self.done = true,
                _ => {}
            },
            _ => {
                if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
                    self.usage.input_tokens = usage
                        .get("prompt_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    self.usage.output_tokens = usage
                        .get("completion_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                }
                let Some(delta) = v.pointer("/choices/0/delta") else {
                    return Ok(());
                };
                if let Some(t) = delta.get("content").and_then(Value::as_str) {
                    if !t.is_empty() {
                        on_text(t);
                        self.text_at(0).push_str(t);
                    }
                }
                for call in delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    // Tool calls come after the text: their places follow it.
                    let t = self.tool_at(1 + index(call));
                    if let Some(id) = str_at(call, "/id") {
                        t.id = id;
                    }
                    if let Some(name) = str_at(call, "/function/name") {
                        t.name = name;
                    }
                    if let Some(args) = str_at(call, "/function/arguments") {
                        t.json.push_str(&args);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<ModelReply, ModelError> {
        if !self.done {
            return Err(network(
                "the stream ended before the reply was complete".to_owned(),
            ));
        }
        let mut ordered: Vec<(usize, Block)> = Vec::new();
        for (i, text) in self.text {
            if !text.is_empty() {
                ordered.push((i, Block::text(text)));
            }
        }
        for (i, t) in self.tools {
            let input: Value = if t.json.trim().is_empty() {
                Value::Object(Default::default())
            } else {
                serde_json::from_str(&t.json).map_err(|e| {
                    malformed(format!(
                        "tool {} input is not JSON ({e}): {}",
                        t.name, t.json
                    ))
                })?
            };
            ordered.push((i, Block::tool_use(t.id, t.name, input)));
        }
        ordered.sort_by_key(|(i, _)| *i);
        Ok(ModelReply {
            blocks: ordered.into_iter().map(|(_, b)| b).collect(),
            usage: self.usage,
        })
    }
}
