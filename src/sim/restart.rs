//! Restarts: the runtime dropped and restored from what it persisted, checked to hold the same
//! conversations (`restart-equivalence`), with the answers that were in flight handed to the calls
//! the restored runtime issues again.

use std::sync::Arc;

use crate::drive::backend::{ModelAnswer, ToolStep};
use crate::model::ids::CallId;
use crate::observe::Violation;
use crate::runtime::Runtime;

use super::{Note, RunError, Sim};

/// What an answer in flight answers: a frame's model call, or its run of one tool use.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum InFlight {
    Model(uuid::Uuid),
    Tool(uuid::Uuid, Arc<str>),
}

/// An answer in flight.
#[derive(Clone, Debug)]
pub(super) enum Pending {
    Model(ModelAnswer),
    Tool(ToolStep),
}

impl Sim {
    /// What the runtime persisted so far: `state.json` (if written) and `context.jsonl`.
    pub fn persisted(&self) -> (Option<&str>, &str) {
        let memory = self.core.persistence();
        (memory.state.as_deref(), &memory.context)
    }

    /// Restarts the runtime: drops it and restores a new one from what it persisted (the bytes the
    /// file store would have written). The scripted model, tools and clock continue. Meaningful at
    /// a quiescent point, which is when `state.json` is written.
    pub fn restart(&mut self) -> Result<(), RunError> {
        let config = self.rt.config().clone();
        if !config.persist {
            return Err(RunError::Restore(
                "persistence is off (settings: { persist: true })".into(),
            ));
        }
        let catalog = self.rt.catalog_arc();
        let (state, context) = self.persisted();
        let (state_bytes, context_bytes) = (state.map_or(0, str::len), context.len());
        let broken = |message: String| RunError::Violation {
            violation: Violation {
                invariant: crate::observe::names::RESTART_EQUIVALENCE,
                message,
            },
            step: self.steps,
            at_ms: self.clock.now(),
        };
        let rt = match state {
            Some(state) => Runtime::restore(catalog, config, state, context, self.clock.now())
                .map_err(|e| broken(format!("the persisted state does not restore: {e}")))?,
            None => Runtime::new(catalog, config),
        };
        if let Err(difference) = same_conversations(&self.rt, &rt) {
            return Err(broken(format!(
                "the restored runtime differs from the one that stopped: {difference}"
            )));
        }
        // What the old runtime had in flight is lost with it; the restored runtime issues those
        // calls again and gets the same answers.
        let in_flight = std::mem::take(&mut self.in_flight);
        self.lost = in_flight
            .into_iter()
            .filter_map(|(call, answer)| Some((in_flight_key(&self.rt, call)?, answer)))
            .collect();
        if let Some(c) = &mut self.coverage {
            c.restart(
                self.rt
                    .stacks()
                    .entries()
                    .iter()
                    .any(|e| !e.stack.is_empty()),
            );
        }
        self.rt = rt;
        // The old process's timers died with it; the restored runtime set its own (one set again
        // under the same id keeps the tie-break it was drawn, and draws nothing).
        self.rearm = self.clock.drop_timers().into_iter().collect();
        self.note(Note::Restart {
            state_bytes,
            context_bytes,
        });
        self.settle()
    }
}

/// Whether `restored` holds the conversations `crashed` held: the same stacks of frames (ids,
/// sessions, iterations), main sessions and queued messages. `Err` says the first difference.
pub(super) fn same_conversations(crashed: &Runtime, restored: &Runtime) -> Result<(), String> {
    for (slot, old) in crashed.stacks().views().enumerate() {
        let key = old.key();
        let Some(new) = restored.stack(key) else {
            return Err(format!("conversation {key} is gone"));
        };
        if old.entry().inbox != new.entry().inbox {
            return Err(format!("conversation {key}: its queued messages differ"));
        }
        // Between turns the main session waits in the conversation; during one, in the main frame.
        if old.is_empty() && old.entry().main_session != new.entry().main_session {
            return Err(format!("conversation {key}: the main session differs"));
        }
        if old.depth() != new.depth() {
            return Err(format!(
                "conversation {key}: {} became {}",
                old.describe(),
                new.describe()
            ));
        }
        for (a, b) in old.frames().zip(new.frames()) {
            let name = a.agent_name();
            if a.frame_id() != b.frame_id() {
                return Err(format!("conversation {key}: frame {name} has another id"));
            }
            same_frame(key, a, b)?;
        }
        let (forks, restored_forks) = (crashed.stacks().forks(slot), restored.stacks().forks(slot));
        if forks.len() != restored_forks.len() {
            return Err(format!(
                "conversation {key}: {} forks ran, {} restored",
                forks.len(),
                restored_forks.len()
            ));
        }
        for (a, b) in forks.into_iter().zip(restored_forks) {
            if a.frame_id() != b.frame_id() {
                return Err(format!(
                    "conversation {key}: fork {} has another id",
                    a.agent_name()
                ));
            }
            same_frame(key, a, b)?;
        }
    }
    Ok(())
}

/// The same frame before a crash and after its restore: its session and its count.
pub(super) fn same_frame(
    key: &str,
    a: &crate::agents::frame::StackFrame,
    b: &crate::agents::frame::StackFrame,
) -> Result<(), String> {
    let name = a.agent_name();
    if a.session() != b.session() {
        return Err(format!(
            "conversation {key}: the session of {name} differs ({} messages became {})",
            a.session().messages.len(),
            b.session().messages.len()
        ));
    }
    if a.iteration() != b.iteration() {
        return Err(format!(
            "conversation {key}: {name} used {} iterations, restored {}",
            a.iteration(),
            b.iteration()
        ));
    }
    Ok(())
}

/// What `call` of `rt` answers, if its frame still waits for it: the frame's model call, or its
/// run of one tool use (a restored frame issues the same call again under a new id).
pub(super) fn in_flight_key(rt: &Runtime, call: CallId) -> Option<InFlight> {
    let frame = rt
        .stacks()
        .frame_at(crate::model::ids::call_frame(call))?
        .frame_id();
    if rt.request(call).is_some() {
        return Some(InFlight::Model(frame));
    }
    let run = rt.tool_run(call)?;
    Some(InFlight::Tool(frame, run.tool_use_id.clone()))
}
