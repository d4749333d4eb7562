//! The mock server over HTTP/1.1 (axum on tokio): one [`Book`] behind a lock, each request
//! decoded and checked with its provider's validator, routed by the book, and answered with the
//! provider's body, event stream or error envelope. Every exchange goes to the JSONL journal (when
//! one is given) and into the report.
//!
//! Endpoints: `POST /v1/messages` (Anthropic Messages), `POST /v1/chat/completions` (OpenAI Chat
//! Completions), `POST /v1/responses` (OpenAI Responses), `GET /v1/models`, and the server's own
//! `GET /_agentsim/report`, `GET /_agentsim/transcript` and `POST /_agentsim/shutdown`.
//!
//! This file holds the server, its endpoints and the exchange; the faults injected in place of
//! replies are `faults.rs`, the findings and the report `report.rs`.

mod faults;
mod report;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::book::{Answer, Book};
use super::responses::Responses;
use crate::model::llm::LlmErrorKind;
use crate::observe::names;
use crate::scenario::Scenario;
use crate::wire::reply::{self, ErrorKind, ErrorReply, Sse};
use crate::wire::{self, Provider};

use faults::{dropped_connection, inject};
pub use faults::{Delay, InjectedFault, RandomFaults, LATENCY_MS, STALL_MS};
pub use report::{FaultSummary, Finding, Report, UnusedReplies};

/// The largest request body taken, in bytes (larger ones get the provider's 413).
pub const DEFAULT_BODY_LIMIT: usize = 32 * 1024 * 1024;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen (port 0 picks a free one).
    pub addr: SocketAddr,
    /// Where to write the JSONL journal of every exchange.
    pub journal: Option<PathBuf>,
    /// The largest request body taken, in bytes.
    pub body_limit: usize,
    /// Faults injected at random (seeded) in place of replies.
    pub faults: Option<RandomFaults>,
    /// Keep a transcript of the exchanges (see [`Running::transcript`] and
    /// `GET /_agentsim/transcript`).
    pub transcript: bool,
    /// Real seconds per scripted second of the replies' latencies (`after`, and a stream's
    /// chunk delays); 1 serves them as written.
    pub time_scale: f64,
    /// Host names the control routes (`/_agentsim/*`) answer to besides loopback names and the
    /// server's address (see `src/http_guard.rs`); `*` allows any.
    pub allow_hosts: Vec<String>,
    /// Keep every journal line in memory too (see [`Running::journal_since`]).
    pub keep_journal: bool,
    /// A reply whose script gives no `usage` reports zero tokens, not an estimate (see
    /// [`Book::scripted_usage_only`]).
    pub scripted_usage_only: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            journal: None,
            body_limit: DEFAULT_BODY_LIMIT,
            faults: None,
            transcript: false,
            time_scale: 1.0,
            allow_hosts: Vec::new(),
            keep_journal: false,
            scripted_usage_only: false,
        }
    }
}

struct Shared {
    name: String,
    expect_violation: Option<String>,
    models: Vec<String>,
    body_limit: usize,
    book: Mutex<Book>,
    /// The OpenAI Responses items and responses sent (`item_reference`, `previous_response_id`).
    responses: Mutex<Responses>,
    findings: Mutex<(Vec<Finding>, Vec<Finding>)>,
    journal: Mutex<Option<BufWriter<File>>>,
    exchanges: AtomicU64,
    stop: watch::Sender<bool>,
    faults: Option<RandomFaults>,
    /// Requests per (conversation, agent, turn), for the fault decisions.
    attempts: Mutex<std::collections::BTreeMap<(usize, String, usize), u32>>,
    injected: AtomicU64,
    /// The transcript's exchanges, rendered as they are journaled, if one is kept.
    transcript: Option<Mutex<Vec<(u64, String)>>>,
    /// The journal's lines in the order they were written, if they are kept.
    kept: Option<Mutex<Vec<Value>>>,
    /// With `kept`: each exchange's request as it arrived (routed, before any latency), or its
    /// journal line when it was refused before it was routed.
    arrivals: Option<Mutex<Vec<Value>>>,
    /// Real seconds per scripted second of latencies.
    time_scale: f64,
    /// Requests answered from each agent's script so far, counted when they are routed (before
    /// any latency).
    calls: Mutex<std::collections::BTreeMap<String, usize>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock is a bug; the data stays usable for the report.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// A scripted latency in real milliseconds.
    fn latency(&self, ms: u64) -> u64 {
        if self.time_scale == 1.0 {
            ms
        } else {
            (ms as f64 * self.time_scale).round() as u64
        }
    }

    /// A stream's events with their delays scaled.
    fn scaled(&self, mut events: Vec<Sse>) -> Vec<Sse> {
        for e in &mut events {
            e.delay_ms = self.latency(e.delay_ms);
        }
        events
    }

    fn transcript(&self) -> String {
        let Some(t) = &self.transcript else {
            return String::new();
        };
        let mut exchanges = lock(t).clone();
        exchanges.sort_by_key(|(n, _)| *n);
        exchanges.into_iter().map(|(_, text)| text).collect()
    }

    fn record(&self, line: &Value, finding: Option<Finding>) {
        if let Some(f) = finding {
            let mut findings = lock(&self.findings);
            if f.invariant.is_some() {
                findings.0.push(f);
            } else {
                findings.1.push(f);
            }
        }
        if let Some(t) = &self.transcript {
            let n = line.get("exchange").and_then(Value::as_u64).unwrap_or(0);
            lock(t).push((n, super::transcript::render(line)));
        }
        if let Some(kept) = &self.kept {
            lock(kept).push(line.clone());
            if line.get("address").is_none() {
                if let Some(arrivals) = &self.arrivals {
                    lock(arrivals).push(line.clone());
                }
            }
        }
        let mut journal = lock(&self.journal);
        if let Some(w) = journal.as_mut() {
            // A journal that cannot be written is reported once on stderr and then dropped,
            // never silently half-written.
            let ok = serde_json::to_writer(&mut *w, line).is_ok()
                && w.write_all(b"\n").is_ok()
                && w.flush().is_ok();
            if !ok {
                eprintln!("mock-llm: the journal could not be written; journaling stops here");
                *journal = None;
            }
        }
    }
}

/// A running server.
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// The report so far.
    pub fn report(&self) -> Report {
        self.shared.report()
    }

    /// How many exchanges the server has begun (each request counts when it arrives).
    pub fn exchanges(&self) -> u64 {
        self.shared.exchanges.load(Ordering::SeqCst)
    }

    /// Requests answered from each agent's script so far, counted as they are routed (a reply
    /// still waiting out its latency counts).
    pub fn calls_by_agent(&self) -> std::collections::BTreeMap<String, usize> {
        lock(&self.shared.calls).clone()
    }

    /// The transcript so far, in exchange order (empty unless [`Options::transcript`]).
    pub fn transcript(&self) -> String {
        self.shared.transcript()
    }

    /// The journal lines written since the first `from` (empty unless
    /// [`Options::keep_journal`]), in the order they were written: an exchange is written when
    /// it is answered, so a slow one comes after later ones.
    pub fn journal_since(&self, from: usize) -> Vec<Value> {
        self.shared.kept.as_ref().map_or_else(Vec::new, |kept| {
            lock(kept)
                .get(from..)
                .map_or_else(Vec::new, <[Value]>::to_vec)
        })
    }

    /// The requests that arrived since the first `from` (empty unless
    /// [`Options::keep_journal`]): each routed request as soon as it is routed, before its
    /// latency, with its journal line's `exchange`, `path`, `request` and `address`; a request
    /// refused before routing as its journal line.
    pub fn arrivals_since(&self, from: usize) -> Vec<Value> {
        self.shared.arrivals.as_ref().map_or_else(Vec::new, |a| {
            lock(a).get(from..).map_or_else(Vec::new, <[Value]>::to_vec)
        })
    }

    /// Reads the transcript, also after [`Running::finish`].
    pub fn transcript_handle(&self) -> impl Fn() -> String + Send + 'static {
        let shared = self.shared.clone();
        move || shared.transcript()
    }

    /// Asks the server to stop (as `POST /_agentsim/shutdown` does).
    pub fn stop(&self) {
        self.shared.stop.send_replace(true);
    }

    /// Waits until the server has stopped (after [`Running::stop`], the shutdown endpoint, or
    /// `until` resolving), and gives its final report.
    pub async fn finish(
        self,
        until: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<Report> {
        let mut stopped = self.shared.stop.subscribe();
        tokio::select! {
            _ = until => { self.shared.stop.send_replace(true); }
            _ = stopped.wait_for(|s| *s) => {}
        }
        self.task
            .await
            .map_err(|e| std::io::Error::other(format!("the server task failed: {e}")))??;
        Ok(self.shared.report())
    }
}

/// Starts serving `scenario` as `options` say; the server runs until it is stopped.
pub async fn start(scenario: &Scenario, options: Options) -> std::io::Result<Running> {
    let journal = match &options.journal {
        Some(path) => Some(BufWriter::new(File::create(path).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot create the journal {}: {e}", path.display()),
            )
        })?)),
        None => None,
    };
    let mut book = Book::from_scenario(scenario);
    if options.scripted_usage_only {
        book.scripted_usage_only();
    }
    let mut models: Vec<String> = book
        .agents()
        .iter()
        .filter_map(|a| match &a.route {
            super::book::Route::Default { model, .. } => Some(model.clone()),
            super::book::Route::Rule(rule) => rule.model.clone(),
        })
        .collect();
    models.sort();
    models.dedup();
    let (stop, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        name: scenario.name.clone(),
        expect_violation: scenario.expect_violation.clone(),
        models,
        body_limit: options.body_limit,
        book: Mutex::new(book),
        responses: Mutex::new(Responses::new()),
        findings: Mutex::new((Vec::new(), Vec::new())),
        journal: Mutex::new(journal),
        exchanges: AtomicU64::new(0),
        stop,
        faults: options.faults,
        attempts: Mutex::new(Default::default()),
        injected: AtomicU64::new(0),
        transcript: options.transcript.then(|| Mutex::new(Vec::new())),
        kept: options.keep_journal.then(|| Mutex::new(Vec::new())),
        arrivals: options.keep_journal.then(|| Mutex::new(Vec::new())),
        calls: Mutex::default(),
        time_scale: if options.time_scale.is_finite() && options.time_scale >= 0.0 {
            options.time_scale
        } else {
            1.0
        },
    });
    let app = Router::new()
        .route(
            Provider::Anthropic.path(),
            post(anthropic).fallback(unknown),
        )
        .route(
            Provider::OpenAiChat.path(),
            post(openai_chat).fallback(unknown),
        )
        .route(
            Provider::OpenAiResponses.path(),
            post(openai_responses).fallback(unknown),
        )
        .route("/v1/models", get(models_list).fallback(unknown))
        .route("/_agentsim/report", get(report).fallback(unknown))
        .route("/_agentsim/transcript", get(transcript).fallback(unknown))
        .route("/_agentsim/shutdown", post(shutdown).fallback(unknown))
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

async fn models_list(State(s): State<Arc<Shared>>) -> Response {
    // One list both SDKs read: OpenAI's `object`/`owned_by`, Anthropic's `type`/`display_name`.
    let data: Vec<Value> = s
        .models
        .iter()
        .map(|m| {
            json!({"id": m, "object": "model", "type": "model", "created": reply::CREATED,
                   "created_at": "2026-01-01T00:00:00Z", "owned_by": "agentsim",
                   "display_name": m})
        })
        .collect();
    let body = json!({
        "object": "list",
        "has_more": false,
        "first_id": s.models.first(),
        "last_id": s.models.last(),
        "data": data,
    });
    json_response(StatusCode::OK, &body, None)
}

async fn report(State(s): State<Arc<Shared>>) -> Response {
    let report = s.report();
    json_response(
        StatusCode::OK,
        &serde_json::to_value(&report).expect("a report serialises"),
        None,
    )
}

async fn transcript(State(s): State<Arc<Shared>>) -> Response {
    if s.transcript.is_none() {
        let body = json!({"error": {"type": "not_found", "message": "this server keeps no transcript: start it with --transcript FILE"}});
        return json_response(StatusCode::NOT_FOUND, &body, None);
    }
    let mut response = s.transcript().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn shutdown(State(s): State<Arc<Shared>>) -> Response {
    s.stop.send_replace(true);
    json_response(StatusCode::OK, &json!({"stopping": true}), None)
}

async fn unknown(State(s): State<Arc<Shared>>, method: Method, uri: Uri) -> Response {
    let path = uri.path().to_owned();
    let known = Provider::from_path(&path).is_some()
        || matches!(
            path.as_str(),
            "/v1/models" | "/_agentsim/report" | "/_agentsim/transcript" | "/_agentsim/shutdown"
        );
    let provider = provider_of_path(&path);
    let (kind, status, mut message) = if known {
        (
            ErrorKind::InvalidRequest,
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {method} is not allowed on {path}"),
        )
    } else {
        (
            ErrorKind::NotFound,
            StatusCode::NOT_FOUND,
            format!("agentsim mock-llm serves no {method} {path} (it serves POST /v1/messages, POST /v1/chat/completions, POST /v1/responses and GET /v1/models)"),
        )
    };
    if let Some(served) = meant_path(&path).filter(|served| *served != path) {
        message.push_str(&format!(
            "; the runtime meant {served}: check its base URL (Anthropic SDKs take http://HOST:PORT, OpenAI SDKs http://HOST:PORT/v1)"
        ));
    }
    let error = reply::error(provider, kind, Some(&message), "req_agentsim_none");
    let n = s.exchanges.fetch_add(1, Ordering::SeqCst) + 1;
    // A request to a path the server does not serve is a request the runtime under test meant to
    // make: the report lists it (a miss), and the run fails. The control routes are agentsim's own.
    let finding = (!path.starts_with("/_agentsim/")).then(|| Finding {
        exchange: n,
        invariant: None,
        message: message.clone(),
        address: None,
        agent: None,
    });
    s.record(
        &json!({"exchange": n, "method": method.as_str(), "path": path,
                "status": status.as_u16(), "outcome": "unknown-path", "response": error.body}),
        finding,
    );
    json_response(status, &error.body, None)
}

/// The path a request to `path` was meant for, by its last segments: `/messages` (a base URL
/// without `/v1`) or `/v1/v1/messages` (a `/v1` too many) both mean `/v1/messages`.
fn meant_path(path: &str) -> Option<&'static str> {
    let path = path.trim_end_matches('/');
    Provider::ALL
        .map(Provider::path)
        .into_iter()
        .chain(["/v1/models"])
        .find(|served| path.ends_with(served.trim_start_matches("/v1")))
}

fn provider_of_path(path: &str) -> Provider {
    if path.starts_with("/v1/messages") || path.starts_with("/v1/complete") {
        Provider::Anthropic
    } else if path.starts_with("/v1/responses") {
        Provider::OpenAiResponses
    } else {
        Provider::OpenAiChat
    }
}

fn json_response(status: StatusCode, body: &Value, request_id: Option<&str>) -> Response {
    json_text_response(status, body.to_string(), request_id)
}

fn json_text_response(status: StatusCode, body: String, request_id: Option<&str>) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(id) = request_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        h.insert("request-id", id.clone());
        h.insert("x-request-id", id);
    }
    response
}

/// An error answer; a 429 says when to retry (after 1 s), and so does any error when the script
/// gives its `retry_after` (in ms): `retry-after-ms`, which the Anthropic and OpenAI SDKs read
/// first, and `retry-after` in whole seconds (rounded up) for clients that read only that one.
fn error_response(error: &ErrorReply, request_id: &str, retry_after_ms: Option<u64>) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &error.body, Some(request_id));
    let retry_after_ms = retry_after_ms.or((error.status == 429).then_some(1000));
    if let Some(ms) = retry_after_ms {
        let h = response.headers_mut();
        h.insert("retry-after", HeaderValue::from(ms.div_ceil(1000)));
        h.insert("retry-after-ms", HeaderValue::from(ms));
    }
    response
}

impl Shared {
    /// Whether exchanges are journaled or transcribed (what only those show is built only then).
    fn journaling(&self) -> bool {
        self.transcript.is_some() || self.kept.is_some() || lock(&self.journal).is_some()
    }
}

/// One exchange: read, decode, check, route, answer, journal.
async fn exchange(s: Arc<Shared>, provider: Provider, headers: HeaderMap, body: Body) -> Response {
    let path = provider.path();
    let n = s.exchanges.fetch_add(1, Ordering::SeqCst) + 1;
    let mut line = json!({"exchange": n, "method": "POST", "path": path});
    let invalid = |line: Value,
                   kind: ErrorKind,
                   message: String,
                   invariant: Option<&'static str>,
                   request_id: &str| {
        let error = reply::error(provider, kind, Some(&message), request_id);
        let broken = invariant.map(|inv| (Some(inv), message, None));
        s.refuse(line, n, error, "invalid", broken, request_id)
    };
    let Ok(bytes) = axum::body::to_bytes(body, s.body_limit).await else {
        let message = format!(
            "request body too large: the limit is {} bytes",
            s.body_limit
        );
        return invalid(
            line,
            ErrorKind::TooLarge,
            message,
            None,
            "req_agentsim_too_large",
        );
    };
    let content_type = headers.get(header::CONTENT_TYPE);
    let json_type = content_type.and_then(|v| v.to_str().ok()).is_some_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json_type {
        let got = content_type.map_or("none".to_owned(), |v| {
            format!("{:?}", v.to_str().unwrap_or("(not text)"))
        });
        return invalid(
            line,
            ErrorKind::InvalidRequest,
            format!("the request's content-type must be application/json (got {got})"),
            Some(names::REQUEST_FORMAT),
            "req_agentsim_content_type",
        );
    }
    let body: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return invalid(
                line,
                ErrorKind::InvalidRequest,
                format!("the request body is not valid JSON: {e}"),
                Some(names::REQUEST_FORMAT),
                "req_agentsim_bad_json",
            )
        }
    };
    let request_id = wire::request_id_of_bytes(&bytes);
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let choices = body.get("n").and_then(Value::as_u64);
    // What only the journal and the transcript show is built only for them.
    let journaling = s.journaling();
    // A Responses request's item references and previous response, resolved against what the
    // server sent; an id it never sent gets the API's own error.
    let (resolved, pending) = if provider == Provider::OpenAiResponses {
        let resolved = {
            let responses = lock(&s.responses);
            responses
                .resolve(&body)
                .map_err(|unknown| (unknown.explain() + &responses.dropped_note(), unknown))
        };
        match resolved {
            Ok((resolved, pending)) => (resolved, Some(pending)),
            Err((why, unknown)) => {
                if journaling {
                    line["request"] = body;
                }
                let broken = Some((Some(names::REPLAYED_HISTORY), why, None));
                return s.refuse(line, n, unknown.error(), "invalid", broken, &request_id);
            }
        }
    } else {
        (None, None)
    };
    let validated = wire::validate(provider, resolved.as_ref().unwrap_or(&body));
    // Whose a refused request was, when it decodes and routes: a runtime with the bug fixed
    // makes it valid, and that agent's script must answer it.
    let header_list: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
        .collect();
    let refused_agent = validated.is_err().then(|| {
        let decoded = wire::decode(provider, resolved.as_ref().unwrap_or(&body)).ok()?;
        lock(&s.book).agent_of(&decoded, &header_list)
    });
    let refused_agent = refused_agent.flatten();
    if journaling {
        line["request"] = body;
        if let Some(resolved) = resolved {
            line["resolved_input"] = resolved["input"].clone();
        }
    }
    let request = match validated {
        Ok(r) => r,
        Err(rejection) => {
            let invariant = if rejection.fault.is_some() {
                names::TOOL_PAIRING
            } else {
                names::REQUEST_FORMAT
            };
            let message = rejection.message().to_owned();
            let error = ErrorReply {
                status: rejection.status,
                body: rejection.body,
            };
            if let Some(agent) = refused_agent {
                line["agent"] = agent.into();
            }
            let broken = Some((Some(invariant), message, None));
            return s.refuse(line, n, error, "invalid", broken, &request_id);
        }
    };
    if journaling {
        line["stream"] = request.stream.into();
    }
    // A feature of the provider this server does not serve is refused in the provider's error
    // shape and reported, never answered as if it were not there.
    if let Some(choices) = choices.filter(|&c| c > 1 && provider == Provider::OpenAiChat) {
        let message = format!(
            "agentsim mock-llm answers each request with one choice; this request asks for n = {choices}"
        );
        let error = reply::error(
            provider,
            ErrorKind::InvalidRequest,
            Some(&message),
            &request_id,
        );
        let broken = Some((None, message, None));
        return s.refuse(line, n, error, "unsupported", broken, &request_id);
    }
    if journaling {
        // The header that routes a request before any rule, kept so that `agentsim import` can
        // route the request the same way (no other header is journaled: they may hold secrets).
        if let Some((_, name)) = header_list
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(super::book::AGENT_HEADER))
        {
            line["agent_header"] = (*name).into();
        }
        // The conversation of the runtime protocol the request is for, as the runtime named it.
        if let Some((_, name)) = header_list
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(super::book::CONVERSATION_HEADER))
        {
            line["conversation_header"] = (*name).into();
        }
    }
    let routed = lock(&s.book).answer(provider, &request, &header_list);
    let (address, answer) = match routed {
        Ok(found) => found,
        Err(miss) => {
            let error = reply::error(
                provider,
                ErrorKind::NoReply,
                Some(&format!("agentsim mock-llm: {}", miss.message)),
                &request_id,
            );
            let outcome = if miss.violation.is_some() {
                "invalid"
            } else {
                "miss"
            };
            let broken = Some((miss.violation, miss.message, miss.address));
            return s.refuse(line, n, error, outcome, broken, &request_id);
        }
    };
    if address.entry.is_some() {
        *lock(&s.calls).entry(address.agent.clone()).or_insert(0) += 1;
    }
    if journaling {
        line["address"] = serde_json::to_value(&address).expect("serialises");
        if let Some(arrivals) = &s.arrivals {
            lock(arrivals).push(line.clone());
        }
    }
    match answer {
        Answer::Error {
            kind,
            message,
            after_ms,
            partial,
            retry_after_ms,
        } => {
            sleep(s.latency(after_ms)).await;
            let message = (&*message != kind.default_message()).then_some(&*message);
            if let Some(reply) = partial.filter(|_| request.stream) {
                let error = (kind != LlmErrorKind::Network).then(|| (ErrorKind::of(kind), message));
                let name = if error.is_some() {
                    "mid_stream_error"
                } else {
                    "mid_stream_cut"
                };
                return s.broken_stream(
                    provider,
                    &reply,
                    include_usage,
                    error,
                    name,
                    &request_id,
                    line,
                );
            }
            if kind == LlmErrorKind::Network {
                return s.drop_connection(line);
            }
            let error = reply::error(provider, ErrorKind::of(kind), message, &request_id);
            if let Some(ms) = retry_after_ms {
                line["retry_after_ms"] = ms.into();
            }
            s.fault(line, &error, &request_id, retry_after_ms)
        }
        Answer::Stall => {
            line["outcome"] = "stall".into();
            line["status"] = Value::Null;
            s.record(&line, None);
            let mut stopped = s.stop.subscribe();
            let _ = stopped.wait_for(|s| *s).await;
            dropped_connection()
        }
        Answer::Reply { reply, after_ms } => {
            sleep(s.latency(after_ms)).await;
            if let Some(faults) = &s.faults {
                let attempt = {
                    let mut attempts = lock(&s.attempts);
                    let n = attempts
                        .entry((address.conversation, address.agent.clone(), address.turn))
                        .or_insert(0);
                    *n += 1;
                    *n
                };
                let fault = faults.decide(&address, attempt, request.stream);
                line["faults"] =
                    json!({"attempt": attempt, "injected": fault.map(InjectedFault::name)});
                match fault
                    .is_none()
                    .then(|| faults.delay(&address, attempt))
                    .flatten()
                {
                    Some(Delay::Stall(ms)) => {
                        line["faults"]["injected"] = "stall".into();
                        line["faults"]["ms"] = ms.into();
                        lock(&s.book).retract(&address);
                        s.injected.fetch_add(1, Ordering::SeqCst);
                        return s.stall(line, ms).await;
                    }
                    Some(Delay::Latency(ms)) => {
                        line["faults"]["latency_ms"] = ms.into();
                        sleep(s.latency(ms)).await;
                    }
                    None => {}
                }
                if let Some(fault) = fault {
                    lock(&s.book).retract(&address);
                    s.injected.fetch_add(1, Ordering::SeqCst);
                    return inject(
                        &s,
                        provider,
                        fault,
                        &reply,
                        include_usage,
                        &request_id,
                        line,
                    );
                }
            }
            line["outcome"] = "reply".into();
            line["status"] = 200.into();
            if let Some(pending) = pending {
                let response = reply::body(provider, &reply);
                lock(&s.responses).keep(pending, &response);
            }
            if request.stream {
                let events = reply::events(provider, &reply, include_usage);
                if journaling {
                    line["response"] =
                        json!({"events": events.len(), "body": reply::body(provider, &reply)});
                }
                s.record(&line, None);
                sse_response(s.scaled(events), &request_id)
            } else {
                let text = reply::body_text(provider, &reply);
                let response = json_text_response(StatusCode::OK, text, Some(&request_id));
                if journaling {
                    line["response"] = reply::body(provider, &reply);
                }
                s.record(&line, None);
                response
            }
        }
    }
}

async fn sleep(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

fn sse_response(events: Vec<Sse>, request_id: &str) -> Response {
    let body = if events.iter().all(|e| e.delay_ms == 0) {
        let mut text = String::new();
        for e in &events {
            e.write(&mut text);
        }
        Body::from(text)
    } else {
        let stream = futures_util::stream::unfold(events.into_iter(), |mut rest| async move {
            let e = rest.next()?;
            sleep(e.delay_ms).await;
            let mut text = String::new();
            e.write(&mut text);
            Some((Ok::<Bytes, std::io::Error>(Bytes::from(text)), rest))
        });
        Body::from_stream(stream)
    };
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(id) = HeaderValue::from_str(request_id) {
        h.insert("request-id", id.clone());
        h.insert("x-request-id", id);
    }
    response
}
