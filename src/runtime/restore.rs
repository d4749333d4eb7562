//! The runtime's persisted form: [`Runtime::state`] writes it, [`Runtime::restore`] rebuilds a
//! runtime from it and the journal (see [`crate::persist`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::agents::frame::{Phase, StackFrame};
use crate::model::agent::{AgentKind, Catalog};
use crate::model::ids::IdSource;
use crate::model::transcript::Session;
use crate::runtime::planted::PlantedBug;

use super::{Runtime, RuntimeConfig};

impl Runtime {
    /// The persisted form of every conversation (meaningful when the runtime is idle).
    pub fn state(&self) -> crate::persist::State {
        use crate::persist::{ConversationState, FrameMeta, State, Waiting, STATE_VERSION};
        let conversations = self
            .stacks
            .views()
            .map(|v| (v.entry(), v))
            .map(|(e, v)| ConversationState {
                key: e.key.to_string(),
                main_session_id: e.main_session_id,
                usage: e.usage,
                inbox: e.inbox.iter().map(|t| t.to_string()).collect(),
                active_stack: v
                    .frames()
                    .map(|f| FrameMeta {
                        frame_id: f.frame_id,
                        agent_session_id: f.agent_session_id,
                        agent_name: f.agent.name.clone(),
                        agent_type: f.agent.kind,
                        model: f.agent.model.clone(),
                        iteration: f.iteration,
                        max_iterations: f.max_iterations,
                        parent_tool_use_id: f.parent_tool_use_id.clone(),
                        effective_tools: f.agent.tools.clone().unwrap_or_default(),
                        is_skill_agent: f.agent.kind == AgentKind::Skill,
                        environment: BTreeMap::new(),
                        waiting: match &f.phase {
                            Phase::AwaitAnswer { tool_use_id } => Waiting::Answer {
                                tool_use_id: tool_use_id.clone(),
                            },
                            Phase::AwaitChildren { .. } => Waiting::Child,
                            _ => Waiting::User,
                        },
                        turn_start: f.turn_start,
                        usage: f.usage,
                        batch_sends: f.batch_sends,
                    })
                    .collect(),
            })
            .collect();
        State {
            version: STATE_VERSION,
            ids: self.ids.counter(),
            seq: self.seq,
            conversations,
        }
    }

    /// Rebuilds a runtime from `state.json` and `context.jsonl` (see [`crate::persist`]). The
    /// restored runtime continues exactly where the persisted one was when it last went quiet.
    pub fn restore(
        catalog: Arc<Catalog>,
        config: RuntimeConfig,
        state: &str,
        context: &str,
    ) -> Result<Runtime, crate::persist::RestoreError> {
        use crate::persist::{parse_state, replay_context, RestoreError, Waiting};
        let state = parse_state(state)?;
        let skip = config.has_bug(PlantedBug::RestoreForgetsFirstMessage);
        let mut sessions = replay_context(context, skip)?.sessions;
        let mut rt = Runtime::new(catalog, config);
        rt.ids = IdSource::at(rt.config.seed, state.ids);
        rt.seq = state.seq;
        for conv in state.conversations {
            let main_id = conv.main_session_id;
            let slot = rt.stacks.get_or_create(&conv.key, || main_id);
            let mut frames = Vec::new();
            for meta in conv.active_stack {
                let agent = match meta.agent_type {
                    AgentKind::Main => Some(rt.catalog.main.clone()),
                    AgentKind::Skill => rt.catalog.skills.get(&meta.agent_name).cloned(),
                    AgentKind::Agent => rt.catalog.agents.get(&meta.agent_name).cloned(),
                }
                .ok_or_else(|| RestoreError::MissingAgent(meta.agent_name.clone()))?;
                let session = match (meta.agent_type, sessions.remove(&meta.agent_session_id)) {
                    (_, Some(s)) => s,
                    (AgentKind::Main, None) => Session::with_id(main_id),
                    (_, None) => return Err(RestoreError::MissingSession(meta.agent_session_id)),
                };
                let phase = match meta.waiting {
                    Waiting::User => Phase::AwaitUser,
                    Waiting::Answer { tool_use_id } => Phase::AwaitAnswer { tool_use_id },
                    // Its child is the next frame; it is named once pushed.
                    Waiting::Child => Phase::AwaitChildren {
                        children: SmallVec::new(),
                    },
                };
                let mut frame = StackFrame::new(
                    meta.frame_id,
                    agent,
                    session,
                    meta.agent_session_id,
                    meta.parent_tool_use_id,
                );
                frame.iteration = meta.iteration;
                frame.max_iterations = meta.max_iterations;
                frame.usage = meta.usage;
                frame.phase = phase;
                frame.turn_start = meta.turn_start;
                frame.batch_sends = meta.batch_sends;
                frames.push(frame);
            }
            let entry = rt.stacks.entry_mut(slot);
            entry.usage = conv.usage;
            entry.inbox = conv.inbox.into_iter().map(Into::into).collect();
            entry.main_session = sessions
                .remove(&main_id)
                .unwrap_or_else(|| Session::with_id(main_id));
            let mut below: Option<crate::model::ids::FrameId> = None;
            for frame in frames {
                let id = rt.stacks.push(slot, frame);
                if let Some(parent) = below.and_then(|b| rt.stacks.frame_mut(b)) {
                    if let Phase::AwaitChildren { children } = &mut parent.phase {
                        children.push(id);
                    }
                }
                below = Some(id);
            }
        }
        Ok(rt)
    }
}
