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
//! - `POST /webhook/{agent}` (seed 003): a session of the agent on the body as its payload; its id
//!   (a request with an `Idempotency-Key` or `X-Event-Id` seen before: the first's session);
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
//! field or has a wrong type, or a `Host` not the service's, 401 without the bearer token when one
//! is configured, 403 for a foreign `Origin`, 404 for an unknown path, agent or conversation, 405
//! for a wrong method, 408 for a body slower than its deadline, 413 over the body limit, 415 for a
//! POST that is not JSON, 503 over the connection limit (`http_guard.rs`, `listen.rs`). The
//! server stops gracefully on [`Running::stop`] (the CLI: Ctrl-C or SIGTERM), within its
//! shutdown deadline.
//!
//! This file holds the service's start and what its parts share; the handlers are `api.rs`, the
//! engine's task `engine.rs`, the event stream's ids and buffer `events.rs`, the connections
//! (deadlines, limit, shutdown) `listen.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use crate::agents::tree::{Intervention, InterventionOutcome, Node};
use crate::drive::tokio_driver::{Backend, Engine, Setup};
use crate::store::questions::QuestionStore;

/// The store of async sessions a service keeps (SQLite with `--db`, else memory).
pub type Store = Box<dyn QuestionStore + Send>;

mod api;
#[cfg(feature = "sqlite")]
pub mod bench;
mod callbacks;
mod ended;
mod engine;
mod events;
mod keys;
mod listen;

use api::{
    agent, answer, conversation, intervene, message, pending_questions, session, stream, tree,
    unknown, webhook, wrong_method,
};
use engine::{reconcile, run_engine};

pub use callbacks::{answer_token, signature, IDEMPOTENCY_HEADER, SIGNATURE_HEADER};
pub use events::DEFAULT_EVENT_BUFFER;

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
    /// How many of the newest events `GET /agent/stream` keeps for readers that reconnect
    /// (`Last-Event-ID`) or fall behind.
    pub event_buffer: usize,
    /// Host names the service answers to besides loopback names and its own address (in `Host`
    /// and `Origin`); `*` allows any.
    pub allow_hosts: Vec<String>,
    /// Listen on an address other than loopback without a token (refused otherwise).
    pub insecure_no_token: bool,
    /// How long a request's headers may take to arrive; then the connection is closed.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive once its headers did; then 408.
    pub body_timeout: Duration,
    /// How many connections may be open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// How long a graceful stop waits for the requests in flight before it closes what is left.
    pub shutdown_timeout: Duration,
    /// The secret that signs every question callback (HMAC-SHA256 of the body, in
    /// [`SIGNATURE_HEADER`]); `None`: unsigned.
    pub callback_secret: Option<String>,
    /// End as `failed` the store's open sessions that the runtime does not hold (nothing could
    /// resume them); without it such sessions refuse the start.
    pub abandon_sessions: bool,
    /// The secret answer tokens are made with (see [`answer_token`]); `None`: derived from
    /// `token`, and no tokens without one.
    pub answer_secret: Option<String>,
    /// How long an ended session (completed or failed, expired ones included) is kept after it
    /// ended; then it is deleted with its questions. `None`: kept for ever.
    pub retention: Option<Duration>,
}

/// How long a request's headers may take by default.
pub(crate) const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's body may take by default.
pub(crate) const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many connections may be open at once by default; lowered at start when the process's
/// open-file limit leaves room for fewer.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// How long a graceful stop waits for the requests in flight by default.
pub(crate) const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Options {
    /// A free loopback port, no token, the default limits, in memory.
    fn default() -> Options {
        Options {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            body_limit: DEFAULT_BODY_LIMIT,
            state_dir: None,
            public_url: None,
            event_buffer: DEFAULT_EVENT_BUFFER,
            allow_hosts: Vec::new(),
            insecure_no_token: false,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            callback_secret: None,
            abandon_sessions: false,
            retention: None,
            answer_secret: None,
        }
    }
}

/// The wall clock in ms since the epoch: the service's store keeps real times.
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Deletes the sessions that ended more than `retention` ago, with their questions (and, with
/// `--state` alone, their lines beside the state).
fn sweep(shared: &Shared, retention: Duration, state_dir: Option<&std::path::Path>) {
    let before = wall_ms().saturating_sub(retention.as_millis() as u64);
    let mut store = lock(&shared.store);
    let gone = match store.purge_ended(before) {
        Ok(0) => return,
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "expired sessions could not be deleted");
            return;
        }
    };
    if let (Some(file), Some(dir)) = (lock(&shared.ended_file).as_mut(), state_dir) {
        if let Err(e) = file.rewrite(dir, &**store) {
            tracing::error!(error = %e, "the ended sessions beside the state could not be rewritten");
        }
    }
    tracing::info!(
        sessions = gone,
        "sessions past the retention deleted with their questions"
    );
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
        /// The request's idempotency key, if it gave one.
        key: Option<String>,
        reply: oneshot::Sender<Triggered>,
    },
    Answer {
        question: Uuid,
        text: Arc<str>,
    },
    Tree(oneshot::Sender<Vec<Node>>),
    Agent(Uuid, oneshot::Sender<Option<Node>>),
    Idle(Arc<str>, oneshot::Sender<bool>),
}

/// What a webhook's trigger did.
enum Triggered {
    /// A new session started.
    Started(Uuid),
    /// The idempotency key had started this session already: nothing new started.
    Replayed(String),
    /// No agent of that name.
    NoAgent,
    /// The store could not be read.
    Failed(String),
}

/// What the handlers share.
struct Shared {
    commands: mpsc::UnboundedSender<Command>,
    token: Option<String>,
    /// The event stream's ids and its buffer of the newest events.
    events: Arc<events::EventLog>,
    /// The text each conversation was sent, in order.
    sent: Mutex<BTreeMap<String, Vec<String>>>,
    stop: watch::Sender<bool>,
    /// Why the engine stopped, if it did.
    failure: Mutex<Option<String>>,
    /// The store of async sessions (seed 003).
    store: Mutex<Store>,
    /// Where questions' callbacks come from.
    callbacks: callbacks::CallbackSender,
    /// The webhooks' idempotency keys beside `--state` when the store forgets them at a restart.
    key_file: Mutex<Option<keys::KeyFile>>,
    /// The ended sessions beside `--state` when the store forgets them at a restart.
    ended_file: Mutex<Option<ended::EndedFile>>,
    /// Where the runtime persists (absolute), if it does: named in waiting sessions'
    /// `execution_state`.
    state_dir: Option<std::path::PathBuf>,
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
    mut backend: Backend,
    store: Store,
    options: Options,
) -> std::io::Result<Running> {
    if !options.addr.ip().is_loopback() && options.token.is_none() && !options.insecure_no_token {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "refusing to listen on {} without a token: anyone who reaches that address could drive the service (and spend its model's key). Give --token T (or AGENTSIM_TOKEN), listen on loopback, or say --insecure-no-token",
                options.addr
            ),
        ));
    }
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", options.addr))
        })?;
    let addr = listener.local_addr()?;
    let (commands, rx) = mpsc::unbounded_channel();
    let events = Arc::new(events::EventLog::new(wall_ms(), options.event_buffer));
    let (stop, _) = watch::channel(false);
    let answer_key =
        callbacks::answer_key(options.answer_secret.as_deref(), options.token.as_deref());
    let shared = Arc::new(Shared {
        commands,
        token: options.token,
        events,
        sent: Mutex::new(BTreeMap::new()),
        stop,
        failure: Mutex::new(None),
        store: Mutex::new(store),
        key_file: Mutex::new(None),
        ended_file: Mutex::new(None),
        state_dir: options
            .state_dir
            .as_deref()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_owned())),
        callbacks: callbacks::CallbackSender {
            client: reqwest::Client::new(),
            policy: setup.config.callbacks.policy,
            secret: options
                .callback_secret
                .as_deref()
                .map(|s| Arc::from(s.as_bytes())),
            answer_key,
            public_url: options
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{addr}")),
        },
    });
    let mut engine = match &options.state_dir {
        None => Engine::at_wall_clock(&setup, true, wall_ms()),
        Some(dir) => {
            let files = crate::store::FileStore::new(dir).map_err(|e| {
                std::io::Error::new(e.kind(), format!("--state {}: {e}", dir.display()))
            })?;
            Engine::with_files(&setup, true, files, wall_ms()).map_err(std::io::Error::other)?
        }
    };
    engine
        .resume_scripts(&mut backend)
        .map_err(std::io::Error::other)?;
    if let Some(dir) = &options.state_dir {
        let mut store = lock(&shared.store);
        if !store.durable() {
            let file = keys::KeyFile::open(dir, &mut **store).map_err(|e| {
                let path = dir.join(keys::FILE);
                std::io::Error::new(e.kind(), format!("--state {}: {e}", path.display()))
            })?;
            *lock(&shared.key_file) = Some(file);
            let file = ended::EndedFile::open(dir, &mut **store).map_err(|e| {
                let path = dir.join(ended::FILE);
                std::io::Error::new(e.kind(), format!("--state {}: {e}", path.display()))
            })?;
            *lock(&shared.ended_file) = Some(file);
        }
    }
    engine::settle_orphans(
        &engine,
        &mut **lock(&shared.store),
        options.abandon_sessions,
    )
    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    reconcile(&mut engine, &shared);
    if let Some(retention) = options.retention {
        // Sessions past their time go before the first request, then every so often.
        sweep(&shared, retention, options.state_dir.as_deref());
        let (shared, dir) = (shared.clone(), options.state_dir.clone());
        let every = (retention / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
        let mut stop = shared.stop.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(every) => sweep(&shared, retention, dir.as_deref()),
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
    }
    callbacks::resend_outbox(&shared);
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
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(api::Gate {
                guard: crate::http_guard::Guard::new(addr, &options.allow_hosts),
                body_limit: options.body_limit,
                body_timeout: options.body_timeout,
            }),
            api::gate,
        ))
        .with_state(shared.clone());
    let limits = listen::Limits {
        header_timeout: options.header_timeout,
        max_connections: listen::fit_to_file_limit(options.max_connections.max(1)),
        shutdown_timeout: options.shutdown_timeout,
    };
    let server = tokio::spawn(listen::serve(
        listener,
        app,
        limits,
        shared.stop.subscribe(),
    ));
    Ok(Running {
        addr,
        shared,
        server,
        engine,
    })
}
