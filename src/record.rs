//! `agentsim record` (features `mock-server` and `http-model`): a proxy with mock-llm's surfaces
//! (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses, streamed or not, and
//! `GET /v1/models`) that forwards each request to an upstream (a provider, or any compatible
//! server, another `agentsim mock-llm` among them) and returns its answer unchanged: status,
//! headers and body, a stream passed through piece by piece as it arrives.
//!
//! Each request is checked as mock-llm checks it (JSON, the provider's shape, its tool pairing): a
//! broken one gets the provider's own 400 and is not forwarded. Every exchange is kept in a journal
//! of mock-llm's format (the request, the answer read back into a reply body, the fault), which
//! [`crate::import`] turns into a scenario at shutdown. The request's headers go upstream
//! (`Authorization`, `x-api-key` and the rest) and are never kept: the journal keeps only the
//! `x-agentsim-agent` header, which routes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::drive::http::read_stream;
use crate::mock_llm::book::AGENT_HEADER;
use crate::mock_llm::responses::{Pending, Responses};
use crate::model::llm::LlmErrorKind;
use crate::model::transcript::Block;
use crate::observe::names;
use crate::wire::reply::{self, ErrorKind, OutBlock, Reply, Stop};
use crate::wire::{self, Provider};

/// How the proxy runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen (port 0 picks a free one).
    pub addr: SocketAddr,
    /// The upstream's base URL (`https://api.anthropic.com`, `http://127.0.0.1:8080`); a
    /// trailing `/v1` is taken as part of the paths.
    pub upstream: String,
    /// The largest request body taken, in bytes.
    pub body_limit: usize,
    /// Host names the control route (`/_agentsim/shutdown`) also answers to.
    pub allow_hosts: Vec<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream: String::new(),
            body_limit: crate::mock_llm::server::DEFAULT_BODY_LIMIT,
            allow_hosts: Vec::new(),
        }
    }
}

struct Shared {
    upstream: String,
    client: reqwest::Client,
    body_limit: usize,
    exchanges: AtomicU64,
    /// The journal's lines, by exchange number.
    lines: Mutex<Vec<(u64, String)>>,
    /// The OpenAI Responses items and responses that went through, so that a request's
    /// `item_reference`s and `previous_response_id` are journaled resolved, as mock-llm does.
    responses: Mutex<Responses>,
    stop: watch::Sender<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn keep(&self, line: &Value) {
        let n = line.get("exchange").and_then(Value::as_u64).unwrap_or(0);
        lock(&self.lines).push((n, line.to_string()));
    }

    fn journal(&self) -> String {
        let mut lines = lock(&self.lines).clone();
        lines.sort_by_key(|(n, _)| *n);
        lines.into_iter().map(|(_, l)| l + "\n").collect()
    }

    fn url(&self, path: &str) -> String {
        let base = self.upstream.trim_end_matches('/');
        match base.strip_suffix("/v1") {
            Some(root) => format!("{root}{path}"),
            None => format!("{base}{path}"),
        }
    }
}

/// A running proxy.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// The journal so far: one JSON exchange a line, in mock-llm's format, in exchange order.
    pub fn journal(&self) -> String {
        self.shared.journal()
    }

    /// Asks the proxy to stop (as `POST /_agentsim/shutdown` does).
    pub fn stop(&self) {
        self.shared.stop.send_replace(true);
    }

    /// Waits until the proxy has stopped (after [`Running::stop`], the shutdown endpoint, or
    /// `until` resolving), and gives its journal.
    pub async fn finish(
        self,
        until: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<String> {
        let mut stopped = self.shared.stop.subscribe();
        tokio::select! {
            _ = until => { self.shared.stop.send_replace(true); }
            _ = stopped.wait_for(|s| *s) => {}
        }
        self.task
            .await
            .map_err(|e| std::io::Error::other(format!("the proxy task failed: {e}")))??;
        Ok(self.shared.journal())
    }
}

/// Starts the proxy as `options` say; it runs until it is stopped.
pub async fn start(options: Options) -> std::io::Result<Running> {
    let upstream = options.upstream.trim().to_owned();
    if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the upstream must be an http:// or https:// URL, not {upstream:?}"),
        ));
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(std::io::Error::other)?;
    let (stop, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        upstream,
        client,
        body_limit: options.body_limit,
        exchanges: AtomicU64::new(0),
        lines: Mutex::new(Vec::new()),
        responses: Mutex::new(Responses::new()),
        stop,
    });
    let app = Router::new()
        .route(Provider::Anthropic.path(), post(anthropic))
        .route(Provider::OpenAiChat.path(), post(openai_chat))
        .route(Provider::OpenAiResponses.path(), post(openai_responses))
        .route("/v1/models", get(models))
        .route("/_agentsim/shutdown", post(shutdown))
        .fallback(unknown)
        .with_state(shared.clone());
    let (addr, task) = crate::http_guard::serve_guarded(
        app,
        options.addr,
        &options.allow_hosts,
        shared.stop.subscribe(),
    )
    .await?;
    Ok(Running { addr, shared, task })
}

async fn anthropic(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    exchange(s, Provider::Anthropic, headers, body).await
}

async fn openai_chat(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    exchange(s, Provider::OpenAiChat, headers, body).await
}

async fn openai_responses(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    exchange(s, Provider::OpenAiResponses, headers, body).await
}

async fn shutdown(State(s): State<Arc<Shared>>) -> Response {
    s.stop.send_replace(true);
    json_response(StatusCode::OK, &json!({"stopping": true}))
}

async fn unknown(method: Method, uri: Uri) -> Response {
    let message = format!(
        "agentsim record forwards no {method} {} (it forwards POST /v1/messages, POST /v1/chat/completions, POST /v1/responses and GET /v1/models)",
        uri.path()
    );
    let error = reply::error(
        Provider::OpenAiChat,
        ErrorKind::NotFound,
        Some(&message),
        "req_agentsim_none",
    );
    json_response(StatusCode::NOT_FOUND, &error.body)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Headers that belong to one hop, never forwarded either way (and `accept-encoding`, so that
/// the upstream answers uncompressed, as the proxy reads what it passes on).
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-authorization"
            | "proxy-connection"
            | "accept-encoding"
    )
}

/// The request's headers for the upstream: all but the hop-by-hop ones (the credentials among
/// them: they are forwarded, never kept).
fn forwarded(headers: &HeaderMap) -> reqwest::header::HeaderMap {
    let mut out = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        if !hop_by_hop(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The upstream's answer with its status and headers (the hop-by-hop ones aside).
fn answer(status: u16, headers: &reqwest::header::HeaderMap, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in headers {
        if !hop_by_hop(name) {
            response.headers_mut().append(name.clone(), value.clone());
        }
    }
    response
}

/// GET /v1/models, forwarded as it is.
async fn models(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let sent = s
        .client
        .get(s.url("/v1/models"))
        .headers(forwarded(&headers))
        .send()
        .await;
    match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let body = r.bytes().await.unwrap_or_default();
            answer(status, &headers, Body::from(body))
        }
        Err(e) => upstream_unreachable(Provider::OpenAiChat, &e.to_string()),
    }
}

fn upstream_unreachable(provider: Provider, why: &str) -> Response {
    let message = format!("agentsim record: the upstream could not be reached: {why}");
    let error = reply::error(
        provider,
        ErrorKind::Server,
        Some(&message),
        "req_agentsim_none",
    );
    json_response(StatusCode::BAD_GATEWAY, &error.body)
}

/// One exchange: read, check, forward, pass the answer back, keep it in the journal.
async fn exchange(s: Arc<Shared>, provider: Provider, headers: HeaderMap, body: Body) -> Response {
    let path = provider.path();
    let n = s.exchanges.fetch_add(1, Ordering::SeqCst) + 1;
    let mut line = json!({"exchange": n, "method": "POST", "path": path});
    let refuse = |mut line: Value, status: u16, body: Value, violation: Option<&str>| {
        line["outcome"] = "invalid".into();
        line["status"] = status.into();
        if let Some(v) = violation {
            line["violation"] = v.into();
        }
        line["response"] = body.clone();
        s.keep(&line);
        json_response(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            &body,
        )
    };
    let Ok(bytes) = axum::body::to_bytes(body, s.body_limit).await else {
        let message = format!(
            "request body too large: the limit is {} bytes",
            s.body_limit
        );
        let error = reply::error(
            provider,
            ErrorKind::TooLarge,
            Some(&message),
            "req_agentsim_too_large",
        );
        return refuse(line, error.status, error.body, None);
    };
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    let parsed: Result<Value, String> = if json_type {
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("the request body is not valid JSON: {e}"))
    } else {
        Err("the request's content-type must be application/json".to_owned())
    };
    let request = match parsed {
        Ok(v) => v,
        Err(message) => {
            let error = reply::error(
                provider,
                ErrorKind::InvalidRequest,
                Some(&message),
                "req_agentsim_bad_json",
            );
            return refuse(line, error.status, error.body, Some(names::REQUEST_FORMAT));
        }
    };
    // A Responses request's references to items and responses that went through are resolved
    // as mock-llm resolves them (and journaled so); references to what went through before the
    // recording began are the upstream's to resolve, and the journal says the history is not
    // whole.
    let (resolved, pending, unresolved) = if provider == Provider::OpenAiResponses {
        match lock(&s.responses).resolve(&request) {
            Ok((resolved, pending)) => (resolved, Some(pending), false),
            Err(_) => (None, None, true),
        }
    } else {
        (None, None, false)
    };
    let validated = wire::validate(provider, resolved.as_ref().unwrap_or(&request));
    if let Some(resolved) = &resolved {
        line["resolved_input"] = resolved["input"].clone();
    }
    if unresolved {
        line["unresolved"] = true.into();
    }
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    line["request"] = request;
    line["stream"] = stream.into();
    if let Some(agent) = headers.get(AGENT_HEADER).and_then(|v| v.to_str().ok()) {
        line["agent_header"] = agent.into();
    }
    if let Err(rejection) = validated.as_ref().map(|_| ()) {
        if !unresolved {
            let violation = if rejection.fault.is_some() {
                names::TOOL_PAIRING
            } else {
                names::REQUEST_FORMAT
            };
            return refuse(
                line,
                rejection.status,
                rejection.body.clone(),
                Some(violation),
            );
        }
    }
    let sent = s
        .client
        .post(s.url(path))
        .headers(forwarded(&headers))
        .body(bytes)
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            line["outcome"] = "upstream-error".into();
            line["status"] = 502.into();
            line["response"] = json!({"error": {"message": e.to_string()}});
            s.keep(&line);
            return upstream_unreachable(provider, &e.to_string());
        }
    };
    let status = response.status().as_u16();
    let upstream_headers = response.headers().clone();
    line["status"] = status.into();
    if status == 200 && stream {
        let keeper = Keeper {
            shared: s.clone(),
            provider,
            line: Some(line),
            pending,
        };
        let state = (response.bytes_stream(), Vec::new(), keeper);
        let body =
            futures_util::stream::unfold(state, |(mut up, mut seen, mut keeper)| async move {
                match up.next().await {
                    Some(Ok(chunk)) => {
                        seen.extend_from_slice(&chunk);
                        Some((Ok::<Bytes, std::io::Error>(chunk), (up, seen, keeper)))
                    }
                    Some(Err(e)) => {
                        keeper.keep(&seen, Some(e.to_string()));
                        Some((Err(std::io::Error::other(e)), (up, seen, keeper)))
                    }
                    None => {
                        keeper.keep(&seen, None);
                        None
                    }
                }
            });
        return answer(status, &upstream_headers, Body::from_stream(body));
    }
    let body = match response.bytes().await {
        Ok(b) => b,
        Err(e) => {
            line["outcome"] = "upstream-error".into();
            line["response"] = json!({"error": {"message": e.to_string()}});
            s.keep(&line);
            return upstream_unreachable(provider, &e.to_string());
        }
    };
    let value: Option<Value> = serde_json::from_slice(&body).ok();
    line["outcome"] = match (status, &value) {
        (200, Some(_)) => "reply",
        (429 | 500 | 503 | 529, Some(_)) => "fault",
        _ => "upstream-error",
    }
    .into();
    if let (200, Some(response), Some(pending)) = (status, &value, pending) {
        lock(&s.responses).keep(pending, response);
    }
    line["response"] =
        value.unwrap_or_else(|| Value::String(String::from_utf8_lossy(&body).into_owned()));
    s.keep(&line);
    answer(status, &upstream_headers, Body::from(body))
}

/// Keeps a streamed exchange in the journal once its stream has ended (or been dropped: a
/// client that went away mid-stream).
struct Keeper {
    shared: Arc<Shared>,
    provider: Provider,
    line: Option<Value>,
    /// What a Responses request adds to the store, kept with the response it streamed.
    pending: Option<Pending>,
}

/// The response object of a Responses stream's `response.completed` event.
fn completed_response(seen: &[u8]) -> Option<Value> {
    String::from_utf8_lossy(seen)
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("type").and_then(Value::as_str) == Some("response.completed"))
        .and_then(|v| v.get("response").cloned())
}

/// The data of each event of a stream, as JSON (what does not parse is left out).
fn stream_data(seen: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(seen)
        .lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .collect()
}

/// The reasoning a stream sent (Anthropic thinking blocks with their signatures, OpenAI
/// Responses reasoning items), each with how many of the reply's other blocks come before it.
fn streamed_reasoning(provider: Provider, seen: &[u8]) -> Vec<(usize, String, String)> {
    match provider {
        Provider::OpenAiChat => Vec::new(),
        Provider::OpenAiResponses => completed_response(seen)
            .and_then(|r| reply::reasoning(provider, &r).ok())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(at, r)| Some((at, r.id?, r.text?)))
            .collect(),
        Provider::Anthropic => {
            // Each content block by its index: its type, and a thinking block's text and
            // signature as their deltas give them.
            let mut blocks: std::collections::BTreeMap<u64, (String, String, String)> =
                std::collections::BTreeMap::new();
            for event in stream_data(seen) {
                let Some(index) = event.get("index").and_then(Value::as_u64) else {
                    continue;
                };
                let str_at = |p: &str| event.pointer(p).and_then(Value::as_str).unwrap_or("");
                match str_at("/type") {
                    "content_block_start" => {
                        let kind = str_at("/content_block/type").to_owned();
                        let text = str_at("/content_block/thinking").to_owned();
                        let signature = str_at("/content_block/signature").to_owned();
                        blocks.insert(index, (kind, text, signature));
                    }
                    "content_block_delta" => {
                        if let Some((_, text, signature)) = blocks.get_mut(&index) {
                            match str_at("/delta/type") {
                                "thinking_delta" => text.push_str(str_at("/delta/thinking")),
                                "signature_delta" => signature.push_str(str_at("/delta/signature")),
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            let mut at = 0;
            let mut out = Vec::new();
            for (kind, text, signature) in blocks.into_values() {
                match kind.as_str() {
                    "thinking" => out.push((at, signature, text)),
                    "text" | "tool_use" => at += 1,
                    _ => {}
                }
            }
            out
        }
    }
}

/// `blocks` with the reasoning `thoughts` put back in their places.
fn with_reasoning(blocks: Vec<OutBlock>, thoughts: Vec<(usize, String, String)>) -> Vec<OutBlock> {
    if thoughts.is_empty() {
        return blocks;
    }
    let mut thoughts = thoughts.into_iter().peekable();
    let mut out = Vec::new();
    for (at, block) in blocks.into_iter().enumerate() {
        while let Some((_, id, text)) = thoughts.next_if(|(t, ..)| *t <= at) {
            out.push(OutBlock::Thinking {
                id,
                pieces: vec![(0, text)],
            });
        }
        out.push(block);
    }
    out.extend(thoughts.map(|(_, id, text)| OutBlock::Thinking {
        id,
        pieces: vec![(0, text)],
    }));
    out
}

impl Keeper {
    fn keep(&mut self, seen: &[u8], broken: Option<String>) {
        let Some(mut line) = self.line.take() else {
            return;
        };
        let events = seen.windows(2).filter(|w| w == b"\n\n").count();
        match (broken, read_stream(self.provider, seen)) {
            (None, Ok(got)) => {
                if let Some(pending) = self.pending.take() {
                    if let Some(response) = completed_response(seen) {
                        lock(&self.shared.responses).keep(pending, &response);
                    }
                }
                let model = line
                    .pointer("/request/model")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let blocks: Vec<OutBlock> = got
                    .blocks
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text { text } => Some(OutBlock::text(text.to_string())),
                        Block::ToolUse { id, name, input } => Some(OutBlock::ToolUse {
                            after_ms: 0,
                            id: id.to_string(),
                            name: name.to_string(),
                            input: (**input).clone(),
                        }),
                        Block::ToolResult { .. } => None,
                    })
                    .collect();
                let blocks = with_reasoning(blocks, streamed_reasoning(self.provider, seen));
                let stop = if blocks.iter().any(|b| matches!(b, OutBlock::ToolUse { .. })) {
                    Stop::ToolUse
                } else {
                    Stop::EndTurn
                };
                let body = reply::body(
                    self.provider,
                    &Reply {
                        id: String::new(),
                        model,
                        blocks,
                        usage: got.usage,
                        stop,
                    },
                );
                line["outcome"] = "reply".into();
                line["response"] = json!({"events": events, "body": body});
            }
            (broken, got) => {
                let mut response = json!({"events": events, "fault": "mid_stream_cut"});
                if let (None, Err(e)) = (&broken, got) {
                    if e.kind != LlmErrorKind::Network {
                        // The error event's kind, as a scenario names it, and its message when
                        // not the provider's usual one.
                        response["fault"] = "mid_stream_error".into();
                        response["error_kind"] = serde_json::to_value(e.kind).unwrap_or_default();
                        if e.message != ErrorKind::of(e.kind).default_message(self.provider) {
                            response["error_message"] = e.message.into();
                        }
                    }
                }
                line["outcome"] = "fault".into();
                line["response"] = response;
            }
        }
        self.shared.keep(&line);
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some(mut line) = self.line.take() {
            line["outcome"] = "incomplete".into();
            line["response"] = json!({"fault": "the client went away before the stream ended"});
            self.shared.keep(&line);
        }
    }
}

/// The `steps:` of a scenario recorded by driving a runtime through the runtime protocol
/// (`agentsim record --runtime`): each `user` step of `scenario` as it is, followed by an
/// `expect` of what the runtime sent that conversation after it (`sent`: every send, in order,
/// with the `seq` of the `user` line before it, as [`crate::outside_run::Outcome`] gives them).
/// The scenario's own `expect` steps are replaced by these; a step of another kind (time, a
/// restart, an answer) is not one a recording replays, and is an error naming it.
pub fn steps_yaml(
    scenario: &crate::scenario::Scenario,
    sent: &[(String, String)],
    sent_seq: &[u64],
) -> Result<String, String> {
    use crate::scenario::StepKind;
    let quote = |s: &str| serde_json::to_string(s).expect("a string serialises");
    let mut out = String::from("steps:\n");
    let mut seq = 0u64;
    for (i, step) in scenario.steps.iter().enumerate() {
        match &step.kind {
            StepKind::User { key, text, wait } => {
                if !wait {
                    return Err(format!(
                        "step {} (line {}) is a `user` step with `wait: false`: a recording plays each message to its end",
                        i + 1,
                        step.line
                    ));
                }
                seq += 1;
                let keyed = if key == "default" {
                    String::new()
                } else {
                    format!(", key: {}", quote(key))
                };
                out.push_str(&format!("  - {{ user: {}{keyed} }}\n", quote(text)));
                let texts: Vec<String> = sent
                    .iter()
                    .zip(sent_seq)
                    .filter(|((conversation, _), s)| **s == seq && conversation == key)
                    .map(|((_, text), _)| quote(text))
                    .collect();
                out.push_str(&format!(
                    "  - {{ expect: {{ sent: [{}] }}{keyed} }}\n",
                    texts.join(", ")
                ));
            }
            StepKind::Expect(_) => {}
            _ => {
                return Err(format!(
                    "step {} (line {}) is not a `user` or `expect` step: a recording plays user messages only",
                    i + 1,
                    step.line
                ))
            }
        }
    }
    // What was sent to a conversation after a message to another one is not in any step above.
    let placed: usize = scenario
        .steps
        .iter()
        .filter_map(|s| match &s.kind {
            StepKind::User { key, .. } => Some(key),
            _ => None,
        })
        .enumerate()
        .map(|(i, key)| {
            sent.iter()
                .zip(sent_seq)
                .filter(|((c, _), s)| **s == i as u64 + 1 && c == key)
                .count()
        })
        .sum();
    if placed != sent.len() {
        return Err(format!(
            "the runtime sent {} texts, {} of them to a conversation other than the one of the message it was answering (or before the first message): the steps cannot say when they came",
            sent.len(),
            sent.len() - placed
        ));
    }
    Ok(out)
}

/// Agent settings of the scenario a recording was driven by (`skeleton`, its text) carried into
/// the written file (`yaml`, as `agentsim import` writes it): what `hello` tells the runtime
/// beyond an agent's name, kind and system prompt (`max_iterations`, `tools`, `description`,
/// `stream`, ...), written under each agent, and the agents no request went to, declared with
/// their settings, so that the runtime is told the same on replay. Routing, `system`, `model`
/// and `history` stay as the recording settled them.
pub fn with_agent_settings(yaml: &str, skeleton: &str) -> Result<String, String> {
    const SETTLED: [&str; 7] = [
        "kind", "system", "model", "match", "route", "history", "script",
    ];
    let doc: serde_json::Map<String, Value> =
        serde_saphyr::from_str(skeleton).map_err(|e| format!("the scenario: {e}"))?;
    let Some(Value::Object(agents)) = doc.get("agents") else {
        return Ok(yaml.to_owned());
    };
    let lines: Vec<&str> = yaml.lines().collect();
    let Some(start) = lines.iter().position(|l| *l == "agents:") else {
        return Err("the written file has no `agents:`".into());
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| !l.is_empty() && !l.starts_with(' ') && !l.starts_with('#'))
        .map_or(lines.len(), |i| start + 1 + i);
    let settings = |spec: &Value, indent: &str| -> String {
        let mut out = String::new();
        if let Value::Object(fields) = spec {
            for (key, value) in fields
                .iter()
                .filter(|(k, _)| !SETTLED.contains(&k.as_str()))
            {
                out.push_str(&format!("{indent}{key}: {value}\n"));
            }
        }
        out
    };
    let plain = |name: &str| {
        if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            name.to_owned()
        } else {
            serde_json::to_string(name).expect("a string serialises")
        }
    };
    let mut out: String = lines[..=start].iter().map(|l| format!("{l}\n")).collect();
    let mut seen = std::collections::BTreeSet::new();
    // The agent whose lines are being copied: its settings go after its last line.
    let mut current: Option<String> = None;
    let close = |out: &mut String, current: &mut Option<String>| {
        if let Some(spec) = current.take().and_then(|n| agents.get(&n)) {
            out.push_str(&settings(spec, "    "));
        }
    };
    for line in &lines[start + 1..end] {
        let name = line
            .strip_prefix("  ")
            .filter(|r| !r.starts_with(' ') && !r.starts_with('#'))
            .and_then(|r| r.strip_suffix(':'))
            .map(|n| n.trim_matches('"').to_owned());
        if let Some(name) = name {
            close(&mut out, &mut current);
            seen.insert(name.clone());
            current = Some(name);
        }
        out.push_str(line);
        out.push('\n');
    }
    close(&mut out, &mut current);
    for (name, spec) in agents.iter().filter(|(n, _)| !seen.contains(*n)) {
        out.push_str(&format!(
            "  {}:\n    # declared by the scenario recorded; no request went to it\n",
            plain(name)
        ));
        match spec.get("kind").and_then(Value::as_str) {
            Some(kind) => out.push_str(&format!("    kind: {}\n", plain(kind))),
            None if name != "main" => out.push_str("    kind: agent\n"),
            None => {}
        }
        for key in ["system", "model"] {
            if let Some(v) = spec.get(key) {
                out.push_str(&format!("    {key}: {v}\n"));
            }
        }
        out.push_str(&settings(spec, "    "));
    }
    for line in &lines[end..] {
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}
