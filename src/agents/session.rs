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
pub const ASK_USER_IN_ASYNC: &str = "Tool 'ask_user' is not available in async mode";
/// The error result of an `ask_user` whose question timed out under the `fail` policy.
pub const QUESTION_TIMED_OUT: &str = "The question timed out: the session failed.";

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
}

/// The definition a triggered agent runs under: its own, as the main agent of its conversation
/// (frame name `main`; its script stays its own name's).
pub fn main_def(def: &AgentDef) -> Arc<AgentDef> {
    Arc::new(AgentDef {
        kind: AgentKind::Main,
        frame_name: "main".into(),
        ..def.clone()
    })
}

/// The webhook envelope the agent gets as its first message (B06): the request as JSON, its
/// payload under `json` (with `_non_object_json` when it is not an object).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_names_the_agent_and_marks_non_object_payloads() {
        let e = envelope("triage", &json!({"issue": 7}));
        assert_eq!(e["path"], "/webhook/triage");
        assert_eq!(e["json"]["issue"], 7);
        assert!(e.get("_non_object_json").is_none());
        let e = envelope("triage", &json!([1, 2]));
        assert_eq!(e["_non_object_json"], true);
    }
}
