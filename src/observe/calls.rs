//! A frame's model calls: `tool-pairing` (every request is valid under the Anthropic and OpenAI
//! message rules, checked incrementally per session) and `iteration-bound` (no frame calls the
//! model more often than its limit).

use std::sync::Arc;

use uuid::Uuid;

use crate::model::agent::AgentKind;
use crate::model::ids::CallId;
use crate::runtime::Runtime;
use crate::wire::pairing::Pairing;

use super::names::*;
use super::stack::KeyModel;
use super::{violation, Observer, Violation};

impl Observer {
    /// An `llm_request` event: one more call of its frame, within its limit, whose request
    /// pairs every tool use with its result.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_request(
        &mut self,
        rt: &Runtime,
        key: &Arc<str>,
        frame: &Arc<str>,
        frame_id: Uuid,
        session_id: Uuid,
        call: CallId,
        iteration: u32,
        max_iterations: u32,
    ) -> Result<(), Violation> {
        let k = self.key_index(key);
        let KeyModel { frames, main, .. } = &mut self.keys[k];
        // The caller is on top of its model stack, unless the stack is broken.
        let (calls, pairing) = match frames
            .iter_mut()
            .rev()
            .find(|f| f.info.frame_id == frame_id)
        {
            Some(f) if f.info.kind == AgentKind::Main => {
                let main = main.get_or_insert_with(|| (session_id, Pairing::default()));
                if main.0 != session_id {
                    *main = (session_id, Pairing::default());
                }
                (&mut f.calls, &mut main.1)
            }
            Some(f) if f.info.session_id == session_id => (&mut f.calls, &mut f.pairing),
            Some(f) => (
                &mut f.calls,
                self.stray_pairing.entry(session_id).or_default(),
            ),
            None => (
                self.stray_calls.entry(frame_id).or_insert(0),
                self.stray_pairing.entry(session_id).or_default(),
            ),
        };
        *calls += 1;
        if *calls > max_iterations || iteration > max_iterations {
            return Err(violation(
                ITERATION_BOUND,
                format!(
                    "{frame} made model call {} (iteration {iteration}) over its limit of {max_iterations}",
                    *calls
                ),
            ));
        }
        let mut batch = None;
        if let Some(request) = rt.request(call) {
            pairing
                .check_request(request.messages)
                .map_err(|m| violation(TOOL_PAIRING, format!("{frame}: {m}")))?;
            if request.agent.workflow.is_none() {
                batch = request.agent.batch;
            }
        }
        self.on_request(k, frame_id, call, iteration, max_iterations, batch);
        Ok(())
    }
}
