//! The facade for a user's own Rust tests: run a scenario (inline YAML, a file, or one built in
//! code) and assert on what happened, in a few lines.
//!
//! ```
//! let run = agentsim::run_yaml(r#"
//! name: research skill takes over the conversation
//! agents:
//!   research: { kind: skill }
//! llm:
//!   main: [{ use_skill: { skill: research, message: find APIs } }]
//!   research: [Which version?]
//! steps:
//!   - user: research async APIs
//! "#).unwrap();
//! run.assert_passed();
//! assert_eq!(run.sent(), ["Which version?"]);
//! assert_eq!(run.stack("default"), ["main", "skill:research"]);
//! assert!(run.transcript().contains("push skill:research depth=2"));
//! ```
//!
//! Built in code, the same scenario reads:
//!
//! ```
//! use agentsim::{Reply, ScenarioBuilder};
//!
//! let run = ScenarioBuilder::new("research skill takes over the conversation")
//!     .skill("research")
//!     .reply("main", Reply::use_skill("research", "find APIs"))
//!     .reply("main", Reply::text("Found them."))
//!     .reply("research", Reply::text("Which version?"))
//!     .reply("research", Reply::complete("3 APIs"))
//!     .user("research async APIs")
//!     .user("3.13")
//!     .run();
//! run.assert_passed();
//! assert_eq!(run.sent(), ["Which version?", "Found them."]);
//! assert!(run.stack("default").is_empty(), "the turn is over");
//! assert!(run.violation().is_none());
//! ```

#[cfg(feature = "mock-server")]
mod outside;

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::drive::scripted::{
    ReplyKind, ScriptBlock, ScriptedReply, ToolBehavior, ToolScript, ToolStep,
};
use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::llm::{LlmErrorKind, Usage};
use crate::protocol::Event;
use crate::report;
use crate::runtime::{RuntimeConfig, ToolSpec};
use crate::scenario::{
    self, Failure, Outcome, RunOptions, Scenario, ScenarioError, Step, StepKind,
};
use crate::sim::{Entry, Limits, Record, Sim};

#[cfg(feature = "mock-server")]
pub use outside::{run_file_against, run_file_against_with, OutsideRun};

/// A finished run of a scenario: its outcome and the simulation as it ended.
#[derive(Debug)]
pub struct Run {
    outcome: Outcome,
    sim: Sim,
}

impl Run {
    /// Runs `scenario` with its own seed, invariants on.
    pub fn of(scenario: &Scenario) -> Run {
        let (outcome, sim) = scenario::run_keeping_sim(scenario, RunOptions::default());
        Run { outcome, sim }
    }

    /// Whether every step, expectation and invariant held (or the expected violation happened).
    pub fn passed(&self) -> bool {
        self.outcome.passed()
    }

    /// Panics, with the failure, the command that reruns it and the transcript, unless the run
    /// passed.
    #[track_caller]
    pub fn assert_passed(&self) -> &Run {
        if let Some(failure) = &self.outcome.failure {
            panic!(
                "scenario `{}` failed: {failure}\nrerun: {}\n\n{}",
                self.outcome.name,
                self.outcome.rerun_command(),
                self.transcript()
            );
        }
        self
    }

    /// Why the run failed, if it did.
    pub fn failure(&self) -> Option<&Failure> {
        self.outcome.failure.as_ref()
    }

    /// The invariant that broke, if one did (expected or not).
    pub fn violation(&self) -> Option<&str> {
        if let Some(reproduced) = &self.outcome.reproduced {
            return Some(reproduced);
        }
        match &self.outcome.failure {
            Some(Failure::Run { error, .. }) => error.violation().map(|v| v.invariant),
            _ => None,
        }
    }

    /// Every text sent to a user, in order, over every conversation.
    pub fn sent(&self) -> Vec<&str> {
        self.events()
            .filter_map(|e| match e {
                Event::Sent { text, .. } => Some(&**text),
                _ => None,
            })
            .collect()
    }

    /// The texts sent to the user of conversation `key`, in order.
    pub fn sent_to(&self, key: &str) -> Vec<&str> {
        self.events()
            .filter_map(|e| match e {
                Event::Sent { key: k, text, .. } if &**k == key => Some(&**text),
                _ => None,
            })
            .collect()
    }

    /// The stack of conversation `key` at the end, bottom first (`main`, `skill:<name>`,
    /// `agent:<name>`); empty when no turn is in progress.
    pub fn stack(&self, key: &str) -> Vec<String> {
        self.sim
            .runtime()
            .stack(key)
            .map(|v| v.frames().map(|f| f.agent_name().to_string()).collect())
            .unwrap_or_default()
    }

    /// The transcript, as `agentsim run` prints it.
    pub fn transcript(&self) -> String {
        report::text(&self.outcome)
    }

    /// The recorded run.
    pub fn records(&self) -> &[Record] {
        &self.outcome.records
    }

    /// The outcome, with the seed and the rerun command.
    pub fn outcome(&self) -> &Outcome {
        &self.outcome
    }

    /// The simulation as it ended, to look at its runtime.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    fn events(&self) -> impl Iterator<Item = &Event> {
        self.outcome.records.iter().filter_map(|r| match &r.entry {
            Entry::Runtime(e) => Some(e),
            Entry::Sim(_) => None,
        })
    }
}

/// Runs a scenario written inline, in the scenario file format. A malformed scenario is an error
/// located by line and column, as for a file.
pub fn run_yaml(yaml: &str) -> Result<Run, ScenarioError> {
    let scenario = scenario::parse(yaml, Path::new("<inline>"))?;
    scenario.runnable()?;
    Ok(Run::of(&scenario))
}

/// Runs a scenario file.
pub fn run_file(path: impl AsRef<Path>) -> Result<Run, ScenarioError> {
    let scenario = scenario::load(path.as_ref())?;
    scenario.runnable()?;
    Ok(Run::of(&scenario))
}

/// One scripted model reply, for [`ScenarioBuilder::reply`].
#[derive(Clone, Debug)]
pub struct Reply(ScriptedReply);

impl Reply {
    fn blocks(blocks: Vec<ScriptBlock>) -> Reply {
        Reply(ScriptedReply {
            kind: ReplyKind::Content(blocks),
            after_ms: 0,
            usage: Usage::default(),
        })
    }

    fn tool(name: &str, input: Value) -> ScriptBlock {
        ScriptBlock::ToolUse {
            id: None,
            name: name.into(),
            input: Arc::new(input),
        }
    }

    /// A text reply.
    pub fn text(text: &str) -> Reply {
        Reply::blocks(vec![ScriptBlock::Text(text.into())])
    }

    /// A `tool_use` of `name` with this JSON input.
    pub fn tool_use(name: &str, input: Value) -> Reply {
        Reply::blocks(vec![Reply::tool(name, input)])
    }

    /// `use_skill` with this skill and message.
    pub fn use_skill(skill: &str, message: &str) -> Reply {
        Reply::tool_use(
            "use_skill",
            serde_json::json!({ "skill": skill, "message": message }),
        )
    }

    /// `use_agent` with this agent and message.
    pub fn use_agent(agent: &str, message: &str) -> Reply {
        Reply::tool_use(
            "use_agent",
            serde_json::json!({ "agent": agent, "message": message }),
        )
    }

    /// `complete(result)`.
    pub fn complete(result: &str) -> Reply {
        Reply::tool_use("complete", serde_json::json!({ "result": result }))
    }

    /// `ask_user(question)`.
    pub fn ask_user(question: &str) -> Reply {
        Reply::tool_use("ask_user", serde_json::json!({ "question": question }))
    }

    /// A failed call of this kind, with its default message.
    pub fn error(kind: LlmErrorKind) -> Reply {
        Reply(ScriptedReply {
            kind: ReplyKind::Error {
                kind,
                message: kind.default_message().into(),
                mid_stream: false,
                times: crate::drive::scripted::Attempts::default(),
                retry_after_ms: None,
            },
            after_ms: 0,
            usage: Usage::default(),
        })
    }

    /// The same reply, after `ms` milliseconds of virtual latency.
    pub fn after_ms(mut self, ms: u64) -> Reply {
        self.0.after_ms = ms;
        self
    }
}

/// A scenario built in code: agents, scripts, tools and user steps.
#[must_use]
#[derive(Clone, Debug)]
pub struct ScenarioBuilder {
    scenario: Scenario,
}

impl ScenarioBuilder {
    /// An empty scenario (only the main agent) with this name and seed 0.
    pub fn new(name: &str) -> ScenarioBuilder {
        ScenarioBuilder {
            scenario: Scenario {
                path: "<built in code>".into(),
                name: name.to_owned(),
                description: None,
                seed: 0,
                catalog: Catalog::default(),
                config: RuntimeConfig::default(),
                scripts: Default::default(),
                more_replies: None,
                callback_replies: Vec::new(),
                tools: Default::default(),
                steps: Vec::new(),
                limits: Limits::default(),
                expect_violation: None,
                routes: Default::default(),
                per_conversation: Default::default(),
                history: Default::default(),
            },
        }
    }

    fn agent(mut self, def: AgentDef) -> ScenarioBuilder {
        self.scenario.catalog.add(def);
        self
    }

    /// Declares a skill (invoked with `use_skill`).
    pub fn skill(self, name: &str) -> ScenarioBuilder {
        self.agent(AgentDef::new(name, AgentKind::Skill))
    }

    /// Declares an agent (invoked with `use_agent`).
    pub fn subagent(self, name: &str) -> ScenarioBuilder {
        self.agent(AgentDef::new(name, AgentKind::Agent))
    }

    /// Appends a reply to `agent`'s script (`main` for the main agent).
    pub fn reply(mut self, agent: &str, reply: Reply) -> ScenarioBuilder {
        self.scenario
            .scripts
            .entry(agent.to_owned())
            .or_default()
            .push(reply.0);
        self
    }

    /// Declares an external tool that always returns `result`.
    pub fn tool(mut self, name: &str, result: &str) -> ScenarioBuilder {
        self.scenario
            .config
            .tools
            .insert(name.to_owned(), ToolSpec::default());
        let step = ToolStep {
            behavior: ToolBehavior::Result {
                content: result.into(),
                is_error: false,
            },
            after_ms: 0,
        };
        self.scenario
            .tools
            .insert(name.to_owned(), ToolScript::Fixed(step));
        self
    }

    /// A user message to the default conversation, run until the runtime is idle.
    pub fn user(mut self, text: &str) -> ScenarioBuilder {
        self.scenario.steps.push(Step {
            line: 0,
            column: 0,
            kind: StepKind::User {
                key: scenario::DEFAULT_KEY.to_owned(),
                text: text.to_owned(),
                wait: true,
            },
        });
        self
    }

    /// The seed (ids, tie-breaks, every random choice).
    pub fn seed(mut self, seed: u64) -> ScenarioBuilder {
        self.scenario.seed = seed;
        self
    }

    /// The scenario.
    pub fn build(self) -> Scenario {
        self.scenario
    }

    /// Builds and runs it.
    pub fn run(self) -> Run {
        Run::of(&self.scenario)
    }
}
