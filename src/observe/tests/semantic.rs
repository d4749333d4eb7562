//! The semantic invariants: `tool-execution`, `batch-answer`, `message-delivery`,
//! `error-propagation`, `iteration-accounting`, `journal-before-state`.

use super::*;

#[test]
fn a_use_skill_runs_a_passthrough_skill_externally_and_any_other_skill_as_a_child() {
    let mut catalog = Catalog::default();
    let mut passthrough = crate::model::agent::AgentDef::new("r", AgentKind::Skill);
    passthrough.passthrough = true;
    catalog.add(passthrough);
    catalog.add(crate::model::agent::AgentDef::new("p", AgentKind::Skill));
    let main = frame("main", AgentKind::Main, 1, None);
    let use_skill = |skill: &str| Input::LlmReply {
        call: 1,
        reply: LlmReply {
            content: [Block::ToolUse {
                id: "t1".into(),
                name: "use_skill".into(),
                input: Arc::new(serde_json::json!({ "skill": skill, "message": "m" })),
            }]
            .into_iter()
            .collect(),
            usage: Default::default(),
        },
    };
    let direct = vec![
        answered(&main, "t1", "patched", false),
        request(&main, 2, 2, 5),
    ];
    // A passthrough skill answered by its one external run: sound.
    let steps = vec![opened(&main, 5), (Some(use_skill("r")), direct.clone())];
    assert_eq!(semantic_with(catalog.clone(), &steps, false), None);
    // A passthrough skill run as a child frame.
    let child = |name: &str| frame(name, AgentKind::Skill, 2, Some("t1"));
    let pushed = |name: &str| vec![push(&child(name), 2), request(&child(name), 2, 1, 5)];
    let steps = vec![opened(&main, 5), (Some(use_skill("r")), pushed("skill:r"))];
    assert_eq!(
        semantic_with(catalog.clone(), &steps, false),
        Some(names::TOOL_EXECUTION)
    );
    // Any other skill answered with a success that no child delivered.
    let steps = vec![opened(&main, 5), (Some(use_skill("p")), direct)];
    assert_eq!(
        semantic_with(catalog.clone(), &steps, false),
        Some(names::TOOL_EXECUTION)
    );
    // Any other skill run as a child frame (failing here, its error delivered): sound.
    let failed = Event::LlmError {
        key: key(),
        frame: "skill:p".into(),
        frame_id: child("skill:p").frame_id,
        kind: crate::model::llm::LlmErrorKind::Network,
        message: "down".into(),
    };
    let steps = vec![
        opened(&main, 5),
        (Some(use_skill("p")), pushed("skill:p")),
        (
            None,
            vec![
                failed,
                popped(&child("skill:p"), 1, PopReason::Error, 1),
                answered(&main, "t1", "LLM error: down", true),
                request(&main, 3, 2, 5),
            ],
        ),
    ];
    assert_eq!(semantic_with(catalog, &steps, false), None);
}

#[test]
fn with_query_user_none_an_ask_user_is_answered_at_once_that_nobody_answered() {
    let main = frame("main", AgentKind::Main, 1, None);
    let ask = || Input::LlmReply {
        call: 1,
        reply: LlmReply {
            content: [Block::ToolUse {
                id: "t1".into(),
                name: "ask_user".into(),
                input: Arc::new(serde_json::json!({ "question": "Which file?" })),
            }]
            .into_iter()
            .collect(),
            usage: Default::default(),
        },
    };
    let run = |query_user: crate::runtime::QueryUser, steps: Vec<(Option<Input>, Vec<Event>)>| {
        let config = RuntimeConfig {
            query_user,
            ..RuntimeConfig::default()
        };
        semantic_in(Catalog::default(), config, &steps)
    };
    let none = crate::runtime::QueryUser::None;
    let at_once = |content: &str| {
        vec![
            opened(&main, 5),
            (
                Some(ask()),
                vec![
                    answered(&main, "t1", content, false),
                    request(&main, 2, 2, 5),
                ],
            ),
        ]
    };
    assert_eq!(run(none, at_once(messages::NO_ANSWER)), None);
    // Answered at once, but with something else.
    assert_eq!(
        run(none, at_once("src/lib.rs")),
        Some(names::TOOL_EXECUTION)
    );
    // Asked of the user, and answered by the next message.
    let later = vec![
        opened(&main, 5),
        (Some(ask()), vec![]),
        (
            Some(user("src/lib.rs")),
            vec![
                delivered(&main, "src/lib.rs"),
                answered(&main, "t1", "src/lib.rs", false),
                request(&main, 2, 2, 5),
            ],
        ),
    ];
    assert_eq!(run(none, later.clone()), Some(names::TOOL_EXECUTION));
    // With someone to ask, that is how it goes.
    assert_eq!(run(crate::runtime::QueryUser::Interactive, later), None);
}

/// [`semantic`], with `agent:b` a batch child under `policy` (a real run reads the policy
/// from the child's model request; these steps have no runtime behind them).
fn semantic_batch(
    policy: crate::model::agent::EmptyAnswer,
    steps: &[(Option<Input>, Vec<Event>)],
) -> Option<&'static str> {
    let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
    let mut o = Observer::new();
    o.no_runtime = true;
    for (input, events) in steps {
        for f in o.keys.iter_mut().flat_map(|m| m.frames.iter_mut()) {
            if &*f.info.name == "agent:b" && f.batch.is_none() {
                f.batch = Some(Box::new(batch::BatchModel::new(policy)));
            }
        }
        if let Some(input) = input {
            o.before_input(&rt, input);
        }
        if let Err(v) = o.after_step(&rt, events) {
            return Some(v.invariant);
        }
    }
    None
}

#[test]
fn a_batch_child_answers_its_text_or_what_its_policy_makes_of_a_blank_one() {
    use crate::model::agent::EmptyAnswer;
    let main = frame("main", AgentKind::Main, 1, None);
    let b = frame("agent:b", AgentKind::Agent, 2, Some("t1"));
    let says = |call: u64, blocks: Vec<Block>| Input::LlmReply {
        call,
        reply: LlmReply {
            content: blocks.into_iter().collect(),
            usage: Default::default(),
        },
    };
    let tool = |id: &str| Block::ToolUse {
        id: id.into(),
        name: "echo".into(),
        input: Arc::new(serde_json::json!({})),
    };
    let delegation = |what: &'static str, text: &str| Event::Delegation {
        key: key(),
        frame: b.name.clone(),
        what,
        text: text.into(),
    };
    // main delegates to b; b says "notes" next to a tool use, then ends its send with
    // `last` (call 3).
    let start = |first: Vec<Block>| {
        vec![
            opened(&main, 5),
            (
                Some(reply(1, &[("t1", "use_agent")])),
                vec![push(&b, 2), request(&b, 2, 1, 5)],
            ),
            (
                Some(says(2, first)),
                vec![answered(&b, "t2", "ok", false), request(&b, 3, 2, 5)],
            ),
        ]
    };
    let noted = || start(vec![Block::text("notes"), tool("t2")]);
    let silent = || start(vec![tool("t2")]);
    // b's answer `said` reaches main as `received`.
    let answer = |said: &str, received: &str| {
        vec![
            delegation("answer", said),
            popped(&b, 1, PopReason::Completed, 2),
            answered(&main, "t1", received, false),
            request(&main, 4, 2, 5),
        ]
    };
    let ends = |mut steps: Vec<(Option<Input>, Vec<Event>)>, last: Vec<Block>, then| {
        steps.push((Some(says(3, last)), then));
        steps
    };
    let extract = EmptyAnswer::ExtractFromConversation;
    // A text answer is the answer, whatever the policy.
    let done = ends(noted(), vec![Block::text("done")], answer("done", "done"));
    assert_eq!(semantic_batch(EmptyAnswer::AcceptEmpty, &done), None);
    // A blank one: kept, or replaced by the latest text said.
    let blank = || vec![Block::text(" ")];
    let kept = ends(noted(), blank(), answer(" ", " "));
    assert_eq!(semantic_batch(EmptyAnswer::AcceptEmpty, &kept), None);
    assert_eq!(semantic_batch(extract, &kept), Some(names::BATCH_ANSWER));
    let extracted = ends(noted(), blank(), answer("notes", "notes"));
    assert_eq!(semantic_batch(extract, &extracted), None);
    assert_eq!(
        semantic_batch(EmptyAnswer::AcceptEmpty, &extracted),
        Some(names::BATCH_ANSWER)
    );
    // The right answer, delivered as something else.
    let lost = ends(noted(), blank(), answer("notes", ""));
    assert_eq!(semantic_batch(extract, &lost), Some(names::BATCH_ANSWER));
    // Nothing done about the reply that ended the send.
    let ignored = ends(noted(), blank(), vec![]);
    assert_eq!(semantic_batch(extract, &ignored), Some(names::BATCH_ANSWER));
    // ask_for_summary, with nothing said: asked once, then the blank answer is kept.
    let ask = EmptyAnswer::AskForSummary;
    let summary = || {
        vec![
            delegation("summary request", messages::SUMMARY_PROMPT),
            request(&b, 4, 3, 5),
        ]
    };
    let mut asked = ends(silent(), vec![], summary());
    assert_eq!(semantic_batch(ask, &asked), None);
    assert_eq!(semantic_batch(extract, &asked), Some(names::BATCH_ANSWER));
    let mut twice = asked.clone();
    let mut answer_after = answer("", "");
    answer_after[1] = popped(&b, 1, PopReason::Completed, 3);
    answer_after[3] = request(&main, 5, 2, 5);
    asked.push((Some(says(4, vec![])), answer_after));
    assert_eq!(semantic_batch(ask, &asked), None);
    twice.push((Some(says(4, vec![])), summary()));
    assert_eq!(semantic_batch(ask, &twice), Some(names::BATCH_ANSWER));
    // With something said, no summary is asked for.
    let needless = ends(noted(), vec![], summary());
    assert_eq!(semantic_batch(ask, &needless), Some(names::BATCH_ANSWER));
}

#[test]
fn a_cancel_word_reaches_a_frame_as_a_message_only_when_it_starts_the_conversation() {
    let rt = Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default());
    let main = frame("main", AgentKind::Main, 1, None);
    let deliver = |pushed_now: bool, text: &str| {
        let mut o = Observer::new();
        let k = o.key_index(&key());
        o.keys[k].pending = 1;
        o.keys[k].pending_cancels = 1;
        o.keys[k].frames.push(ModelFrame::new(main.clone()));
        if pushed_now {
            o.pushed.push((k, main.frame_id, FrameId::new(0, 0)));
        }
        o.on_user_message(&rt, k, main.frame_id, &text.into());
        o.step.deferred.map(|v| v.invariant)
    };
    // The first message of a conversation starts its main frame, whatever it says.
    assert_eq!(deliver(true, "cancel"), None);
    // Taken from the queue to a frame already on the stack: it must unwind it.
    assert_eq!(deliver(false, " Cancel "), Some(names::MESSAGE_DELIVERY));
    assert_eq!(deliver(false, "cancel the order"), None);
}

#[test]
fn a_failed_child_delivering_a_success_breaks_error_propagation() {
    assert_eq!(semantic(&failing_child(true), false), None);
    assert_eq!(
        semantic(&failing_child(false), false),
        Some(names::ERROR_PROPAGATION)
    );
}

#[test]
fn a_main_frame_at_its_limit_must_tell_the_user() {
    let main = frame("main", AgentKind::Main, 1, None);
    let end = |told: bool| {
        let mut events = vec![popped(&main, 0, PopReason::MaxIterations, 1)];
        let text: Arc<str> = if told {
            events.insert(
                0,
                Event::Sent {
                    key: key(),
                    frame: "main".into(),
                    text: messages::USER_MAX_STEPS.into(),
                },
            );
            messages::USER_MAX_STEPS.into()
        } else {
            "".into()
        };
        events.push(Event::Response {
            key: key(),
            response: crate::model::agent::AgentResponse {
                text,
                tool_calls: Vec::new(),
                iterations: 1,
            },
        });
        vec![
            opened(&main, 1),
            // The reply's tool runs; the loop head then finds the limit.
            (
                Some(reply(1, &[("t1", "x")])),
                vec![answered(&main, "t1", "ok", false)],
            ),
            (None, events),
        ]
    };
    assert_eq!(semantic(&end(true), false), None);
    assert_eq!(semantic(&end(false), false), Some(names::ERROR_PROPAGATION));
}

#[test]
fn a_tool_use_skipped_for_no_documented_reason_breaks_tool_execution() {
    let main = frame("main", AgentKind::Main, 1, None);
    let run = |uses: &[(&str, &str)], results: Vec<Event>| {
        vec![opened(&main, 5), (Some(reply(1, uses)), results)]
    };
    // After `complete` (refused to main here, so nothing completed): not a reason.
    let skipped = |id| answered(&main, id, messages::SKIPPED_AFTER_COMPLETE, true);
    assert_eq!(
        semantic(
            &run(
                &[("t1", "x"), ("t2", "y")],
                vec![answered(&main, "t1", "ok", false), skipped("t2")]
            ),
            false
        ),
        Some(names::TOOL_EXECUTION)
    );
    // At the limit, on a fresh reply (not on resuming at the loop head): not a reason.
    let at_limit = answered(&main, "t1", messages::SKIPPED_AFTER_LIMIT, true);
    assert_eq!(
        semantic(&run(&[("t1", "x")], vec![at_limit]), false),
        Some(names::TOOL_EXECUTION)
    );
    // Interrupted with no interruption: not a reason.
    let interrupted = answered(&main, "t1", messages::TOOL_INTERRUPTED, true);
    assert_eq!(
        semantic(&run(&[("t1", "x")], vec![interrupted]), false),
        Some(names::TOOL_EXECUTION)
    );
    // Cancelled with no unwind: not a reason.
    let cancelled = answered(&main, "t1", messages::CANCELLED_BY_USER, true);
    assert_eq!(
        semantic(&run(&[("t1", "x")], vec![cancelled]), false),
        Some(names::TOOL_EXECUTION)
    );
    // A built-in tool answered as not found.
    let not_found = answered(&main, "t1", "Tool 'use_skill' not found", true);
    assert_eq!(
        semantic(&run(&[("t1", "use_skill")], vec![not_found]), false),
        Some(names::TOOL_EXECUTION)
    );
    // A child that completes skips what follows `complete`: sound.
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t0"));
    let steps = vec![
        opened(&main, 5),
        (
            Some(reply(1, &[("t0", "use_skill")])),
            vec![push(&child, 2), request(&child, 2, 1, 5)],
        ),
        (
            Some(reply(2, &[("c1", "complete"), ("c2", "x")])),
            vec![
                answered(&child, "c1", "done", false),
                answered(&child, "c2", messages::SKIPPED_AFTER_COMPLETE, true),
                popped(&child, 1, PopReason::Completed, 1),
                answered(&main, "t0", "done", false),
                request(&main, 3, 2, 5),
            ],
        ),
    ];
    assert_eq!(semantic(&steps, false), None);
    // A child whose `complete` succeeded but which stays on the stack.
    let mut stays = steps.clone();
    stays[2].1.truncate(2);
    assert_eq!(semantic(&stays, false), Some(names::TOOL_EXECUTION));
}

#[test]
fn a_message_neither_delivered_nor_dropped_breaks_message_delivery() {
    let main = frame("main", AgentKind::Main, 1, None);
    // Delivered: sound. (With no runtime behind the events, the conversation is idle.)
    let steps = vec![(
        Some(user("hi")),
        vec![push(&main, 1), delivered(&main, "hi")],
    )];
    assert_eq!(semantic(&steps, false), None);
    // Sent and never delivered, with the conversation idle.
    assert_eq!(
        semantic(&[(Some(user("hi")), vec![])], false),
        Some(names::MESSAGE_DELIVERY)
    );
    // Delivered but never sent (or delivered twice).
    assert_eq!(
        semantic(
            &[(None, vec![push(&main, 1), delivered(&main, "hi")])],
            false
        ),
        Some(names::MESSAGE_DELIVERY)
    );
    // A cancel word on an active stack that nothing acts on.
    let steps = vec![
        (
            Some(user("hi")),
            vec![push(&main, 1), delivered(&main, "hi")],
        ),
        (Some(user("stop")), vec![]),
    ];
    assert_eq!(semantic(&steps, false), Some(names::MESSAGE_DELIVERY));
    // The unwind drops more queued messages than were waiting.
    let unwound = Event::Cancelled {
        key: key(),
        text: "stop".into(),
        frames: 1,
        dropped: 2,
    };
    let steps = vec![
        (
            Some(user("hi")),
            vec![push(&main, 1), delivered(&main, "hi")],
        ),
        (Some(user("more")), vec![]),
        (
            Some(user("stop")),
            vec![popped(&main, 0, PopReason::Cancelled, 0), unwound],
        ),
    ];
    assert_eq!(semantic(&steps, false), Some(names::MESSAGE_DELIVERY));
    // An unwind that no cancel word asked for (a queued ordinary message taken for one).
    let unwound = Event::Cancelled {
        key: key(),
        text: "more".into(),
        frames: 1,
        dropped: 0,
    };
    let steps = vec![
        (
            Some(user("hi")),
            vec![push(&main, 1), delivered(&main, "hi")],
        ),
        (
            Some(user("more")),
            vec![popped(&main, 0, PopReason::Cancelled, 0), unwound],
        ),
    ];
    assert_eq!(semantic(&steps, false), Some(names::MESSAGE_DELIVERY));
}

#[test]
fn a_count_that_is_not_the_passes_made_breaks_iteration_accounting() {
    let main = frame("main", AgentKind::Main, 1, None);
    let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
    // main's reply spawns a child and leaves t2; the child's result resumes main at the loop
    // head, which runs t2 in a pass of its own before its next model call (iteration 3).
    let steps = |iteration: u32| {
        vec![
            opened(&main, 5),
            (
                Some(reply(1, &[("t1", "use_skill"), ("t2", "x")])),
                vec![push(&child, 2), request(&child, 2, 1, 5)],
            ),
            (
                Some(reply(2, &[("c", "complete")])),
                vec![
                    answered(&child, "c", "done", false),
                    popped(&child, 1, PopReason::Completed, 1),
                    answered(&main, "t1", "done", false),
                    answered(&main, "t2", "ok", false),
                    request(&main, 3, iteration, 5),
                ],
            ),
        ]
    };
    assert_eq!(semantic(&steps(3), false), None);
    assert_eq!(
        semantic(&steps(2), false),
        Some(names::ITERATION_ACCOUNTING)
    );
    // A pop that reports a count other than the passes made.
    let steps = vec![
        opened(&main, 5),
        (
            Some(reply(1, &[("t1", "use_skill")])),
            vec![push(&child, 2), request(&child, 2, 1, 5)],
        ),
        (
            Some(reply(2, &[("c", "complete")])),
            vec![
                answered(&child, "c", "done", false),
                popped(&child, 1, PopReason::Completed, 2),
                answered(&main, "t1", "done", false),
            ],
        ),
    ];
    assert_eq!(semantic(&steps, false), Some(names::ITERATION_ACCOUNTING));
}

#[test]
fn an_operation_missing_from_the_journal_or_after_the_state_breaks_journal_before_state() {
    let main = frame("main", AgentKind::Main, 1, None);
    // With persistence on, a delivered message must be in the step's journal lines; the
    // runtime behind these made-up events wrote none.
    let steps = vec![(
        Some(user("hi")),
        vec![push(&main, 1), delivered(&main, "hi")],
    )];
    assert_eq!(semantic(&steps, false), None);
    assert_eq!(semantic(&steps, true), Some(names::JOURNAL_BEFORE_STATE));

    // The line present, before the state: sound; after it: broken.
    let mut o = Observer::new();
    o.persist = true;
    let line = crate::persist::ContextEntry::User {
        agent_session_id: main.session_id,
        text: "hi".into(),
    }
    .line();
    o.expect("user", main.session_id, None, None, &main.name);
    let append = Effect::AppendContext { line };
    let state = Effect::WriteState { json: "{}".into() };
    assert!(o.check_journal([&append, &state].into_iter()).is_ok());
    assert_eq!(
        o.check_journal([&state, &append].into_iter())
            .err()
            .map(|v| v.invariant),
        Some(names::JOURNAL_BEFORE_STATE)
    );
    // A line for another session does not stand for this one.
    let other = Effect::AppendContext {
        line: crate::persist::ContextEntry::User {
            agent_session_id: Uuid::from_u128(7),
            text: "hi".into(),
        }
        .line(),
    };
    assert_eq!(
        o.check_journal([&other, &state].into_iter())
            .err()
            .map(|v| v.invariant),
        Some(names::JOURNAL_BEFORE_STATE)
    );
}
