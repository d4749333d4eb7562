//! `journal-before-state`: every session operation of a step is journaled to `context.jsonl`
//! before the state that follows it is written.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use uuid::Uuid;

use crate::protocol::Effect;

use super::names;
use super::step::{fact, Expect};
use super::{violation, Observer, Violation};

/// The start of one `context.jsonl` line: what the journal check compares.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    agent_session_id: Uuid,
    #[serde(default, borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default)]
    is_error: Option<bool>,
}

impl Observer {
    /// A session operation of this step that the journal must hold (when the runtime persists).
    pub(super) fn expect(
        &mut self,
        kind: &'static str,
        session: Uuid,
        id: Option<Arc<str>>,
        is_error: Option<bool>,
        frame: &Arc<str>,
    ) {
        if self.persist {
            self.step.mark(fact::EXPECTED).expected.push(Expect {
                kind,
                session,
                id,
                is_error,
                frame: frame.clone(),
            });
        }
    }

    /// Every session operation of the step is in the journal lines it emitted, and no line
    /// follows the state written at its end.
    pub(super) fn check_journal<'a>(
        &self,
        effects: impl Iterator<Item = &'a Effect>,
    ) -> Result<(), Violation> {
        let mut lines: Vec<Head<'a>> = Vec::new();
        let mut state_written = false;
        for effect in effects {
            match effect {
                Effect::WriteState { .. } => state_written = true,
                Effect::AppendContext { line } => {
                    if state_written {
                        return Err(violation(
                            names::JOURNAL_BEFORE_STATE,
                            format!(
                                "the state was written before the journal line {}",
                                line.trim_end()
                            ),
                        ));
                    }
                    for one in line.lines() {
                        match serde_json::from_str::<Head<'_>>(one) {
                            Ok(head) => lines.push(head),
                            Err(e) => {
                                return Err(violation(
                                    names::JOURNAL_BEFORE_STATE,
                                    format!("an unreadable journal line ({e}): {one}"),
                                ))
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for want in &self.step.expected {
            let found = lines.iter().position(|h| {
                h.kind == want.kind
                    && h.agent_session_id == want.session
                    && want
                        .id
                        .as_deref()
                        .is_none_or(|id| h.tool_use_id.as_deref() == Some(id))
                    && want.is_error.is_none_or(|e| h.is_error == Some(e))
            });
            match found {
                Some(i) => {
                    lines.remove(i);
                }
                None => {
                    let what = match want.kind {
                        "agent_session" => "the start of the session".to_owned(),
                        "agent_session_complete" => "the end of the session".to_owned(),
                        "user" => "a user message".to_owned(),
                        "assistant" => "a model reply".to_owned(),
                        _ => format!("the tool_result for {}", want.id.as_deref().unwrap_or("?")),
                    };
                    return Err(violation(
                        names::JOURNAL_BEFORE_STATE,
                        format!(
                            "{what} of {} (session {}) was not journaled before the state that follows it",
                            want.frame, want.session
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}
