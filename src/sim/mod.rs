//! The deterministic driver: it runs the [`Runtime`] against a scripted model and scripted tools on
//! a virtual clock, with one seeded generator, checking the invariants after every step.
//!
//! A *step* feeds the runtime one input (a user message, or the next item due on the clock) and
//! applies every effect it answers with. [`Sim::run_until_idle`] and [`Sim::advance`] are loops
//! over [`Sim::step`], so a test can stop between any two steps and look. Limits on steps, stack
//! depth and model calls turn a runaway run into an error that shows the current stack; a run
//! never hangs.

pub mod clock;
pub mod faults;
pub mod mock_llm;
pub mod mock_tools;
pub mod rng;

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::model::agent::Catalog;
use crate::model::llm::{Chunk, LlmError, LlmReply};
use crate::model::transcript::Block;
use crate::observe::{Observer, Violation};
use crate::protocol::{Effect, Event, Input};
use crate::runtime::{Runtime, RuntimeConfig};

use clock::Clock;
use faults::{FaultPlan, Materialized};
use mock_llm::{Delivery, MockLlm, ReplyKind};
use mock_tools::{MockTools, ToolBehavior, ToolStep};
use rng::SimRng;

/// Bounds that turn a runaway run into a clear failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Steps (inputs fed to the runtime).
    pub max_steps: u64,
    /// Frames on one stack.
    pub max_depth: usize,
    /// Model calls.
    pub max_llm_calls: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 100_000,
            max_depth: 256,
            max_llm_calls: 10_000,
        }
    }
}

/// Why a run stopped early.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    /// Too many steps.
    #[error("step limit of {limit} reached at {at_ms}ms; stack: {stack}")]
    StepLimit {
        /// The limit.
        limit: u64,
        /// Virtual time.
        at_ms: u64,
        /// The stacks when it stopped.
        stack: String,
    },
    /// A stack grew too deep.
    #[error("depth limit of {limit} reached at step {step}; stack: {stack}")]
    DepthLimit {
        /// The limit.
        limit: usize,
        /// Step number.
        step: u64,
        /// The stacks.
        stack: String,
    },
    /// Too many model calls.
    #[error("model-call limit of {limit} reached at step {step}; stack: {stack}")]
    LlmCallLimit {
        /// The limit.
        limit: u64,
        /// Step number.
        step: u64,
        /// The stacks.
        stack: String,
    },
    /// An agent's script ran out.
    #[error("the script of agent '{agent}' has no entry for call {call}; stack: {stack}")]
    ScriptExhausted {
        /// The agent.
        agent: String,
        /// 1-based call number.
        call: usize,
        /// The stacks.
        stack: String,
    },
    /// A tool's per-call script ran out.
    #[error("the script of tool '{tool}' has no entry for call {call}")]
    ToolScriptExhausted {
        /// The tool.
        tool: String,
        /// 1-based call number.
        call: usize,
    },
    /// The runtime waits for something that will never come (a stalled model call, a hung tool).
    #[error("nothing is scheduled but the runtime is not idle at {at_ms}ms; stack: {stack}")]
    Stuck {
        /// Virtual time.
        at_ms: u64,
        /// The stacks.
        stack: String,
    },
    /// The runtime could not be restored from what it persisted.
    #[error("restart failed: {0}")]
    Restore(String),
    /// An invariant broke.
    #[error("invariant {} broken at step {step} ({at_ms}ms): {}", violation.invariant, violation.message)]
    Violation {
        /// What broke.
        violation: Violation,
        /// Step number.
        step: u64,
        /// Virtual time.
        at_ms: u64,
    },
}

impl RunError {
    /// The broken invariant, if that is what stopped the run.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            RunError::Violation { violation, .. } => Some(violation),
            _ => None,
        }
    }
}

/// A note of the simulator itself in the transcript (the runtime's own entries are [`Event`]s).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Note {
    /// The scripted model will never answer this call.
    LlmStall {
        /// Agent.
        agent: String,
    },
    /// A scripted tool will never finish.
    ToolHang {
        /// Tool.
        tool: Arc<str>,
    },
    /// The runtime was restarted from its persisted state.
    Restart {
        /// Bytes of `state.json`.
        state_bytes: usize,
        /// Bytes of `context.jsonl`.
        context_bytes: usize,
    },
    /// A fault was injected.
    Fault {
        /// What it was.
        what: String,
    },
    /// The clock was moved forward by a scenario step.
    Advance {
        /// New time.
        to_ms: u64,
    },
}

/// One entry of the recorded run.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Entry {
    /// Something the runtime did.
    Runtime(Event),
    /// Something the simulator did.
    Sim(Note),
}

/// A timestamped entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// Virtual time in ms.
    pub t_ms: u64,
    /// Step that produced it.
    pub step: u64,
    /// What happened.
    pub entry: Entry,
}

/// Builds a [`Sim`].
#[must_use]
#[derive(Debug)]
pub struct SimBuilder {
    catalog: Catalog,
    config: RuntimeConfig,
    llm: MockLlm,
    tools: MockTools,
    seed: u64,
    limits: Limits,
    observe: bool,
    record: bool,
    faults: Option<FaultPlan>,
    materialize: bool,
}

impl SimBuilder {
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
    pub fn llm(mut self, llm: MockLlm) -> SimBuilder {
        self.llm = llm;
        self
    }

    /// The scripted tools.
    pub fn tools(mut self, tools: MockTools) -> SimBuilder {
        self.tools = tools;
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
        Sim {
            rt: Runtime::new(Arc::new(self.catalog), config),
            clock: Clock::default(),
            rng: SimRng::new(self.seed),
            llm: self.llm,
            tools: self.tools,
            observer: self.observe.then(Observer::new),
            record: self.record,
            limits: self.limits,
            records: Vec::new(),
            steps: 0,
            llm_calls: 0,
            seed: self.seed,
            faults: self.faults,
            materialized: self.materialize.then(Materialized::default),
            persisted_state: None,
            persisted_context: String::new(),
        }
    }
}

/// The simulation.
#[derive(Clone)]
pub struct Sim {
    rt: Runtime,
    clock: Clock,
    rng: SimRng,
    llm: MockLlm,
    tools: MockTools,
    observer: Option<Observer>,
    record: bool,
    limits: Limits,
    records: Vec<Record>,
    steps: u64,
    llm_calls: u64,
    seed: u64,
    faults: Option<FaultPlan>,
    materialized: Option<Materialized>,
    persisted_state: Option<String>,
    persisted_context: String,
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("now_ms", &self.clock.now())
            .field("steps", &self.steps)
            .field("stack", &self.describe_stacks())
            .finish()
    }
}

impl Sim {
    /// A builder for these agents.
    pub fn builder(catalog: Catalog) -> SimBuilder {
        SimBuilder {
            catalog,
            config: RuntimeConfig::default(),
            llm: MockLlm::default(),
            tools: MockTools::default(),
            seed: 0,
            limits: Limits::default(),
            observe: true,
            record: true,
            faults: None,
            materialize: false,
        }
    }

    /// What the run delivered so far, if the builder asked to record it.
    pub fn materialized(&self) -> Option<&Materialized> {
        self.materialized.as_ref()
    }

    /// The fault plan, if any.
    pub fn fault_plan(&mut self) -> Option<&mut FaultPlan> {
        self.faults.as_mut()
    }

    /// The runtime, to inspect between steps.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Virtual time in ms.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Model calls made.
    pub fn llm_calls(&self) -> u64 {
        self.llm_calls
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The recorded run.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Replaces the scripted model (to continue a prepared run with a new script).
    pub fn replace_llm(&mut self, llm: MockLlm) {
        self.llm = llm;
    }

    /// The scripted model (to see what was used).
    pub fn llm(&self) -> &MockLlm {
        &self.llm
    }

    /// Every stack, as `key: [main, skill:research]`.
    pub fn describe_stacks(&self) -> String {
        let stacks = self.rt.stacks();
        if stacks.views().all(|v| v.is_empty()) {
            return "[] (empty)".into();
        }
        stacks
            .views()
            .filter(|v| !v.is_empty())
            .map(|v| format!("{}: {}", v.key(), v.describe()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// A user message for conversation `key`, delivered now (one step).
    pub fn user(&mut self, key: &str, text: &str) -> Result<(), RunError> {
        self.feed(Input::User {
            key: key.into(),
            text: text.into(),
        })
    }

    /// Feeds the next item due on the clock. `Ok(false)` when nothing is scheduled.
    pub fn step(&mut self) -> Result<bool, RunError> {
        match self.clock.pop_due(u64::MAX) {
            Some(item) => self.feed(item.input).map(|()| true),
            None => Ok(false),
        }
    }

    /// Steps until every conversation waits for the user.
    pub fn run_until_idle(&mut self) -> Result<(), RunError> {
        while !self.rt.is_idle() {
            if !self.step()? {
                return Err(RunError::Stuck {
                    at_ms: self.clock.now(),
                    stack: self.describe_stacks(),
                });
            }
        }
        Ok(())
    }

    /// What the runtime persisted so far: `state.json` (if written) and `context.jsonl`.
    pub fn persisted(&self) -> (Option<&str>, &str) {
        (self.persisted_state.as_deref(), &self.persisted_context)
    }

    /// Restarts the runtime: drops it and restores a new one from what it persisted (the bytes the
    /// file store would have written). The scripted model, tools and clock continue. Meaningful at
    /// a quiescent point, which is when `state.json` is written.
    pub fn restart(&mut self) -> Result<(), RunError> {
        let config = self.rt.config().clone();
        if !config.persist {
            return Err(RunError::Restore(
                "persistence is off (settings: { persist: true })".into(),
            ));
        }
        let catalog = self.rt.catalog_arc();
        let rt = match &self.persisted_state {
            Some(state) => Runtime::restore(catalog, config, state, &self.persisted_context)
                .map_err(|e| RunError::Violation {
                    violation: Violation {
                        invariant: crate::observe::names::RESTART_EQUIVALENCE,
                        message: format!("the persisted state does not restore: {e}"),
                    },
                    step: self.steps,
                    at_ms: self.clock.now(),
                })?,
            None => Runtime::new(catalog, config),
        };
        self.rt = rt;
        self.note(Note::Restart {
            state_bytes: self.persisted_state.as_ref().map_or(0, String::len),
            context_bytes: self.persisted_context.len(),
        });
        Ok(())
    }

    /// Takes up to `n` steps (stops early when nothing is scheduled).
    pub fn run_steps(&mut self, n: u64) -> Result<(), RunError> {
        for _ in 0..n {
            if !self.step()? {
                break;
            }
        }
        Ok(())
    }

    /// Steps through everything due in the next `ms` milliseconds, then moves the clock to the end.
    pub fn advance(&mut self, ms: u64) -> Result<(), RunError> {
        let until = self.clock.now().saturating_add(ms);
        while let Some(item) = self.clock.pop_due(until) {
            self.feed(item.input)?;
        }
        self.clock.advance_to(until);
        if self.record {
            self.records.push(Record {
                t_ms: until,
                step: self.steps,
                entry: Entry::Sim(Note::Advance { to_ms: until }),
            });
        }
        Ok(())
    }

    fn feed(&mut self, input: Input) -> Result<(), RunError> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return Err(RunError::StepLimit {
                limit: self.limits.max_steps,
                at_ms: self.clock.now(),
                stack: self.describe_stacks(),
            });
        }
        self.rt.set_now(self.clock.now());
        self.rt.handle(input);
        // The invariants are checked on what the runtime did before its effects are applied, so
        // that a script running out in the same step cannot hide a violation.
        if let Some(observer) = &mut self.observer {
            if let Err(violation) = observer.after_step(&self.rt, self.rt.events()) {
                self.flush_events();
                return Err(RunError::Violation {
                    violation,
                    step: self.steps,
                    at_ms: self.clock.now(),
                });
            }
        }
        self.flush_events();
        while let Some(effect) = self.rt.poll_effect() {
            self.apply(effect)?;
        }
        for entry in self.rt.stacks().entries() {
            if entry.stack.depth() > self.limits.max_depth {
                return Err(RunError::DepthLimit {
                    limit: self.limits.max_depth,
                    step: self.steps,
                    stack: self.describe_stacks(),
                });
            }
        }
        Ok(())
    }

    fn flush_events(&mut self) {
        if self.record {
            let (t_ms, step) = (self.clock.now(), self.steps);
            self.records
                .extend(self.rt.drain_events().map(|event| Record {
                    t_ms,
                    step,
                    entry: Entry::Runtime(event),
                }));
        } else {
            self.rt.clear_events();
        }
    }

    fn note(&mut self, note: Note) {
        if self.record {
            self.records.push(Record {
                t_ms: self.clock.now(),
                step: self.steps,
                entry: Entry::Sim(note),
            });
        }
    }

    /// Schedules a model reply (or error, or stream) for `call`; a stall schedules nothing.
    fn schedule_reply(
        &mut self,
        call: crate::model::ids::CallId,
        delivery: Delivery,
        usage: crate::model::llm::Usage,
        after: u64,
    ) {
        let order = self.rng.next_u64();
        match delivery {
            Delivery::Content(content) => {
                let reply = LlmReply { content, usage };
                self.clock
                    .schedule(after, order, Input::LlmReply { call, reply });
            }
            Delivery::Stream(chunks) => {
                let mut at = after;
                for (delay, block) in chunks {
                    at = at.saturating_add(delay);
                    let chunk = match block {
                        Block::Text { text } => Chunk::Text(text),
                        other => Chunk::ToolUse(other),
                    };
                    self.clock
                        .schedule(at, order, Input::LlmChunk { call, chunk });
                }
                self.clock
                    .schedule(at, order, Input::LlmEnd { call, usage });
            }
            Delivery::Error { kind, message } => {
                let error = LlmError {
                    kind,
                    message: message.to_string(),
                };
                self.clock
                    .schedule(after, order, Input::LlmError { call, error });
            }
            Delivery::Stall => {}
        }
    }

    fn apply(&mut self, effect: Effect) -> Result<(), RunError> {
        match effect {
            Effect::CallLlm { call } => {
                self.llm_calls += 1;
                if self.llm_calls > self.limits.max_llm_calls {
                    return Err(RunError::LlmCallLimit {
                        limit: self.limits.max_llm_calls,
                        step: self.steps,
                        stack: self.describe_stacks(),
                    });
                }
                // The request is borrowed from the runtime: nothing is copied unless a fault or
                // the materialized record needs the agent's name.
                let mut notes = Vec::new();
                let (delivery, usage, after) = {
                    let Some(request) = self.rt.request(call) else {
                        return Ok(()); // Nobody waits for this call any more.
                    };
                    let agent: &str = &request.agent.name;
                    if let Some(injected) = self.faults.as_mut().and_then(FaultPlan::llm) {
                        let what = match &injected.kind {
                            ReplyKind::Stall => format!("the model stalls for {agent}"),
                            _ => format!("model error for {agent}"),
                        };
                        notes.push(Note::Fault { what });
                        if let Some(m) = &mut self.materialized {
                            m.replies
                                .entry(agent.to_owned())
                                .or_default()
                                .push(injected.clone());
                        }
                        let delivery = match injected.kind {
                            ReplyKind::Error { kind, message } => Delivery::Error { kind, message },
                            _ => Delivery::Stall,
                        };
                        if delivery == Delivery::Stall {
                            notes.push(Note::LlmStall {
                                agent: agent.to_owned(),
                            });
                        }
                        (delivery, injected.usage, injected.after_ms)
                    } else {
                        let extra = self.faults.as_mut().map_or(0, FaultPlan::llm_latency);
                        if extra > 0 {
                            let what = format!("model latency +{extra}ms for {agent}");
                            notes.push(Note::Fault { what });
                        }
                        let answer = match self.llm.next(agent) {
                            Ok(answer) => answer,
                            Err(e) => {
                                return Err(RunError::ScriptExhausted {
                                    agent: e.agent,
                                    call: e.call,
                                    stack: self.describe_stacks(),
                                })
                            }
                        };
                        let after = answer.after_ms.saturating_add(extra);
                        if let Some(m) = &mut self.materialized {
                            let mut delivered = self
                                .llm
                                .scripted(agent, answer.call)
                                .expect("the call was just answered from the script")
                                .clone();
                            delivered.after_ms = after;
                            m.replies
                                .entry(agent.to_owned())
                                .or_default()
                                .push(delivered);
                        }
                        if answer.delivery == Delivery::Stall {
                            notes.push(Note::LlmStall {
                                agent: agent.to_owned(),
                            });
                        }
                        (answer.delivery, answer.usage, after)
                    }
                };
                for note in notes {
                    self.note(note);
                }
                self.schedule_reply(call, delivery, usage, after);
            }
            Effect::RunTool { call } => {
                let mut notes = Vec::new();
                let ToolStep { behavior, after_ms } = {
                    let Some(run) = self.rt.tool_run(call) else {
                        return Ok(()); // Nobody waits for this run any more.
                    };
                    let name = run.name;
                    let injected = self.faults.as_mut().and_then(FaultPlan::tool);
                    let mut step = match injected {
                        Some(step) => {
                            notes.push(Note::Fault {
                                what: format!("tool {name} fails"),
                            });
                            step
                        }
                        None => self.tools.next(name, run.input).map_err(|e| {
                            RunError::ToolScriptExhausted {
                                tool: e.tool,
                                call: e.call,
                            }
                        })?,
                    };
                    let extra = self.faults.as_mut().map_or(0, FaultPlan::tool_latency);
                    if extra > 0 {
                        notes.push(Note::Fault {
                            what: format!("tool {name} latency +{extra}ms"),
                        });
                        step.after_ms = step.after_ms.saturating_add(extra);
                    }
                    if let Some(m) = &mut self.materialized {
                        m.tools
                            .entry(name.to_string())
                            .or_default()
                            .push(step.clone());
                    }
                    if step.behavior == ToolBehavior::Hang {
                        notes.push(Note::ToolHang { tool: name.clone() });
                    }
                    step
                };
                for note in notes {
                    self.note(note);
                }
                let order = self.rng.next_u64();
                let result = match behavior {
                    ToolBehavior::Result { content, is_error } => {
                        Ok(crate::agents::tools::ToolOutput { content, is_error })
                    }
                    ToolBehavior::Fail(message) => {
                        Err(crate::agents::tools::ToolError(message.to_string()))
                    }
                    ToolBehavior::Hang => return Ok(()),
                };
                self.clock
                    .schedule(after_ms, order, Input::ToolDone { call, result });
            }
            Effect::SetTimer { timer, after_ms } => {
                let order = self.rng.next_u64();
                self.clock.schedule(after_ms, order, Input::Timer { timer });
            }
            Effect::CancelTimer { timer } => self.clock.cancel_timer(timer),
            Effect::AppendContext { line } => self.persisted_context.push_str(&line),
            Effect::WriteState { json } => self.persisted_state = Some(json),
            Effect::Send { .. } | Effect::Stream { .. } => {}
        }
        Ok(())
    }
}
