//! The stack and the checks read from model requests: each check with a recorded exchange that
//! breaks it and one that keeps it.

use serde_json::json;

use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::transcript::{Block, Message, Role};
use crate::outside::codec::EndReason;
use crate::outside::inferred::{Exchange, Inference, Violation};

fn catalog() -> Catalog {
    let mut main = AgentDef::new("main", AgentKind::Main);
    main.max_iterations = 3;
    let mut c = Catalog::new(main);
    c.add(AgentDef::new("research", AgentKind::Skill));
    let mut writer = AgentDef::new("writer", AgentKind::Agent);
    writer.max_iterations = 2;
    c.add(writer);
    c
}

fn user(blocks: Vec<Block>) -> Message {
    Message {
        role: Role::User,
        content: blocks.into(),
    }
}

fn assistant(blocks: Vec<Block>) -> Message {
    Message {
        role: Role::Assistant,
        content: blocks.into(),
    }
}

/// A run of exchanges fed one by one, numbered from 1.
struct Feed {
    inference: Inference,
    n: u64,
    violations: Vec<Violation>,
}

impl Feed {
    fn new() -> Feed {
        Feed {
            inference: Inference::new(&catalog()),
            n: 0,
            violations: Vec::new(),
        }
    }

    /// A request of `agent` whose messages end with `last`, answered by `reply` (`None`: the
    /// call failed).
    fn call(&mut self, agent: &str, last: Vec<Block>, reply: Option<Vec<Block>>) {
        self.n += 1;
        let messages = vec![
            user(vec![Block::text("go")]),
            assistant(vec![Block::text("earlier")]),
            user(last),
        ];
        let x = Exchange {
            number: self.n,
            agent,
            messages: &messages,
        };
        self.violations.extend(self.inference.request(&x));
        self.inference.reply(self.n, reply.as_deref());
    }

    fn names(&self) -> Vec<String> {
        self.inference
            .frames()
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect()
    }

    fn checks(&self) -> Vec<&'static str> {
        self.violations.iter().map(|v| v.check).collect()
    }
}

fn text(t: &str) -> Vec<Block> {
    vec![Block::text(t)]
}

fn spawn(id: &str, skill: &str) -> Vec<Block> {
    vec![Block::tool_use(
        id,
        "use_skill",
        json!({"skill": skill, "message": "m"}),
    )]
}

fn result(id: &str, content: &str, is_error: bool) -> Vec<Block> {
    vec![Block::tool_result(id, content, is_error)]
}

#[test]
fn a_spawn_pushes_the_child_and_its_complete_pops_it_with_its_result_delivered() {
    let mut f = Feed::new();
    f.inference.user(false);
    f.call("main", text("research"), Some(spawn("u1", "research")));
    assert_eq!(f.names(), ["main"]);
    f.call("research", text("m"), Some(text("Which version?")));
    assert_eq!(f.names(), ["main", "skill:research"]);
    f.inference.settle();
    // The child waits for the user: it stays on top at idle.
    assert_eq!(f.names(), ["main", "skill:research"]);
    f.inference.user(false);
    let done = vec![Block::tool_use(
        "u2",
        "complete",
        json!({"result": "3 APIs"}),
    )];
    f.call("research", text("3.13"), Some(done));
    f.call(
        "main",
        result("u1", "3 APIs", false),
        Some(text("Found 3 APIs.")),
    );
    f.inference.sent("Found 3 APIs.");
    f.inference.settle();
    assert!(f.names().is_empty());
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    let ended: Vec<_> = f
        .inference
        .ended
        .iter()
        .map(|e| (e.name.as_str(), e.iterations, e.reason))
        .collect();
    assert_eq!(
        ended,
        [
            ("skill:research", Some(2), EndReason::Completed),
            ("main", Some(2), EndReason::Answered)
        ]
    );
    // complete's own result, then the parent's.
    let results: Vec<_> = f
        .inference
        .results
        .iter()
        .map(|r| (r.frame.as_str(), r.content.as_str()))
        .collect();
    assert_eq!(results, [("skill:research", "3 APIs"), ("main", "3 APIs")]);
    let r = &f.inference.responses[0];
    assert_eq!(
        (r.text.as_str(), r.iterations, r.tool_calls.as_slice()),
        ("Found 3 APIs.", 2, &["use_skill".to_owned()][..])
    );
}

#[test]
fn a_completed_result_delivered_changed_or_as_an_error_breaks_complete_delivery() {
    for (content, is_error) in [("3 apis", false), ("3 APIs", true)] {
        let mut f = Feed::new();
        f.inference.user(false);
        f.call("main", text("go"), Some(spawn("u1", "research")));
        let done = vec![Block::tool_use(
            "u2",
            "complete",
            json!({"result": "3 APIs"}),
        )];
        f.call("research", text("m"), Some(done));
        f.call("main", result("u1", content, is_error), Some(text("ok")));
        assert_eq!(f.checks(), ["complete-delivery"], "{content} {is_error}");
    }
}

#[test]
fn a_failed_child_delivered_as_a_success_breaks_error_cascade() {
    let mut f = Feed::new();
    f.inference.user(false);
    f.call("main", text("go"), Some(spawn("u1", "research")));
    f.call("research", text("m"), None);
    f.call(
        "main",
        result("u1", "LLM error: boom", false),
        Some(text("ok")),
    );
    assert_eq!(f.checks(), ["error-cascade"]);
    // Delivered as an error, it holds.
    let mut f = Feed::new();
    f.inference.user(false);
    f.call("main", text("go"), Some(spawn("u1", "research")));
    f.call("research", text("m"), None);
    f.call(
        "main",
        result("u1", "LLM error: boom", true),
        Some(text("ok")),
    );
    assert!(f.violations.is_empty());
    assert_eq!(f.inference.ended[0].reason, EndReason::Error);
}

#[test]
fn a_frame_past_its_limit_breaks_iteration_limit_and_a_retry_counts_once() {
    let mut f = Feed::new();
    f.inference.user(false);
    let tool = || vec![Block::tool_use("t", "search", json!({}))];
    f.call("main", text("go"), None);
    // The retry of a failed call is the same iteration.
    f.call("main", text("go"), Some(tool()));
    f.call("main", result("t", "r", false), Some(tool()));
    f.call("main", result("t", "r", false), Some(tool()));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    f.call("main", result("t", "r", false), Some(tool()));
    assert_eq!(f.checks(), ["iteration-limit"]);
    assert!(f.violations[0].message.contains("past its limit of 3"));
}

#[test]
fn a_user_message_reaching_a_frame_below_the_top_breaks_routing() {
    let mut f = Feed::new();
    f.inference.user(false);
    f.call("main", text("go"), Some(spawn("u1", "research")));
    f.call("research", text("m"), Some(text("Which version?")));
    f.inference.settle();
    f.inference.user(false);
    f.call("main", text("3.13"), Some(text("ok")));
    assert_eq!(f.checks(), ["routing"]);
    assert!(
        f.violations[0].message.contains("`skill:research`"),
        "{}",
        f.violations[0].message
    );
}

#[test]
fn a_user_message_to_a_top_frame_at_its_limit_ends_it_and_its_parent_asks_first() {
    // `writer` (limit 2) asks the user at its last iteration; the answer ends it at its limit,
    // and the parent's request carrying that error comes first: no routing error.
    let mut f = Feed::new();
    f.inference.user(false);
    let use_writer = vec![Block::tool_use(
        "u1",
        "use_agent",
        json!({"agent": "writer", "message": "m"}),
    )];
    f.call("main", text("go"), Some(use_writer));
    f.call("writer", text("m"), Some(text("working")));
    f.inference.settle();
    f.inference.user(false);
    f.call("writer", text("more"), Some(text("Which version?")));
    f.inference.settle();
    assert_eq!(f.names(), ["main", "agent:writer"]);
    f.inference.user(false);
    f.call(
        "main",
        result("u1", "Agent reached maximum iterations.", true),
        Some(text("It gave up.")),
    );
    assert!(f.violations.is_empty(), "{:?}", f.violations);
}

#[test]
fn a_user_message_to_main_at_its_limit_ends_it_and_the_next_message_starts_a_new_main() {
    // main (limit 3) asks the user at its third iteration; the answer ends it at its limit with
    // no request; the next message's request starts a new main frame, not a fourth iteration.
    let mut f = Feed::new();
    f.inference.user(false);
    let ask = || {
        vec![Block::tool_use(
            "q",
            "ask_user",
            json!({"question": "which?"}),
        )]
    };
    f.call(
        "main",
        text("go"),
        Some(vec![Block::tool_use("t", "t1", json!({}))]),
    );
    f.call(
        "main",
        result("t", "ok", false),
        Some(vec![Block::tool_use("t2", "t1", json!({}))]),
    );
    f.call("main", result("t2", "ok", false), Some(ask()));
    f.inference.settle();
    assert_eq!(f.names(), ["main"]);
    f.inference.user(false);
    f.inference.sent("Agent reached maximum steps.");
    f.inference.settle();
    assert!(f.names().is_empty());
    f.inference.user(false);
    f.call("main", text("again"), Some(text("Hello again.")));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    assert_eq!(f.inference.ended[0].reason, EndReason::MaxIterations);
}

#[test]
fn with_asks_answered_at_once_a_frame_that_asked_does_not_wait_for_the_user() {
    let mut f = Feed::new();
    f.inference.asks_answered_at_once();
    f.inference.user(false);
    let ask = vec![Block::tool_use(
        "q",
        "ask_user",
        json!({"question": "which?"}),
    )];
    f.call("main", text("go"), Some(ask));
    f.inference.sent("Agent reached maximum steps.");
    f.inference.settle();
    // It asked, was answered at once, and its turn ended: nothing waits at idle.
    assert!(f.names().is_empty());
    f.inference.user(false);
    f.call("main", text("again"), Some(text("Hello again.")));
    assert!(f.violations.is_empty(), "{:?}", f.violations);
}

#[test]
fn at_idle_a_frame_that_does_not_wait_for_the_user_has_ended() {
    // The writer agent reaches its limit of 2 with a tool use left: at idle it is gone, and the
    // main frame that waited on it too.
    let mut f = Feed::new();
    f.inference.user(false);
    let tool = || vec![Block::tool_use("t", "search", json!({}))];
    let writer = vec![Block::tool_use(
        "u1",
        "use_agent",
        json!({"agent": "writer", "message": "m"}),
    )];
    f.call("main", text("go"), Some(writer));
    f.call("writer", text("m"), Some(tool()));
    f.call("writer", result("t", "r", false), Some(tool()));
    f.inference.settle();
    let ended: Vec<_> = f
        .inference
        .ended
        .iter()
        .map(|e| (e.name.as_str(), e.reason))
        .collect();
    assert_eq!(
        ended,
        [
            ("agent:writer", EndReason::MaxIterations),
            ("main", EndReason::Error)
        ]
    );
    // Results to its last tools went into no request: they are named as unseen.
    assert_eq!(f.inference.unseen["agent:writer"], ["search"]);
}

#[test]
fn a_cancel_word_empties_the_stack_and_a_stray_agent_loses_it() {
    let mut f = Feed::new();
    f.inference.user(false);
    f.call("main", text("go"), Some(spawn("u1", "research")));
    f.call("research", text("m"), Some(text("?")));
    f.inference.user(true);
    assert!(f.names().is_empty());
    assert!(f
        .inference
        .ended
        .iter()
        .all(|e| e.reason == EndReason::Cancelled));
    // A request of an agent nobody spawned: the stack is lost, and says why.
    f.inference.user(false);
    f.call(
        "main",
        text("again"),
        Some(vec![Block::tool_use("x", "search", json!({}))]),
    );
    f.call("writer", text("m"), Some(text("hi")));
    let why = f.inference.frames().unwrap_err();
    assert!(why.contains("`writer`"), "{why}");
    assert!(why.contains("neither on the stack"), "{why}");
}

#[test]
fn an_agent_invoking_itself_pushes_nothing() {
    let mut f = Feed::new();
    f.inference.user(false);
    f.call("main", text("go"), Some(spawn("u1", "research")));
    f.call("research", text("m"), Some(spawn("u2", "research")));
    f.call(
        "research",
        result("u2", "Agent 'research' cannot invoke itself", true),
        Some(text("ok")),
    );
    assert_eq!(f.names(), ["main", "skill:research"]);
    assert!(f.violations.is_empty());
}
