//! Seed 001's agent tree, decided in DESIGN §8: every agent that runs is a [`Node`] with a
//! [`Status`]; a user may [`Intervention`] on any live one.
//!
//! A live node's fields live in its frame (a frame *is* the running agent); the runtime builds a
//! [`Node`] from a frame when asked (`Runtime::tree`, `Runtime::agent`) and keeps one for every
//! agent that ended, so that expectations and the service can still name it. The status machine
//! and its transitions are here, as data: the runtime moves through them and the
//! `status-transitions` invariant checks every move against [`Status::can_become`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::model::transcript::Message;

/// The status of an agent (seed 001's `AgentStatus`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Running or waiting for its model, a tool or a child.
    #[default]
    Running,
    /// Waiting for the user: its question is open, or (an interactive frame) it spoke and waits
    /// for the user's reply.
    AwaitingUser,
    /// Ended with a result.
    Completed,
    /// Ended by a failure: its model call failed, it reached its limit, it was cancelled.
    Error,
    /// Ended by the user's intervention.
    Deleted,
    /// Its task was changed by an intervention; it stays so until its next model call.
    Modified,
}

impl Status {
    /// Every status, in a stable order.
    pub const ALL: [Status; 6] = [
        Status::Running,
        Status::AwaitingUser,
        Status::Completed,
        Status::Error,
        Status::Deleted,
        Status::Modified,
    ];

    /// The wire name: `running`, `awaiting_user`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::AwaitingUser => "awaiting_user",
            Status::Completed => "completed",
            Status::Error => "error",
            Status::Deleted => "deleted",
            Status::Modified => "modified",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the status is an end: completed, error and deleted are absorbing.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Error | Status::Deleted)
    }

    /// Whether an agent in this status may move to `to` (DESIGN §8):
    ///
    /// - `running` ↔ `awaiting_user`;
    /// - `running` and `awaiting_user` → `modified` (an intervention); `modified` → `running`
    ///   (its next model call), or wherever the reply of a model call already in flight when the
    ///   change came leads (`awaiting_user`, `completed`): the change then waits for the call
    ///   after;
    /// - `running` → `completed` (only an agent that ran produces a result);
    /// - any live status → `error` or `deleted`;
    /// - nothing leaves a terminal status, and no status moves to itself.
    pub fn can_become(self, to: Status) -> bool {
        use Status::*;
        match (self, to) {
            (from, _) if from.is_terminal() => false,
            (from, to) if from == to => false,
            (_, Error | Deleted) => true,
            (Running, AwaitingUser | Modified | Completed) => true,
            (AwaitingUser, Running | Modified) => true,
            (Modified, Running | AwaitingUser | Completed) => true,
            _ => false,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The comment a node carries (seed 001's `userComment`) when nobody intervened.
pub const UNCHANGED: &str = "unchanged";
/// [`UNCHANGED`] as one shared text: every node nobody commented on names it, so that ending an
/// agent allocates nothing for it.
pub fn unchanged() -> Arc<str> {
    UNCHANGED_TEXT.get_or_init(|| UNCHANGED.into()).clone()
}

static UNCHANGED_TEXT: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();

/// Whether `text` is the shared [`unchanged`] text itself (not merely equal to it).
pub(crate) fn is_unchanged(text: &Arc<str>) -> bool {
    UNCHANGED_TEXT.get().is_some_and(|u| Arc::ptr_eq(u, text))
}

/// The comment that deletes an agent.
pub const DELETE: &str = "delete";
/// The comment that changes an agent's task to its new `user_content`.
pub(crate) const MODIFY: &str = "modify";

/// One agent of the tree (seed 001's `AgentState`, without the messages unless asked for).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// Its id (the frame's id).
    pub agent_id: Uuid,
    /// The agent that started it (`None` for a main frame).
    pub parent_id: Option<Uuid>,
    /// The conversation it belongs to.
    pub key: Arc<str>,
    /// Its frame name: `main`, `skill:<name>`, `agent:<name>`, `fork:<caller>#<handle>`.
    pub name: Arc<str>,
    /// Its status.
    pub status: Status,
    /// The last comment a user gave it (`unchanged` when none).
    pub user_comment: Arc<str>,
    /// The task it was started with, or the content a `modify` gave it.
    pub user_content: Arc<str>,
    /// The agents it started, in order (children and forks).
    pub subagents: Vec<Uuid>,
    /// Its result, once it ended (the text its parent or the user received).
    pub result: Option<Arc<str>>,
    /// Free-form data, ordered.
    pub metadata: BTreeMap<String, Value>,
    /// When it started, in the driver's milliseconds.
    pub created_at: u64,
    /// Its messages: only in `Runtime::agent`, never in the tree or an `agent-state` event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
}

/// What a user asks of a live agent (seed 001's `userIntervention`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Intervention {
    /// `delete`, `modify`, `unchanged` or any other text (stored, changes nothing).
    pub user_comment: Option<Arc<str>>,
    /// The agent's new task (delivered with `modify`).
    pub user_content: Option<Arc<str>>,
    /// A status to set: only `deleted` and `modified`, and only where [`Status::can_become`]
    /// allows it.
    pub status: Option<Status>,
}

/// An open question (seed 001): an agent's `ask_user` waiting for its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Question {
    /// Its id: an answer names it.
    pub id: Uuid,
    /// The asking agent.
    pub agent_id: Uuid,
    /// The asking agent's conversation.
    pub key: Arc<str>,
    /// The asking agent's frame name.
    pub frame: Arc<str>,
    /// The `ask_user` tool use it answers (`None` for a workflow's question).
    pub tool_use_id: Option<Arc<str>>,
    /// The question.
    pub text: Arc<str>,
}

/// An `ask_user` input as the user is shown it: the question, then each option on a line of its
/// own.
pub(crate) fn question_text(input: &serde_json::Value) -> String {
    let mut text = input
        .get("question")
        .and_then(|q| q.as_str())
        .unwrap_or_default()
        .to_owned();
    if let Some(options) = input.get("options").and_then(|o| o.as_array()) {
        for option in options {
            text.push_str("\n- ");
            match option.as_str() {
                Some(s) => text.push_str(s),
                None => text.push_str(&option.to_string()),
            }
        }
    }
    text
}

/// How the runtime answered an intervention.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum InterventionOutcome {
    /// Applied (a deletion at once, a modification by the agent's next model call).
    Accepted,
    /// No live agent has that id (never one, or it already ended).
    NotFound,
    /// Refused, with the reason; nothing changed.
    Refused {
        /// Why.
        reason: String,
    },
}

impl Intervention {
    /// Whether it deletes the agent.
    pub fn deletes(&self) -> bool {
        self.user_comment.as_deref() == Some(DELETE) || self.status == Some(Status::Deleted)
    }

    /// Whether it modifies the agent's task.
    pub fn modifies(&self) -> bool {
        self.user_comment.as_deref() == Some(MODIFY) || self.status == Some(Status::Modified)
    }

    /// Checks it against the agent's current status: `Err(reason)` if it must be refused.
    pub fn check(&self, current: Status) -> Result<(), String> {
        if let Some(to) = self.status {
            if !matches!(to, Status::Deleted | Status::Modified) {
                return Err(format!(
                    "status '{to}' cannot be set by an intervention: only 'deleted' and 'modified' can"
                ));
            }
        }
        if self.deletes() && self.modifies() {
            return Err("an intervention cannot both delete and modify an agent".to_owned());
        }
        if self.modifies() && current == Status::Modified {
            return Ok(()); // A second modification replaces the first.
        }
        let to = if self.deletes() {
            Some(Status::Deleted)
        } else if self.modifies() {
            Some(Status::Modified)
        } else {
            None
        };
        match to {
            Some(to) if !current.can_become(to) => Err(format!(
                "an agent whose status is '{current}' cannot become '{to}'"
            )),
            _ => Ok(()),
        }
    }
}

/// The text an agent gets when its task is modified (DESIGN §8).
pub(crate) fn task_changed(content: &str) -> String {
    format!("The user changed your task: {content}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_statuses_are_absorbing_and_nothing_moves_to_itself() {
        for from in Status::ALL {
            for to in Status::ALL {
                if from.is_terminal() || from == to {
                    assert!(!from.can_become(to), "{from} -> {to}");
                }
            }
        }
        assert!(Status::Running.can_become(Status::Completed));
        assert!(!Status::AwaitingUser.can_become(Status::Completed));
        assert!(Status::Modified.can_become(Status::Running));
        assert!(!Status::AwaitingUser.can_become(Status::AwaitingUser));
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn interventions_are_checked_against_the_current_status() {
        let delete = Intervention {
            user_comment: Some(DELETE.into()),
            ..Default::default()
        };
        assert!(delete.check(Status::Running).is_ok());
        assert!(delete.check(Status::Completed).is_err());
        let set_completed = Intervention {
            status: Some(Status::Completed),
            ..Default::default()
        };
        assert!(set_completed.check(Status::Running).is_err());
        let comment = Intervention {
            user_comment: Some("looks good".into()),
            ..Default::default()
        };
        assert!(comment.check(Status::AwaitingUser).is_ok());
        let both = Intervention {
            user_comment: Some(DELETE.into()),
            status: Some(Status::Modified),
            ..Default::default()
        };
        assert!(both.check(Status::Running).is_err());
    }
}
