//! `agentsim serve`: the reference runtime as an HTTP service (DESIGN §10), driven by the tokio
//! [`Engine`] in real time, with the model answered by a scenario's scripts or by a provider's
//! API over HTTP.
//!
//! One task owns the engine (and so the runtime); HTTP handlers talk to it through a command
//! channel and read what it published: the text each conversation was sent, and a broadcast of
//! stream events for `GET /agent/stream`. The endpoints:
//!
//! - `POST /conversations/{key}/messages` `{"text": ...}`: a user message (202, queued);
//! - `GET /conversations/{key}`: what the conversation was sent so far, and whether it is idle;
//! - `POST /webhook/{agent}` (seed 003): a session of the agent on the body as its payload; its id;
//! - `GET /agent/questions?status=pending`: the store's pending questions;
//! - `POST /agent/answer/{session_id}` `{"question_id", "answer"}`: through the store first (the
//!   first answer wins and resumes the agent; `duplicate_ignored`; 404);
//! - `GET /agent/session/{session_id}`: a session as the store has it;
//! - `GET /agent/tree`: the live agents, without messages (seed 001's `getAgentTree`);
//! - `GET /agent/{id}`: one agent, live with its messages or ended (404 when unknown);
//! - `POST /agent/{id}/intervene` `{"user_comment"?, "user_content"?, "status"?}` (seed 001's
//!   `userIntervention`): 200 accepted, 404 not found, 409 refused with the reason;
//! - `GET /agent/stream`: server-sent events, one per stream event of any conversation (an
//!   `agent-state` on every status change, and the text deltas and tool indicators of agents
//!   declared `stream`), and one `message` per text sent to a user.
//!
//! Every error is JSON, `{"ok": false, "error": ...}`: 400 for a body that is not JSON or lacks a
//! field or has a wrong type, 401 without the bearer token when one is configured, 404 for an
//! unknown path, agent or conversation, 405 for a wrong method, 413 over the body limit. The
//! server stops gracefully on [`Running::stop`] (the CLI: Ctrl-C or SIGTERM).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use uuid::Uuid;

use crate::agents::tree::{Intervention, InterventionOutcome, Node, Status};
use crate::drive::tokio_driver::{Backend, Engine, Setup};
use crate::protocol::{Effect, Input};
use crate::store::questions::{
    timestamp, Answered, NewQuestion, QuestionStore, SessionStatus, StoreError,
};

/// The store of async sessions a service keeps (SQLite with `--db`, else memory).
pub type Store = Box<dyn QuestionStore + Send>;

#[cfg(feature = "sqlite")]
pub mod bench;

/// The largest request body taken by default, in bytes.
pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

/// How `agentsim serve` runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where to listen (port 0 picks a free one).
    pub addr: SocketAddr,
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
    /// The largest request body taken, in bytes.
    pub body_limit: usize,
    /// Where the runtime persists (`state.json` and `context.jsonl`), so that a restart resumes
    /// every conversation and session; `None` keeps it in memory.
    pub state_dir: Option<std::path::PathBuf>,
    /// The service's address as its callbacks' receivers reach it (the base of each callback's
    /// `answer_url`); `None`: `http://` and the address it listens on.
    pub public_url: Option<String>,
}

/// The wall clock in ms since the epoch: the service's store keeps real times.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A question to the engine's task, answered on its channel.
enum Command {
    Message {
        key: Arc<str>,
        text: Arc<str>,
    },
    Intervene {
        agent: Uuid,
        intervention: Intervention,
        reply: oneshot::Sender<InterventionOutcome>,
    },
    Trigger {
        agent: String,
        payload: Value,
        reply: oneshot::Sender<Option<Uuid>>,
    },
    Answer {
        question: Uuid,
        text: Arc<str>,
    },
    Tree(oneshot::Sender<Vec<Node>>),
    Agent(Uuid, oneshot::Sender<Option<Node>>),
    Idle(Arc<str>, oneshot::Sender<bool>),
}

/// What the handlers share.
struct Shared {
    commands: mpsc::UnboundedSender<Command>,
    token: Option<String>,
    events: broadcast::Sender<(String, Value)>,
    /// The text each conversation was sent, in order.
    sent: Mutex<BTreeMap<String, Vec<String>>>,
    stop: watch::Sender<bool>,
    /// Why the engine stopped, if it did.
    failure: Mutex<Option<String>>,
    /// The store of async sessions (seed 003).
    store: Mutex<Store>,
    /// Where questions' callbacks come from.
    callbacks: CallbackSender,
}

/// Sends questions' callbacks (seed 003's B20), each in a task of its own so that a receiver
/// that hangs or refuses delays nothing else: one POST with `X-Agent-Session`, retried by the
/// scenario's policy when it fails (refused, timed out, a status other than 2xx). The question
/// stays listed whatever the callback got.
#[derive(Clone)]
struct CallbackSender {
    client: reqwest::Client,
    policy: crate::agents::session::CallbackPolicy,
    public_url: String,
}

impl CallbackSender {
    fn send(&self, url: &str, session: Uuid, body: Value) {
        let (this, url) = (self.clone(), url.to_owned());
        tokio::spawn(async move {
            use crate::agents::session::CALLBACK_SESSION_HEADER;
            let timeout = std::time::Duration::from_millis(this.policy.timeout_ms);
            for n in 0..=this.policy.retries {
                if n > 0 {
                    let wait = this.policy.backoff_before(n);
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                }
                let sent = this
                    .client
                    .post(&url)
                    .header(CALLBACK_SESSION_HEADER, session.to_string())
                    .timeout(timeout)
                    .json(&body)
                    .send()
                    .await;
                match sent {
                    Ok(reply) if reply.status().is_success() => {
                        tracing::info!(%url, %session, attempt = n + 1, "question callback delivered");
                        return;
                    }
                    Ok(reply) => {
                        tracing::warn!(%url, %session, attempt = n + 1, status = %reply.status(), "question callback refused");
                    }
                    Err(e) => {
                        tracing::warn!(%url, %session, attempt = n + 1, error = %e, "question callback failed");
                    }
                }
            }
            tracing::warn!(%url, %session, "question callback given up; the question stays listed");
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server that runs.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    engine: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Asks the server to stop: it stops taking connections, finishes the requests in flight,
    /// and its engine stops.
    pub fn stop(&self) {
        let _ = self.shared.stop.send(true);
    }

    /// A handle that stops the server (for a signal handler).
    pub fn stopper(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || {
            let _ = shared.stop.send(true);
        }
    }

    /// Waits until the server stopped; an error if it could not serve or its engine failed.
    pub async fn finish(self) -> std::io::Result<()> {
        let served = self
            .server
            .await
            .map_err(|e| std::io::Error::other(format!("the server task failed: {e}")))?;
        let _ = self.engine.await;
        served?;
        match lock(&self.shared.failure).take() {
            Some(failure) => Err(std::io::Error::other(failure)),
            None => Ok(()),
        }
    }
}

/// Starts serving a runtime of `setup` whose model calls `backend` answers, with async sessions
/// kept in `store`.
pub async fn start(
    setup: Setup,
    backend: Backend,
    store: Store,
    options: Options,
) -> std::io::Result<Running> {
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", options.addr))
        })?;
    let addr = listener.local_addr()?;
    let (commands, rx) = mpsc::unbounded_channel();
    let (events, _) = broadcast::channel(1024);
    let (stop, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        commands,
        token: options.token,
        events,
        sent: Mutex::new(BTreeMap::new()),
        stop,
        failure: Mutex::new(None),
        store: Mutex::new(store),
        callbacks: CallbackSender {
            client: reqwest::Client::new(),
            policy: setup.config.callbacks.policy,
            public_url: options
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{addr}")),
        },
    });
    let mut engine = match &options.state_dir {
        None => Engine::new(&setup, true),
        Some(dir) => {
            let files = crate::store::FileStore::new(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("--state {}: {e}", dir.display()))
            })?;
            Engine::with_files(&setup, true, files, wall_ms()).map_err(std::io::Error::other)?
        }
    };
    reconcile(&mut engine, &shared);
    let engine = tokio::spawn(run_engine(engine, backend, rx, shared.clone()));
    let app = Router::new()
        .route("/conversations/{key}/messages", post(message))
        .route("/conversations/{key}", get(conversation))
        .route("/webhook/{agent}", post(webhook))
        .route("/agent/questions", get(pending_questions))
        .route("/agent/answer/{session}", post(answer))
        .route("/agent/session/{session}", get(session))
        .route("/agent/tree", get(tree))
        .route("/agent/stream", get(stream))
        .route("/agent/{id}", get(agent))
        .route("/agent/{id}/intervene", post(intervene))
        .fallback(unknown)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(options.body_limit))
        .with_state(shared.clone());
    let mut stopped = shared.stop.subscribe();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    Ok(Running {
        addr,
        shared,
        server,
        engine,
    })
}

/// The engine's task: commands from the handlers and outcomes of its own tasks, each followed by
/// the effects it leads to, until the server stops.
async fn run_engine(
    mut engine: Engine,
    mut backend: Backend,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shared: Arc<Shared>,
) {
    let mut stop = shared.stop.subscribe();
    // A restored runtime issues again the calls it waited for.
    if let Err(e) = engine.pump(&mut backend, |effect| publish(&shared, effect)) {
        fail(&shared, &e.to_string());
        return;
    }
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Trigger { agent, payload, reply }) => {
                    // The session is in the store before the caller hears of it.
                    let id = engine.runtime_mut().trigger(&agent, payload);
                    let published = engine.pump(&mut backend, |effect| publish(&shared, effect));
                    let _ = reply.send(id);
                    if let Err(e) = published {
                        fail(&shared, &e.to_string());
                        return;
                    }
                    continue;
                }
                Some(command) => apply(&mut engine, command, &shared),
                None => return,
            },
            input = engine.next_input() => match input {
                Some(input) => engine.handle(input),
                None => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        }
        let published = engine.pump(&mut backend, |effect| publish(&shared, effect));
        if let Err(e) = published {
            fail(&shared, &e.to_string());
            return;
        }
    }
}

/// After a restart, the runtime's persisted state and the store are made to agree on every open
/// question: one the store acknowledged an answer to (the service stopped before the runtime
/// persisted it) is answered again, so that nothing acknowledged is lost; one the store never
/// heard of (the service stopped in between) is asked in the store again.
fn reconcile(engine: &mut Engine, shared: &Shared) {
    reconcile_sessions(engine, &mut **lock(&shared.store));
    let mut answers = Vec::new();
    {
        let mut store = lock(&shared.store);
        for q in engine.runtime().questions() {
            let Ok(rows) = store.questions(&q.key) else {
                continue;
            };
            let id = q.id.to_string();
            match rows.into_iter().find(|r| r.id == id) {
                Some(row) => {
                    if let Some(answer) = row.answer {
                        answers.push((q.id, answer));
                    }
                }
                None => {
                    let question = NewQuestion {
                        id,
                        session_id: q.key.to_string(),
                        question: q.text.to_string(),
                        context: None,
                    };
                    if let Err(e) = store.ask(&question, wall_ms()) {
                        tracing::error!(error = %e, "a question could not be stored again");
                    }
                }
            }
        }
    }
    for (question, answer) in answers {
        tracing::info!(%question, "an acknowledged answer is given again after a restart");
        engine.runtime_mut().answer(question, answer);
    }
}

/// After a restart, the store is made to agree with the runtime's persisted state on every
/// session: one the runtime started before the service stopped but the store never heard of is
/// stored (running), and one whose agent ended it, or whose question failed it, is ended in the
/// store with the same outcome. The runtime persists before the store is told, so the store can
/// only be behind it.
fn reconcile_sessions(engine: &Engine, store: &mut (dyn QuestionStore + Send)) {
    let now = wall_ms();
    for s in engine.runtime().async_sessions() {
        let id = s.id.to_string();
        let status = match store.session(&id) {
            Ok(Some(row)) => row.status,
            Ok(None) => {
                if let Err(e) = store.create_session(&id, &s.agent.name, &s.payload, now) {
                    tracing::error!(session = %id, error = %e, "a session could not be stored again");
                    continue;
                }
                tracing::info!(session = %id, "a session the store never heard of is stored after a restart");
                SessionStatus::Running
            }
            Err(e) => {
                tracing::error!(session = %id, error = %e, "a session could not be read");
                continue;
            }
        };
        if status.is_terminal() {
            continue;
        }
        let outcome = match (&s.outcome, s.failed) {
            (_, true) => Some(SessionStatus::Failed),
            (Some((true, _)), false) => Some(SessionStatus::Completed),
            (Some((false, _)), false) => Some(SessionStatus::Failed),
            (None, false) => None,
        };
        let Some(to) = outcome else {
            continue;
        };
        let mut ended = || -> Result<(), StoreError> {
            if let Some((_, result)) = &s.outcome {
                let state = json!({ "result": &**result }).to_string();
                store.save_state(&id, &state, now)?;
            }
            if to == SessionStatus::Completed && status == SessionStatus::PendingInput {
                store.transition(&id, SessionStatus::Running, now)?;
            }
            store.transition(&id, to, now)
        };
        match ended() {
            Ok(()) => {
                tracing::info!(session = %id, status = %to, "a session's end is stored after a restart")
            }
            Err(e) => {
                tracing::error!(session = %id, error = %e, "a session's end could not be stored")
            }
        }
    }
}

fn fail(shared: &Shared, e: &str) {
    tracing::error!(error = %e, "the engine stopped");
    *lock(&shared.failure) = Some(e.to_owned());
    let _ = shared.stop.send(true);
}

fn apply(engine: &mut Engine, command: Command, shared: &Shared) {
    match command {
        Command::Message { key, text } => {
            lock(&shared.sent).entry(key.to_string()).or_default();
            engine.handle(Input::User { key, text });
        }
        Command::Intervene {
            agent,
            intervention,
            reply,
        } => {
            let outcome = engine.runtime_mut().intervene(agent, intervention);
            let _ = reply.send(outcome);
        }
        Command::Answer { question, text } => {
            engine.runtime_mut().answer(question, text);
        }
        Command::Trigger { .. } => unreachable!("the engine's task runs triggers itself"),
        Command::Tree(reply) => {
            let _ = reply.send(engine.runtime().tree());
        }
        Command::Agent(id, reply) => {
            let _ = reply.send(engine.runtime().agent(id));
        }
        Command::Idle(key, reply) => {
            let stacks = engine.runtime().stacks();
            let idle = stacks
                .slot(&key)
                .is_none_or(|slot| !stacks.busy(slot) && stacks.entry(slot).inbox.is_empty());
            let _ = reply.send(idle);
        }
    }
}

/// Publishes what the runtime sends out: text for a user is kept with its conversation and
/// broadcast as a `message`; a stream event is broadcast under its type.
fn publish(shared: &Shared, effect: &Effect) {
    match effect {
        Effect::Send { key, text, .. } => {
            lock(&shared.sent)
                .entry(key.to_string())
                .or_default()
                .push(text.to_string());
            let data = json!({ "key": &**key, "text": &**text });
            let _ = shared.events.send(("message".to_owned(), data));
        }
        Effect::Session(op) => {
            if let Err(e) =
                crate::store::questions::record(&mut **lock(&shared.store), op, wall_ms())
            {
                // The runtime told the store something its lifecycle refuses: a runtime bug,
                // reported, never applied.
                tracing::error!(error = %e, "the session store refused an operation");
                return;
            }
            if let crate::protocol::SessionOp::Asked {
                session,
                question,
                text,
                context,
                agent,
                callback: Some(url),
            } = &**op
            {
                let body = crate::agents::session::callback_body(
                    *session,
                    agent,
                    *question,
                    text,
                    context.as_deref(),
                    &shared.callbacks.public_url,
                );
                shared.callbacks.send(url, *session, body);
            }
        }
        Effect::Stream { key, event } => {
            let mut data = serde_json::to_value(event).unwrap_or(Value::Null);
            let kind = data
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("stream")
                .replace('_', "-");
            if let Value::Object(map) = &mut data {
                map.insert("key".to_owned(), json!(&**key));
            }
            let _ = shared.events.send((kind, data));
        }
        _ => {}
    }
}

/// A JSON error: `{"ok": false, "error": ...}` with its status.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "ok": false, "error": self.1 }))).into_response()
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError(status, message.into())
}

/// `Err` with a 401 unless the request carries the configured bearer token.
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &shared.token else {
        return Ok(());
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(token.as_str()) {
        Ok(())
    } else {
        Err(error(StatusCode::UNAUTHORIZED, "unauthorized"))
    }
}

/// A request's JSON body as `T`: 413 over the limit, 400 for what is not JSON or not a `T`.
fn body<T: serde::de::DeserializeOwned>(
    bytes: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = bytes.map_err(|r| {
        let status = r.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the request body is larger than the server's limit".to_owned()
        } else {
            r.body_text()
        };
        error(status, message)
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )
    })?;
    serde_json::from_value(value).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            format!("the body is not what this endpoint takes: {e}"),
        )
    })
}

fn agent_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| {
        error(
            StatusCode::BAD_REQUEST,
            format!("'{text}' is not an agent id (a uuid)"),
        )
    })
}

/// Asks the engine's task; a 503 if it stopped.
async fn ask<T>(
    shared: &Shared,
    make: impl FnOnce(oneshot::Sender<T>) -> Command,
) -> Result<T, ApiError> {
    let (tx, rx) = oneshot::channel();
    let gone = || error(StatusCode::SERVICE_UNAVAILABLE, "the runtime has stopped");
    shared.commands.send(make(tx)).map_err(|_| gone())?;
    rx.await.map_err(|_| gone())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    text: String,
}

async fn message(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = || -> Result<Response, ApiError> {
        authorize(&shared, &headers)?;
        let MessageBody { text } = body(bytes)?;
        if key.trim().is_empty() {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "a conversation key cannot be empty",
            ));
        }
        let command = Command::Message {
            key: key.as_str().into(),
            text: text.into(),
        };
        shared
            .commands
            .send(command)
            .map_err(|_| error(StatusCode::SERVICE_UNAVAILABLE, "the runtime has stopped"))?;
        let reply = json!({ "ok": true, "status": "queued", "key": key });
        Ok((StatusCode::ACCEPTED, axum::Json(reply)).into_response())
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

async fn conversation(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Response {
    if let Err(e) = authorize(&shared, &headers) {
        return e.into_response();
    }
    let Some(sent) = lock(&shared.sent).get(&key).cloned() else {
        let message = format!("conversation not found: {key}");
        return error(StatusCode::NOT_FOUND, message).into_response();
    };
    let idle = match ask(&shared, |tx| Command::Idle(key.as_str().into(), tx)).await {
        Ok(idle) => idle,
        Err(e) => return e.into_response(),
    };
    axum::Json(json!({ "key": key, "sent": sent, "idle": idle })).into_response()
}

async fn tree(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&shared, &headers) {
        return e.into_response();
    }
    match ask(&shared, Command::Tree).await {
        Ok(nodes) => axum::Json(nodes).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn agent(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let run = async {
        authorize(&shared, &headers)?;
        let id = agent_id(&id)?;
        match ask(&shared, |tx| Command::Agent(id, tx)).await? {
            Some(node) => Ok(axum::Json(node).into_response()),
            None => Err(error(
                StatusCode::NOT_FOUND,
                format!("agent not found: {id}"),
            )),
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InterventionBody {
    #[serde(default)]
    user_comment: Option<String>,
    #[serde(default)]
    user_content: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

async fn intervene(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        authorize(&shared, &headers)?;
        let id = agent_id(&id)?;
        let b: InterventionBody = body(bytes)?;
        let status = match b.status.as_deref() {
            None => None,
            Some(s) => Some(Status::parse(s).ok_or_else(|| {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("'{s}' is not a status (running, awaiting_user, completed, error, deleted, modified)"),
                )
            })?),
        };
        let intervention = Intervention {
            user_comment: b.user_comment.map(Into::into),
            user_content: b.user_content.map(Into::into),
            status,
        };
        let outcome = ask(&shared, |reply| Command::Intervene {
            agent: id,
            intervention,
            reply,
        })
        .await?;
        Ok(match outcome {
            InterventionOutcome::Accepted => {
                axum::Json(json!({ "ok": true, "outcome": "accepted" })).into_response()
            }
            InterventionOutcome::NotFound => {
                let body = json!({ "ok": false, "outcome": "not_found", "error": format!("agent not found: {id}") });
                (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
            }
            InterventionOutcome::Refused { reason } => {
                let body = json!({ "ok": false, "outcome": "refused", "error": reason });
                (StatusCode::CONFLICT, axum::Json(body)).into_response()
            }
        })
    };
    run.await.unwrap_or_else(|e: ApiError| e.into_response())
}

async fn stream(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&shared, &headers) {
        return e.into_response();
    }
    let events = shared.events.subscribe();
    // The stream ends when the server stops, so that a graceful shutdown does not wait on it.
    let stop = shared.stop.subscribe();
    let items = futures_util::stream::unfold(events, move |mut events| {
        let mut stop = stop.clone();
        async move {
            let event = tokio::select! {
                got = events.recv() => match got {
                    Ok((kind, data)) => SseEvent::default().event(kind).data(data.to_string()),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        // A slow reader missed events: it is told how many.
                        let data = json!({ "missed": n }).to_string();
                        SseEvent::default().event("lagged").data(data)
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = stop.wait_for(|s| *s) => return None,
            };
            Some((Ok::<_, std::convert::Infallible>(event), events))
        }
    });
    Sse::new(items)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn webhook(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(agent): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = async {
        authorize(&shared, &headers)?;
        if bytes.as_ref().is_ok_and(|b| b.is_empty()) {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "the webhook's body is empty",
            ));
        }
        let payload: Value = body(bytes)?;
        let id = ask(&shared, |reply| Command::Trigger {
            agent: agent.clone(),
            payload,
            reply,
        })
        .await?
        .ok_or_else(|| error(StatusCode::NOT_FOUND, format!("agent not found: {agent}")))?;
        let reply = json!({ "ok": true, "status": "accepted", "agent": agent, "session_id": id.to_string() });
        Ok(axum::Json(reply).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
struct QuestionsQuery {
    #[serde(default)]
    status: Option<String>,
}

async fn pending_questions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    query: Result<axum::extract::Query<QuestionsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let run = || -> Result<Response, ApiError> {
        authorize(&shared, &headers)?;
        let query = query.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
        if let Some(status) = query.status.as_deref().filter(|s| *s != "pending") {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("status={status}: only pending questions are listed"),
            ));
        }
        let pending = lock(&shared.store)
            .pending()
            .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        let questions: Vec<Value> = pending
            .into_iter()
            .map(|p| {
                let context = p
                    .question
                    .context
                    .as_deref()
                    .and_then(|c| serde_json::from_str::<Value>(c).ok())
                    .unwrap_or(Value::Null);
                json!({
                    "id": p.question.id,
                    "session_id": p.question.session_id,
                    "agent_name": p.agent_name,
                    "question": p.question.question,
                    "context": context,
                    "asked_at": timestamp(p.question.created_at),
                })
            })
            .collect();
        Ok(axum::Json(json!({ "questions": questions })).into_response())
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
struct AnswerBody {
    question_id: String,
    answer: String,
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(session): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = || -> Result<Response, ApiError> {
        authorize(&shared, &headers)?;
        let b: AnswerBody = body(bytes)?;
        let not_found = |what: String| error(StatusCode::NOT_FOUND, what);
        let question = Uuid::parse_str(&b.question_id)
            .map_err(|_| not_found(format!("question {} of session {session}", b.question_id)))?;
        // The first answer is committed before anyone hears of it; the runtime is told after.
        let outcome = lock(&shared.store).answer(&session, &b.question_id, &b.answer, wall_ms());
        match outcome {
            Ok(Answered::Resumed) => {
                let command = Command::Answer {
                    question,
                    text: b.answer.as_str().into(),
                };
                shared.commands.send(command).map_err(|_| {
                    error(StatusCode::SERVICE_UNAVAILABLE, "the runtime has stopped")
                })?;
                let reply = json!({ "ok": true, "status": "resumed", "session_id": session });
                Ok(axum::Json(reply).into_response())
            }
            Ok(Answered::DuplicateIgnored) => {
                let reply = json!({ "ok": true, "status": "duplicate_ignored" });
                Ok(axum::Json(reply).into_response())
            }
            Err(StoreError::NotFound(what)) => Err(not_found(format!("not found: {what}"))),
            Err(e @ StoreError::Illegal { .. }) => Err(error(StatusCode::CONFLICT, e.to_string())),
            Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        }
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

/// A session's result as seed 003 reads it (B10): none is `{"error":"no_result"}`; a JSON object
/// text is that object; other JSON is `{"result": v}`; other text is `{"raw_result": s}`.
fn coerce_result(result: Option<&str>) -> Value {
    let Some(text) = result else {
        return json!({ "error": "no_result" });
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(other) => json!({ "result": other }),
        Err(_) => json!({ "raw_result": text }),
    }
}

async fn session(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(session): Path<String>,
) -> Response {
    let run = || -> Result<Response, ApiError> {
        authorize(&shared, &headers)?;
        let internal = |e: StoreError| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        let store = lock(&shared.store);
        let row = store.session(&session).map_err(internal)?.ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                format!("session not found: {session}"),
            )
        })?;
        let asked = store.questions(&session).map_err(internal)?.len();
        let ended = row.status.is_terminal();
        let text = row.result();
        let result = match (row.status, text) {
            (SessionStatus::Completed, text) => coerce_result(text.as_deref()),
            _ => Value::Null,
        };
        Ok(axum::Json(json!({
            "id": row.id,
            "agent_name": row.agent_name,
            "status": row.status.as_str(),
            "result": result,
            "questions_asked": asked,
            "created_at": timestamp(row.created_at),
            "completed_at": ended.then(|| timestamp(row.updated_at)),
        }))
        .into_response())
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

async fn unknown(method: Method, uri: Uri) -> ApiError {
    error(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {method} {}", uri.path()),
    )
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {method}", uri.path()),
    )
}
