//! Seed 001's six-step workflow (DESIGN §8) in the turn machinery: where a workflow agent's text
//! reply is a decision, what each decision leads to, and the children of step 4. The steps and
//! the reading of decisions are data in [`crate::agents::workflow`].
//!
//! A decision is an ordinary model call: the step's prompt is a user text of the agent's session,
//! the call goes through the loop head (its limit, its iteration, its checkpoint), and a reply
//! with tool uses runs them like any other, until a reply without one gives the decision. A
//! question needs no tool use: the frame waits in [`Phase::AwaitAnswer`] without one, and the
//! answer is a user text. The children of step 4 are forks of the agent's own definition whose
//! session is only their subquestion; when its main execution ends, the agent waits for all of
//! them in [`Phase::AwaitSubagents`].

use std::sync::Arc;

use crate::agents::frame::{Phase, StackFrame};
use crate::agents::tree::Status;
use crate::agents::workflow::{self as wf, Step, WorkflowRun};
use crate::model::messages;
use crate::persist::ContextEntry;
use crate::protocol::Event;
use crate::runtime::config::QueryUser;

use super::turn_context::{TurnAction, TurnCx, TurnResult};
use super::turn_loop::run;

/// Whether `frame` runs a workflow that has begun (its text replies are decisions).
#[inline]
pub(super) fn active(frame: &StackFrame) -> bool {
    frame.agent.workflow.is_some()
        && frame
            .node
            .more()
            .workflow
            .is_some_and(|r| r.step != Step::Pending)
}

/// Begins the workflow of a frame whose task is in its session (a new child's first turn, a
/// user's message to a main frame): step 1's prompt. A workflow already under way goes on.
pub(super) fn begin(frame: &mut StackFrame, cx: &mut TurnCx<'_>) {
    let depth = match frame.node.more().workflow {
        Some(run) if run.step != Step::Pending => return,
        Some(run) => run.depth,
        None => 0,
    };
    frame.node.more_mut().workflow = Some(WorkflowRun::pending(depth));
    enter(frame, Step::Clarify, wf::CLARIFY_PROMPT.into(), cx);
}

fn run_of(frame: &mut StackFrame) -> &mut WorkflowRun {
    frame
        .node
        .more_mut()
        .workflow
        .get_or_insert(WorkflowRun::pending(0))
}

/// Moves to `step`: its prompt joins the session as a user text, and the loop head comes next.
fn enter(frame: &mut StackFrame, step: Step, prompt: Arc<str>, cx: &mut TurnCx<'_>) {
    run_of(frame).step = step;
    cx.record(|| Event::WorkflowStep {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        step,
    });
    user_text(frame, prompt, cx);
    frame.phase = Phase::Loop;
}

fn user_text(frame: &mut StackFrame, text: Arc<str>, cx: &mut TurnCx<'_>) {
    cx.journal(|| ContextEntry::User {
        agent_session_id: frame.agent_session_id,
        text: text.clone(),
    });
    frame.session.add_user_message(text);
}

/// Enters `step` and runs on.
fn go(
    frame: &mut StackFrame,
    step: Step,
    prompt: Arc<str>,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    enter(frame, step, prompt, cx);
    run(frame, cx)
}

/// A text reply of a workflow agent: the decision of its step.
pub(super) fn on_text(
    frame: &mut StackFrame,
    text: Arc<str>,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    let run = *run_of(frame);
    match run.step {
        Step::Clarify if wf::is(&text, wf::NO) => {
            go(frame, Step::Blocking, wf::BLOCKING_PROMPT.into(), cx)
        }
        Step::Clarify => ask(frame, text, cx),
        Step::Blocking if wf::is(&text, wf::NO_QUESTION) => after_blocking(frame, cx),
        Step::Blocking => {
            run_of(frame).asked += 1;
            ask(frame, text, cx)
        }
        Step::Subquestions => {
            for task in wf::subquestions(&text) {
                super::fork::start_child(frame, &task, run.depth + 1, cx);
            }
            go(frame, Step::Main, wf::MAIN_PROMPT.into(), cx)
        }
        Step::Main => main_done(frame, cx),
        Step::Summary if wf::needs_more_info(&text) && !run.more_info => {
            let r = run_of(frame);
            r.more_info = true;
            r.step = Step::MoreInfo;
            ask(frame, text, cx)
        }
        Step::Summary | Step::MoreInfo | Step::Pending => finish(frame, text, cx),
    }
}

/// After the blocking questions: the subquestions, unless the agent is at its depth bound.
fn after_blocking(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    let depth = run_of(frame).depth;
    let max = frame.agent.workflow.map_or(0, |w| w.max_depth);
    if depth < max {
        go(
            frame,
            Step::Subquestions,
            wf::SUBQUESTIONS_PROMPT.into(),
            cx,
        )
    } else {
        go(frame, Step::Main, wf::MAIN_PROMPT.into(), cx)
    }
}

/// Asks the user `text`. Nobody to ask (`query_user: none`, or a stacked batch agent, which
/// never talks to the user): answered at once with `No answer from the user.`
fn ask(frame: &mut StackFrame, text: Arc<str>, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    let unattended = frame.agent.batch.is_some() && !frame.is_fork();
    if cx.config.query_user == QueryUser::None || unattended {
        return answered(frame, messages::NO_ANSWER.into(), cx);
    }
    if cx.session.is_some() {
        // A triggered session has no user: the question is persisted for an answer through the
        // store when the agent asks asynchronously; otherwise nobody can answer it.
        return match super::sessions::ask_async(frame, None, text, None, cx) {
            super::sessions::SessionAsk::Opened => None,
            super::sessions::SessionAsk::Refused(_) => {
                answered(frame, messages::NO_ANSWER.into(), cx)
            }
        };
    }
    cx.open_question(frame, None, text.clone(), None);
    if frame.is_fork() {
        // A fork never talks to the user: its question waits for an answer by its id, or for
        // the next message of a conversation whose top frame waits on it.
        cx.set_status(frame, Status::AwaitingUser);
        return None;
    }
    Some(TurnResult::new(TurnAction::Interrupt, text))
}

/// The user's answer to the workflow's question: a user text, then the step after it.
pub(super) fn answered(
    frame: &mut StackFrame,
    text: Arc<str>,
    cx: &mut TurnCx<'_>,
) -> Option<TurnResult> {
    user_text(frame, text, cx);
    let at = *run_of(frame);
    match at.step {
        Step::Clarify => go(frame, Step::Blocking, wf::BLOCKING_PROMPT.into(), cx),
        Step::Blocking if at.asked >= wf::MAX_BLOCKING => after_blocking(frame, cx),
        Step::Blocking => go(frame, Step::Blocking, wf::BLOCKING_PROMPT.into(), cx),
        Step::MoreInfo => go(frame, Step::Main, wf::MAIN_AGAIN_PROMPT.into(), cx),
        _ => {
            frame.phase = Phase::Loop;
            run(frame, cx)
        }
    }
}

/// The main execution ended: the summary, once every child has ended.
fn main_done(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    let running = frame.node.more().forks.iter().any(|r| r.frame.is_some());
    if running {
        cx.record(|| Event::WaitSubagents {
            key: cx.key.clone(),
            frame: frame.agent.frame_name.clone(),
            frame_id: frame.frame_id,
            waiting: true,
        });
        frame.phase = Phase::AwaitSubagents;
        return None;
    }
    summary(frame, cx)
}

/// Every child ended while the agent waited for them.
pub(super) fn children_done(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    cx.record(|| Event::WaitSubagents {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        waiting: false,
    });
    summary(frame, cx)
}

fn summary(frame: &mut StackFrame, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    let children: Vec<(Arc<str>, &str, Arc<str>)> = frame
        .node
        .more()
        .forks
        .iter()
        .map(|r| {
            let result = r
                .result
                .as_ref()
                .map_or_else(|| "".into(), |(t, _)| t.clone());
            (r.task.clone(), r.status.as_str(), result)
        })
        .collect();
    let prompt = wf::summary_prompt(&children).into();
    go(frame, Step::Summary, prompt, cx)
}

/// The summary is the agent's result; `metadata.subagents` lists each child's id, status and
/// result.
fn finish(frame: &mut StackFrame, text: Arc<str>, cx: &mut TurnCx<'_>) -> Option<TurnResult> {
    cx.record(|| Event::WorkflowDone {
        key: cx.key.clone(),
        frame: frame.agent.frame_name.clone(),
        frame_id: frame.frame_id,
        result: text.clone(),
    });
    let more = frame.node.more_mut();
    let subagents: Vec<serde_json::Value> = more
        .forks
        .iter()
        .map(|r| {
            serde_json::json!({
                "agent_id": r.agent_id.to_string(),
                "status": r.status.as_str(),
                "result": r.result.as_ref().map(|(t, _)| &**t),
            })
        })
        .collect();
    more.metadata
        .insert("subagents".to_owned(), serde_json::Value::Array(subagents));
    more.workflow = None;
    frame.phase = Phase::AwaitUser;
    let action = if frame.is_main() {
        TurnAction::SendText
    } else {
        TurnAction::Complete
    };
    Some(TurnResult::new(action, text))
}
