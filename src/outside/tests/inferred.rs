//! The stack and the checks read from model requests: each check with a recorded exchange that
//! breaks it and one that keeps it.

use serde_json::json;

use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::transcript::{Block, Message, Role};
use crate::outside::codec::EndReason;
use crate::outside::conversations::{Addressing, Inferences};
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

// -- several conversations --------------------------------------------------------------------

/// Exchanges of several conversations fed to [`Inferences`], numbered from 1.
struct Many {
    inferences: Inferences,
    n: u64,
    violations: Vec<Violation>,
}

impl Many {
    fn new(addressing: Addressing) -> Many {
        Many {
            inferences: Inferences::new(&catalog(), addressing),
            n: 0,
            violations: Vec::new(),
        }
    }

    /// A request of `agent` naming `conversation` in its header, answered by `reply`.
    fn call(&mut self, header: Option<&str>, agent: &str, last: Vec<Block>, reply: Vec<Block>) {
        self.n += 1;
        let messages = vec![user(last)];
        let x = Exchange {
            number: self.n,
            agent,
            messages: &messages,
        };
        self.violations.extend(self.inferences.request(&x, header));
        self.inferences.reply(self.n, Some(&reply));
    }

    fn names(&self, conversation: &str) -> Result<Vec<String>, String> {
        Ok(self
            .inferences
            .of(conversation)
            .frames()?
            .into_iter()
            .map(|f| f.name)
            .collect())
    }
}

/// Conversation `a` pushes a skill that asks its user; then `b`'s user talks to main.
fn interleaved(m: &mut Many, header: bool) {
    let (a, b) = if header {
        (Some("a"), Some("b"))
    } else {
        (None, None)
    };
    m.inferences.user("a", false);
    m.call(a, "main", text("research"), spawn("u1", "research"));
    let ask = vec![Block::tool_use(
        "u2",
        "ask_user",
        json!({"question": "Which version?"}),
    )];
    m.call(a, "research", text("m"), ask);
    m.inferences.sent("a", "Which version?");
    m.inferences.settle();
    m.inferences.user("b", false);
    m.call(b, "main", text("hello"), text("Hi there."));
    m.inferences.sent("b", "Hi there.");
    m.inferences.settle();
}

#[test]
fn requests_that_name_their_conversation_keep_each_conversations_stack_apart() {
    let mut m = Many::new(Addressing::Header);
    interleaved(&mut m, true);
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    // a's skill still waits for its user; b's main answered and left.
    assert_eq!(m.names("a").unwrap(), ["main", "skill:research"]);
    assert_eq!(m.names("b").unwrap(), Vec::<String>::new());
    let b = m.inferences.of("b");
    assert_eq!(b.responses.len(), 1);
    assert_eq!(
        (b.responses[0].text.as_str(), b.responses[0].iterations),
        ("Hi there.", 1)
    );
    assert!(m.inferences.of("a").responses.is_empty());
    // a's user answers; the skill completes and main answers in a.
    m.inferences.user("a", false);
    let done = vec![Block::tool_use(
        "u3",
        "complete",
        json!({"result": "3 APIs"}),
    )];
    m.call(Some("a"), "research", result("u2", "3.13", false), done);
    m.call(
        Some("a"),
        "main",
        result("u1", "3 APIs", false),
        text("Found 3 APIs."),
    );
    m.inferences.settle();
    assert!(m.violations.is_empty(), "{:?}", m.violations);
    assert_eq!(m.names("a").unwrap(), Vec::<String>::new());
    assert_eq!(m.inferences.of("a").responses[0].iterations, 2);
    // A conversation agentsim never wrote to has an empty stack.
    assert_eq!(m.names("c").unwrap(), Vec::<String>::new());
}

#[test]
fn the_same_requests_read_as_one_conversation_break_routing() {
    // What the header prevents: b's message read as if it were a's reaches main, not the skill
    // on top of a's stack.
    let mut m = Many::new(Addressing::One("a".to_owned()));
    interleaved(&mut m, false);
    let checks: Vec<&str> = m.violations.iter().map(|v| v.check).collect();
    assert_eq!(checks, ["routing"], "{:?}", m.violations);
}

#[test]
fn a_check_broken_in_one_of_several_conversations_names_it() {
    let mut m = Many::new(Addressing::Header);
    m.inferences.user("a", false);
    m.inferences.user("b", false);
    // b's user message reaches a skill nobody spawned in b.
    m.call(Some("b"), "research", text("hello"), text("Hi."));
    m.call(Some("a"), "main", text("hello"), text("Hi."));
    assert_eq!(m.violations.len(), 1, "{:?}", m.violations);
    assert_eq!(m.violations[0].check, "routing");
    assert!(
        m.violations[0]
            .message
            .starts_with("in conversation `b`, the user's message with an empty stack goes to the main agent `main`"),
        "{}",
        m.violations[0].message
    );
    // b's stack is lost; a's is followed.
    assert!(m.names("b").is_err());
    assert_eq!(m.inferences.of("a").responses.len(), 1);
}

#[test]
fn a_request_without_the_header_or_naming_an_unknown_conversation_stops_the_inference() {
    let mut m = Many::new(Addressing::Header);
    m.inferences.user("a", false);
    m.call(None, "main", text("hello"), text("Hi."));
    let u = m.inferences.unaddressed().expect("unaddressed").clone();
    assert_eq!(u.exchange, 1);
    assert_eq!(
        u.message,
        "model request #1 (to agent `main`) carries no header `x-agentsim-conversation`, though the runtime offered the capability `conversation-header`, which promises the conversation on every model request"
    );
    // Nothing after it is followed.
    m.call(Some("a"), "main", text("hello"), text("Hi."));
    assert_eq!(m.names("a").unwrap(), Vec::<String>::new());

    let mut m = Many::new(Addressing::Header);
    m.inferences.user("a", false);
    m.call(Some("elsewhere"), "main", text("hello"), text("Hi."));
    let u = m.inferences.unaddressed().expect("unaddressed");
    assert!(
        u.message.contains("names the conversation `elsewhere` in its header `x-agentsim-conversation`, to which agentsim sent no `user` message (it sent to `a`)"),
        "{}",
        u.message
    );
    // In a scenario of one conversation the header is not needed.
    let mut m = Many::new(Addressing::One("a".to_owned()));
    m.inferences.user("a", false);
    m.call(None, "main", text("hello"), text("Hi."));
    assert!(m.inferences.unaddressed().is_none());
    assert_eq!(m.inferences.of("a").responses.len(), 1);
}

#[test]
fn a_check_broken_in_the_one_conversation_of_a_scenario_does_not_name_it() {
    // A runtime may promise the header in a scenario of one conversation: the promise is held,
    // and the message stays as it is without the header.
    let mut m = Many::new(Addressing::Header);
    m.inferences.in_one_conversation();
    m.inferences.user("a", false);
    m.call(Some("a"), "research", text("hello"), text("Hi."));
    assert_eq!(m.violations.len(), 1, "{:?}", m.violations);
    assert!(
        m.violations[0]
            .message
            .starts_with("the user's message with an empty stack goes to the main agent `main`"),
        "{}",
        m.violations[0].message
    );
}
