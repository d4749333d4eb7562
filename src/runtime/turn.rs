//! One turn of one frame: seed 000's `execute_turn`, which is also seed 002's agent core loop
//! (LLM → tools → LLM until a text reply), written as a resumable state machine.
//!
//! The seed's version is an `async` function that awaits the model and each tool. A sans-IO runtime
//! cannot await, so the loop keeps its position in [`Phase`] and returns `None` whenever it needs
//! the driver (a model reply, a tool outcome, a timer); the driver feeds the answer back as a
//! [`TurnInput`] and the loop continues exactly where it stopped. The iteration accounting is the
//! seed's: every pass through the loop head counts one iteration, whether it calls the model or
//! only runs the tool uses left unresolved when a child completed.
//!
//! This file takes each input to where the loop goes on, and handles the model's replies; the
//! loop itself is [`super::turn_loop`], and what a turn takes and gives is
//! [`super::turn_context`].

use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::model::llm::LlmReply;
use crate::model::messages;
use crate::model::transcript::{Block, Content};
use crate::persist::ContextEntry;
use crate::protocol::{Effect, Event, StreamEvent};
use crate::runtime::planted::PlantedBug;

use super::dispatch::{on_tool_outcome, on_tool_timeout};
use super::turn_context::{TurnAction, TurnCx, TurnInput, TurnResult};
use super::turn_loop::run;

/// Runs the frame until its turn ends (`Some`) or it waits for the driver (`None`).
///
/// The caller has checked that `input` is what the frame waits for (a reply to *its* call, a
/// result of *its* tool); stale inputs never get here.
#[inline]
pub(crate) fn execute_turn(
    frame: &mut StackFrame,
    input: TurnInput,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    match input {
        TurnInput::Start => {
            frame.phase = Phase::Loop;
            if frame.agent.workflow.is_some() {
                super::workflow::begin(frame, cx);
            }
        }
        TurnInput::User(text) => match std::mem::take(&mut frame.phase) {
            Phase::AwaitAnswer {
                tool_use_id: None,
                timer,
                ..
            } => {
                if let Some((timer, _)) = timer {
                    cx.effects.push_back(Effect::CancelTimer { timer });
                }
                return super::workflow::answered(frame, text, cx);
            }
            Phase::AwaitAnswer {
                tool_use_id: Some(tool_use_id),
                timer,
                ..
            } => {
                if let Some((timer, _)) = timer {
                    cx.effects.push_back(Effect::CancelTimer { timer });
                }
                if cx.config.has_bug(PlantedBug::AnswerCountsAnIteration) {
                    frame.iteration += 1;
                }
                cx.add_result(frame, tool_use_id, text, false);
                frame.phase = Phase::RunTools;
            }
            _ => {
                if !(frame.is_main() && cx.config.has_bug(PlantedBug::MainMessagesUnjournaled)) {
                    cx.journal(|| ContextEntry::User {
                        agent_session_id: frame.agent_session_id,
                        text: text.clone(),
                    });
                }
                frame.session.add_user_message(text);
                frame.phase = Phase::Loop;
                if frame.agent.workflow.is_some() {
                    super::workflow::begin(frame, cx);
                }
            }
        },
        TurnInput::ChildResult {
            tool_use_id,
            content,
            is_error,
        } => {
            cx.add_result(frame, tool_use_id, content, is_error);
            frame.phase = Phase::Loop;
            frame.resumed_from_child = true;
        }
        TurnInput::LlmReply(reply) => return on_reply(frame, reply, false, cx),
        TurnInput::LlmStreamEnd(reply) => return on_reply(frame, reply, true, cx),
        TurnInput::LlmError(error) => {
            cx.record(|| Event::LlmError {
                key: cx.key.clone(),
                frame: frame.agent.frame_name.clone(),
                frame_id: frame.frame_id,
                kind: error.kind,
                message: error.message.as_str().into(),
            });
            frame.phase = Phase::Loop;
            return Some(TurnResult::new(TurnAction::Error, error.message));
        }
        TurnInput::ToolDone { call, output } => {
            if !on_tool_outcome(frame, call, output.content, output.is_error, cx) {
                return None;
            }
        }
        TurnInput::ToolTimeout { timer } => {
            if !on_tool_timeout(frame, timer, cx) {
                return None;
            }
        }
        TurnInput::QuestionFailed(text) => match std::mem::take(&mut frame.phase) {
            Phase::AwaitAnswer {
                tool_use_id: Some(tool_use_id),
                ..
            } => {
                cx.add_result(frame, tool_use_id, text, true);
                frame.phase = Phase::RunTools;
            }
            // A workflow's question: the failure is what it hears back.
            Phase::AwaitAnswer {
                tool_use_id: None, ..
            } => return super::workflow::answered(frame, text, cx),
            other => {
                frame.phase = other;
                return None;
            }
        },
        TurnInput::Answered => {
            if let Phase::AwaitAnswer {
                timer: Some((timer, _)),
                ..
            } = frame.phase
            {
                cx.effects.push_back(Effect::CancelTimer { timer });
            }
            frame.phase = Phase::RunTools;
        }
        TurnInput::SubagentsDone => {
            if !matches!(frame.phase, Phase::AwaitSubagents) {
                return None;
            }
            return super::workflow::children_done(frame, cx);
        }
        TurnInput::ForkDone {
            at,
            content,
            is_error,
        } => {
            if !matches!(frame.phase, Phase::AwaitFork { .. }) {
                return None;
            }
            cx.finish_tool(frame, at, None, content, is_error);
            frame.phase = Phase::RunTools;
        }
    }
    run(frame, cx)
}

fn on_reply(
    frame: &mut StackFrame,
    mut reply: LlmReply,
    streamed: bool,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    // Both APIs reject empty text blocks: a reply of nothing but empty text is an empty reply.
    let empty_text = |b: &Block| matches!(b, Block::Text { text } if text.is_empty());
    if reply.content.iter().any(empty_text) {
        reply.content.retain(|b| !empty_text(b));
    }
    frame.usage += reply.usage;
    *cx.usage += reply.usage;
    cx.activity(frame, |a| a.first_output);
    cx.detail(|| Event::LlmReply {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        content: reply.content.clone(),
        usage: reply.usage,
    });
    if reply.content.is_empty() {
        // An empty reply sends nothing; it is not added to the session either, since the APIs
        // reject an empty assistant message.
        if cx.config.has_bug(PlantedBug::EmptyReplyRecorded) {
            cx.journal(|| ContextEntry::Assistant {
                agent_session_id: frame.agent_session_id,
                content: Content::new(),
            });
            frame.session.add_assistant_message(Content::new());
        }
        frame.phase = Phase::AwaitUser;
        return Some(TurnResult::new(TurnAction::SendText, ""));
    }
    let mut has_tool_use = false;
    for (i, block) in reply.content.iter().enumerate() {
        match block {
            Block::Text { .. } => {}
            Block::ToolUse { id, .. } => {
                has_tool_use = true;
                // A reused id would make the next request invalid under both APIs: the reply is
                // rejected as a failed call instead of corrupting the session.
                let earlier = reply.content[..i]
                    .iter()
                    .any(|b| matches!(b, Block::ToolUse { id: other, .. } if crate::model::ids::same_id(other, id)));
                if earlier || frame.session.has_tool_use_id(id) {
                    let message = format!("invalid reply: duplicate tool_use id '{id}'");
                    return reject_reply(frame, message, cx);
                }
            }
            Block::ToolResult { .. } => {
                let message = "invalid reply: a model reply cannot hold a tool_result".to_owned();
                return reject_reply(frame, message, cx);
            }
        }
    }
    let text = reply_text(&reply.content);
    if let (false, Some(text)) = (streamed, &text) {
        cx.stream(frame, || StreamEvent::TextDelta { text: text.clone() });
    }
    cx.journal(|| ContextEntry::Assistant {
        agent_session_id: frame.agent_session_id,
        content: reply.content.clone(),
    });
    frame.session.add_assistant_message(reply.content);
    if has_tool_use
        && frame.iteration >= frame.max_iterations
        && cx.config.has_bug(PlantedBug::ToolsSkippedOnLastIteration)
    {
        cx.resolve_all(frame, messages::SKIPPED_AFTER_LIMIT);
        return Some(TurnResult::new(TurnAction::MaxIterations, ""));
    }
    if has_tool_use {
        // Text next to tool uses is recorded but not sent (DESIGN §3 item 5).
        frame.phase = Phase::RunTools;
        run(frame, cx)
    } else if frame.agent.workflow.is_some() && super::workflow::active(frame) {
        // A workflow agent's text is the decision of its step.
        super::workflow::on_text(frame, text.unwrap_or_else(|| "".into()), cx)
    } else {
        frame.phase = Phase::AwaitUser;
        Some(TurnResult::new(
            TurnAction::SendText,
            text.unwrap_or_else(|| "".into()),
        ))
    }
}

/// The reply's text: one block's text is shared as it is, several are joined.
fn reply_text(content: &[Block]) -> Option<Arc<str>> {
    let mut texts = content.iter().filter_map(|b| match b {
        Block::Text { text } => Some(text),
        _ => None,
    });
    let first = texts.next()?;
    let Some(second) = texts.next() else {
        return Some(first.clone());
    };
    let mut all = String::from(&**first);
    all.push_str(second);
    texts.for_each(|t| all.push_str(t));
    Some(all.into())
}

fn reject_reply(
    frame: &mut StackFrame,
    message: String,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    cx.record(|| Event::LlmError {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        kind: crate::model::llm::LlmErrorKind::Other,
        message: message.as_str().into(),
    });
    frame.phase = Phase::Loop;
    Some(TurnResult::new(TurnAction::Error, message))
}
