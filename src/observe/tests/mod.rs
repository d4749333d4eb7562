//! Unit tests of the observer: events made up by hand and fed to it, with no runtime behind them
//! (or an empty one), each invariant on a broken sequence next to its sound twin. The structural
//! invariants are in [`stack`], the semantic ones in [`semantic`]; the helpers that build the
//! events are here.

mod semantic;
mod stack;

use std::sync::Arc;

use uuid::Uuid;

use super::stack::ModelFrame;
use super::*;
use crate::agents::tree::Status;
use crate::model::agent::{AgentKind, Catalog};
use crate::model::ids::FrameId;
use crate::model::llm::LlmReply;
use crate::model::transcript::Block;
use crate::protocol::{Effect, FrameInfo, Input, PopReason};
use crate::runtime::RuntimeConfig;

#[test]
fn a_waits_handle_is_a_number_or_a_string_holding_one() {
    use serde_json::json;
    assert_eq!(fork_handle(&json!(2)), Some(2));
    assert_eq!(fork_handle(&json!("2")), Some(2));
    assert_eq!(fork_handle(&json!(" 3 ")), Some(3));
    for none in [
        json!("two"),
        json!(-1),
        json!(1.5),
        json!(null),
        json!([1]),
        json!(1u64 << 40),
    ] {
        assert_eq!(fork_handle(&none), None, "{none}");
    }
}

fn rt() -> Runtime {
    Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default())
}

fn frame(name: &str, kind: AgentKind, n: u128, parent: Option<&str>) -> FrameInfo {
    FrameInfo {
        frame_id: Uuid::from_u128(n),
        name: name.into(),
        kind,
        parent_tool_use_id: parent.map(Into::into),
        session_id: Uuid::from_u128(1000 + n),
    }
}

fn key() -> Arc<str> {
    "k".into()
}

fn push(f: &FrameInfo, depth: usize) -> Event {
    Event::Push {
        key: key(),
        frame: f.clone(),
        depth,
        frame_ref: FrameId::new(depth as u32, 0),
    }
}

fn pop(f: &FrameInfo, depth: usize) -> Event {
    popped(f, depth, PopReason::Completed, 1)
}

fn result(session: &FrameInfo, id: &str) -> Event {
    Event::ToolResult {
        key: key(),
        frame: session.name.clone(),
        frame_id: session.frame_id,
        session_id: session.session_id,
        tool_use_id: id.into(),
        content: "r".into(),
        is_error: false,
    }
}

fn first_violation(events: &[Event]) -> Option<&'static str> {
    let rt = rt();
    let mut o = Observer::new();
    for e in events {
        if let Err(v) = o.on_event(&rt, e) {
            return Some(v.invariant);
        }
    }
    o.end_of_step(&rt).err().map(|v| v.invariant)
}

// The semantic invariants, each on a broken sequence next to its sound twin.

/// Feeds steps (an input the driver is about to send, then the events it caused) and returns
/// the first invariant broken. `persist` turns the journal check on, with `effects` as every
/// step's effects.
fn semantic(steps: &[(Option<Input>, Vec<Event>)], persist: bool) -> Option<&'static str> {
    semantic_with(Catalog::default(), steps, persist)
}

/// [`semantic`] with these definitions.
fn semantic_with(
    catalog: Catalog,
    steps: &[(Option<Input>, Vec<Event>)],
    persist: bool,
) -> Option<&'static str> {
    let config = RuntimeConfig {
        persist,
        ..RuntimeConfig::default()
    };
    semantic_in(catalog, config, steps)
}

/// [`semantic`] with these definitions and settings.
fn semantic_in(
    catalog: Catalog,
    config: RuntimeConfig,
    steps: &[(Option<Input>, Vec<Event>)],
) -> Option<&'static str> {
    let rt = Runtime::new(Arc::new(catalog), config);
    let mut o = Observer::new();
    o.no_runtime = true;
    for (input, events) in steps {
        if let Some(input) = input {
            o.before_input(&rt, input);
        }
        if let Err(v) = o.after_step(&rt, events) {
            return Some(v.invariant);
        }
    }
    None
}

/// The first step of a turn: "go" reaches a new main frame (limit `max`), which calls the
/// model (call 1).
fn opened(main: &FrameInfo, max: u32) -> (Option<Input>, Vec<Event>) {
    (
        Some(user("go")),
        vec![
            push(main, 1),
            delivered(main, "go"),
            request(main, 1, 1, max),
        ],
    )
}

fn request(f: &FrameInfo, call: u64, iteration: u32, max: u32) -> Event {
    Event::LlmRequest {
        key: key(),
        frame: f.name.clone(),
        frame_id: f.frame_id,
        session_id: f.session_id,
        call,
        iteration,
        max_iterations: max,
        messages: 1,
    }
}

fn reply(call: u64, uses: &[(&str, &str)]) -> Input {
    let content = uses
        .iter()
        .map(|(id, name)| Block::ToolUse {
            id: (*id).into(),
            name: (*name).into(),
            input: Arc::new(serde_json::json!({})),
        })
        .collect();
    Input::LlmReply {
        call,
        reply: LlmReply {
            content,
            usage: Default::default(),
        },
    }
}

fn answered(session: &FrameInfo, id: &str, content: &str, is_error: bool) -> Event {
    Event::ToolResult {
        key: key(),
        frame: session.name.clone(),
        frame_id: session.frame_id,
        session_id: session.session_id,
        tool_use_id: id.into(),
        content: content.into(),
        is_error,
    }
}

fn popped(f: &FrameInfo, depth: usize, reason: PopReason, iterations: u32) -> Event {
    Event::Pop {
        key: key(),
        frame: f.clone(),
        depth,
        reason,
        iterations,
        from: Status::Running,
    }
}

fn user(text: &str) -> Input {
    Input::User {
        key: key(),
        text: text.into(),
    }
}

fn delivered(f: &FrameInfo, text: &str) -> Event {
    Event::UserMessage {
        key: key(),
        frame: f.name.clone(),
        frame_id: f.frame_id,
        text: text.into(),
    }
}

/// main asks for skill:r (`t1`); the child's model call fails; its result reaches main.
fn failing_child(delivered_as_error: bool) -> Vec<(Option<Input>, Vec<Event>)> {
    let main = frame("main", AgentKind::Main, 1, None);
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
    let error = Event::LlmError {
        key: key(),
        frame: child.name.clone(),
        frame_id: child.frame_id,
        kind: crate::model::llm::LlmErrorKind::Network,
        message: "down".into(),
    };
    vec![
        opened(&main, 5),
        (
            Some(reply(1, &[("t1", "use_skill")])),
            vec![push(&child, 2), request(&child, 2, 1, 5)],
        ),
        (
            None,
            vec![
                error,
                popped(&child, 1, PopReason::Error, 1),
                answered(&main, "t1", "LLM error: down", delivered_as_error),
                request(&main, 3, 2, 5),
            ],
        ),
    ]
}
