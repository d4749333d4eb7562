//! The engine's task: the one owner of the [`Engine`] (and so of the runtime). It takes the
//! handlers' commands and its own tasks' outcomes, applies the effects each leads to, publishes
//! what the conversations were sent and the stream events, tells the store of async sessions what
//! the runtime did, and at a start reconciles the store with a restored runtime.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::drive::tokio_driver::{Backend, Engine};
use crate::protocol::{Effect, Input};
use crate::store::questions::{NewQuestion, QuestionStore, SessionStatus, StoreError};

use super::{lock, wall_ms, Command, Shared, Triggered};

/// The engine's task: commands from the handlers and outcomes of its own tasks, each followed by
/// the effects it leads to, until the server stops.
pub(super) async fn run_engine(
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
    // The state written, the journal keeps only what it needs (sessions a start forgot go).
    match engine.compact_journal(0) {
        Ok(Some((before, after))) if before != after => {
            tracing::info!(
                before,
                after,
                "the runtime's journal lost the lines of ended sessions"
            )
        }
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "the runtime's journal could not be compacted"),
    }
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Trigger { agent, payload, key, reply }) => {
                    // One task runs every trigger, so that two requests with one key cannot
                    // both start a session.
                    match key.as_deref().map(|k| replayed(&shared, k)).transpose() {
                        Ok(Some(Some(session))) => {
                            let _ = reply.send(Triggered::Replayed(session));
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            let _ = reply.send(Triggered::Failed(e.to_string()));
                            continue;
                        }
                    }
                    // The session is in the store before the caller hears of it, and so is
                    // its key.
                    // `payload` is the request's whole envelope (`api::webhook_envelope`).
                    let id = engine.runtime_mut().trigger_envelope(&agent, &payload);
                    let published = engine.pump(&mut backend, |effect| publish(&shared, effect));
                    let triggered = match (id, key) {
                        (None, _) => Triggered::NoAgent,
                        (Some(id), None) => Triggered::Started(id),
                        (Some(id), Some(key)) => {
                            let session = id.to_string();
                            let remembered = lock(&shared.store)
                                .remember_key(&key, &session, wall_ms())
                                .map_err(|e| e.to_string())
                                .and_then(|()| match lock(&shared.key_file).as_mut() {
                                    Some(file) => file.append(&key, &session).map_err(|e| e.to_string()),
                                    None => Ok(()),
                                });
                            match remembered {
                                Ok(()) => Triggered::Started(id),
                                Err(e) => {
                                    tracing::error!(%session, error = %e, "a webhook's idempotency key could not be stored");
                                    Triggered::Failed(e)
                                }
                            }
                        }
                    };
                    let _ = reply.send(triggered);
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
        if forget_ended(&mut engine, &shared) {
            // The state without them is written, and the journal loses their lines now and
            // then (when it doubled).
            let written = engine.pump(&mut backend, |effect| publish(&shared, effect));
            if let Err(e) = written {
                fail(&shared, &e.to_string());
                return;
            }
            compact(&mut engine);
        }
    }
}

/// The smallest journal worth compacting, in bytes.
const JOURNAL_MIN: u64 = 1 << 20;

/// Compacts the runtime's journal when it doubled since it last was (see
/// [`Engine::compact_journal`]); a failure is logged, and the journal stays as it was.
pub(super) fn compact(engine: &mut Engine) {
    match engine.compact_journal(JOURNAL_MIN) {
        Ok(Some((before, after))) => {
            tracing::info!(
                before,
                after,
                "the runtime's journal lost the lines of ended sessions"
            )
        }
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "the runtime's journal could not be compacted"),
    }
}

/// Lets the runtime drop every session that ended and whose end the store keeps: the store
/// answers for it from then on, and the runtime's state (rewritten whole at each input) holds
/// only the sessions that still run or wait. A session whose end the store could not take stays
/// in the runtime, so that a restart brings the store level again.
pub(super) fn forget_ended(engine: &mut Engine, shared: &Shared) -> bool {
    let ended: Vec<uuid::Uuid> = engine
        .runtime()
        .async_sessions()
        .filter(|s| s.ended)
        .map(|s| s.id)
        .collect();
    let store = lock(&shared.store);
    let mut file = lock(&shared.ended_file);
    let mut forgot = false;
    for id in ended {
        let row = match store.session(&id.to_string()) {
            Ok(Some(row)) if row.status.is_terminal() => row,
            _ => continue,
        };
        // A store that forgets at a restart has the session's end written beside the state
        // first.
        if let Some(file) = file.as_mut() {
            if let Err(e) = file.append(&row, &**store) {
                tracing::error!(session = %id, error = %e, "an ended session could not be written beside the state; the runtime keeps it");
                continue;
            }
        }
        forgot |= engine.runtime_mut().forget_session(id);
    }
    forgot
}

/// The session a webhook's idempotency `key` started, if the store remembers the key and still
/// holds the session.
fn replayed(shared: &Shared, key: &str) -> Result<Option<String>, StoreError> {
    let store = lock(&shared.store);
    match store.session_of_key(key)? {
        Some(session) if store.session(&session)?.is_some() => Ok(Some(session)),
        _ => Ok(None),
    }
}

/// What a start does with the store's sessions that have not ended but that the runtime does
/// not hold (a service restarted on its `--db` without the `--state` it ran with, or with
/// another): nothing here can resume them, so an answer to one must not be acknowledged as if
/// something would act on it. With `abandon` each is ended as `failed`, the reason kept (an
/// answer then gets 410); without it the start is refused with what to do.
pub(super) fn settle_orphans(
    engine: &Engine,
    store: &mut (dyn QuestionStore + Send),
    abandon: bool,
) -> Result<(), String> {
    let known: std::collections::BTreeSet<String> = engine
        .runtime()
        .async_sessions()
        .map(|s| s.id.to_string())
        .collect();
    let open = store
        .open_sessions()
        .map_err(|e| format!("the session store could not be read: {e}"))?;
    let orphans: Vec<_> = open
        .into_iter()
        .filter(|s| !known.contains(&s.id))
        .collect();
    let Some(first) = orphans.first() else {
        return Ok(());
    };
    if !abandon {
        // A waiting session names the state directory of the runtime that ran it.
        let ran_with = first
            .execution_state
            .as_deref()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .and_then(|v| v.get("state_dir")?.as_str().map(str::to_owned));
        let state = match ran_with {
            Some(dir) => format!("--state {dir} (the one it ran with)"),
            None => "the --state DIR of the service that ran them".to_owned(),
        };
        return Err(format!(
            "the session store holds {} session(s) that have not ended (the first: {} of agent {}, {}) but that the runtime this service starts from does not hold, so nothing would act on their answers. Start with {state}, or give --abandon-sessions to end them as failed (an answer to one is then refused with 410)",
            orphans.len(),
            first.id,
            first.agent_name,
            first.status
        ));
    }
    let now = wall_ms();
    for s in &orphans {
        let reason = format!(
            "the service restarted without the runtime state that ran this session (it was {}); ended by --abandon-sessions",
            s.status
        );
        crate::store::questions::abandon(store, &s.id, &reason, now)
            .map_err(|e| format!("session {} could not be abandoned: {e}", s.id))?;
        tracing::warn!(session = %s.id, agent = %s.agent_name, "a session nothing can resume is abandoned (failed)");
    }
    Ok(())
}

/// After a restart, the runtime's persisted state and the store are made to agree on every open
/// question: one the store acknowledged an answer to (the service stopped before the runtime
/// persisted it) is answered again, so that nothing acknowledged is lost; one the store never
/// heard of (the service stopped in between) is asked in the store again.
pub(super) fn reconcile(engine: &mut Engine, shared: &Shared) {
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
                    // Its callback goes in the outbox with it (sent once the start is done).
                    let session = engine
                        .runtime()
                        .async_sessions()
                        .find(|s| *s.id.to_string() == *q.key);
                    let callback = session.and_then(|s| {
                        let url = s
                            .agent
                            .async_questions
                            .as_ref()
                            .and_then(|a| a.callback.clone())
                            .or_else(|| engine.runtime().config().callbacks.url.clone())?;
                        let agent = s.agent.name.to_string();
                        Some(super::callbacks::callback(
                            shared,
                            (s.id, q.id),
                            &agent,
                            (&q.text, None),
                            &url,
                        ))
                    });
                    let question = NewQuestion {
                        id,
                        session_id: q.key.to_string(),
                        question: q.text.to_string(),
                        context: None,
                    };
                    let state = waiting_state(shared, &q.id.to_string());
                    let asked =
                        store.ask_with(&question, callback.as_ref(), Some(&state), wall_ms());
                    if let Err(e) = asked {
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
    // What a start forgets is written by the first pump, which comes before any request.
    forget_ended(engine, shared);
}

/// After a restart, the store is made to agree with the runtime's persisted state on every
/// session: one the runtime started before the service stopped but the store never heard of is
/// stored (running), and one whose agent ended it, or whose question failed it, is ended in the
/// store with the same outcome. The runtime persists before the store is told, so the store can
/// only be behind it.
pub(super) fn reconcile_sessions(engine: &Engine, store: &mut (dyn QuestionStore + Send)) {
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

/// What a waiting session's `execution_state` holds: the question it waits for and where the
/// runtime that will resume it keeps its state (`state_dir`, absolute; `null` when the runtime
/// is in memory and the session cannot outlive the process). The agent's own state is the
/// runtime's, in `state_dir`'s `state.json` and `context.jsonl`; an ended session's
/// `execution_state` is replaced by its result.
pub(super) fn waiting_state(shared: &Shared, question: &str) -> String {
    json!({
        "waiting_for": question,
        "runtime": "agentsim serve",
        "state_dir": shared.state_dir.as_deref().map(|d| d.display().to_string()),
    })
    .to_string()
}

pub(super) fn fail(shared: &Shared, e: &str) {
    tracing::error!(error = %e, "the engine stopped");
    *lock(&shared.failure) = Some(e.to_owned());
    let _ = shared.stop.send(true);
}

pub(super) fn apply(engine: &mut Engine, command: Command, shared: &Shared) {
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
pub(super) fn publish(shared: &Arc<Shared>, effect: &Effect) {
    match effect {
        Effect::Send { key, text, .. } => {
            lock(&shared.sent)
                .entry(key.to_string())
                .or_default()
                .push(text.to_string());
            let data = json!({ "key": &**key, "text": &**text });
            shared.events.push("message".to_owned(), &data);
        }
        Effect::Session(op) => {
            // A question with a callback is stored with it, in one operation (the outbox).
            let callback = match &**op {
                crate::protocol::SessionOp::Asked {
                    session,
                    question,
                    text,
                    context,
                    agent,
                    callback: Some(url),
                } => Some(super::callbacks::callback(
                    shared,
                    (*session, *question),
                    agent,
                    (text, context.as_deref()),
                    url,
                )),
                _ => None,
            };
            let recorded = {
                let mut store = lock(&shared.store);
                match &**op {
                    crate::protocol::SessionOp::Asked {
                        session,
                        question,
                        text,
                        context,
                        ..
                    } => {
                        let state = waiting_state(shared, &question.to_string());
                        let question = NewQuestion {
                            id: question.to_string(),
                            session_id: session.to_string(),
                            question: text.to_string(),
                            context: context.as_ref().map(|c| c.to_string()),
                        };
                        store.ask_with(&question, callback.as_ref(), Some(&state), wall_ms())
                    }
                    _ => crate::store::questions::record(&mut **store, op, wall_ms()),
                }
            };
            if let Err(e) = recorded {
                // The runtime told the store something its lifecycle refuses: a runtime bug,
                // reported, never applied.
                tracing::error!(error = %e, "the session store refused an operation");
                return;
            }
            if let Some(callback) = callback {
                shared.callbacks.send(shared.clone(), callback);
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
            shared.events.push(kind, &data);
        }
        _ => {}
    }
}
