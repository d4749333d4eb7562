//! The HTTP API: one handler per endpoint (see the module's list), each authorized, its body
//! read, and its question put to the engine's task or the store; every error JSON.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::agents::tree::{Intervention, InterventionOutcome, Status};
use crate::store::questions::{iso_timestamp, Answered, SessionStatus, StoreError};

use super::{lock, wall_ms, Command, Shared, Triggered};

/// A JSON error: `{"ok": false, "error": ...}` with its status.
pub(super) struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "ok": false, "error": self.1 }))).into_response()
    }
}

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError(status, message.into())
}

/// What every request passes before its handler: the `http_guard::Guard` (the right
/// `Host`, no foreign `Origin`, JSON POSTs) and its body read whole within the body's deadline
/// and limit.
pub(super) struct Gate {
    pub(super) guard: crate::http_guard::Guard,
    pub(super) body_limit: usize,
    pub(super) body_timeout: std::time::Duration,
}

/// Lets in only what the [`Gate`] allows: 400, 403 or 415 from the guard, 413 over the body
/// limit, 408 for a body that did not arrive in time; the handler gets the body read.
pub(super) async fn gate(
    State(gate): State<Arc<Gate>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use futures_util::StreamExt as _;
    // A webhook takes any body, as the seed's does; every other POST is JSON.
    let checked = if request.uri().path().starts_with("/webhook/") {
        gate.guard
            .check_any_body(request.method(), request.headers())
    } else {
        gate.guard.check(request.method(), request.headers())
    };
    if let Err((status, message)) = checked {
        return error(status, message).into_response();
    }
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is larger than the server's limit",
        )
    };
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > gate.body_limit as u64) {
        return too_large().into_response();
    }
    let (parts, body) = request.into_parts();
    let read = async {
        let mut stream = body.into_data_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                error(
                    StatusCode::BAD_REQUEST,
                    format!("the request body could not be read: {e}"),
                )
            })?;
            if bytes.len() + chunk.len() > gate.body_limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    match tokio::time::timeout(gate.body_timeout, read).await {
        Ok(Ok(bytes)) => {
            let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
            next.run(request).await
        }
        Ok(Err(e)) => e.into_response(),
        Err(_) => error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} ms (--body-timeout)",
                gate.body_timeout.as_millis()
            ),
        )
        .into_response(),
    }
}

/// `Err` with a 401 unless the request carries the configured bearer token.
pub(super) fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
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
pub(super) fn body<T: serde::de::DeserializeOwned>(
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

pub(super) fn agent_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| {
        error(
            StatusCode::BAD_REQUEST,
            format!("'{text}' is not an agent id (a uuid)"),
        )
    })
}

/// Asks the engine's task; a 503 if it stopped.
pub(super) async fn ask<T>(
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
pub(super) struct MessageBody {
    text: String,
}

pub(super) async fn message(
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

pub(super) async fn conversation(
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

pub(super) async fn tree(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&shared, &headers) {
        return e.into_response();
    }
    match ask(&shared, Command::Tree).await {
        Ok(nodes) => axum::Json(nodes.iter().map(node_json).collect::<Vec<_>>()).into_response(),
        Err(e) => e.into_response(),
    }
}

/// An agent as the API shows it: its `created_at` in ISO 8601 UTC (the runtime's time is the
/// wall clock's ms).
fn node_json(node: &crate::agents::tree::Node) -> Value {
    let mut v = serde_json::to_value(node).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.insert(
            "created_at".to_owned(),
            iso_timestamp(node.created_at).into(),
        );
    }
    v
}

pub(super) async fn agent(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let run = async {
        authorize(&shared, &headers)?;
        let id = agent_id(&id)?;
        match ask(&shared, |tx| Command::Agent(id, tx)).await? {
            Some(node) => Ok(axum::Json(node_json(&node)).into_response()),
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
pub(super) struct InterventionBody {
    #[serde(default, alias = "userComment")]
    user_comment: Option<String>,
    #[serde(default, alias = "userContent")]
    user_content: Option<String>,
    #[serde(default)]
    status: Option<String>,
}

pub(super) async fn intervene(
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

pub(super) async fn stream(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&shared, &headers) {
        return e.into_response();
    }
    let last = headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let start = shared.events.start(last.as_deref());
    // The stream ends when the server stops, so that a graceful shutdown does not wait on it.
    let items = shared.events.reader(start, shared.stop.subscribe());
    Sse::new(items)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The longest idempotency key taken, in bytes.
const MAX_KEY_LEN: usize = 256;

/// A webhook's idempotency key: its `Idempotency-Key` header, else its `X-Event-Id`; 400 for
/// one that is empty, too long or not visible ASCII.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some((name, value)) = ["idempotency-key", "x-event-id"]
        .into_iter()
        .find_map(|name| Some((name, headers.get(name)?)))
    else {
        return Ok(None);
    };
    let bad = |why: &str| error(StatusCode::BAD_REQUEST, format!("the {name} header {why}"));
    let key = value
        .to_str()
        .map_err(|_| bad("is not visible ASCII"))?
        .trim();
    if key.is_empty() {
        return Err(bad("is empty"));
    }
    if key.len() > MAX_KEY_LEN || key.chars().any(|c| c.is_ascii_control()) {
        return Err(bad(&format!(
            "is longer than {MAX_KEY_LEN} bytes or holds control characters"
        )));
    }
    Ok(Some(key.to_owned()))
}

/// The envelope of a webhook request: its content type, its headers (secrets redacted) and its
/// body, as JSON when it is JSON and base64 otherwise.
fn webhook_envelope(agent: &str, headers: &HeaderMap, body: &[u8]) -> Value {
    use crate::agents::session::{envelope_of, WebhookRequest};
    let mut list: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    list.sort();
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .map_or(String::new(), |v| {
            String::from_utf8_lossy(v.as_bytes()).into_owned()
        });
    envelope_of(
        agent,
        &WebhookRequest {
            content_type,
            headers: list,
            body: body.to_vec(),
        },
    )
}

pub(super) async fn webhook(
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
        let bytes = bytes.map_err(|r| {
            let status = r.status();
            let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "the request body is larger than the server's limit".to_owned()
            } else {
                r.body_text()
            };
            error(status, message)
        })?;
        let payload = webhook_envelope(&agent, &headers, &bytes);
        let key = idempotency_key(&headers)?;
        let triggered = ask(&shared, |reply| Command::Trigger {
            agent: agent.clone(),
            payload,
            key: key.map(|k| format!("{agent}\n{k}")),
            reply,
        })
        .await?;
        match triggered {
            Triggered::Started(id) => {
                let reply = json!({ "ok": true, "status": "accepted", "agent": agent, "session_id": id.to_string() });
                Ok(axum::Json(reply).into_response())
            }
            Triggered::Replayed(session) => {
                let internal =
                    |e: StoreError| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
                let status = lock(&shared.store)
                    .session(&session)
                    .map_err(internal)?
                    .map(|row| row.status.as_str());
                let reply = json!({
                    "ok": true,
                    "status": "accepted",
                    "agent": agent,
                    "session_id": session,
                    "session_status": status,
                    "replayed": true,
                });
                let mut response = axum::Json(reply).into_response();
                response
                    .headers_mut()
                    .insert("idempotent-replayed", HeaderValue::from_static("true"));
                Ok(response)
            }
            Triggered::NoAgent => Err(error(
                StatusCode::NOT_FOUND,
                format!("agent not found: {agent}"),
            )),
            Triggered::Failed(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e)),
        }
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct QuestionsQuery {
    #[serde(default)]
    status: Option<String>,
    /// At most this many questions (a page).
    #[serde(default)]
    limit: Option<usize>,
    /// The `next` of the page before: the questions after it.
    #[serde(default)]
    after: Option<String>,
}

/// The most questions a page holds.
const PAGE_MAX: usize = 1000;

pub(super) async fn pending_questions(
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
        let mut pending = lock(&shared.store)
            .pending()
            .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        // Pages in creation order (ties by id); a cursor is the last question's time and id,
        // so that a page starts where the last ended whatever was answered meanwhile.
        let at = |q: &crate::store::questions::QuestionRow| (q.created_at, q.id.clone());
        pending.sort_by_key(|p| at(&p.question));
        if let Some(after) = &query.after {
            let cursor = after
                .split_once('.')
                .and_then(|(ms, id)| Some((ms.parse::<u64>().ok()?, id.to_owned())))
                .ok_or_else(|| {
                    error(
                        StatusCode::BAD_REQUEST,
                        format!("after={after}: not a cursor this service gave (a page's `next`)"),
                    )
                })?;
            pending.retain(|p| at(&p.question) > cursor);
        }
        let limit = match query.limit {
            None => None,
            Some(n @ 1..=PAGE_MAX) => Some(n),
            Some(n) => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    format!("limit={n}: a page holds 1 to {PAGE_MAX} questions"),
                ))
            }
        };
        let next = match limit {
            Some(n) if pending.len() > n => {
                pending.truncate(n);
                pending
                    .last()
                    .map(|p| format!("{}.{}", p.question.created_at, p.question.id))
            }
            _ => None,
        };
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
                    "asked_at": iso_timestamp(p.question.created_at),
                })
            })
            .collect();
        let mut reply = json!({ "questions": questions });
        if limit.is_some() {
            reply["next"] = next.map_or(Value::Null, Value::from);
        }
        Ok(axum::Json(reply).into_response())
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerBody {
    question_id: String,
    answer: String,
}

pub(super) async fn answer(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(session): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let run = || -> Result<Response, ApiError> {
        // The service's token, or the question's own answer token (from its callback), which
        // answers that question of that session and nothing else.
        let authorized = authorize(&shared, &headers);
        let b: AnswerBody = match authorized {
            Ok(()) => body(bytes)?,
            Err(unauthorized) => {
                let key = shared.callbacks.answer_key.clone().ok_or(unauthorized)?;
                let given = headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default()
                    .to_owned();
                let b: AnswerBody = body(bytes)?;
                if !super::callbacks::answers(&key, &session, &b.question_id, &given) {
                    return Err(error(StatusCode::UNAUTHORIZED, "unauthorized"));
                }
                b
            }
        };
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
            Err(StoreError::NotFound(what)) => {
                // A session a restart abandoned is gone for good, and says why.
                let abandoned = lock(&shared.store)
                    .session(&session)
                    .ok()
                    .flatten()
                    .and_then(|row| row.abandoned());
                match abandoned {
                    Some(reason) => Err(error(
                        StatusCode::GONE,
                        format!("session {session} was abandoned: {reason}"),
                    )),
                    None => Err(not_found(format!("not found: {what}"))),
                }
            }
            Err(e @ StoreError::Illegal { .. }) => Err(error(StatusCode::CONFLICT, e.to_string())),
            Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        }
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

/// A session's result as seed 003 reads it (B10): none is `{"error":"no_result"}`; a JSON object
/// text is that object; other JSON is `{"result": v}`; other text is `{"raw_result": s}`.
pub(super) fn coerce_result(result: Option<&str>) -> Value {
    let Some(text) = result else {
        return json!({ "error": "no_result" });
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(other) => json!({ "result": other }),
        Err(_) => json!({ "raw_result": text }),
    }
}

pub(super) async fn session(
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
            "created_at": iso_timestamp(row.created_at),
            "completed_at": ended.then(|| iso_timestamp(row.updated_at)),
        }))
        .into_response())
    };
    run().unwrap_or_else(IntoResponse::into_response)
}

pub(super) async fn unknown(method: Method, uri: Uri) -> ApiError {
    error(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {method} {}", uri.path()),
    )
}

pub(super) async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {method}", uri.path()),
    )
}
