//! Tool dispatch inside a turn: how each `tool_use` is treated (`complete`, the spawners,
//! `ask_user`, an external tool, a refusal), parallel batches (DESIGN §3 item 9), and timeouts
//! (item 10).

use std::sync::Arc;

use smallvec::SmallVec;

use crate::agents::frame::{BatchItem, Phase, StackFrame};
use crate::agents::tools::{builtin, complete_result, Tool, ToolContext, ToolOutcome};
use crate::agents::tools::{UseAgent, UseSkill};
use crate::model::ids::CallId;
use crate::model::messages;
use crate::model::transcript::BlockAt;
use crate::persist::ContextEntry;
use crate::protocol::{Effect, Event, StreamEvent};
use crate::runtime::planted::PlantedBug;
use crate::runtime::RuntimeConfig;

use super::turn_context::{ChildSpec, TurnAction, TurnCx, TurnResult};

/// How the runtime treats one `tool_use`.
enum Dispatch {
    /// An external tool, with its timeout (looked up once, here).
    External(Option<u64>),
    Builtin(Builtin),
}

/// A tool use the runtime answers itself.
enum Builtin {
    Complete,
    Spawner(&'static dyn Tool),
    AskUser,
    Fork,
    Wait,
    Refused(String),
}

fn classify(frame: &StackFrame, name: &str, config: &RuntimeConfig) -> Dispatch {
    match name {
        builtin::COMPLETE
            if frame.is_main() && !config.has_bug(PlantedBug::MainCompleteAccepted) =>
        {
            Dispatch::Builtin(Builtin::Refused(messages::tool_not_available(name)))
        }
        builtin::COMPLETE => Dispatch::Builtin(Builtin::Complete),
        builtin::FORK if frame.agent.fork => Dispatch::Builtin(Builtin::Fork),
        builtin::WAIT if frame.agent.fork => Dispatch::Builtin(Builtin::Wait),
        builtin::USE_SKILL | builtin::USE_AGENT if frame.is_fork() => {
            Dispatch::Builtin(Builtin::Refused(messages::not_available_to_fork(name)))
        }
        builtin::USE_SKILL => Dispatch::Builtin(Builtin::Spawner(&UseSkill)),
        builtin::USE_AGENT => Dispatch::Builtin(Builtin::Spawner(&UseAgent)),
        builtin::ASK_USER if frame.agent.batch.is_some() => {
            Dispatch::Builtin(Builtin::Refused(messages::ASK_USER_IN_BATCH.to_owned()))
        }
        builtin::ASK_USER => Dispatch::Builtin(Builtin::AskUser),
        _ => match config.tools.get(name) {
            None => Dispatch::Builtin(Builtin::Refused(messages::tool_not_found(name))),
            Some(_) if !frame.agent.allows(name) => {
                Dispatch::Builtin(Builtin::Refused(messages::tool_not_available(name)))
            }
            Some(spec) => Dispatch::External(spec.timeout_ms),
        },
    }
}

/// Handles one unresolved tool use. `Some(r)` leaves the loop with `r`; `None` continues it.
#[inline]
pub(super) fn run_next_tool(
    frame: &mut StackFrame,
    cx: &mut TurnCx<'_>,
) -> Option<Option<TurnResult>> {
    let Some((at, next)) = frame.session.next_unresolved() else {
        frame.phase = Phase::Loop;
        return None;
    };
    cx.detail(|| Event::ToolCall {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        tool_use_id: next.id.clone(),
        name: next.name.clone(),
        input: next.input.clone(),
    });
    let builtin = match classify(frame, next.name, cx.config) {
        // An external tool's driver reads the id, name and input from the session
        // (`Runtime::tool_run`): nothing is copied for it.
        Dispatch::External(_) if frame.agent.parallel_tools => {
            start_batch(frame, cx);
            return Some(None);
        }
        Dispatch::External(timeout_ms) => {
            start_tool(frame, at, None, timeout_ms, cx);
            return Some(None);
        }
        Dispatch::Builtin(builtin) => builtin,
    };
    let (id, input) = (next.id.clone(), next.input.clone());
    match builtin {
        Builtin::Complete => {
            let result = complete_result(&input);
            cx.add_result(frame, id, result.clone(), false);
            cx.resolve_all(frame, messages::SKIPPED_AFTER_COMPLETE);
            Some(Some(TurnResult::new(TurnAction::Complete, result)))
        }
        Builtin::Refused(text) => {
            cx.finish_tool(frame, at, None, text.into(), true);
            None
        }
        Builtin::Fork => {
            let Some(prompt) = input.get("prompt").and_then(|q| q.as_str()) else {
                let text = messages::missing_field("prompt").into();
                cx.finish_tool(frame, at, None, text, true);
                return None;
            };
            let handle = super::fork::start_fork(frame, prompt, cx);
            cx.finish_tool(frame, at, None, handle.to_string().into(), false);
            None
        }
        Builtin::Wait => {
            let Some(handle) = input.get("handle") else {
                let text = messages::missing_field("handle").into();
                cx.finish_tool(frame, at, None, text, true);
                return None;
            };
            super::fork::wait_fork(frame, at, handle, cx)
        }
        Builtin::AskUser => {
            if input.get("question").and_then(|q| q.as_str()).is_none() {
                let text = messages::missing_field("question").into();
                cx.finish_tool(frame, at, None, text, true);
                return None;
            }
            if cx.session.is_some() {
                return super::sessions::ask_in_session(frame, at, &id, &input, cx)
                    .expect("a session asks in its own way");
            }
            if cx.config.query_user == crate::runtime::config::QueryUser::None {
                // Nobody to ask: answered at once, and the turn goes on.
                cx.finish_tool(frame, at, None, messages::NO_ANSWER.into(), false);
                return None;
            }
            let text = crate::agents::tree::question_text(&input);
            cx.open_question(frame, Some(id), text.as_str().into(), None);
            if frame.is_fork() {
                // A fork never talks to the user: its question waits for an answer by its id, or
                // for the next message of a conversation whose top frame waits on the fork.
                cx.set_status(frame, crate::agents::tree::Status::AwaitingUser);
                return Some(None);
            }
            Some(Some(TurnResult::new(TurnAction::Interrupt, text)))
        }
        Builtin::Spawner(tool) => {
            let ctx = ToolContext {
                catalog: cx.catalog,
                caller: &frame.agent,
                tool_use_id: &id,
            };
            match tool.call(&input, &ctx) {
                Ok(ToolOutcome::Output(out)) => {
                    cx.finish_tool(frame, at, None, out.content, out.is_error);
                    None
                }
                Err(e) => {
                    let text = messages::tool_failed(&e.0);
                    cx.finish_tool(frame, at, None, text.into(), true);
                    None
                }
                Ok(ToolOutcome::Spawn(req)) if req.agent.passthrough => {
                    // A passthrough skill is one external execution, under the skill's name: no
                    // frame is pushed.
                    let external: Arc<str> = req.agent.frame_name.clone();
                    start_tool(frame, at, Some(external), None, cx);
                    Some(None)
                }
                Ok(ToolOutcome::Spawn(req)) => {
                    let child = ChildSpec::new(req, id, cx.ids);
                    cx.journal(|| ContextEntry::AgentSession {
                        agent_session_id: child.agent_session_id,
                        agent_name: child.req.agent.name.clone(),
                        agent_type: child.req.agent.kind,
                        parent_tool_use_id: child.parent_tool_use_id.clone(),
                        message: child.req.message.clone(),
                    });
                    // The orchestration loop names the child once it is pushed.
                    frame.phase = Phase::AwaitChildren {
                        children: SmallVec::new(),
                    };
                    Some(Some(TurnResult {
                        action: TurnAction::ChildActivated,
                        text: "".into(),
                        child: Some(Box::new(child)),
                    }))
                }
            }
        }
    }
}

/// Emits one external tool run for the tool use at `at` and waits for it. `name` overrides the
/// tool's name (a passthrough skill runs under its own).
fn start_tool(
    frame: &mut StackFrame,
    at: BlockAt,
    name: Option<Arc<str>>,
    timeout_ms: Option<u64>,
    cx: &mut TurnCx<'_>,
) {
    let (call, timer) = emit_run(frame, at, name.as_ref(), timeout_ms, cx);
    if cx.config.has_bug(PlantedBug::ToolRunNeverIssued) && timer.is_none() {
        // The run was pushed last: take it back, as if it had never been handed over.
        cx.effects.pop_back();
    }
    frame.phase = Phase::AwaitTool {
        call,
        at,
        name,
        timer,
    };
}

fn emit_run(
    frame: &mut StackFrame,
    at: BlockAt,
    name: Option<&Arc<str>>,
    timeout_ms: Option<u64>,
    cx: &mut TurnCx<'_>,
) -> (CallId, Option<CallId>) {
    if let Some(tool_use) = frame.session.tool_use_at(at) {
        let name = name.unwrap_or(tool_use.name);
        cx.stream(frame, || StreamEvent::ToolStart {
            name: name.clone(),
            id: tool_use.id.clone(),
        });
        tracing::debug!(frame = %frame.agent.frame_name, tool = %name, id = %tool_use.id, "tool call");
    }
    cx.activity(frame, |a| a.tool_start);
    let call = cx.next_call();
    cx.effects.push_back(Effect::RunTool { call });
    let timer = match timeout_ms {
        Some(after_ms) => {
            let timer = cx.next_call();
            cx.effects.push_back(Effect::SetTimer { timer, after_ms });
            Some(timer)
        }
        None => None,
    };
    (call, timer)
}

/// Emits the maximal run of consecutive external tool uses at once (DESIGN §3 item 9). The first
/// one is known to be external; the run stops at the first built-in or refused tool, which then
/// runs in order after the batch.
fn start_batch(frame: &mut StackFrame, cx: &mut TurnCx<'_>) {
    let uses: Vec<BlockAt> = frame.session.unresolved().map(|(at, _)| at).collect();
    let mut batch = Vec::with_capacity(uses.len());
    for (i, at) in uses.into_iter().enumerate() {
        let Some(tool_use) = frame.session.tool_use_at(at) else {
            break;
        };
        let Dispatch::External(timeout_ms) = classify(frame, tool_use.name, cx.config) else {
            break;
        };
        if i > 0 {
            // The first was recorded by the caller.
            cx.detail(|| Event::ToolCall {
                key: cx.key.clone(),
                frame: frame.agent.frame_name.clone(),
                frame_id: frame.frame_id,
                tool_use_id: tool_use.id.clone(),
                name: tool_use.name.clone(),
                input: tool_use.input.clone(),
            });
        }
        let (call, timer) = emit_run(frame, at, None, timeout_ms, cx);
        batch.push(BatchItem {
            call,
            at,
            output: None,
            appended: false,
            timer,
        });
    }
    frame.phase = Phase::AwaitTools { batch };
}

/// A tool finished or timed out. Returns whether the frame can continue its loop.
pub(super) fn on_tool_outcome(
    frame: &mut StackFrame,
    call: CallId,
    content: Arc<str>,
    is_error: bool,
    cx: &mut TurnCx<'_>,
) -> bool {
    if !is_error {
        cx.activity(frame, |a| a.tool_success);
    }
    match std::mem::take(&mut frame.phase) {
        Phase::AwaitTool {
            at, name, timer, ..
        } => {
            if let Some(timer) = timer {
                cx.effects.push_back(Effect::CancelTimer { timer });
            }
            cx.finish_tool(frame, at, name.as_ref(), content, is_error);
            frame.phase = Phase::RunTools;
            true
        }
        Phase::AwaitTools { mut batch } => {
            for item in batch.iter_mut() {
                if item.call == call || item.timer == Some(call) {
                    if item.call == call {
                        if let Some(timer) = item.timer {
                            cx.effects.push_back(Effect::CancelTimer { timer });
                        }
                    }
                    if cx.config.has_bug(PlantedBug::CompletionOrderResults) {
                        cx.finish_tool(frame, item.at, None, content.clone(), is_error);
                        item.output = Some(("".into(), false));
                        item.appended = true;
                        continue;
                    }
                    // Record when each tool of the batch finished: its result joins the session
                    // only when the whole batch is in, in the reply's order.
                    cx.detail(|| Event::ToolFinished {
                        key: cx.key.clone(),
                        frame: frame.agent.frame_name.clone(),
                        frame_id: frame.frame_id,
                        tool_use_id: frame
                            .session
                            .tool_use_at(item.at)
                            .map(|u| u.id.clone())
                            .unwrap_or_default(),
                        is_error,
                    });
                    item.output = Some((content.clone(), is_error));
                }
            }
            if batch.iter().any(|item| item.output.is_none()) {
                frame.phase = Phase::AwaitTools { batch };
                return false;
            }
            // Every tool finished: results go in in the reply's order, whatever order they
            // finished in.
            for item in batch {
                let Some((content, is_error)) = item.output else {
                    continue; // Checked above: every item has its output.
                };
                if item.appended {
                    continue; // Already appended by the completion-order bug.
                }
                cx.finish_tool(frame, item.at, None, content, is_error);
            }
            frame.phase = Phase::RunTools;
            true
        }
        other => {
            frame.phase = other;
            false
        }
    }
}

pub(super) fn on_tool_timeout(frame: &mut StackFrame, timer: CallId, cx: &mut TurnCx<'_>) -> bool {
    let (at, name) = match &frame.phase {
        Phase::AwaitTool { at, name, .. } => (*at, name.as_ref()),
        Phase::AwaitTools { batch } if !cx.config.has_bug(PlantedBug::BatchTimeoutIgnored) => {
            match batch.iter().find(|i| i.timer == Some(timer)) {
                Some(item) => (item.at, None),
                None => return false,
            }
        }
        _ => return false,
    };
    let Some(name) = name.or(frame.session.tool_use_at(at).map(|u| u.name)) else {
        return false;
    };
    let timeout_ms = cx
        .config
        .tools
        .get(&**name)
        .and_then(|t| t.timeout_ms)
        .unwrap_or(0);
    let text: Arc<str> = messages::tool_timed_out(name, timeout_ms).into();
    on_tool_outcome(frame, timer, text, true, cx)
}
