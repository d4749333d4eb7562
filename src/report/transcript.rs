//! The transcript: a stable, readable text rendering of a recorded run (virtual time, frame,
//! model requests and replies, tool calls and results, push and pop with the depth, what the user
//! was sent), and a JSON rendering of the same records.
//!
//! The text form is what snapshots store, so it is built only from the records: no `Debug` of
//! internal types, no addresses, nothing that is not a function of (scenario, seed).

use super::escape::printable;
use std::fmt::Write as _;

use serde::Serialize;

use crate::model::transcript::Block;
use crate::protocol::StreamEvent;
use crate::protocol::{Event, PopReason};
use crate::scenario::{Failure, Outcome};
use crate::sim::{Entry, Note, Record};

/// `[   1.250s]`: virtual time with millisecond precision.
fn time(ms: u64) -> String {
    format!("[{:>4}.{:03}s]", ms / 1000, ms % 1000)
}

fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// One block as transcripts show it.
pub fn block(b: &Block) -> String {
    match b {
        Block::Text { text } => format!("text {}", quote(text)),
        Block::ToolUse { id, name, input } => format!("tool_use {name} {id} {input}"),
        Block::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => format!(
            "tool_result {tool_use_id} {} error={is_error}",
            quote(content)
        ),
    }
}

pub(super) fn reason(r: PopReason) -> &'static str {
    match r {
        PopReason::Answered => "answered",
        PopReason::Completed => "completed",
        PopReason::MaxIterations => "max iterations",
        PopReason::Error => "error",
        PopReason::Cancelled => "cancelled",
        PopReason::Deleted => "deleted",
    }
}

/// Whether the text transcript shows this record. A status change that a push, a pop or a send
/// already shows (an agent starting, ending, waiting for the user and resuming) is left out;
/// modifications, deletions and every change of a fork are shown.
pub fn shown(entry: &Entry) -> bool {
    use crate::agents::tree::Status;
    match entry {
        Entry::Runtime(Event::AgentState {
            from,
            status,
            frame,
            ..
        }) => {
            frame.starts_with("fork:") && from.is_some() && !status.is_terminal()
                || matches!(status, Status::Modified)
                || *from == Some(Status::Modified) && *status == Status::Running
        }
        // The tool call's own line says it.
        Entry::Runtime(Event::Wait { .. }) => false,
        // An interactive frame's question is sent to the user, and that line says it.
        Entry::Runtime(Event::Question { frame, .. }) => frame.starts_with("fork:"),
        _ => true,
    }
}

/// One record as one line (without the time).
pub fn line(entry: &Entry) -> String {
    match entry {
        Entry::Sim(note) => match note {
            Note::LlmStall { agent } => {
                format!("sim: the model stalls for {agent} (no reply will come)")
            }
            Note::ToolHang { tool } => format!("sim: tool {tool} hangs (no result will come)"),
            Note::Advance { to_ms } => format!("sim: time advanced to {}ms", to_ms),
            Note::Fault { what } => format!("sim: fault injected: {what}"),
            Note::AsyncAnswer { question, outcome } => {
                format!("sim: the store did not take an answer to question {question}: {outcome}")
            }
            Note::Callback { summary } => format!("sim: question callback {summary}"),
            Note::Restart {
                state_bytes,
                context_bytes,
            } => format!(
                "sim: runtime restarted from state.json ({state_bytes} bytes) and context.jsonl ({context_bytes} bytes)"
            ),
        },
        Entry::Runtime(event) => match event {
            Event::UserMessage { frame, text, .. } => format!("user → {frame}: {}", quote(text)),
            Event::Queued { text, .. } => format!("user (queued while busy): {}", quote(text)),
            Event::EmptyUserMessage { .. } => {
                "user: an empty message, ignored (no model accepts an empty text)".to_owned()
            }
            Event::Push { frame, depth, .. } => match &frame.parent_tool_use_id {
                Some(parent) => format!("push {} depth={depth} parent={parent}", frame.name),
                None => format!("push {} depth={depth}", frame.name),
            },
            Event::Pop {
                frame,
                depth,
                reason: r,
                iterations,
                ..
            } => format!(
                "pop {} depth={depth} ({}, {iterations} iterations)",
                frame.name,
                reason(*r)
            ),
            Event::LlmRequest {
                frame,
                iteration,
                max_iterations,
                messages,
                ..
            } => format!(
                "{frame} → llm: iteration {iteration}/{max_iterations}, {messages} messages"
            ),
            Event::LlmReply {
                frame,
                content,
                usage,
                ..
            } => {
                let body = if content.is_empty() {
                    "empty".to_owned()
                } else {
                    content.iter().map(block).collect::<Vec<_>>().join(" + ")
                };
                if usage.is_zero() {
                    format!("{frame} ← llm: {body}")
                } else {
                    format!(
                        "{frame} ← llm: {body} [tokens {} in, {} out]",
                        usage.input_tokens, usage.output_tokens
                    )
                }
            }
            Event::LlmError {
                frame,
                kind,
                message,
                ..
            } => format!("{frame} ← llm error ({}): {message}", kind_name(*kind)),
            Event::Stale { what, .. } => format!("stale {what} ignored"),
            Event::ToolFinished {
                frame,
                tool_use_id,
                is_error,
                ..
            } => format!(
                "{frame} tool {tool_use_id} finished{} (parallel: its result joins when the batch is in)",
                if *is_error { " with an error" } else { "" }
            ),
            Event::Reissued { frame, what, .. } => {
                format!("{frame} {what} issued again after the restart")
            }
            Event::ToolCall {
                frame,
                tool_use_id,
                name,
                input,
                ..
            } => format!("{frame} tool {name} {tool_use_id} {input}"),
            Event::ToolResult {
                frame,
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                let tag = if *is_error { "error" } else { "ok" };
                format!("{frame} ← result {tool_use_id} {tag}: {}", quote(content))
            }
            Event::Sent { frame, text, .. } => {
                format!("send → user (from {frame}): {}", quote(text))
            }
            Event::EmptyReply { frame, .. } => format!("{frame}: empty reply, nothing sent"),
            Event::Stream { frame, event, .. } => match event {
                StreamEvent::TextDelta { text } => format!("{frame} stream: text {}", quote(text)),
                StreamEvent::ToolStart { name, id } => {
                    format!("{frame} stream: tool start {name} {id}")
                }
                StreamEvent::ToolFinish { name, id, is_error } => {
                    format!("{frame} stream: tool finish {name} {id} error={is_error}")
                }
                StreamEvent::AgentState { status, .. } => {
                    format!("{frame} stream: agent-state {status}")
                }
            },
            Event::AgentState {
                frame,
                from,
                status,
                result,
                ..
            } => match (from, result) {
                (Some(from), Some(result)) => {
                    format!("{frame}: {from} → {status}: {}", quote(result))
                }
                (Some(from), None) => format!("{frame}: {from} → {status}"),
                (None, _) => format!("{frame}: {status}"),
            },
            Event::Intervention {
                frame,
                agent_id,
                user_comment,
                user_content,
                status,
                outcome,
                ..
            } => {
                let mut asked = Vec::new();
                if let Some(c) = user_comment {
                    asked.push(format!("comment {}", quote(c)));
                }
                if let Some(c) = user_content {
                    asked.push(format!("content {}", quote(c)));
                }
                if let Some(s) = status {
                    asked.push(format!("status {s}"));
                }
                let target = frame.as_deref().map_or_else(|| agent_id.to_string(), str::to_owned);
                let answer = match outcome {
                    crate::agents::tree::InterventionOutcome::Accepted => "accepted".to_owned(),
                    crate::agents::tree::InterventionOutcome::NotFound => "not found".to_owned(),
                    crate::agents::tree::InterventionOutcome::Refused { reason } => {
                        format!("refused: {reason}")
                    }
                };
                format!("intervene {target} ({}): {answer}", asked.join(", "))
            }
            Event::TaskChanged { frame, text, .. } => {
                format!("{frame} ← user (task changed): {}", quote(text))
            }
            Event::ForkStarted {
                caller,
                handle,
                frame,
                ..
            } => format!("fork {} started by {caller} (handle {handle})", frame.name),
            Event::Question {
                frame,
                question_id,
                text,
                ..
            } => format!("{frame} asks (question {question_id}): {}", quote(text)),
            Event::Answer {
                question_id,
                frame,
                text,
                accepted,
                ..
            } => match (frame, accepted) {
                (Some(frame), true) => {
                    format!("answer to question {question_id} ({frame}): {}", quote(text))
                }
                _ => format!("answer to question {question_id}: no open question has that id"),
            },
            Event::Wait {
                frame,
                tool_use_id,
                handle,
                ..
            } => match handle {
                Some(h) => format!("{frame} waits for fork {h} ({tool_use_id})"),
                None => format!("{frame} waits for no fork ({tool_use_id})"),
            },
            Event::Triggered {
                key: Some(key),
                agent,
                ..
            } => format!("trigger: session {key} of {agent} started"),
            Event::Triggered { agent, .. } => {
                format!("trigger: no agent named '{agent}': nothing started")
            }
            Event::QuestionTimedOut {
                question_id,
                answer: Some(answer),
                ..
            } => format!("question {question_id} timed out: the default answer {answer:?} is its answer"),
            Event::QuestionTimedOut {
                question_id,
                expired: true,
                ..
            } => format!("question {question_id} left open: the session expired and failed"),
            Event::QuestionTimedOut { question_id, .. } => {
                format!("question {question_id} timed out: the session failed")
            }
            Event::QuestionWithdrawn { question_id, .. } => format!(
                "question {question_id} withdrawn: the agent waiting for it left, the session failed"
            ),
            Event::SessionEnded {
                completed, result, ..
            } => format!(
                "session {}: {result:?}",
                if *completed { "completed" } else { "failed" }
            ),
            Event::WorkflowStep { frame, step, .. } => {
                format!("{frame} enters workflow step {}", step.as_str())
            }
            Event::WorkflowDone { frame, result, .. } => {
                format!("{frame}'s workflow ends with its summary {result:?}")
            }
            Event::WaitSubagents { frame, waiting, .. } => match waiting {
                true => format!("{frame} waits for its subagents"),
                false => format!("{frame}'s subagents have all ended"),
            },
            Event::ForkEnded {
                frame,
                status,
                result,
                iterations,
                ..
            } => format!(
                "fork {} ended {status} ({iterations} iterations): {}",
                frame.name,
                quote(result)
            ),
            Event::Response { response, .. } => {
                let calls: Vec<&str> = response.tool_calls.iter().map(|c| &*c.name).collect();
                format!(
                    "response: {} iterations, tool calls [{}]",
                    response.iterations,
                    calls.join(", ")
                )
            }
            Event::Delegation {
                frame, what, text, ..
            } => format!("delegation {what} ({frame}): {}", quote(text)),
            Event::Watchdog { frame, what, .. } => format!("watchdog {frame}: {what}"),
            Event::Cancelled {
                text,
                frames,
                dropped,
                ..
            } => format!(
                "user {}: cancelled, {frames} frames unwound, {dropped} queued messages dropped",
                quote(text)
            ),
        },
    }
}

fn kind_name(kind: crate::model::llm::LlmErrorKind) -> &'static str {
    use crate::model::llm::LlmErrorKind::*;
    match kind {
        RateLimit => "rate_limit",
        Overloaded => "overloaded",
        Network => "network",
        Other => "other",
    }
}

/// The conversation an event belongs to, if it names one.
fn key_of(entry: &Entry) -> Option<&str> {
    let Entry::Runtime(event) = entry else {
        return None;
    };
    Some(match event {
        Event::UserMessage { key, .. }
        | Event::Queued { key, .. }
        | Event::EmptyUserMessage { key }
        | Event::Push { key, .. }
        | Event::Pop { key, .. }
        | Event::LlmRequest { key, .. }
        | Event::LlmReply { key, .. }
        | Event::LlmError { key, .. }
        | Event::Reissued { key, .. }
        | Event::ToolFinished { key, .. }
        | Event::ToolCall { key, .. }
        | Event::ToolResult { key, .. }
        | Event::Sent { key, .. }
        | Event::EmptyReply { key, .. }
        | Event::Stream { key, .. }
        | Event::Response { key, .. }
        | Event::Delegation { key, .. }
        | Event::Watchdog { key, .. }
        | Event::AgentState { key, .. }
        | Event::TaskChanged { key, .. }
        | Event::ForkStarted { key, .. }
        | Event::ForkEnded { key, .. }
        | Event::Wait { key, .. }
        | Event::WaitSubagents { key, .. }
        | Event::WorkflowStep { key, .. }
        | Event::QuestionTimedOut { key, .. }
        | Event::QuestionWithdrawn { key, .. }
        | Event::SessionEnded { key, .. }
        | Event::WorkflowDone { key, .. }
        | Event::Question { key, .. }
        | Event::Cancelled { key, .. } => key,
        Event::Intervention { key, .. }
        | Event::Answer { key, .. }
        | Event::Triggered { key, .. } => key.as_ref()?,
        Event::Stale { .. } => return None,
    })
}

/// The records as text, one line each. Lines of a conversation other than `default` start with
/// its key, so scenarios with several conversations stay readable.
pub fn records_text(records: &[Record]) -> String {
    let mut out = String::new();
    for r in records.iter().filter(|r| shown(&r.entry)) {
        match key_of(&r.entry) {
            Some(key) if key != crate::scenario::DEFAULT_KEY => {
                let _ = writeln!(out, "{} <{key}> {}", time(r.t_ms), line(&r.entry));
            }
            _ => {
                let _ = writeln!(out, "{} {}", time(r.t_ms), line(&r.entry));
            }
        }
    }
    out
}

/// The whole transcript of an outcome: a header, the records and the verdict.
pub fn text(outcome: &Outcome) -> String {
    text_colored(outcome, false)
}

/// [`text`], with a failed expectation's differences marked in color when `color` is on (for a
/// terminal; snapshots and files get [`text`]).
pub fn text_colored(outcome: &Outcome, color: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}", printable(&outcome.name));
    let _ = writeln!(out, "# seed {}", outcome.seed);
    out.push_str(&records_text(&outcome.records));
    match (&outcome.failure, color) {
        (Some(f), true) => {
            let _ = writeln!(out, "FAILED: {}", super::diff::failure_text(f, true));
        }
        _ => {
            let _ = writeln!(out, "{}", super::escape::terminal(&verdict(outcome)));
        }
    }
    out
}

/// `passed`, `reproduced <invariant>`, or `FAILED: <why>`.
pub fn verdict(outcome: &Outcome) -> String {
    match (&outcome.failure, &outcome.reproduced) {
        (None, Some(inv)) => format!(
            "reproduced: invariant {inv} broke, as the scenario expects: {}",
            outcome.violation_message.as_deref().unwrap_or("")
        ),
        (None, None) => "passed".to_owned(),
        (Some(f), _) => format!("FAILED: {f}"),
    }
}

#[derive(Serialize)]
struct JsonTranscript<'a> {
    scenario: &'a str,
    path: &'a str,
    seed: u64,
    passed: bool,
    failure: Option<serde_json::Value>,
    rerun: Option<String>,
    reproduced: Option<&'a str>,
    records: &'a [Record],
}

/// The transcript as JSON (safe to print: see [`super::escape::json`]).
pub fn json(outcome: &Outcome) -> String {
    let failure = outcome.failure.as_ref().map(Failure::to_json);
    let text = serde_json::to_string_pretty(&JsonTranscript {
        scenario: &outcome.name,
        path: &outcome.path,
        seed: outcome.seed,
        passed: outcome.passed(),
        failure,
        rerun: outcome.failure.is_some().then(|| outcome.rerun_command()),
        reproduced: outcome.reproduced.as_deref(),
        records: &outcome.records,
    })
    .expect("records serialise: their maps have string keys");
    super::escape::json(&text).into_owned()
}
