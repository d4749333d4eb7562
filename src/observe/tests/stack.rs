//! The structural invariants: `main-at-bottom`, `stack-linkage`, `single-delivery`, `routing`,
//! `cleanup`, `iteration-bound`, and the agents a push and a pop start and end.

use super::*;

/// A pushed frame's agent must live in the runtime, at the place its push named and with
/// the status its events left it (running, unless an `agent-state` moved it since): a push
/// the runtime has no frame for, or a frame whose status moved with no event, breaks
/// `tree-consistency`.
#[test]
fn a_pushed_agent_lives_in_the_runtime_as_its_events_tell() {
    let main = frame("main", AgentKind::Main, 1, None);
    let v = first_violation(&[push(&main, 1)]);
    assert_eq!(v, Some(names::TREE_CONSISTENCY), "no frame in the runtime");

    let config = RuntimeConfig {
        record_events: true,
        ..RuntimeConfig::default()
    };
    let mut rt = Runtime::new(Arc::new(Catalog::default()), config);
    let go = user("go");
    rt.handle(go.clone());
    let pushed = rt.events().to_vec();
    rt.clear_events();
    let call = std::iter::from_fn(|| rt.poll_effect())
        .find_map(|e| match e {
            Effect::CallLlm { call } => Some(call),
            _ => None,
        })
        .expect("main calls its model");
    let ask = Block::tool_use(
        "q1",
        "ask_user",
        serde_json::json!({ "question": "which?" }),
    );
    let reply = Input::LlmReply {
        call,
        reply: LlmReply {
            content: vec![ask].into_iter().collect(),
            usage: Default::default(),
        },
    };
    rt.handle(reply);
    let asked = rt.events().to_vec();
    assert!(
        asked.iter().any(|e| matches!(
            e,
            Event::AgentState {
                status: Status::AwaitingUser,
                implied: false,
                ..
            }
        )),
        "main awaits the user: {asked:?}"
    );
    // The push's step judged against the runtime one step later: main awaits the user, with
    // no event of that move among the step's.
    let mut o = Observer::for_runtime(&rt);
    o.before_input(&rt, &go);
    let v = o.after_step(&rt, &pushed).unwrap_err();
    assert_eq!(v.invariant, names::TREE_CONSISTENCY, "{v}");
    assert!(v.message.contains("awaiting_user"), "{v}");
    // With the event of the move in the step, the same runtime agrees.
    let mut o = Observer::for_runtime(&rt);
    o.before_input(&rt, &go);
    let moved: Vec<Event> = pushed
        .iter()
        .cloned()
        .chain(
            asked
                .iter()
                .filter(|e| matches!(e, Event::AgentState { .. }))
                .cloned(),
        )
        .collect();
    let v = o.after_step(&rt, &moved).err();
    assert_ne!(v.map(|v| v.invariant), Some(names::TREE_CONSISTENCY));
}

/// A push starts its frame's agent and a pop ends it, from the status the pop names: one
/// the agent did not have, or a start after the end, breaks `status-transitions`.
#[test]
fn a_push_and_a_pop_move_their_agent_as_its_status_allows() {
    let main = frame("main", AgentKind::Main, 1, None);
    let answered = popped(&main, 0, PopReason::Answered, 0);
    // (A turn of no model call breaks other invariants, but not this one.)
    assert_ne!(
        first_violation(&[push(&main, 1), answered.clone()]),
        Some(names::STATUS_TRANSITIONS)
    );
    let mut from_elsewhere = answered.clone();
    if let Event::Pop { from, .. } = &mut from_elsewhere {
        *from = Status::AwaitingUser;
    }
    assert_eq!(
        first_violation(&[push(&main, 1), from_elsewhere]),
        Some(names::STATUS_TRANSITIONS)
    );
    assert_eq!(
        first_violation(&[push(&main, 1), answered.clone(), push(&main, 1)]),
        Some(names::STATUS_TRANSITIONS)
    );
    assert_eq!(
        first_violation(&[push(&main, 1), answered.clone(), answered]),
        Some(names::STATUS_TRANSITIONS),
        "an agent ends once"
    );
}

#[test]
fn a_child_on_an_empty_stack_or_a_second_main_breaks_main_at_bottom() {
    let main = frame("main", AgentKind::Main, 1, None);
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
    assert_eq!(
        first_violation(&[push(&child, 1)]),
        Some(names::MAIN_AT_BOTTOM)
    );
    let main2 = frame("main", AgentKind::Main, 3, None);
    assert_eq!(
        first_violation(&[push(&main, 1), push(&main2, 2)]),
        Some(names::MAIN_AT_BOTTOM)
    );
}

#[test]
fn a_popped_child_must_deliver_exactly_once_to_its_parent() {
    let main = frame("main", AgentKind::Main, 1, None);
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
    let other = frame("agent:x", AgentKind::Agent, 3, None);
    // No delivery at all.
    let events = [push(&main, 1), push(&child, 2), pop(&child, 1)];
    assert_eq!(first_violation(&events), Some(names::SINGLE_DELIVERY));
    // Two deliveries.
    let events = [
        push(&main, 1),
        push(&child, 2),
        pop(&child, 1),
        result(&main, "t1"),
        result(&main, "t1"),
    ];
    assert_eq!(first_violation(&events), Some(names::SINGLE_DELIVERY));
    // Delivered to the wrong session.
    let events = [
        push(&main, 1),
        push(&child, 2),
        pop(&child, 1),
        result(&other, "t1"),
    ];
    assert_eq!(first_violation(&events), Some(names::SINGLE_DELIVERY));
}

#[test]
fn popping_a_frame_that_is_not_on_top_breaks_stack_linkage() {
    let main = frame("main", AgentKind::Main, 1, None);
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
    let events = [push(&main, 1), push(&child, 2), pop(&main, 1)];
    assert_eq!(first_violation(&events), Some(names::STACK_LINKAGE));
    // A result for the link while the child is still active.
    let events = [push(&main, 1), push(&child, 2), result(&main, "t1")];
    assert_eq!(first_violation(&events), Some(names::STACK_LINKAGE));
}

#[test]
fn a_message_to_a_frame_below_the_top_breaks_routing() {
    let main = frame("main", AgentKind::Main, 1, None);
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
    let to_main = Event::UserMessage {
        key: key(),
        frame: "main".into(),
        frame_id: main.frame_id,
        text: "hi".into(),
    };
    assert_eq!(
        first_violation(&[push(&main, 1), push(&child, 2), to_main.clone()]),
        Some(names::ROUTING)
    );
    assert_eq!(first_violation(&[to_main]), Some(names::ROUTING));
}

#[test]
fn an_answer_with_frames_left_breaks_cleanup() {
    let main = frame("main", AgentKind::Main, 1, None);
    let cancelled = Event::Cancelled {
        key: key(),
        text: "stop".into(),
        frames: 1,
        dropped: 0,
    };
    assert_eq!(
        first_violation(&[push(&main, 1), cancelled]),
        Some(names::CLEANUP)
    );
}

#[test]
fn one_call_over_the_limit_breaks_iteration_bound() {
    let main = frame("main", AgentKind::Main, 1, None);
    let request = |i: u32| Event::LlmRequest {
        key: key(),
        frame: "main".into(),
        frame_id: main.frame_id,
        session_id: main.session_id,
        call: 99,
        iteration: i,
        max_iterations: 2,
        messages: 1,
    };
    assert_eq!(first_violation(&[request(1), request(2)]), None);
    // The observer counts calls itself: a runtime that forgets to count is still caught.
    assert_eq!(
        first_violation(&[request(1), request(1), request(1)]),
        Some(names::ITERATION_BOUND)
    );
}
