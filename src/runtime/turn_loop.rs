//! The loop proper of a turn (seed 000's `execute_turn` loop, seed 002's core loop): from the
//! frame's phase, pass through the loop head (its iteration limit, its checkpoint, the model
//! call) and run the tool uses left, until the frame must wait for the driver or its turn ends.
//! Whatever resumes a frame ([`super::turn`], a workflow's next step) enters it here.

use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::tree::Status;
use crate::model::messages;
use crate::model::transcript::Content;
use crate::persist::ContextEntry;
use crate::protocol::{Effect, Event};
use crate::runtime::planted::PlantedBug;

use super::dispatch::run_next_tool;
use super::turn_context::{TurnAction, TurnCx, TurnResult};

/// The loop proper, from the frame's current phase.
pub(super) fn run(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    // Set when running tools just found none left, so the loop head need not look again.
    let mut all_resolved = false;
    loop {
        match frame.phase {
            Phase::Loop => {
                let limit = if cx.config.has_bug(PlantedBug::IterationOffByOne) {
                    frame.max_iterations + 1
                } else {
                    frame.max_iterations
                };
                if frame.iteration >= limit {
                    cx.resolve_all(frame, messages::SKIPPED_AFTER_LIMIT);
                    return Some(TurnResult::new(TurnAction::MaxIterations, ""));
                }
                frame.iteration += 1;
                let skip = cx.config.has_bug(PlantedBug::SkipUnresolvedAfterChild)
                    && frame.resumed_from_child;
                frame.resumed_from_child = false;
                if !skip && !all_resolved && frame.session.next_unresolved_tool_use().is_some() {
                    if cx.config.has_bug(PlantedBug::ToolPassUncounted) {
                        frame.iteration -= 1;
                    }
                    frame.phase = Phase::RunTools;
                    continue;
                }
                if frame.node.more().pending_modify.is_some()
                    || frame.node.status != Status::Running
                {
                    task_checkpoint(frame, cx);
                }
                let call = cx.next_call();
                tracing::debug!(frame = %frame.agent.frame_name, iteration = frame.iteration, "model call");
                cx.record(|| Event::LlmRequest {
                    key: cx.key.clone(),
                    frame: frame.agent.frame_name.clone(),
                    frame_id: frame.frame_id,
                    session_id: frame.agent_session_id,
                    call,
                    iteration: frame.iteration,
                    max_iterations: frame.max_iterations,
                    messages: frame.session.messages.len(),
                });
                cx.effects.push_back(Effect::CallLlm { call });
                frame.phase = Phase::AwaitLlm {
                    call,
                    partial: Content::new(),
                };
                return None;
            }
            Phase::RunTools => {
                if let Some(done) = run_next_tool(frame, cx) {
                    return done;
                }
                all_resolved = matches!(frame.phase, Phase::Loop);
            }
            _ => return None,
        }
    }
}

/// The checkpoint before a model call: a modification's new task reaches the agent as a user
/// text, and the agent runs again.
fn task_checkpoint(frame: &mut StackFrame, cx: &mut TurnCx<'_>) {
    if let Some(content) = frame
        .node
        .more
        .as_mut()
        .and_then(|m| m.pending_modify.take())
    {
        let text: Arc<str> = crate::agents::tree::task_changed(&content).into();
        cx.record(|| Event::TaskChanged {
            key: cx.key.clone(),
            frame: frame.agent.frame_name.clone(),
            agent_id: frame.frame_id,
            text: text.clone(),
        });
        cx.journal(|| ContextEntry::User {
            agent_session_id: frame.agent_session_id,
            text: text.clone(),
        });
        frame.session.add_user_message(text);
    }
    cx.set_status(frame, Status::Running);
}
