//! Seed 003's async sessions in the runtime (DESIGN §9): a trigger starts a session whose agent
//! runs with no user; its `ask_user` persists a question (agents declared `async_questions`) with
//! a timeout in the driver's time, or is refused; the session ends with its agent's final text.
//! What the store must record goes out as [`SessionOp`] effects, in order.

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::session::{self, AsyncSession};
use crate::agents::tree::Status;
use crate::model::agent::OnTimeout;
use crate::model::ids::CallId;
use crate::protocol::{Effect, Event, SessionOp};

use super::turn_context::{TurnCx, TurnInput, TurnResult};
use super::Runtime;

impl Runtime {
    /// The async sessions, in the order of their conversations: what a driver's store must
    /// agree with (a service restarted after a crash compares the two).
    pub(crate) fn async_sessions(&self) -> impl Iterator<Item = &AsyncSession> {
        self.stacks
            .entries()
            .iter()
            .filter_map(|e| e.session.as_deref())
    }

    /// Drops the conversation of session `id` once it ended and none of its agents runs any
    /// more: the runtime then neither holds nor persists it, so that what an input costs does
    /// not grow with the sessions ever run. A driver calls it once its store keeps the
    /// session's end (a restart then finds the session there, not in the runtime). `false`,
    /// changing nothing, for a session the runtime does not hold or that has not ended.
    pub(crate) fn forget_session(&mut self, id: Uuid) -> bool {
        let key = id.to_string();
        let Some(slot) = self.stacks.slot(&key) else {
            return false;
        };
        let ended = self
            .stacks
            .entry(slot)
            .session
            .as_ref()
            .is_some_and(|s| s.id == id && s.ended);
        let forgotten = ended && self.stacks.remove(slot);
        if forgotten {
            // The state without it is written at once (a driver takes the effect).
            self.end_input();
        }
        forgotten
    }

    /// Whether the frame behind model call `call` is offered `ask_user` (DESIGN §9): always in a
    /// user's conversation; in a triggered session only by an agent that asks asynchronously,
    /// and never by a fork (one question at a time). A call it is not offered is refused all
    /// the same, should the model make it.
    pub fn offers_ask_user(&self, call: CallId) -> bool {
        let Some(frame) = self.stacks.frame_at(crate::model::ids::call_frame(call)) else {
            return true;
        };
        let session = self
            .stacks
            .entry(frame.conversation as usize)
            .session
            .is_some();
        !session || (frame.agent.async_questions.is_some() && !frame.is_fork())
    }

    /// Starts a session of `agent` with the webhook's `payload` (seed 003's `POST
    /// /webhook/{agent}`): its id, which is also its conversation's key; `None` when no agent has
    /// that name. Like [`Runtime::handle`], it ends with the state written when the runtime
    /// persists.
    pub fn trigger(&mut self, agent: &str, payload: serde_json::Value) -> Option<Uuid> {
        let id = self.apply_trigger(agent, payload);
        self.end_input();
        id
    }

    /// Starts a session of `agent` whose first message is `envelope` (a webhook request's, as
    /// [`session::envelope_of`] builds it); the session's id, or `None` for an unknown agent.
    pub(crate) fn trigger_envelope(
        &mut self,
        agent: &str,
        envelope: &serde_json::Value,
    ) -> Option<Uuid> {
        let id = self.start_session(agent, envelope);
        self.end_input();
        id
    }

    pub(super) fn apply_trigger(
        &mut self,
        agent: &str,
        payload: serde_json::Value,
    ) -> Option<Uuid> {
        self.start_session(agent, &session::envelope(agent, &payload))
    }

    fn start_session(&mut self, agent: &str, envelope: &serde_json::Value) -> Option<Uuid> {
        let Some(def) = self.catalog.get(agent) else {
            if self.config.record_events {
                self.events.push(Event::Triggered {
                    key: None,
                    agent: agent.into(),
                    started: false,
                });
            }
            return None;
        };
        let def = session::main_def(def);
        let id = self.ids.next_uuid();
        let envelope: Arc<str> = envelope.to_string().into();
        let key: Arc<str> = id.to_string().into();
        let slot = self.slot(&key);
        let expires_at = self
            .config
            .session_expiry_ms
            .map(|e| self.now.saturating_add(e));
        self.stacks.entry_mut(slot).session = Some(Box::new(AsyncSession {
            id,
            agent: def,
            ended: false,
            failed: false,
            expires_at,
            payload: envelope.clone(),
            outcome: None,
        }));
        self.effects
            .push_back(Effect::Session(Box::new(SessionOp::Started {
                session: id,
                agent: agent.into(),
                payload: envelope.clone(),
            })));
        if self.config.record_events {
            self.events.push(Event::Triggered {
                key: Some(key),
                agent: agent.into(),
                started: true,
            });
        }
        self.on_user(slot, envelope);
        Some(id)
    }

    /// A session's main frame left its stack: the session ends, completed with its final text
    /// when it answered, failed otherwise (unless it failed already: the store has it so).
    pub(super) fn session_ended(&mut self, slot: usize, completed: bool, result: &Arc<str>) {
        let entry = self.stacks.entry_mut(slot);
        let Some(session) = entry.session.as_mut() else {
            return;
        };
        if session.ended {
            return;
        }
        session.ended = true;
        let (id, failed) = (session.id, session.failed);
        let key = entry.key.clone();
        if failed {
            return;
        }
        session.outcome = Some((completed, result.clone()));
        self.effects
            .push_back(Effect::Session(Box::new(SessionOp::Ended {
                session: id,
                completed,
                result: result.clone(),
            })));
        if self.config.record_events {
            self.events.push(Event::SessionEnded {
                key,
                completed,
                result: result.clone(),
            });
        }
    }

    /// Frame `id` is about to leave its stack (deleted or cancelled). If it is a child waiting
    /// for an async question's answer, the store's session waits for an answer nobody would
    /// take: it fails, as under a `fail` timeout (B14's `pending_input → failed`), and the agents
    /// below run on to their end, which changes the session no more. (A main frame that leaves
    /// ends its session failed.)
    pub(super) fn withdraw_question(&mut self, id: crate::model::ids::FrameId) {
        let Some(frame) = self.stacks.frame(id) else {
            return;
        };
        let Phase::AwaitAnswer {
            timer: Some(_),
            question,
            ..
        } = frame.phase
        else {
            return;
        };
        if frame.parent.is_none() {
            return;
        }
        let entry = self.stacks.entry_mut(frame.conversation as usize);
        let key = entry.key.clone();
        let Some(session) = entry.session.as_mut() else {
            return;
        };
        if session.ended || session.failed {
            return;
        }
        session.failed = true;
        self.effects
            .push_back(Effect::Session(Box::new(SessionOp::Withdrawn {
                session: session.id,
                question,
            })));
        if self.config.record_events {
            self.events.push(Event::QuestionWithdrawn {
                key,
                question_id: question,
            });
        }
    }

    /// Whether `timer` is an async question's timeout; if so, acts on it.
    pub(super) fn on_question_timer(&mut self, timer: CallId) -> bool {
        let Some(frame) = self.stacks.frame_at(crate::model::ids::call_frame(timer)) else {
            return false;
        };
        let Phase::AwaitAnswer {
            timer: Some((t, _)),
            question,
            ..
        } = frame.phase
        else {
            return false;
        };
        if t != timer {
            return false;
        }
        let (id, slot) = (frame.id(), frame.conversation as usize);
        let policy = frame
            .agent
            .async_questions
            .as_ref()
            .map_or(OnTimeout::Fail, |a| a.on_timeout.clone());
        let entry = self.stacks.entry_mut(slot);
        let key = entry.key.clone();
        let Some(session) = entry.session.as_mut() else {
            return false;
        };
        let expired = session.expires_at.is_some_and(|at| self.now >= at);
        let answer = match policy {
            OnTimeout::DefaultAnswer(text) if !expired => Some(text),
            _ => {
                session.failed = true;
                None
            }
        };
        let session_id = session.id;
        self.effects
            .push_back(Effect::Session(Box::new(SessionOp::TimedOut {
                session: session_id,
                question,
                answer: answer.clone(),
            })));
        if self.config.record_events {
            self.events.push(Event::QuestionTimedOut {
                key,
                question_id: question,
                answer: answer.clone(),
                expired,
            });
        }
        // The timer fired: nothing to withdraw.
        if let Some(frame) = self.stacks.frame_mut(id) {
            if let Phase::AwaitAnswer { timer, .. } = &mut frame.phase {
                *timer = None;
            }
        }
        self.set_status(id, Status::Running);
        let input = match answer {
            Some(text) => TurnInput::User(text),
            None if expired => TurnInput::QuestionFailed(session::SESSION_EXPIRED.into()),
            None => TurnInput::QuestionFailed(session::QUESTION_TIMED_OUT.into()),
        };
        self.drive(id, input);
        self.pump(slot);
        true
    }
}

/// What asking in a triggered session did.
pub(super) enum SessionAsk {
    /// The question is persisted and the frame waits for its answer.
    Opened,
    /// Nobody can answer (the agent does not ask asynchronously, or its session failed): why.
    Refused(&'static str),
}

/// `ask_user` in a triggered session: refused unless the agent asks asynchronously; then the
/// question is persisted and its timeout set, and the frame waits (no text goes to any user).
/// `None` when it is not a session (the caller asks as usual); else what the dispatch of a
/// built-in returns: `Some(None)` goes on with the next tool use (the ask was refused and
/// answered), `Some(Some(None))` parks the turn.
pub(super) fn ask_in_session(
    frame: &mut StackFrame,
    at: crate::model::transcript::BlockAt,
    tool_use_id: &Arc<str>,
    input: &serde_json::Value,
    cx: &mut TurnCx<'_>,
) -> Option<Option<Option<TurnResult>>> {
    cx.session?;
    let text: Arc<str> = crate::agents::tree::question_text(input).into();
    let mut context = serde_json::Map::new();
    for key in ["options", "context"] {
        if let Some(v) = input.get(key) {
            context.insert(key.into(), v.clone());
        }
    }
    let context =
        (!context.is_empty()).then(|| serde_json::Value::Object(context).to_string().into());
    match ask_async(frame, Some(tool_use_id.clone()), text, context, cx) {
        SessionAsk::Opened => Some(Some(None)),
        SessionAsk::Refused(why) => {
            cx.finish_tool(frame, at, None, why.into(), true);
            Some(None)
        }
    }
}

/// A question in a triggered session (an `ask_user`, or a workflow's question when
/// `tool_use_id` is `None`): persisted with its timeout when the agent asks asynchronously and
/// its session has not failed, the frame then waiting (`awaiting_user`); refused otherwise.
pub(super) fn ask_async(
    frame: &mut StackFrame,
    tool_use_id: Option<Arc<str>>,
    text: Arc<str>,
    context: Option<Arc<str>>,
    cx: &mut TurnCx<'_>,
) -> SessionAsk {
    let Some((session, failed, expires_at)) = cx.session else {
        return SessionAsk::Refused(session::ASK_USER_IN_ASYNC);
    };
    let Some(asks) = frame.agent.async_questions.clone() else {
        return SessionAsk::Refused(session::ASK_USER_IN_ASYNC);
    };
    if frame.is_fork() {
        // A session has one question open at a time (B23), and forks run beside the frame
        // that may be asking: only the session's stack asks.
        return SessionAsk::Refused(session::FORK_ASK_IN_ASYNC);
    }
    if failed {
        // The session failed already: nobody will answer.
        return SessionAsk::Refused(session::QUESTION_TIMED_OUT);
    }
    // A session already past its expiry fails as its question opens: nobody is called.
    let expired = expires_at.is_some_and(|at| at <= cx.now);
    let callback = match expired {
        true => None,
        false => asks
            .callback
            .clone()
            .or_else(|| cx.config.callbacks.url.clone()),
    };
    let timer = cx.next_call();
    // The question waits for its timeout, or until its session expires if that comes first.
    let after_ms = asks
        .timeout_ms
        .unwrap_or(cx.config.question_timeout_ms)
        .min(expires_at.map_or(u64::MAX, |at| at.saturating_sub(cx.now)));
    let deadline = cx.now.saturating_add(after_ms);
    let question = cx.open_question(frame, tool_use_id, text.clone(), Some((timer, deadline)));
    cx.effects
        .push_back(Effect::Session(Box::new(SessionOp::Asked {
            session,
            question,
            text,
            context,
            agent: frame.agent.name.as_str().into(),
            callback,
        })));
    cx.effects.push_back(Effect::SetTimer { timer, after_ms });
    cx.set_status(frame, Status::AwaitingUser);
    SessionAsk::Opened
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::model::agent::{AgentDef, AgentKind, AsyncQuestions, Catalog, OnTimeout};
    use crate::protocol::{Effect, Input};
    use crate::runtime::{Runtime, RuntimeConfig};

    fn first_call(rt: &mut Runtime) -> u64 {
        while let Some(effect) = rt.poll_effect() {
            if let Effect::CallLlm { call } = effect {
                return call;
            }
        }
        panic!("no model call");
    }

    #[test]
    fn ask_user_is_offered_in_a_session_only_to_an_agent_that_asks_asynchronously() {
        let mut catalog = Catalog::default();
        catalog.add(AgentDef::new("main", AgentKind::Main));
        catalog.add(AgentDef::new("plain", AgentKind::Agent));
        let mut asking = AgentDef::new("asking", AgentKind::Agent);
        asking.async_questions = Some(AsyncQuestions {
            timeout_ms: None,
            on_timeout: OnTimeout::Fail,
            callback: None,
        });
        catalog.add(asking);
        let mut rt = Runtime::new(Arc::new(catalog), RuntimeConfig::default());
        rt.handle(Input::User {
            key: "user".into(),
            text: "hi".into(),
        });
        let call = first_call(&mut rt);
        assert!(rt.offers_ask_user(call), "a user's conversation");
        rt.trigger("plain", serde_json::json!({}));
        let call = first_call(&mut rt);
        assert!(
            !rt.offers_ask_user(call),
            "a session's agent without async_questions"
        );
        rt.trigger("asking", serde_json::json!({}));
        let call = first_call(&mut rt);
        assert!(
            rt.offers_ask_user(call),
            "a session's agent with async_questions"
        );
    }
}
