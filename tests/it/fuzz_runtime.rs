//! Fuzzing the runtime and the invariant observer on stable, with proptest: sequences of driver
//! inputs in any order, fed straight to [`Runtime::handle`] with no simulator in between.
//!
//! - `any_input_sequence_is_handled_without_panic`: fully arbitrary inputs: answers to calls that
//!   were never issued (unknown frames, random ids), answers of the wrong kind (a tool result for a
//!   model call, a timer with a tool's id), answers given twice, model replies of any shape (unknown
//!   tools, `complete` from main, missing agents, duplicated ids, inputs that are not objects),
//!   restores from whatever was persisted. Nothing may panic.
//! - `a_conforming_driver_never_breaks_an_invariant`: what a driver that keeps the protocol may
//!   send (`src/protocol.rs`): answers of the right kind to calls the runtime issued, in any order
//!   and interleaving, stale ones included (answered twice, or after a cancel or a restore), user
//!   messages at any time, restores from the last state and the journal. The observer must report
//!   no violation.
//!
//! CI runs a few thousand sequences. A soak runs millions:
//! `AGENTSIM_FUZZ_CASES=500000 cargo test --release --test it fuzz_runtime::` (per property; the
//! README gives the figures of the last soak).

use std::path::Path;
use std::sync::Arc;

use agentsim::agents::tools::{ToolError, ToolOutput};
use agentsim::model::ids::{call_id, CallId};
use agentsim::model::llm::{Chunk, LlmError, LlmErrorKind, LlmReply, Usage};
use agentsim::model::transcript::{Block, Content};
use agentsim::observe::Observer;
use agentsim::protocol::{Effect, Input};
use agentsim::runtime::{Runtime, RuntimeConfig};
use agentsim::scenario;
use proptest::prelude::*;
use serde_json::{json, Value};

fn cases() -> u32 {
    std::env::var("AGENTSIM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// The agents and tools every sequence runs against: main, an interactive skill and agent, a batch
/// agent, a streaming agent, tools.
const CATALOG: &str = r#"
name: fuzz
agents:
  main: { max_iterations: 4, parallel_tools: true }
  research: { kind: skill, max_iterations: 3 }
  helper: { kind: agent, max_iterations: 3 }
  batcher: { kind: agent, batch: accept_empty, max_iterations: 3 }
  streamer: { kind: agent, stream: true, max_iterations: 3 }
tools:
  t1: {}
  t2: {}
steps: []
"#;

fn base() -> (Arc<agentsim::model::agent::Catalog>, RuntimeConfig) {
    let s = scenario::parse(CATALOG, Path::new("fuzz.yaml")).expect("the catalog loads");
    let mut config = s.config;
    config.record_events = true;
    config.detailed_events = true;
    (Arc::new(s.catalog), config)
}

/// Which call an answer names.
#[derive(Clone, Debug)]
enum Target {
    /// The n-th call of the right kind the runtime issued (modulo how many there are).
    Issued(usize),
    /// A call of another kind (a tool's id for a model answer, ...).
    OtherKind(usize),
    /// A call id at a random frame place and sequence number.
    Made(u32, u64),
}

/// A model reply's content.
#[derive(Clone, Debug)]
enum ReplyShape {
    Text,
    Empty,
    Tools(Vec<ToolShape>),
    TextAndTools(Vec<ToolShape>),
}

#[derive(Clone, Debug)]
enum ToolShape {
    Known(u8),
    Unknown,
    Complete(bool),
    UseSkill(bool),
    UseAgent(u8),
    AskUser,
    NotAnObject,
    DuplicateId,
}

#[derive(Clone, Debug)]
enum Action {
    User(u8, u8),
    Reply(Target, ReplyShape),
    Chunk(Target, bool),
    End(Target),
    ModelError(Target, u8),
    ToolDone(Target, u8),
    Timer(Target),
    Advance(u16),
    Restore,
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        8 => any::<usize>().prop_map(Target::Issued),
        1 => any::<usize>().prop_map(Target::OtherKind),
        1 => (0u32..8, 0u64..64).prop_map(|(f, s)| Target::Made(f, s)),
    ]
}

fn tool_shape() -> impl Strategy<Value = ToolShape> {
    prop_oneof![
        4 => (0u8..2).prop_map(ToolShape::Known),
        1 => Just(ToolShape::Unknown),
        3 => any::<bool>().prop_map(ToolShape::Complete),
        2 => any::<bool>().prop_map(ToolShape::UseSkill),
        3 => (0u8..4).prop_map(ToolShape::UseAgent),
        1 => Just(ToolShape::AskUser),
        1 => Just(ToolShape::NotAnObject),
        1 => Just(ToolShape::DuplicateId),
    ]
}

fn reply_shape() -> impl Strategy<Value = ReplyShape> {
    prop_oneof![
        3 => Just(ReplyShape::Text),
        1 => Just(ReplyShape::Empty),
        4 => proptest::collection::vec(tool_shape(), 1..4).prop_map(ReplyShape::Tools),
        1 => proptest::collection::vec(tool_shape(), 1..3).prop_map(ReplyShape::TextAndTools),
    ]
}

fn action_aimed_at(target: BoxedStrategy<Target>) -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => (0u8..2, 0u8..5).prop_map(|(k, t)| Action::User(k, t)),
        8 => (target.clone(), reply_shape()).prop_map(|(t, r)| Action::Reply(t, r)),
        1 => (target.clone(), any::<bool>()).prop_map(|(t, tool)| Action::Chunk(t, tool)),
        1 => target.clone().prop_map(Action::End),
        1 => (target.clone(), 0u8..4).prop_map(|(t, k)| Action::ModelError(t, k)),
        5 => (target.clone(), 0u8..3).prop_map(|(t, k)| Action::ToolDone(t, k)),
        2 => target.prop_map(Action::Timer),
        1 => (0u16..5000).prop_map(Action::Advance),
        1 => Just(Action::Restore),
    ]
}

/// Any action, answers aimed anywhere.
fn action() -> impl Strategy<Value = Action> {
    action_aimed_at(target().boxed())
}

/// What a driver that keeps the protocol may send: answers name calls the runtime issued, of
/// their kind (once, twice, late: any of those is allowed).
fn conforming_action() -> impl Strategy<Value = Action> {
    action_aimed_at(any::<usize>().prop_map(Target::Issued).boxed())
}

/// A driver that feeds the actions and keeps what it needs to name calls and to restore.
struct Driver {
    catalog: Arc<agentsim::model::agent::Catalog>,
    config: RuntimeConfig,
    rt: Runtime,
    observer: Observer,
    llm: Vec<CallId>,
    tools: Vec<CallId>,
    timers: Vec<CallId>,
    now: u64,
    state: Option<String>,
    context: String,
    next_id: u64,
}

impl Driver {
    fn new(persist: bool, interruptions: bool) -> Driver {
        let (catalog, mut config) = base();
        config.persist = persist;
        if interruptions {
            config.interruptions = Some(agentsim::agents::watchdog::InterruptionConfig::fixed());
        }
        let rt = Runtime::new(Arc::clone(&catalog), config.clone());
        Driver {
            catalog,
            config,
            rt,
            observer: Observer::new(),
            llm: Vec::new(),
            tools: Vec::new(),
            timers: Vec::new(),
            now: 0,
            state: None,
            context: String::new(),
            next_id: 0,
        }
    }

    fn pick(&self, target: &Target, own: &[CallId], others: [&[CallId]; 2]) -> CallId {
        match *target {
            Target::Issued(n) if !own.is_empty() => own[n % own.len()],
            Target::OtherKind(n) => {
                let all: Vec<CallId> = others.iter().flat_map(|c| c.iter().copied()).collect();
                if all.is_empty() {
                    call_id(0, n as u64)
                } else {
                    all[n % all.len()]
                }
            }
            Target::Made(frame, seq) => call_id(frame, seq),
            // Nothing issued yet: a call nobody made.
            Target::Issued(n) => call_id(0, n as u64),
        }
    }

    fn block(&mut self, shape: &ToolShape) -> Block {
        self.next_id += 1;
        let id: Arc<str> = match shape {
            ToolShape::DuplicateId => "toolu_dup".into(),
            _ => format!("toolu_{}", self.next_id).into(),
        };
        let (name, input): (&str, Value) = match shape {
            ToolShape::Known(n) => (["t1", "t2"][*n as usize % 2], json!({ "n": 1 })),
            ToolShape::Unknown => ("nope", json!({})),
            ToolShape::Complete(true) => ("complete", json!({ "result": "done" })),
            ToolShape::Complete(false) => ("complete", json!({})),
            ToolShape::UseSkill(present) => {
                let skill = if *present { "research" } else { "ghost" };
                ("use_skill", json!({ "skill": skill, "message": "go" }))
            }
            ToolShape::UseAgent(n) => {
                let agent = ["helper", "batcher", "streamer", "ghost"][*n as usize % 4];
                ("use_agent", json!({ "agent": agent, "message": "go" }))
            }
            ToolShape::AskUser => ("ask_user", json!({ "question": "which?" })),
            ToolShape::NotAnObject => ("t1", json!([1, 2])),
            ToolShape::DuplicateId => ("t1", json!({})),
        };
        Block::ToolUse {
            id,
            name: name.into(),
            input: Arc::new(input),
        }
    }

    fn input(&mut self, action: &Action) -> Option<Input> {
        let (llm, tools, timers) = (self.llm.clone(), self.tools.clone(), self.timers.clone());
        Some(match action {
            Action::User(key, text) => Input::User {
                key: ["default", "other"][*key as usize % 2].into(),
                text: ["hello", "cancel", "stop", "yes", ""][*text as usize % 5].into(),
            },
            Action::Reply(t, shape) => {
                let call = self.pick(t, &llm, [&tools, &timers]);
                let mut content = Content::new();
                let text = |s: &str| Block::Text { text: s.into() };
                match shape {
                    ReplyShape::Text => content.push(text("an answer")),
                    ReplyShape::Empty => {}
                    ReplyShape::Tools(uses) => {
                        for u in uses {
                            content.push(self.block(u));
                        }
                    }
                    ReplyShape::TextAndTools(uses) => {
                        content.push(text("let me see"));
                        for u in uses {
                            content.push(self.block(u));
                        }
                    }
                }
                Input::LlmReply {
                    call,
                    reply: LlmReply {
                        content,
                        usage: Usage::default(),
                    },
                }
            }
            Action::Chunk(t, tool) => {
                let call = self.pick(t, &llm, [&tools, &timers]);
                let chunk = if *tool {
                    Chunk::ToolUse(self.block(&ToolShape::Known(0)))
                } else {
                    Chunk::Text("piece".into())
                };
                Input::LlmChunk { call, chunk }
            }
            Action::End(t) => Input::LlmEnd {
                call: self.pick(t, &llm, [&tools, &timers]),
                usage: Usage::default(),
            },
            Action::ModelError(t, kind) => Input::LlmError {
                call: self.pick(t, &llm, [&tools, &timers]),
                error: LlmError {
                    kind: [
                        LlmErrorKind::RateLimit,
                        LlmErrorKind::Overloaded,
                        LlmErrorKind::Network,
                        LlmErrorKind::Other,
                    ][*kind as usize % 4],
                    message: "boom".into(),
                },
            },
            Action::ToolDone(t, kind) => Input::ToolDone {
                call: self.pick(t, &tools, [&llm, &timers]),
                result: match kind {
                    0 => Ok(ToolOutput {
                        content: "r".into(),
                        is_error: false,
                    }),
                    1 => Ok(ToolOutput {
                        content: "bad".into(),
                        is_error: true,
                    }),
                    _ => Err(ToolError("crashed".into())),
                },
            },
            Action::Timer(t) => Input::Timer {
                timer: self.pick(t, &timers, [&llm, &tools]),
            },
            Action::Advance(ms) => {
                self.now += u64::from(*ms);
                return None;
            }
            Action::Restore => {
                if let Some(state) = &self.state {
                    let restored = Runtime::restore(
                        Arc::clone(&self.catalog),
                        self.config.clone(),
                        state,
                        &self.context,
                        self.now,
                    );
                    // What this runtime persisted restores; calls in flight are issued again.
                    let rt = restored.expect("the runtime's own state restores");
                    self.rt = rt;
                    // The observer goes on: the restored runtime continues the same run.
                    self.settle()
                        .expect("a restored runtime keeps every invariant");
                }
                return None;
            }
        })
    }

    /// Checks what the runtime just did and takes its effects, as a driver must.
    fn settle(&mut self) -> Result<(), agentsim::observe::Violation> {
        let checked = self.observer.after_step(&self.rt, self.rt.events());
        self.rt.clear_events();
        while let Some(effect) = self.rt.poll_effect() {
            match effect {
                Effect::CallLlm { call } => {
                    assert!(
                        self.rt.request(call).is_some(),
                        "a fresh call has a request"
                    );
                    self.llm.push(call);
                }
                Effect::RunTool { call } => {
                    assert!(self.rt.tool_run(call).is_some(), "a fresh run has a tool");
                    self.tools.push(call);
                }
                Effect::SetTimer { timer, .. } => self.timers.push(timer),
                Effect::AppendContext { line } => self.context.push_str(&line),
                Effect::WriteState { json } => self.state = Some(json),
                Effect::CancelTimer { .. }
                | Effect::Send { .. }
                | Effect::Stream { .. }
                | Effect::Session(_) => {}
            }
        }
        checked
    }

    /// Feeds one action; the observer's verdict on the step.
    fn feed(&mut self, action: &Action) -> Result<(), agentsim::observe::Violation> {
        let Some(input) = self.input(action) else {
            return Ok(());
        };
        self.rt.set_now(self.now);
        self.observer.before_input(&self.rt, &input);
        self.rt.handle(input);
        self.settle()
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_input_sequence_is_handled_without_panic(
        persist in any::<bool>(),
        interruptions in any::<bool>(),
        actions in proptest::collection::vec(action(), 1..120),
    ) {
        let mut driver = Driver::new(persist, interruptions);
        for action in &actions {
            // Restoring after nonsense inputs is nonsense too: only the conforming property
            // restores (a restore must then succeed).
            if matches!(action, Action::Restore) {
                continue;
            }
            let _ = driver.feed(action);
        }
    }

    #[test]
    fn a_conforming_driver_never_breaks_an_invariant(
        persist in any::<bool>(),
        interruptions in any::<bool>(),
        actions in proptest::collection::vec(conforming_action(), 1..120),
    ) {
        let mut driver = Driver::new(persist, interruptions);
        for (i, action) in actions.iter().enumerate() {
            if let Err(v) = driver.feed(action) {
                prop_assert!(false, "action {} ({:?}) broke {}", i, action, v);
            }
        }
    }
}

/// Found by `a_conforming_driver_never_breaks_an_invariant`: an empty user message became an empty
/// text block, which both model APIs reject. The runtime now ignores it, and says so.
#[test]
fn an_empty_user_message_is_ignored_not_sent_to_the_model() {
    let mut driver = Driver::new(false, false);
    driver.rt.handle(Input::User {
        key: "default".into(),
        text: "".into(),
    });
    assert!(matches!(
        driver.rt.events(),
        [agentsim::protocol::Event::EmptyUserMessage { .. }]
    ));
    driver.settle().expect("no invariant breaks");
    assert!(driver.llm.is_empty(), "no model call for an empty message");
    assert!(driver.rt.is_idle());
    // A message with text after it is delivered as usual.
    driver
        .feed(&Action::User(0, 0))
        .expect("no invariant breaks");
    assert_eq!(driver.llm.len(), 1);
}
