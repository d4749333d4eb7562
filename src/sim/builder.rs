//! [`SimBuilder`]: the settings of a simulation (its model, tools, seed, limits, faults, what it
//! observes and records), checked and turned into a [`Sim`] by [`SimBuilder::build`].

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::agents::session::CallbackReply;
use crate::drive::backend::{Model, OwnedModel, OwnedTools, Tools};
use crate::drive::faults::FaultPlan;
use crate::drive::record::Materialized;
use crate::drive::scripted::{MockLlm, MockTools};
use crate::drive::{Core, Memory};
use crate::model::agent::Catalog;
use crate::model::rng::SimRng;
use crate::observe::coverage::RunCoverage;
use crate::observe::Observer;
use crate::runtime::{Runtime, RuntimeConfig};

use super::clock::Clock;
use super::sessions::Callbacks;
use super::{Limits, Sim};

/// Builds a [`Sim`].
#[must_use]
#[derive(Debug)]
pub struct SimBuilder {
    catalog: Catalog,
    config: RuntimeConfig,
    model: Box<dyn OwnedModel>,
    tools: Box<dyn OwnedTools>,
    seed: u64,
    limits: Limits,
    observe: bool,
    record: bool,
    faults: Option<FaultPlan>,
    materialize: bool,
    coverage: bool,
    callback_replies: Vec<CallbackReply>,
}

impl SimBuilder {
    /// What the simulated callback endpoint replies to each attempt, in order (past the end:
    /// 200).
    pub fn callback_replies(mut self, replies: Vec<CallbackReply>) -> SimBuilder {
        self.callback_replies = replies;
        self
    }

    /// Record which behaviours the run reached (see [`Sim::coverage`]).
    pub fn coverage(mut self, on: bool) -> SimBuilder {
        self.coverage = on;
        self
    }

    /// Inject faults from this plan.
    pub fn faults(mut self, plan: FaultPlan) -> SimBuilder {
        self.faults = Some(plan);
        self
    }

    /// Record what was delivered (see [`Sim::materialized`]).
    pub fn materialize(mut self, on: bool) -> SimBuilder {
        self.materialize = on;
        self
    }

    /// The runtime's settings (tools, cancel words).
    pub fn config(mut self, config: RuntimeConfig) -> SimBuilder {
        self.config = config;
        self
    }

    /// The scripted model.
    pub fn llm(self, llm: MockLlm) -> SimBuilder {
        self.model(llm)
    }

    /// Any model backend (the scripted one by default).
    pub fn model(mut self, model: impl Model + Clone + Send + 'static) -> SimBuilder {
        self.model = Box::new(model);
        self
    }

    /// The scripted tools, or any tools backend.
    pub fn tools(mut self, tools: impl Tools + Clone + Send + 'static) -> SimBuilder {
        self.tools = Box::new(tools);
        self
    }

    /// The seed (ids, tie-breaks, every random choice).
    pub fn seed(mut self, seed: u64) -> SimBuilder {
        self.seed = seed;
        self
    }

    /// Run limits.
    pub fn limits(mut self, limits: Limits) -> SimBuilder {
        self.limits = limits;
        self
    }

    /// Check invariants after every step (on by default).
    pub fn observe(mut self, on: bool) -> SimBuilder {
        self.observe = on;
        self
    }

    /// Keep the transcript (on by default).
    pub fn record(mut self, on: bool) -> SimBuilder {
        self.record = on;
        self
    }

    /// The simulation.
    pub fn build(self) -> Sim {
        let mut config = self.config;
        config.seed = self.seed;
        config.record_events = self.observe || self.record;
        config.detailed_events = self.record;
        // The simulator reads the recorded `agent-state` events; nobody watches the stream.
        config.stream_agent_states = false;
        let coverage = self.coverage.then(|| RunCoverage::new(config.persist));
        let rt = Runtime::new(Arc::new(self.catalog), config);
        let observer = self.observe.then(|| Observer::for_runtime(&rt));
        Sim {
            coverage,
            stalls: 0,
            rt,
            clock: Clock::default(),
            rng: SimRng::new(self.seed),
            core: Core::new(self.limits, Memory::default()),
            model: self.model,
            tools: self.tools,
            observer,
            record: self.record,
            records: Vec::new(),
            notes: Vec::new(),
            steps: 0,
            seed: self.seed,
            faults: self.faults,
            materialized: self.materialize.then(Materialized::default),
            in_flight: BTreeMap::new(),
            lost: BTreeMap::new(),
            store: crate::store::MemoryQuestions::new(),
            sessions: Vec::new(),
            callbacks: Callbacks {
                replies: self.callback_replies.into(),
                sent: Vec::new(),
            },
            rearm: BTreeMap::new(),
        }
    }
}

impl Sim {
    /// A builder for these agents.
    pub(crate) fn builder(catalog: Catalog) -> SimBuilder {
        SimBuilder {
            catalog,
            config: RuntimeConfig::default(),
            model: Box::new(MockLlm::default()),
            tools: Box::new(MockTools::default()),
            seed: 0,
            limits: Limits::default(),
            observe: true,
            record: true,
            faults: None,
            materialize: false,
            coverage: false,
            callback_replies: Vec::new(),
        }
    }
}
