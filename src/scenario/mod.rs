//! Scenario files: one file is one test. [`format`](mod@format) is the file format,
//! [`load`](mod@load) reads and checks a file with located errors, [`run`](mod@run) plays its steps
//! against a [`Sim`] and [`expect`] checks its expectations.

mod build;
mod error;
pub mod expect;
pub mod format;
pub mod free;
pub mod load;
mod mismatch;
pub mod play;
pub mod run;
mod scripts;
mod steps;
pub mod tree;
pub mod write;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::drive::scripted::{MockLlm, MoreReplies, ScriptedReply};
use crate::drive::scripted::{MockTools, ToolScript};
use crate::model::agent::Catalog;
use crate::runtime::RuntimeConfig;
use crate::sim::{Limits, Sim, SimBuilder};

pub use load::{load, parse, parse_bytes, ScenarioError};
pub use run::{run, run_keeping_sim, Failure, Outcome, RunOptions};

/// Session key of steps and expectations that name none.
pub const DEFAULT_KEY: &str = "default";

/// A loaded, checked scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file it came from.
    pub path: PathBuf,
    /// What it shows.
    pub name: String,
    /// Longer explanation.
    pub description: Option<String>,
    /// Its seed (overridden by `--seed` or `AGENTSIM_SEED`).
    pub seed: u64,
    /// Declared agents.
    pub catalog: Catalog,
    /// Runtime settings (tools, cancel words).
    pub config: RuntimeConfig,
    /// Model scripts by agent name.
    pub scripts: BTreeMap<String, Vec<ScriptedReply>>,
    /// Replies past the end of a script (generated scenarios; a file's scripts end where they end).
    pub more_replies: Option<Arc<dyn MoreReplies>>,
    /// What the simulated callback endpoint replies to each attempt, in order (past the end:
    /// 200).
    pub callback_replies: Vec<crate::agents::session::CallbackReply>,
    /// Tool scripts by tool name.
    pub tools: BTreeMap<String, ToolScript>,
    /// The steps.
    pub steps: Vec<Step>,
    /// Run limits.
    pub limits: Limits,
    /// The invariant this scenario must break, if it reproduces a bug.
    pub expect_violation: Option<String>,
    /// The agents' `match:` rules for `agentsim mock-llm`, by agent name.
    pub routes: BTreeMap<String, MatchRule>,
    /// The agents whose script each conversation gets whole (`script: per_conversation`, for
    /// `agentsim mock-llm`).
    pub per_conversation: std::collections::BTreeSet<String>,
    /// How `agentsim mock-llm` holds each agent's replayed history to what it sent.
    pub history: HistoryPolicies,
}

/// The `history:` policies of a scenario: the file's, and the agents' own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryPolicies {
    /// The file's `history` (for agents that set none).
    pub file: format::HistoryPolicy,
    /// The agents' own `history`, by agent name.
    pub agents: BTreeMap<String, format::HistoryPolicy>,
}

impl HistoryPolicies {
    /// The policy of the agent `name`; a fork's script (`main#1`) has its agent's.
    pub fn of(&self, name: &str) -> format::HistoryPolicy {
        let base = name.split_once('#').map_or(name, |(base, _)| base);
        self.agents.get(base).copied().unwrap_or(self.file)
    }
}

/// The conditions that route a request to an agent (all given ones must hold).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchRule {
    /// The system prompt contains this text.
    pub system_contains: Option<String>,
    /// The model name is this.
    pub model: Option<String>,
    /// These headers have these values (names in lower case).
    pub headers: BTreeMap<String, String>,
    /// The tools offered are exactly these (in any order).
    pub tools: Option<Vec<String>>,
    /// The tools offered include these (in any order; more may be offered).
    pub tools_include: Vec<String>,
    /// The tools offered include this one.
    pub tool: Option<String>,
    /// The conversation's first user message contains this text (to give concurrent
    /// conversations of one agent scripts of their own).
    pub first_user_contains: Option<String>,
}

impl fmt::Display for MatchRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = &self.system_contains {
            parts.push(format!("system prompt contains {t:?}"));
        }
        if let Some(m) = &self.model {
            parts.push(format!("model {m:?}"));
        }
        for (n, v) in &self.headers {
            parts.push(format!("header {n}: {v:?}"));
        }
        if let Some(t) = &self.tools {
            parts.push(format!("tools [{}]", t.join(", ")));
        }
        if !self.tools_include.is_empty() {
            parts.push(format!("tools include [{}]", self.tools_include.join(", ")));
        }
        if let Some(t) = &self.tool {
            parts.push(format!("tool {t}"));
        }
        if let Some(t) = &self.first_user_contains {
            parts.push(format!("first user message contains {t:?}"));
        }
        if parts.is_empty() {
            f.write_str("any request")
        } else {
            f.write_str(&parts.join(" and "))
        }
    }
}

/// One step of a scenario.
#[derive(Clone, Debug)]
pub struct Step {
    /// Line of the step in the file.
    pub line: u32,
    /// Column.
    pub column: u32,
    /// What it does.
    pub kind: StepKind,
}

/// What a step does.
#[derive(Clone, Debug)]
pub enum StepKind {
    /// A user message; with `wait`, run until idle afterwards.
    User {
        /// Session key.
        key: String,
        /// The text.
        text: String,
        /// Run until idle.
        wait: bool,
    },
    /// Let time pass.
    Advance(u64),
    /// Take this many simulator steps.
    Run(u64),
    /// Restart the runtime from what it persisted.
    Restart,
    /// Check expectations.
    Expect(Box<format::ExpectSpec>),
    /// The user answers an open question, of the agent named or with the id given; with `wait`,
    /// run until idle afterwards.
    Answer {
        /// The asking agent, as the step names it.
        agent: Option<String>,
        /// The question's id.
        question: Option<uuid::Uuid>,
        /// The answer.
        text: String,
        /// Run until idle.
        wait: bool,
    },
    /// A webhook triggers a session (seed 003); with `wait`, run until idle afterwards.
    Trigger {
        /// The agent.
        agent: String,
        /// The payload.
        payload: serde_json::Value,
        /// Run until idle.
        wait: bool,
    },
    /// An answer through the store of async sessions (seed 003); with `wait`, run until idle.
    AsyncAnswer {
        /// The session, 1-based in trigger order.
        session: usize,
        /// The question, 1-based in the session's asking order (default: the latest).
        question: Option<usize>,
        /// The answer.
        text: String,
        /// Run until idle.
        wait: bool,
    },
    /// A user intervenes on an agent; with `wait`, run until idle afterwards.
    Intervene {
        /// The agent, as the step names it.
        agent: String,
        /// What the user asks.
        intervention: crate::agents::tree::Intervention,
        /// Run until idle.
        wait: bool,
    },
}

impl Scenario {
    /// A builder for a simulation of this scenario with the given seed (to add faults, say).
    pub(crate) fn sim_builder(&self, seed: u64) -> SimBuilder {
        Sim::builder(self.catalog.clone())
            .config(self.config.clone())
            .llm(MockLlm::new(self.scripts.clone()).with_more(self.more_replies.clone()))
            .tools(MockTools::new(self.tools.clone()))
            .callback_replies(self.callback_replies.clone())
            .seed(seed)
            .limits(self.limits)
    }

    /// What the tokio driver needs of this scenario: its agents, settings, limits and tools.
    #[cfg(feature = "http-model")]
    pub fn driver_setup(&self) -> crate::drive::tokio_driver::Setup {
        crate::drive::tokio_driver::Setup {
            catalog: self.catalog.clone(),
            config: self.config.clone(),
            limits: self.limits,
            tools: self.tools.clone(),
        }
    }

    /// Whether the scenario can be run (`run`, `check`, `explore`): it has `steps`. A file
    /// without them is still a valid file for `agentsim mock-llm`, which serves its scripts to a
    /// runtime that brings its own user, but running it would check nothing and pass.
    pub fn runnable(&self) -> Result<(), ScenarioError> {
        if self.steps.is_empty() {
            return Err(ScenarioError {
                path: self.path.clone(),
                line: 1,
                column: 1,
                message: "the scenario has no `steps`, so running it would check nothing: add the user's `steps` (with `expect` steps) to run it; a file without steps can only be served with `agentsim mock-llm`".to_owned(),
            });
        }
        Ok(())
    }

    /// A simulation of this scenario with the given seed.
    pub fn sim(&self, seed: u64, observe: bool, record: bool) -> Sim {
        self.sim_builder(seed)
            .observe(observe)
            .record(record)
            .build()
    }
}
