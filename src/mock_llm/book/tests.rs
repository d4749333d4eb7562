//! Unit tests of the book: requests addressed to agents, conversations and turns, and the misses.

use super::*;
use crate::drive::scripted::{Attempts, ScriptedReply};
use serde_json::{json, Value};

fn text(t: &str) -> ScriptedReply {
    ScriptedReply {
        kind: ReplyKind::Content(vec![ScriptBlock::Text(t.into())]),
        after_ms: 0,
        usage: Usage::default(),
    }
}

fn tool(name: &str) -> ScriptedReply {
    ScriptedReply {
        kind: ReplyKind::Content(vec![ScriptBlock::ToolUse {
            id: None,
            name: name.into(),
            input: Arc::new(json!({"q": 1})),
        }]),
        after_ms: 0,
        usage: Usage::default(),
    }
}

fn error() -> ScriptedReply {
    ScriptedReply {
        kind: ReplyKind::Error {
            kind: LlmErrorKind::RateLimit,
            message: "slow down".into(),
            mid_stream: false,
            times: Attempts::default(),
            retry_after_ms: None,
        },
        after_ms: 0,
        usage: Usage::default(),
    }
}

fn agent(name: &str, entries: Vec<ScriptedReply>) -> AgentScript {
    AgentScript {
        name: name.into(),
        route: Route::Default {
            model: name.into(),
            system: format!("You are `{name}`."),
        },
        entries,
        per_conversation: false,
        history: HistoryPolicy::Exact,
    }
}

fn request(model: &str, messages: Value) -> Request {
    crate::wire::anthropic::validate(&json!({
        "model": model, "max_tokens": 100, "messages": messages
    }))
    .expect("a valid request")
}

fn ask(book: &mut Book, model: &str, messages: Value) -> Result<(Address, Answer), Miss> {
    book.answer(Provider::Anthropic, &request(model, messages), &[])
}

fn tool_id(answer: &Answer) -> String {
    match answer {
        Answer::Reply { reply, .. } => match &reply.blocks[0] {
            OutBlock::ToolUse { id, .. } => id.clone(),
            other => panic!("not a tool use: {other:?}"),
        },
        other => panic!("not a reply: {other:?}"),
    }
}

#[test]
fn an_empty_reply_is_not_replayed_and_the_grown_request_is_the_next_turn() {
    let empty = ScriptedReply {
        kind: ReplyKind::Content(Vec::new()),
        after_ms: 0,
        usage: Usage::default(),
    };
    let mut book = Book::new(vec![agent(
        "worker",
        vec![tool("search"), empty, text("summary")],
    )]);
    let (_, first) = ask(
        &mut book,
        "worker",
        json!([{"role": "user", "content": "go"}]),
    )
    .unwrap();
    let id = tool_id(&first);
    let turn1 = json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
    ]);
    let (a, _) = ask(&mut book, "worker", turn1.clone()).unwrap();
    assert_eq!((a.turn, a.entry), (1, Some(2)), "the empty reply");
    // The runtime keeps no empty assistant message: it asks again with more to say.
    let mut grown = turn1.clone();
    grown[2]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text": "summarise"}));
    let (a, answer) = ask(&mut book, "worker", grown).unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 2, Some(3)));
    assert!(matches!(answer, Answer::Reply { .. }));
    assert!(book.unused().is_empty());
    // The request that got the empty reply, again, is not a new turn: nothing is left.
    let miss = ask(&mut book, "worker", turn1).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY), "{}", miss.message);
}

#[test]
fn a_per_conversation_script_starts_over_for_each_conversation() {
    let mut worker = agent("worker", vec![tool("search"), text("done")]);
    worker.per_conversation = true;
    let mut book = Book::new(vec![worker]);
    let mut ids = Vec::new();
    for task in ["task one", "task two", "task one"] {
        let (a, answer) = ask(
            &mut book,
            "worker",
            json!([{"role": "user", "content": task}]),
        )
        .unwrap();
        assert_eq!((a.turn, a.entry), (0, Some(1)), "{task}");
        ids.push((task, tool_id(&answer)));
    }
    assert_eq!(book.conversations(), 3);
    // Each goes on with its own second entry, in any order.
    for (task, id) in ids.iter().rev() {
        let (a, _) = ask(
            &mut book,
            "worker",
            json!([
                {"role": "user", "content": task},
                {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
            ]),
        )
        .unwrap();
        assert_eq!((a.turn, a.entry), (1, Some(2)), "{task}");
    }
    assert!(book.unused().is_empty());
    // A third turn is past the script's end: a miss, never a default.
    let (task, id) = &ids[0];
    let miss = ask(
        &mut book,
        "worker",
        json!([
            {"role": "user", "content": task},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "more?"}
        ]),
    )
    .unwrap_err();
    assert!(miss.message.contains("turn 2"), "{}", miss.message);
}

#[test]
fn a_tool_loop_is_addressed_by_agent_conversation_and_turn() {
    let mut book = Book::new(vec![agent("main", vec![tool("search"), text("done")])]);
    let (a, first) = ask(
        &mut book,
        "main",
        json!([{"role": "user", "content": "hi"}]),
    )
    .unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 0, Some(1)));
    let id = tool_id(&first);
    assert_eq!(id, "toolu_as_a_a_a");
    let history = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
    ]);
    let (a, second) = ask(&mut book, "main", history.clone()).unwrap();
    assert_eq!((a.conversation, a.turn, a.entry), (1, 1, Some(2)));
    assert!(matches!(second, Answer::Reply { .. }));
    assert!(book.unused().is_empty());
    // The same turn again, after its reply: the runtime dropped that reply.
    let miss = ask(&mut book, "main", history).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(
        miss.message.contains("later turns were dropped"),
        "{}",
        miss.message
    );
}

#[test]
fn a_turn_past_the_script_is_a_miss_that_says_what_the_script_holds() {
    let mut book = Book::new(vec![agent("main", vec![tool("search")])]);
    let (_, first) = ask(
        &mut book,
        "main",
        json!([{"role": "user", "content": "hi"}]),
    )
    .unwrap();
    let id = tool_id(&first);
    let history = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
    ]);
    let miss = ask(&mut book, "main", history).unwrap_err();
    assert_eq!(miss.violation, None);
    assert_eq!(
        miss.message,
        "no scripted reply for agent `main`, conversation 1 (first user message \"hi\"), turn 1: the script holds 1 reply, all taken by earlier turns"
    );
    assert_eq!(miss.address.unwrap().turn, 1);
}

#[test]
fn scripted_errors_are_served_to_the_retries_of_their_turn() {
    let mut book = Book::new(vec![agent("main", vec![error(), error(), text("ok")])]);
    let hi = json!([{"role": "user", "content": "hi"}]);
    for n in 1..=2 {
        let (a, answer) = ask(&mut book, "main", hi.clone()).unwrap();
        assert_eq!((a.conversation, a.turn, a.entry), (1, 0, Some(n)));
        assert!(matches!(
            answer,
            Answer::Error {
                kind: LlmErrorKind::RateLimit,
                ..
            }
        ));
    }
    let (a, answer) = ask(&mut book, "main", hi).unwrap();
    assert_eq!((a.conversation, a.entry), (1, Some(3)));
    assert!(matches!(answer, Answer::Reply { .. }));
    assert_eq!(book.conversations(), 1);
}

fn error_times(times: Attempts) -> ScriptedReply {
    let mut e = error();
    if let ReplyKind::Error { times: t, .. } = &mut e.kind {
        *t = times;
    }
    e
}

/// The entries that answer `n` attempts of the first turn of a conversation starting with `hi`.
fn entries_of_attempts(book: &mut Book, hi: &str, n: usize) -> Vec<Option<usize>> {
    let hi = json!([{"role": "user", "content": hi}]);
    (0..n)
        .map(|_| {
            ask(book, "main", hi.clone())
                .ok()
                .and_then(|(a, _)| a.entry)
        })
        .collect()
}

#[test]
fn an_error_with_times_fails_that_many_attempts_of_its_turn() {
    let mut book = Book::new(vec![agent(
        "main",
        vec![
            error_times(Attempts::Times(3)),
            error(),
            text("ok"),
            text("second conversation"),
        ],
    )]);
    assert_eq!(
        entries_of_attempts(&mut book, "hi", 5),
        [Some(1), Some(1), Some(1), Some(2), Some(3)],
        "three attempts meet the first error, one the second, then the reply"
    );
    assert_eq!(book.conversations(), 1);
    assert_eq!(book.unused(), [("main".to_owned(), vec![4])]);
    // Another conversation gets the next entry: the counts were this turn's.
    assert_eq!(entries_of_attempts(&mut book, "other", 1), [Some(4)]);
    assert!(book.unused().is_empty());
}

#[test]
fn an_error_partly_served_counts_as_served_and_what_follows_does_not() {
    let mut book = Book::new(vec![agent(
        "main",
        vec![error_times(Attempts::Times(5)), text("ok")],
    )]);
    assert_eq!(entries_of_attempts(&mut book, "hi", 2), [Some(1), Some(1)]);
    assert_eq!(book.unused(), [("main".to_owned(), vec![2])]);
}

#[test]
fn an_error_of_every_attempt_never_lets_its_turn_through_and_ends_its_entries() {
    let mut book = Book::new(vec![agent(
        "main",
        vec![error_times(Attempts::Always), text("next")],
    )]);
    assert_eq!(entries_of_attempts(&mut book, "hi", 20), vec![Some(1); 20]);
    // The entry after it belongs to the next turn asked for: here another conversation's.
    assert_eq!(book.unused(), [("main".to_owned(), vec![2])]);
    let (a, answer) = ask(
        &mut book,
        "main",
        json!([{"role": "user", "content": "another"}]),
    )
    .unwrap();
    assert_eq!((a.conversation, a.entry), (2, Some(2)));
    assert!(matches!(answer, Answer::Reply { .. }));
    assert!(book.unused().is_empty());
}

#[test]
fn the_agent_header_routes_before_rules_and_default_routing() {
    let mut book = Book::new(vec![
        agent("main", vec![text("from main")]),
        AgentScript {
            name: "helper".into(),
            route: Route::Rule(MatchRule {
                system_contains: Some("never sent".into()),
                ..MatchRule::default()
            }),
            entries: vec![text("from helper")],
            per_conversation: false,
            history: HistoryPolicy::Exact,
        },
    ]);
    // The model name says `main`; the header says `helper`, and wins.
    let req = request("main", json!([{"role": "user", "content": "hi"}]));
    let (a, _) = book
        .answer(Provider::Anthropic, &req, &[("X-Agentsim-Agent", "helper")])
        .unwrap();
    assert_eq!((a.agent.as_str(), a.entry), ("helper", Some(1)));
    let miss = book
        .answer(
            Provider::Anthropic,
            &req,
            &[("x-agentsim-agent", "planner")],
        )
        .unwrap_err();
    assert_eq!(miss.violation, None);
    assert_eq!(
        miss.message,
        "the request's header `x-agentsim-agent: planner` names no agent with a script in the scenario; agents: `main`, `helper`"
    );
    // Without the header, default routing as before.
    let (a, _) = book.answer(Provider::Anthropic, &req, &[]).unwrap();
    assert_eq!(a.agent, "main");
}

#[test]
fn rewritten_or_dropped_history_breaks_replayed_history() {
    let mut book = Book::new(vec![agent(
        "main",
        vec![text("one"), text("two"), text("three")],
    )]);
    ask(
        &mut book,
        "main",
        json!([{"role": "user", "content": "hi"}]),
    )
    .unwrap();
    let rewritten = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "uno"},
        {"role": "user", "content": "more"}
    ]);
    let miss = ask(&mut book, "main", rewritten).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(
        miss.message.contains("assistant turn 1 differs: the server sent text \"one\", the request replays text \"uno\""),
        "{}",
        miss.message
    );
    let good = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "more"}
    ]);
    ask(&mut book, "main", good).unwrap();
    let unknown = json!([
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "more"}
    ]);
    let miss = ask(&mut book, "main", unknown).unwrap_err();
    assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
    assert!(miss.message.contains("no conversation of that agent began"));
}

#[test]
fn alike_conversations_are_told_apart_by_order_of_first_appearance() {
    let mut book = Book::new(vec![agent(
        "worker",
        vec![tool("a"), tool("b"), text("x"), text("y")],
    )]);
    let hi = json!([{"role": "user", "content": "same task"}]);
    let (a1, r1) = ask(&mut book, "worker", hi.clone()).unwrap();
    let (a2, r2) = ask(&mut book, "worker", hi).unwrap();
    assert_eq!((a1.conversation, a2.conversation), (1, 2));
    let (id1, id2) = (tool_id(&r1), tool_id(&r2));
    assert_ne!(id1, id2);
    // The second conversation continues first: it takes the next free entry.
    let turn = |id: &str, name: &str| {
        json!([
            {"role": "user", "content": "same task"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": {"q": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
        ])
    };
    let (b2, _) = ask(&mut book, "worker", turn(&id2, "b")).unwrap();
    assert_eq!((b2.conversation, b2.turn, b2.entry), (2, 1, Some(3)));
    let (b1, _) = ask(&mut book, "worker", turn(&id1, "a")).unwrap();
    assert_eq!((b1.conversation, b1.turn, b1.entry), (1, 1, Some(4)));
}

#[test]
fn a_fork_is_found_by_its_model_name_though_it_keeps_its_callers_system_prompt() {
    let mut fork = agent("main#1", vec![text("forked")]);
    fork.route = Route::Default {
        model: "main#1".into(),
        system: String::new(),
    };
    let mut book = Book::new(vec![agent("main", vec![text("main")]), fork]);
    // The fork's request: its script name as the model, main's system prompt.
    let request = crate::wire::anthropic::validate(&json!({
        "model": "main#1", "max_tokens": 1, "system": "You are `main`.",
        "messages": [{"role": "user", "content": "hi"}]
    }))
    .unwrap();
    let (address, _) = book.answer(Provider::Anthropic, &request, &[]).unwrap();
    assert_eq!(address.agent, "main#1");
    // Main's own request still goes to main.
    let (address, _) = ask(
        &mut book,
        "main",
        json!([{"role": "user", "content": "hi"}]),
    )
    .unwrap();
    assert_eq!(address.agent, "main");
}

#[test]
fn a_request_no_agent_or_two_agents_match_is_a_miss_listing_the_rules() {
    let mut book = Book::new(vec![
        agent("main", vec![text("a")]),
        AgentScript {
            name: "helper".into(),
            route: Route::Rule(MatchRule {
                system_contains: Some("helper".into()),
                ..MatchRule::default()
            }),
            entries: vec![text("b")],
            per_conversation: false,
            history: HistoryPolicy::Exact,
        },
    ]);
    let miss = ask(
        &mut book,
        "gpt-x",
        json!([{"role": "user", "content": "hi"}]),
    )
    .unwrap_err();
    assert!(
        miss.message
            .starts_with("no agent of the scenario matches the request (model \"gpt-x\""),
        "{}",
        miss.message
    );
    assert!(
        miss.message
            .contains("`helper` (system prompt contains \"helper\")"),
        "{}",
        miss.message
    );
    let both = crate::wire::anthropic::validate(&json!({
        "model": "main", "max_tokens": 1, "system": "you are the helper",
        "messages": [{"role": "user", "content": "hi"}]
    }))
    .unwrap();
    let miss = book.answer(Provider::Anthropic, &both, &[]).unwrap_err();
    assert!(
        miss.message
            .contains("matches several agents: `main`, `helper`"),
        "{}",
        miss.message
    );
    assert_eq!(book.unused().len(), 2);
}

#[test]
fn letters_count_without_digits() {
    assert_eq!(letters(0), "a");
    assert_eq!(letters(25), "z");
    assert_eq!(letters(26), "ba");
    assert_eq!(letters(429), "qn");
    assert_eq!(clip("abcdef", 3), "abc…");
    assert_eq!(clip("abc", 3), "abc");
}

mod history;
