//! Seed 001's `fork` and `wait` (DESIGN §8): a fork is a batch child of the caller's own
//! definition that runs beside its caller, off every stack, in its own frame; `wait` parks the
//! caller's tool until the fork ends.
//!
//! A fork's frame sits in the arena like any other and answers its calls by [`FrameId`]; only the
//! orchestration differs: it never reaches the user, and when it ends, its result goes to its
//! caller's record of it (and to the caller's `wait`, if one is parked on it) instead of a stack.

use std::sync::Arc;

use crate::agents::frame::{ForkOf, ForkRecord, Phase, StackFrame};
use crate::agents::tree::Status;
use crate::model::agent::AgentDef;
use crate::model::ids::FrameId;
use crate::model::messages;
use crate::model::transcript::{BlockAt, Session};
use crate::persist::ContextEntry;
use crate::protocol::{Event, FrameInfo};
use crate::runtime::planted::PlantedBug;

use super::turn_context::{TurnAction, TurnCx, TurnInput, TurnResult};
use super::Runtime;

/// The script name of a fork: `<caller>#<handle>` (`main#1`, `research#2`, `main#1#1`).
pub fn fork_name(caller: &str, handle: u32) -> String {
    format!("{caller}#{handle}")
}

/// The definition a fork of `caller` runs under: the caller's own, named `name`.
pub(super) fn fork_def(caller: &AgentDef, name: String) -> Arc<AgentDef> {
    Arc::new(AgentDef {
        frame_name: format!("fork:{name}").into(),
        name,
        ..AgentDef::clone(caller)
    })
}

/// Starts fork `handle` of `frame` with `prompt`: its frame waits in the turn context until the
/// orchestration places and starts it, once the caller's step is over.
pub(super) fn start_fork(frame: &mut StackFrame, prompt: &str, cx: &mut TurnCx<'_>) -> u32 {
    // The caller's conversation up to its last complete exchange (the reply that forks is still
    // open), then the prompt.
    let cut = frame
        .session
        .next_unresolved()
        .map_or(frame.session.messages.len(), |(at, _)| at.message as usize);
    new_fork(frame, prompt, cut, None, cx)
}

/// Starts a workflow child of `frame` (step 4 of the six steps): a fork whose session is only
/// its subquestion, running the same workflow at `depth`.
pub(super) fn start_child(frame: &mut StackFrame, task: &str, depth: u32, cx: &mut TurnCx<'_>) {
    new_fork(frame, task, 0, Some(depth), cx);
}

fn new_fork(
    frame: &mut StackFrame,
    prompt: &str,
    cut: usize,
    workflow_depth: Option<u32>,
    cx: &mut TurnCx<'_>,
) -> u32 {
    let handle = u32::try_from(frame.node.more().forks.len() + 1).unwrap_or(u32::MAX);
    let agent = fork_def(&frame.agent, fork_name(&frame.agent.name, handle));
    let agent_session_id = cx.ids.next_uuid();
    let frame_id = cx.ids.next_uuid();
    let session = Session::forked(agent_session_id, &frame.session, cut, prompt);
    cx.journal(|| ContextEntry::ForkSession {
        agent_session_id,
        caller_session_id: frame.agent_session_id,
        messages: cut,
        prompt: prompt.into(),
    });
    let mut fork = StackFrame::new(frame_id, agent, session, agent_session_id, None);
    fork.node.user_content = prompt.into();
    fork.node.more_mut().fork_of = Some(ForkOf {
        caller: frame.id,
        handle,
    });
    if let Some(depth) = workflow_depth {
        fork.node.more_mut().workflow = Some(crate::agents::workflow::WorkflowRun::pending(depth));
    }
    frame.node.more_mut().forks.push(ForkRecord {
        handle,
        agent_id: frame_id,
        frame: None,
        result: None,
        status: Status::Running,
        task: prompt.into(),
    });
    cx.forks.push(fork);
    handle
}

/// The caller's `wait({handle})`: answered at once when the fork ended (or never was), parked
/// otherwise. `Some(None)` parks the turn.
pub(super) fn wait_fork(
    frame: &mut StackFrame,
    at: BlockAt,
    handle: &serde_json::Value,
    cx: &mut TurnCx<'_>,
) -> Option<Option<TurnResult>> {
    let n = match handle {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    let shown = match handle {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    cx.record(|| Event::Wait {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        tool_use_id: frame
            .session
            .tool_use_at(at)
            .map_or_else(|| "".into(), |u| u.id.clone()),
        handle: n.and_then(|n| u32::try_from(n).ok()),
    });
    let record = n.and_then(|n| {
        frame
            .node
            .more()
            .forks
            .iter()
            .find(|r| u64::from(r.handle) == n)
    });
    match record {
        None => {
            cx.finish_tool(frame, at, None, messages::no_fork(&shown).into(), true);
            None
        }
        Some(ForkRecord {
            result: Some((text, is_error)),
            ..
        }) => {
            let (text, is_error) = (text.clone(), *is_error);
            cx.finish_tool(frame, at, None, text, is_error);
            None
        }
        Some(r) if cx.config.has_bug(PlantedBug::WaitReturnsEarly) => {
            let text = format!("Fork {} is still running.", r.handle).into();
            cx.finish_tool(frame, at, None, text, false);
            None
        }
        Some(r) => {
            frame.phase = Phase::AwaitFork {
                at,
                handle: r.handle,
            };
            Some(None)
        }
    }
}

impl Runtime {
    /// Places the forks the last turn started and starts each one.
    pub(super) fn start_new_forks(&mut self) {
        while !self.new_forks.is_empty() {
            let forks = std::mem::take(&mut self.new_forks);
            for fork in forks {
                let Some(of) = fork.node.more().fork_of else {
                    continue;
                };
                let Some(slot) = self
                    .stacks
                    .frame(of.caller)
                    .map(|c| c.conversation as usize)
                else {
                    continue; // The caller ended in the same step: the fork never starts.
                };
                let info = FrameInfo::of(&fork);
                let agent_id = fork.frame_id;
                let id = self.stacks.insert_detached(slot, fork, of.caller);
                if let Some(caller) = self.stacks.frame_mut(of.caller) {
                    if let Some(r) = caller
                        .node
                        .more_mut()
                        .forks
                        .iter_mut()
                        .find(|r| r.agent_id == agent_id)
                    {
                        r.frame = Some(id);
                    }
                }
                if self.config.record_events {
                    let caller = self.stacks.frame(of.caller).expect("checked above");
                    self.events.push(Event::ForkStarted {
                        key: self.stacks.entry(slot).key.clone(),
                        caller: caller.agent.frame_name.clone(),
                        caller_id: caller.frame_id,
                        handle: of.handle,
                        frame: info,
                    });
                }
                self.node_started(id, Some(of.caller), false);
                self.drive(id, TurnInput::Start);
            }
        }
    }

    /// How a turn of fork `id` ended: a fork ends with its final text (or its `complete`), or
    /// fails; nothing of it reaches the user.
    pub(super) fn act_fork(&mut self, id: FrameId, result: TurnResult) {
        let (status, text, is_error) = match result.action {
            TurnAction::SendText | TurnAction::Complete => (Status::Completed, result.text, false),
            TurnAction::MaxIterations => (
                Status::Error,
                Arc::from(messages::CHILD_MAX_ITERATIONS),
                true,
            ),
            TurnAction::Error => (
                Status::Error,
                messages::llm_error(&result.text).into(),
                true,
            ),
            TurnAction::Interrupted | TurnAction::Interrupt | TurnAction::ChildActivated => (
                Status::Error,
                Arc::from(messages::agent_interrupted("a fork cannot reach the user")),
                true,
            ),
        };
        self.end_fork(id, status, text, is_error, true);
    }

    /// Ends fork `id` with `status` and `text`: its own forks are cancelled, its open tool uses
    /// answered, its node ends, and (with `tell_caller`) its caller learns the result, resuming a
    /// `wait` parked on it. A caller that is itself ending is not told.
    pub(super) fn end_fork(
        &mut self,
        id: FrameId,
        status: Status,
        text: Arc<str>,
        is_error: bool,
        tell_caller: bool,
    ) {
        self.cancel_forks_of(id);
        let skip: &str = match status {
            Status::Deleted => messages::AGENT_DELETED,
            _ => messages::FORK_CANCELLED,
        };
        self.with_frame(id, |frame, cx| cx.stop(frame, Some(skip), Phase::AwaitUser));
        let Some(mut fork) = self.stacks.remove_detached(id) else {
            return;
        };
        let slot = fork.conversation as usize;
        if self.config.record_events {
            self.events.push(Event::ForkEnded {
                key: self.stacks.entry(slot).key.clone(),
                frame: FrameInfo::of(&fork),
                status,
                result: text.clone(),
                iterations: fork.iteration,
            });
        }
        self.node_ended_as(slot, &mut fork, status, &text);
        let Some(of) = fork.node.more().fork_of.filter(|_| tell_caller) else {
            return;
        };
        let Some(caller) = self.stacks.frame_mut(of.caller) else {
            return;
        };
        if let Some(r) = caller
            .node
            .more_mut()
            .forks
            .iter_mut()
            .find(|r| r.handle == of.handle)
        {
            r.frame = None;
            r.result = Some((text.clone(), is_error));
            r.status = status;
        }
        if matches!(caller.phase, Phase::AwaitSubagents)
            && caller.node.more().forks.iter().all(|r| r.frame.is_none())
        {
            let caller_slot = caller.conversation as usize;
            self.drive(of.caller, TurnInput::SubagentsDone);
            self.pump(caller_slot);
        } else if let Phase::AwaitFork { at, handle } = caller.phase {
            let any = self.config.has_bug(PlantedBug::WaitResumedByAnyFork);
            if handle == of.handle || any {
                let caller_slot = caller.conversation as usize;
                self.drive(
                    of.caller,
                    TurnInput::ForkDone {
                        at,
                        content: text,
                        is_error,
                    },
                );
                self.pump(caller_slot);
            }
        }
    }

    /// Cancels every fork of frame `id` still running (its caller's frame ends, so nothing is
    /// resumed).
    pub(super) fn cancel_forks_of(&mut self, id: FrameId) {
        let Some(caller) = self.stacks.frame_mut(id) else {
            return;
        };
        let mut running = Vec::new();
        for r in caller.node.more_mut().forks.iter_mut() {
            if let Some(fork) = r.frame.take() {
                r.result = Some((messages::FORK_CANCELLED.into(), true));
                r.status = Status::Error;
                running.push(fork);
            }
        }
        for fork in running {
            let text = messages::FORK_CANCELLED.into();
            self.end_fork(fork, Status::Error, text, true, false);
        }
    }
}
