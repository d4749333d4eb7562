//! Unit tests of the runtime's bookkeeping that the invariants leave alone: timers cancelled
//! with the frames that hold them, streamed text merged into one block, the detail events kept
//! only when asked for, and the ended nodes.

use std::sync::Arc;

use serde_json::json;

use crate::agents::tree::Status;
use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::ids::CallId;
use crate::model::llm::{Chunk, LlmReply};
use crate::model::transcript::Block;
use crate::protocol::{Effect, Event, Input};
use crate::runtime::{Runtime, RuntimeConfig, ToolSpec};

fn catalog(main: AgentDef, others: Vec<AgentDef>) -> Arc<Catalog> {
    let mut catalog = Catalog::default();
    catalog.add(main);
    for def in others {
        catalog.add(def);
    }
    Arc::new(catalog)
}

/// Takes every effect queued, in order.
fn effects(rt: &mut Runtime) -> Vec<Effect> {
    std::iter::from_fn(|| rt.poll_effect()).collect()
}

fn llm_call(effects: &[Effect]) -> CallId {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::CallLlm { call } => Some(*call),
            _ => None,
        })
        .expect("a model call")
}

fn user(rt: &mut Runtime, text: &str) {
    rt.handle(Input::User {
        key: "user".into(),
        text: text.into(),
    });
}

fn reply(rt: &mut Runtime, call: CallId, blocks: Vec<Block>) {
    let reply = LlmReply {
        content: blocks.into_iter().collect(),
        usage: Default::default(),
    };
    rt.handle(Input::LlmReply { call, reply });
}

/// A main agent (parallel or not) and a tool `slow` with a timeout of one second.
fn with_slow_tool(parallel: bool) -> Runtime {
    let mut main = AgentDef::new("main", AgentKind::Main);
    main.parallel_tools = parallel;
    let mut config = RuntimeConfig::default();
    config.tools.insert(
        "slow".into(),
        ToolSpec {
            timeout_ms: Some(1000),
        },
    );
    Runtime::new(catalog(main, vec![]), config)
}

/// The timers set and the timers cancelled among `effects`.
fn timers(effects: &[Effect]) -> (Vec<CallId>, Vec<CallId>) {
    let (mut set, mut cancelled) = (Vec::new(), Vec::new());
    for e in effects {
        match e {
            Effect::SetTimer { timer, .. } => set.push(*timer),
            Effect::CancelTimer { timer } => cancelled.push(*timer),
            _ => {}
        }
    }
    (set, cancelled)
}

#[test]
fn a_cancel_cancels_the_timeout_of_the_tool_its_frame_waits_for() {
    let mut rt = with_slow_tool(false);
    user(&mut rt, "go");
    let call = llm_call(&effects(&mut rt));
    reply(
        &mut rt,
        call,
        vec![Block::tool_use("t1", "slow", json!({}))],
    );
    let (set, cancelled) = timers(&effects(&mut rt));
    assert_eq!((set.len(), cancelled.len()), (1, 0));
    user(&mut rt, "stop");
    let (_, cancelled) = timers(&effects(&mut rt));
    assert_eq!(cancelled, set, "the stopped frame's timer is cancelled");
}

#[test]
fn a_cancel_cancels_every_timeout_of_a_parallel_batch() {
    let mut rt = with_slow_tool(true);
    user(&mut rt, "go");
    let call = llm_call(&effects(&mut rt));
    reply(
        &mut rt,
        call,
        vec![
            Block::tool_use("t1", "slow", json!({})),
            Block::tool_use("t2", "slow", json!({})),
        ],
    );
    let (set, _) = timers(&effects(&mut rt));
    assert_eq!(set.len(), 2);
    user(&mut rt, "stop");
    let (_, mut cancelled) = timers(&effects(&mut rt));
    cancelled.sort_unstable();
    assert_eq!(cancelled, set, "both runs' timers are cancelled");
}

/// Streams "Hello" and " world" to a streaming main agent, with detail events or without.
fn streamed(detailed: bool) -> Runtime {
    let mut main = AgentDef::new("main", AgentKind::Main);
    main.stream = true;
    let config = RuntimeConfig {
        detailed_events: detailed,
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(catalog(main, vec![]), config);
    user(&mut rt, "hi");
    let call = llm_call(&effects(&mut rt));
    for piece in ["Hello", "", " world"] {
        rt.handle(Input::LlmChunk {
            call,
            chunk: Chunk::Text(piece.into()),
        });
    }
    let deltas: Vec<Effect> = effects(&mut rt);
    let texts: Vec<String> = deltas
        .iter()
        .filter_map(|e| match e {
            Effect::Stream {
                event: crate::protocol::StreamEvent::TextDelta { text },
                ..
            } => Some(text.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Hello", " world"], "an empty piece streams nothing");
    rt.handle(Input::LlmEnd {
        call,
        usage: Default::default(),
    });
    rt
}

#[test]
fn streamed_text_joins_one_block_and_records_its_pieces_only_in_detail() {
    for detailed in [false, true] {
        let rt = streamed(detailed);
        let entry = rt.stack("user").expect("the conversation").entry();
        let last = entry.main_session.messages.last().expect("the reply");
        assert_eq!(
            last.content.len(),
            1,
            "one text block, not one per piece: {:?}",
            last.content
        );
        assert_eq!(last.text(), "Hello world");
        let pieces = rt
            .events()
            .iter()
            .filter(|e| matches!(e, Event::Stream { .. }))
            .count();
        assert_eq!(pieces, if detailed { 2 } else { 0 }, "detailed: {detailed}");
    }
}

/// One user turn the main agent answers with `answer`.
fn answered_turn(rt: &mut Runtime, answer: &str) {
    user(rt, "hi");
    let call = llm_call(&effects(rt));
    reply(rt, call, vec![Block::text(answer)]);
    effects(rt);
}

#[test]
fn the_ended_nodes_keep_the_latest_ones_once_full() {
    let config = RuntimeConfig {
        ended_nodes: 3,
        ..RuntimeConfig::default()
    };
    let main = AgentDef::new("main", AgentKind::Main);
    let mut rt = Runtime::new(catalog(main, vec![]), config);
    for n in 1..=5usize {
        answered_turn(&mut rt, &format!("answer {n}"));
        let results: Vec<String> = rt
            .ended_agents()
            .map(|node| node.result.as_deref().unwrap_or("").to_owned())
            .collect();
        let want: Vec<String> = (1..=n)
            .skip(n.saturating_sub(3))
            .map(|k| format!("answer {k}"))
            .collect();
        assert_eq!(results, want, "after {n} turns");
    }
    let nodes: Vec<_> = rt.ended_agents().collect();
    assert!(nodes.iter().all(|node| node.status == Status::Completed
        && node.messages.is_none()
        && node.subagents.is_empty()
        && &*node.name == "main"));
    let ids: std::collections::BTreeSet<_> = nodes.iter().map(|node| node.agent_id).collect();
    assert_eq!(ids.len(), 3, "each kept node is its own agent");
    assert!(rt.agent(nodes[0].agent_id).is_some());
}

#[test]
fn an_ended_node_lists_the_agents_it_started_whether_its_place_is_new_or_reused() {
    for ended_nodes in [64, 2] {
        let config = RuntimeConfig {
            ended_nodes,
            ..RuntimeConfig::default()
        };
        let main = AgentDef::new("main", AgentKind::Main);
        let helper = AgentDef::new("helper", AgentKind::Agent);
        let mut rt = Runtime::new(catalog(main, vec![helper]), config);
        // Fill the ring first, so that the second pass reuses places.
        answered_turn(&mut rt, "warm up");
        answered_turn(&mut rt, "warm up");
        user(&mut rt, "delegate");
        let call = llm_call(&effects(&mut rt));
        reply(
            &mut rt,
            call,
            vec![Block::tool_use(
                "u1",
                "use_agent",
                json!({ "agent": "helper", "message": "do it" }),
            )],
        );
        let call = llm_call(&effects(&mut rt));
        reply(
            &mut rt,
            call,
            vec![Block::tool_use(
                "c1",
                "complete",
                json!({ "result": "done" }),
            )],
        );
        let call = llm_call(&effects(&mut rt));
        reply(&mut rt, call, vec![Block::text("all done")]);
        effects(&mut rt);
        let nodes: Vec<_> = rt.ended_agents().rev().take(2).collect();
        let (main, child) = (nodes[0], nodes[1]);
        assert_eq!(&*child.name, "agent:helper", "ring of {ended_nodes}");
        assert_eq!(
            main.subagents,
            vec![child.agent_id],
            "ring of {ended_nodes}"
        );
        assert_eq!(child.parent_id, Some(main.agent_id));
        assert!(child.subagents.is_empty());
    }
}

#[test]
fn deleting_an_agent_that_waits_for_an_async_answer_cancels_the_questions_timeout() {
    use crate::agents::tree::Intervention;
    use crate::model::agent::{AsyncQuestions, OnTimeout};
    let main = AgentDef::new("main", AgentKind::Main);
    let mut asking = AgentDef::new("asking", AgentKind::Agent);
    asking.async_questions = Some(AsyncQuestions {
        timeout_ms: Some(60_000),
        on_timeout: OnTimeout::Fail,
        callback: None,
    });
    let mut rt = Runtime::new(catalog(main, vec![asking]), RuntimeConfig::default());
    rt.trigger("asking", json!({ "task": "file it" }));
    let call = llm_call(&effects(&mut rt));
    reply(
        &mut rt,
        call,
        vec![Block::tool_use(
            "q1",
            "ask_user",
            json!({ "question": "Which folder?" }),
        )],
    );
    let (set, _) = timers(&effects(&mut rt));
    assert_eq!(set.len(), 1, "the question's timeout");
    let agent = rt.tree().first().expect("the asking agent").agent_id;
    rt.intervene(
        agent,
        Intervention {
            status: Some(Status::Deleted),
            ..Intervention::default()
        },
    );
    let (_, cancelled) = timers(&effects(&mut rt));
    assert_eq!(
        cancelled, set,
        "the deleted agent's question timer is cancelled"
    );
}

#[test]
fn the_response_to_a_message_lists_each_tool_call_of_its_turn_with_its_result() {
    let mut config = RuntimeConfig::default();
    config
        .tools
        .insert("lookup".into(), ToolSpec { timeout_ms: None });
    let main = AgentDef::new("main", AgentKind::Main);
    let mut rt = Runtime::new(catalog(main, vec![]), config);
    // A first turn whose call must not be listed in the second's response.
    answered_turn(&mut rt, "hello");
    user(&mut rt, "look both up");
    let call = llm_call(&effects(&mut rt));
    reply(
        &mut rt,
        call,
        vec![
            Block::tool_use("a", "lookup", json!({ "q": 1 })),
            Block::tool_use("b", "lookup", json!({ "q": 2 })),
        ],
    );
    for (n, (content, is_error)) in [("one", false), ("two failed", true)]
        .into_iter()
        .enumerate()
    {
        let run = effects(&mut rt)
            .iter()
            .find_map(|e| match e {
                Effect::RunTool { call } => Some(*call),
                _ => None,
            })
            .unwrap_or_else(|| panic!("run {n}"));
        let output = crate::agents::tools::ToolOutput {
            content: content.into(),
            is_error,
        };
        rt.handle(Input::ToolDone {
            call: run,
            result: Ok(output),
        });
    }
    let call = llm_call(&effects(&mut rt));
    reply(&mut rt, call, vec![Block::text("both found")]);
    let responses: Vec<_> = rt
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Response { response, .. } => Some(response),
            _ => None,
        })
        .collect();
    let last = responses.last().expect("a response");
    let calls: Vec<(&str, &str, &str, bool)> = last
        .tool_calls
        .iter()
        .map(|c| (&*c.id, &*c.name, &*c.result, c.is_error))
        .collect();
    assert_eq!(
        calls,
        [
            ("a", "lookup", "one", false),
            ("b", "lookup", "two failed", true)
        ]
    );
    assert_eq!(*last.tool_calls[1].input, json!({ "q": 2 }));
}

/// Tool calls and model replies are detail events: recorded only when detail is asked for, even
/// when events are recorded.
#[test]
fn tool_calls_and_replies_are_recorded_only_in_detail() {
    for detailed in [false, true] {
        let mut config = RuntimeConfig {
            record_events: true,
            detailed_events: detailed,
            ..RuntimeConfig::default()
        };
        config
            .tools
            .insert("lookup".into(), ToolSpec { timeout_ms: None });
        let main = AgentDef::new("main", AgentKind::Main);
        let mut rt = Runtime::new(catalog(main, vec![]), config);
        user(&mut rt, "look it up");
        let call = llm_call(&effects(&mut rt));
        reply(
            &mut rt,
            call,
            vec![Block::tool_use("a", "lookup", json!({ "q": 1 }))],
        );
        let detail = rt
            .events()
            .iter()
            .filter(|e| matches!(e, Event::ToolCall { .. } | Event::LlmReply { .. }))
            .count();
        assert_eq!(detail > 0, detailed, "detailed: {detailed}");
        assert!(
            rt.events().iter().any(|e| matches!(e, Event::Push { .. })),
            "the other events are recorded either way"
        );
    }
}

/// A stacked frame's start and end are its push and pop, which carry what an observer needs of
/// them (its frame, the status it ended from); their `agent-state` events are detail, recorded
/// only for the transcript and marked implied, right after the push and right before the pop.
#[test]
fn a_stacked_frames_start_and_end_are_agent_states_only_in_detail() {
    for detailed in [false, true] {
        let config = RuntimeConfig {
            record_events: true,
            detailed_events: detailed,
            ..RuntimeConfig::default()
        };
        let main = AgentDef::new("main", AgentKind::Main);
        let mut rt = Runtime::new(catalog(main, vec![]), config);
        user(&mut rt, "hi");
        let call = llm_call(&effects(&mut rt));
        reply(&mut rt, call, vec![Block::text("hello")]);
        let kinds: Vec<String> = rt
            .events()
            .iter()
            .filter_map(|e| match e {
                Event::Push { frame_ref, .. } => {
                    let frame = rt.frame(*frame_ref);
                    assert!(frame.is_none(), "the turn ended: its frame is gone");
                    Some("push".to_owned())
                }
                Event::Pop { from, reason, .. } => {
                    assert_eq!(*from, Status::Running, "detailed: {detailed}");
                    Some(format!("pop as {}", reason.ended_as()))
                }
                Event::AgentState {
                    from,
                    status,
                    implied,
                    ..
                } => {
                    assert!(implied, "a main frame's start and end only");
                    Some(format!("state {from:?} to {status}"))
                }
                _ => None,
            })
            .collect();
        let want: &[&str] = if detailed {
            &[
                "push",
                "state None to running",
                "state Some(Running) to completed",
                "pop as completed",
            ]
        } else {
            &["push", "pop as completed"]
        };
        assert_eq!(kinds, want, "detailed: {detailed}");
    }
}

/// Each status change reaches the stream as an `agent_state` effect when the setting asks for
/// it, and never otherwise.
#[test]
fn agent_states_reach_the_stream_only_when_asked_for() {
    for stream in [false, true] {
        let config = RuntimeConfig {
            stream_agent_states: stream,
            ..RuntimeConfig::default()
        };
        let main = AgentDef::new("main", AgentKind::Main);
        let mut rt = Runtime::new(catalog(main, vec![]), config);
        user(&mut rt, "hi");
        let mut all = effects(&mut rt);
        let call = llm_call(&all);
        reply(&mut rt, call, vec![Block::text("hello")]);
        all.extend(effects(&mut rt));
        let states: Vec<Status> = all
            .into_iter()
            .filter_map(|e| match e {
                Effect::Stream {
                    event: crate::protocol::StreamEvent::AgentState { status, .. },
                    ..
                } => Some(status),
                _ => None,
            })
            .collect();
        let want: &[Status] = if stream {
            &[Status::Running, Status::Completed]
        } else {
            &[]
        };
        assert_eq!(states, want, "stream_agent_states: {stream}");
    }
}

/// `Runtime::answer` says whether the answer was taken: by the open question's id once, never by
/// an unknown id or a second time.
#[test]
fn an_answer_by_id_says_whether_it_was_taken() {
    let main = AgentDef::new("main", AgentKind::Main);
    let mut rt = Runtime::new(catalog(main, vec![]), RuntimeConfig::default());
    user(&mut rt, "plan it");
    let call = llm_call(&effects(&mut rt));
    reply(
        &mut rt,
        call,
        vec![Block::tool_use(
            "q",
            "ask_user",
            json!({ "question": "Which day?" }),
        )],
    );
    effects(&mut rt);
    let question = rt.questions().remove(0);
    assert!(!rt.answer(uuid::Uuid::from_u128(7), "Monday"));
    assert!(rt.answer(question.id, "Monday"));
    assert!(rt.questions().is_empty());
    assert!(
        !rt.answer(question.id, "Tuesday"),
        "a question is answered once"
    );
}

/// A triggered session is listed with the id its trigger returned, and an async question keeps
/// its options as its context (none when it has none).
#[test]
fn sessions_are_listed_and_questions_keep_their_options_as_context() {
    use crate::model::agent::{AsyncQuestions, OnTimeout};
    use crate::protocol::SessionOp;
    let main = AgentDef::new("main", AgentKind::Main);
    let mut asking = AgentDef::new("asking", AgentKind::Agent);
    asking.async_questions = Some(AsyncQuestions {
        timeout_ms: None,
        on_timeout: OnTimeout::Fail,
        callback: None,
    });
    let mut rt = Runtime::new(catalog(main, vec![asking]), RuntimeConfig::default());
    let mut contexts = Vec::new();
    let mut ids = Vec::new();
    for input in [
        json!({ "question": "Which folder?", "options": ["a", "b"] }),
        json!({ "question": "Why?" }),
    ] {
        ids.push(rt.trigger("asking", json!({})).expect("a declared agent"));
        let call = llm_call(&effects(&mut rt));
        reply(&mut rt, call, vec![Block::tool_use("q", "ask_user", input)]);
        contexts.extend(effects(&mut rt).into_iter().filter_map(|e| match e {
            Effect::Session(op) => match *op {
                SessionOp::Asked { context, .. } => Some(context.map(|c| c.to_string())),
                _ => None,
            },
            _ => None,
        }));
    }
    let listed: Vec<uuid::Uuid> = rt.async_sessions().map(|s| s.id).collect();
    assert_eq!(listed, ids);
    assert_eq!(
        contexts,
        [Some(r#"{"options":["a","b"]}"#.to_owned()), None],
        "options are the context; a question without any has none"
    );
}
