//! Unit tests of the `history:` policies: histories that agents share (handoffs, supervisors,
//! summaries, restored conversations) under `continuation`, the same refused by `exact` with the
//! policy to use, and `lenient` for compacted histories.

use super::*;

fn with(name: &str, history: HistoryPolicy, entries: Vec<ScriptedReply>) -> AgentScript {
    AgentScript {
        history,
        ..agent(name, entries)
    }
}

fn named_tool(name: &str) -> ScriptedReply {
    tool(name)
}

/// An assistant message with the tool use `id` (input `{"q": 1}`) and the user's result.
fn call_and_result(id: &str, name: &str) -> [Value; 2] {
    [
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": {"q": 1}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}),
    ]
}

fn messages(parts: &[Value]) -> Value {
    Value::Array(parts.to_vec())
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// The OpenAI Agents SDK's default handoff: triage's turn hands off with a tool call; the
/// forecaster's first request replays it (user message, call, output) under its own routing.
fn handoff_book(forecaster: HistoryPolicy) -> Book {
    Book::new(vec![
        with(
            "triage",
            HistoryPolicy::Continuation,
            vec![named_tool("transfer_to_forecaster")],
        ),
        with(
            "forecaster",
            forecaster,
            vec![named_tool("get_forecast"), text("Sunny, 21 C.")],
        ),
    ])
}

#[test]
fn a_handoff_continues_the_conversation_under_the_new_agents_script() {
    let mut book = handoff_book(HistoryPolicy::Continuation);
    let ask_user = user("Weather in Rome?");
    let (a, first) = ask(
        &mut book,
        "triage",
        messages(std::slice::from_ref(&ask_user)),
    )
    .unwrap();
    assert_eq!((a.agent.as_str(), a.conversation, a.turn), ("triage", 1, 0));
    let handoff = tool_id(&first);
    let [call, result] = call_and_result(&handoff, "transfer_to_forecaster");
    let history = vec![ask_user, call, result];
    let (a, second) = ask(&mut book, "forecaster", messages(&history)).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.conversation, a.turn, a.entry),
        ("forecaster", 1, 0, Some(1)),
        "the forecaster's first turn, in triage's conversation"
    );
    let forecast = tool_id(&second);
    assert_ne!(
        forecast, handoff,
        "ids are numbered by place in the conversation"
    );
    let mut history = history;
    history.extend(call_and_result(&forecast, "get_forecast"));
    let (a, third) = ask(&mut book, "forecaster", messages(&history)).unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 1, Some(2)));
    assert!(matches!(third, Answer::Reply { .. }));
    assert_eq!(book.conversations(), 1);
    assert!(book.unused().is_empty());
}

#[test]
fn an_exact_agent_refuses_a_handed_off_history_and_names_the_policy_that_takes_it() {
    let mut book = handoff_book(HistoryPolicy::Exact);
    let ask_user = user("Weather in Rome?");
    let (_, first) = ask(
        &mut book,
        "triage",
        messages(std::slice::from_ref(&ask_user)),
    )
    .unwrap();
    let [call, result] = call_and_result(&tool_id(&first), "transfer_to_forecaster");
    let miss = ask(&mut book, "forecaster", messages(&[ask_user, call, result])).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(
        miss.message.contains("but no conversation of that agent began with that message; it continues conversation 1 (last sent to agent `triage`): to let agents share a history, give `forecaster` `history: continuation`"),
        "{}",
        miss.message
    );
}

#[test]
fn a_nested_handoff_history_is_the_clients_own_message_and_starts_a_conversation() {
    let mut book = handoff_book(HistoryPolicy::Continuation);
    // `nest_handoff_history=True`: one assistant message summing up, no user message.
    let nested = messages(&[assistant(
        "For context, here is the conversation so far: user asked for the weather in Rome.",
    )]);
    let (a, _) = ask(&mut book, "forecaster", nested.clone()).unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 0, Some(1)));
    // Under `exact`, the same message is a turn the server never sent.
    let mut book = handoff_book(HistoryPolicy::Exact);
    let miss = ask(&mut book, "forecaster", nested).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY), "{}", miss.message);
    assert!(
        miss.message.contains("first user message \"\""),
        "{}",
        miss.message
    );
}

/// langgraph-supervisor: one message list for the supervisor and its worker; the library writes
/// an assistant message of its own ("Transferring back to supervisor", with a tool call and its
/// result) that no model produced.
#[test]
fn a_supervisor_round_trip_takes_the_librarys_own_messages() {
    let mut book = Book::new(vec![
        with(
            "supervisor",
            HistoryPolicy::Continuation,
            vec![named_tool("transfer_to_worker"), text("Rome: sunny.")],
        ),
        with(
            "worker",
            HistoryPolicy::Continuation,
            vec![named_tool("search"), text("Found: sunny.")],
        ),
    ]);
    let mut history = vec![user("Weather in Rome?")];
    let (_, r) = ask(&mut book, "supervisor", messages(&history)).unwrap();
    history.extend(call_and_result(&tool_id(&r), "transfer_to_worker"));
    let (a, r) = ask(&mut book, "worker", messages(&history)).unwrap();
    assert_eq!((a.agent.as_str(), a.conversation, a.turn), ("worker", 1, 0));
    history.extend(call_and_result(&tool_id(&r), "search"));
    let (a, _) = ask(&mut book, "worker", messages(&history)).unwrap();
    assert_eq!((a.turn, a.entry), (1, Some(2)));
    history.push(assistant("Found: sunny."));
    history.extend(call_and_result(
        "call_back_1",
        "transfer_back_to_supervisor",
    ));
    let back = history.len() - 2;
    history[back] = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Transferring back to supervisor"},
        {"type": "tool_use", "id": "call_back_1", "name": "transfer_back_to_supervisor", "input": {}}]});
    let (a, r) = ask(&mut book, "supervisor", messages(&history)).unwrap();
    assert_eq!(
        (a.agent.as_str(), a.conversation, a.turn, a.entry),
        ("supervisor", 1, 1, Some(2))
    );
    assert!(matches!(r, Answer::Reply { .. }));
    assert_eq!(book.conversations(), 1);
    assert!(book.unused().is_empty());
}

#[test]
fn a_restored_history_that_begins_with_an_assistant_turn_continues() {
    let mut book = Book::new(vec![with(
        "child",
        HistoryPolicy::Continuation,
        vec![named_tool("search"), text("done")],
    )]);
    let (_, r) = ask(&mut book, "child", messages(&[user("Research Rome")])).unwrap();
    let [call, result] = call_and_result(&tool_id(&r), "search");
    // ash's restored child: its log lacks the first user message.
    let (a, _) = ask(&mut book, "child", messages(&[call, result])).unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 1, Some(2)));
}

#[test]
fn continuation_still_catches_a_changed_tool_call_a_dropped_turn_and_a_dropped_reply() {
    let book = || {
        Book::new(vec![
            with(
                "main",
                HistoryPolicy::Continuation,
                vec![named_tool("search"), named_tool("fetch"), text("done")],
            ),
            with("other", HistoryPolicy::Continuation, vec![text("forked")]),
        ])
    };
    let mut b = book();
    let hi = user("hi");
    let (_, r) = ask(&mut b, "main", messages(std::slice::from_ref(&hi))).unwrap();
    let first = tool_id(&r);
    // The server's tool call with other input: it claims the server's turn and contradicts it.
    let changed = json!({"role": "assistant", "content": [{"type": "tool_use", "id": first, "name": "search", "input": {"q": 2}}]});
    let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": first, "content": "ok"}]});
    let miss = ask(&mut b, "main", messages(&[hi.clone(), changed, result])).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(
        miss.message.contains("assistant message 1 of the request for agent `main` replays a tool use the server sent in conversation 1 (to agent `main`), out of its history: it changes that turn"),
        "{}",
        miss.message
    );
    // A dropped first turn before the server's second tool call.
    let [c1, r1] = call_and_result(&first, "search");
    let (_, r) = ask(
        &mut b,
        "main",
        messages(&[hi.clone(), c1.clone(), r1.clone()]),
    )
    .unwrap();
    let second = tool_id(&r);
    let [c2, r2] = call_and_result(&second, "fetch");
    let miss = ask(
        &mut b,
        "main",
        messages(&[hi.clone(), c2.clone(), r2.clone()]),
    )
    .unwrap_err();
    assert!(
        miss.message.contains(&format!("the server sent it after tool use search ({first}) (sent to agent `main`), which the request does not replay")),
        "{}",
        miss.message
    );
    // The history `main` was answered on, again, without the answer: the reply was dropped.
    let miss = ask(
        &mut b,
        "main",
        messages(&[hi.clone(), c1.clone(), r1.clone()]),
    )
    .unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(
        miss.message.contains("later turns were dropped"),
        "{}",
        miss.message
    );
    // Another agent may answer that history (a fork): only the agent that answered it is held.
    let (a, _) = ask(&mut b, "other", messages(&[hi, c1, r1])).unwrap();
    assert_eq!((a.agent.as_str(), a.conversation, a.turn), ("other", 1, 0));
}

#[test]
fn a_retry_and_a_fault_in_a_shared_history_meet_the_same_turn() {
    let mut book = handoff_book(HistoryPolicy::Continuation);
    book.agents[1].entries.insert(0, error());
    let hi = user("Weather in Rome?");
    let (_, r) = ask(&mut book, "triage", messages(std::slice::from_ref(&hi))).unwrap();
    let [call, result] = call_and_result(&tool_id(&r), "transfer_to_forecaster");
    let history = messages(&[hi, call, result]);
    let (a, answer) = ask(&mut book, "forecaster", history.clone()).unwrap();
    assert!(matches!(answer, Answer::Error { .. }));
    assert_eq!((a.turn, a.entry), (0, Some(1)));
    let (a, answer) = ask(&mut book, "forecaster", history.clone()).unwrap();
    assert_eq!((a.turn, a.entry), (0, Some(2)), "the retry gets the reply");
    let id = tool_id(&answer);
    // A fault in place of that reply: the retry gets it again, with the same ids.
    book.retract(&a);
    let (again, answer) = ask(&mut book, "forecaster", history).unwrap();
    assert_eq!((again.turn, again.entry), (0, Some(2)));
    assert_eq!(tool_id(&answer), id);
}

#[test]
fn lenient_follows_a_compacted_history_and_never_compares_it() {
    let mut book = Book::new(vec![with(
        "main",
        HistoryPolicy::Lenient,
        vec![
            named_tool("search"),
            text("Rome is sunny."),
            text("Paris too."),
        ],
    )]);
    let hi = user("Weather?");
    let (_, r) = ask(&mut book, "main", messages(std::slice::from_ref(&hi))).unwrap();
    let [call, result] = call_and_result(&tool_id(&r), "search");
    let (a, _) = ask(&mut book, "main", messages(&[hi, call, result])).unwrap();
    assert_eq!(a.turn, 1);
    // Compacted: a summary instead of the first turns, the last reply kept.
    let compacted = messages(&[
        user("Summary: the user asked for the weather; a search was made."),
        assistant("Rome is sunny."),
        user("And Paris?"),
    ]);
    let (a, _) = ask(&mut book, "main", compacted).unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 2, Some(3)));
    // A rewritten history is not compared: a turn past the script is a miss, not a violation.
    let rewritten = messages(&[user("Weather?"), assistant("Rome is rainy."), user("Sure?")]);
    let miss = ask(&mut book, "main", rewritten).unwrap_err();
    assert_eq!(miss.violation, None, "{}", miss.message);
}

#[test]
fn alike_continued_conversations_are_told_apart_by_order_of_first_appearance() {
    let mut main = with(
        "main",
        HistoryPolicy::Continuation,
        vec![text("It is 18 C."), text("Cloudy.")],
    );
    main.per_conversation = true;
    let mut book = Book::new(vec![main]);
    let hi = messages(&[user("Weather?")]);
    let (a1, _) = ask(&mut book, "main", hi.clone()).unwrap();
    let (a2, _) = ask(&mut book, "main", hi).unwrap();
    assert_eq!((a1.conversation, a2.conversation), (1, 2));
    // Both were sent the same turn: the two follow-ups, whatever their order, get one each.
    let more = messages(&[user("Weather?"), assistant("It is 18 C."), user("Sky?")]);
    for n in [1, 2] {
        let (a, _) = ask(&mut book, "main", more.clone()).unwrap();
        assert_eq!((a.conversation, a.turn, a.entry), (n, 1, Some(2)));
    }
    // A third is a history both were already answered on.
    let miss = ask(&mut book, "main", more).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(
        miss.message.contains("later turns were dropped"),
        "{}",
        miss.message
    );
    assert!(book.unused().is_empty());
}
