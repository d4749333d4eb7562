//! The deterministic driver: it runs the [`Runtime`] against a scripted model and scripted tools on
//! a virtual clock, with one seeded generator, checking the invariants after every step.
//!
//! A *step* feeds the runtime one input (a user message, or the next item due on the clock) and
//! applies every effect it answers with. [`Sim::run_until_idle`] and [`Sim::advance`] are loops
//! over [`Sim::step`], so a test can stop between any two steps and look. Limits on steps, stack
//! depth and model calls turn a runaway run into an error that shows the current stack; a run
//! never hangs.

pub mod clock;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::agents::session::CallbackReply;
use crate::drive::backend::{
    BackendError, Delivery, Model, ModelAnswer, OwnedModel, OwnedTools, ToolBehavior, ToolStep,
    Tools,
};
use crate::drive::faults::{FaultPlan, WithFaults};
use crate::drive::record::{Materialized, Recording};
use crate::drive::scripted::{MockLlm, MockTools};
use crate::drive::{Core, Memory, Work};
use crate::model::agent::Catalog;
use crate::model::ids::CallId;
use crate::model::llm::{Chunk, LlmError, LlmReply, LlmRequest};
use crate::model::rng::SimRng;
use crate::model::transcript::Block;
use crate::observe::coverage::RunCoverage;
use crate::observe::{Observer, Violation};
use crate::protocol::{Effect, Event, Input, ToolRun};
use crate::runtime::{Runtime, RuntimeConfig};

use clock::Clock;

pub use crate::drive::{Limits, Note, RunError};

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

/// The simulation.
#[derive(Clone)]
pub struct Sim {
    rt: Runtime,
    clock: Clock,
    rng: SimRng,
    /// Limits, stale calls and persistence, shared with every driver.
    core: Core<Memory>,
    model: Box<dyn OwnedModel>,
    tools: Box<dyn OwnedTools>,
    observer: Option<Observer>,
    record: bool,
    records: Vec<Record>,
    /// Notes a backend left while answering a call (kept to reuse its buffer).
    notes: Vec<Note>,
    steps: u64,
    seed: u64,
    faults: Option<FaultPlan>,
    materialized: Option<Materialized>,
    /// Answers scheduled but not yet delivered, by call (kept only with persistence on, so that a
    /// restart can hand them to the calls the restored runtime issues again).
    in_flight: BTreeMap<CallId, Pending>,
    /// Answers lost in the last restart, by what they answered.
    lost: BTreeMap<InFlight, Pending>,
    /// The behaviours reached, if the builder asked for them.
    coverage: Option<RunCoverage>,
    /// Model calls that stalled and tools that hung so far: what may leave a run waiting.
    stalls: u64,
    /// The store of async sessions (seed 003): the simulation's database, which a restart of
    /// the runtime keeps.
    store: crate::store::MemoryQuestions,
    /// The sessions in the order they started, each with its questions in the order asked.
    sessions: Vec<(uuid::Uuid, Vec<uuid::Uuid>)>,
    /// The simulated callback endpoint and what was sent to it.
    callbacks: Callbacks,
    /// The tie-breaks of the timers the last restart dropped, by id.
    rearm: BTreeMap<CallId, u64>,
}

/// The simulated endpoint of questions' callbacks (seed 003's B20): what it replies, and the
/// callbacks sent so far.
#[derive(Clone, Debug, Default)]
struct Callbacks {
    replies: std::collections::VecDeque<CallbackReply>,
    sent: Vec<SentCallback>,
}

/// A question's callback as the simulator played it: every attempt in virtual time. Nothing in
/// the runtime waits for a callback, so its attempts are played out when the question opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentCallback {
    /// The session.
    pub session: uuid::Uuid,
    /// The question.
    pub question: uuid::Uuid,
    /// The agent that asked.
    pub agent: Arc<str>,
    /// Where it went.
    pub url: Arc<str>,
    /// The body posted (the same on every attempt).
    pub body: serde_json::Value,
    /// Each attempt's start (ms after the question opened) and what it got.
    pub attempts: Vec<(u64, CallbackReply)>,
}

impl SentCallback {
    /// `agent → url: refused at +0ms, delivered at +1000ms` (each attempt's start after the
    /// question opened).
    pub fn timeline(&self) -> String {
        let attempts: Vec<String> = self
            .attempts
            .iter()
            .map(|(at, reply)| format!("{reply} at +{at}ms"))
            .collect();
        let end = if self.delivered() { "" } else { ", gave up" };
        format!(
            "{} → {}: {}{end}",
            self.agent,
            self.url,
            attempts.join(", ")
        )
    }

    /// Whether an attempt delivered it.
    pub fn delivered(&self) -> bool {
        self.attempts.last().is_some_and(|a| a.1.delivered())
    }
}

impl fmt::Display for SentCallback {
    /// `agent → url: refused, 500, delivered` (`…, gave up` when no attempt delivered it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} → {}: ", self.agent, self.url)?;
        for (n, (_, reply)) in self.attempts.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{reply}")?;
        }
        if !self.delivered() {
            f.write_str(", gave up")?;
        }
        Ok(())
    }
}

/// The answer URL's base in callbacks the simulator sends.
pub const SIM_PUBLIC_URL: &str = "http://agentsim.sim";

/// What an answer in flight answers: a frame's model call, or its run of one tool use.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum InFlight {
    Model(uuid::Uuid),
    Tool(uuid::Uuid, Arc<str>),
}

/// An answer in flight.
#[derive(Clone, Debug)]
enum Pending {
    Model(ModelAnswer),
    Tool(ToolStep),
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

    /// What the run delivered so far, if the builder asked to record it.
    pub fn materialized(&self) -> Option<&Materialized> {
        self.materialized.as_ref()
    }

    /// The behaviours the run reached so far, if the builder asked to record them.
    pub fn coverage(&self) -> Option<&RunCoverage> {
        self.coverage.as_ref()
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
        self.core.llm_calls()
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The recorded run.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Replaces the model (to continue a prepared run with a new script).
    pub fn replace_llm(&mut self, llm: MockLlm) {
        self.model = Box::new(llm);
    }

    /// The scripted model, if the model is the scripted one (to see what was used).
    pub fn llm(&self) -> Option<&MockLlm> {
        self.model.as_any().downcast_ref()
    }

    /// The scripted tools, if the tools are the scripted ones (to see what was used).
    pub fn mock_tools(&self) -> Option<&MockTools> {
        self.tools.as_any().downcast_ref()
    }

    /// Every stack, as `key: [main, skill:research]`.
    pub fn describe_stacks(&self) -> String {
        describe(&self.rt)
    }

    /// A user message for conversation `key`, delivered now (one step).
    pub fn user(&mut self, key: &str, text: &str) -> Result<(), RunError> {
        self.feed(Input::User {
            key: key.into(),
            text: text.into(),
        })
    }

    /// A user intervenes on agent `agent_id` (seed 001); the runtime's answer is recorded as an
    /// [`crate::protocol::Event::Intervention`].
    pub fn intervene(
        &mut self,
        agent_id: uuid::Uuid,
        intervention: crate::agents::tree::Intervention,
    ) -> Result<(), RunError> {
        self.feed(Input::Intervene {
            agent_id,
            intervention,
        })
    }

    /// The user answers question `question_id` (seed 001); the runtime's answer is recorded as an
    /// [`crate::protocol::Event::Answer`].
    pub fn answer(&mut self, question_id: uuid::Uuid, text: &str) -> Result<(), RunError> {
        self.feed(Input::Answer {
            question_id,
            text: text.into(),
        })
    }

    /// A webhook triggers a session of `agent` with `payload` (seed 003).
    pub fn trigger(&mut self, agent: &str, payload: serde_json::Value) -> Result<(), RunError> {
        self.feed(Input::Trigger {
            agent: agent.into(),
            payload,
        })
    }

    /// Someone answers question `question` of session `session` through the store (seed 003's
    /// `POST /agent/answer/{session}`): the first answer is stored and resumes the agent; a
    /// duplicate, or an answer to an unknown, completed or failed session, changes nothing and
    /// is noted.
    pub fn answer_async(
        &mut self,
        session: uuid::Uuid,
        question: uuid::Uuid,
        text: &str,
    ) -> Result<(), RunError> {
        use crate::store::questions::{Answered, QuestionStore, StoreError};
        let now = self.clock.now();
        let outcome = self
            .store
            .answer(&session.to_string(), &question.to_string(), text, now);
        let refused = match outcome {
            Ok(Answered::Resumed) => None,
            Ok(Answered::DuplicateIgnored) => Some("duplicate_ignored"),
            Err(StoreError::NotFound(_)) => Some("not_found"),
            Err(e) => return Err(RunError::Store(e.to_string())),
        };
        match refused {
            None => self.answer(question, text),
            Some(outcome) => {
                if self.record || self.observer.is_some() {
                    self.records.push(Record {
                        t_ms: now,
                        step: self.steps,
                        entry: Entry::Sim(Note::AsyncAnswer { question, outcome }),
                    });
                }
                Ok(())
            }
        }
    }

    /// The store of async sessions.
    pub fn store(&self) -> &crate::store::MemoryQuestions {
        &self.store
    }

    /// The async sessions in the order they started, each with its questions in the order asked.
    pub fn sessions(&self) -> &[(uuid::Uuid, Vec<uuid::Uuid>)] {
        &self.sessions
    }

    /// The questions' callbacks sent so far, in order (seed 003's B20).
    pub fn callbacks(&self) -> &[SentCallback] {
        &self.callbacks.sent
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
                return Err(self.stuck());
            }
        }
        Ok(())
    }

    /// Checks the `progress` invariant where a run stops: if a conversation is busy and nothing
    /// is scheduled to move it, the run has stalled by itself (see [`Sim::stuck`]).
    pub fn check_progress(&mut self) -> Result<(), RunError> {
        if self.rt.is_idle() || self.clock.has_pending() {
            return Ok(());
        }
        match self.stuck() {
            e @ RunError::Violation { .. } => Err(e),
            _ => Ok(()),
        }
    }

    /// The error of a run that has nothing scheduled while a conversation is busy: a clean
    /// limit when a model call stalled or a tool hung, else (with the observer on) a broken
    /// `progress` invariant, since the runtime waits for something nobody was asked to do.
    pub fn stuck(&self) -> RunError {
        // A hung tool excuses the wait, but not a result that was due by now (its timeout).
        if let Some(Err(violation)) = self
            .observer
            .as_ref()
            .map(|o| o.check_stuck(self.clock.now()))
        {
            return RunError::Violation {
                violation,
                step: self.steps,
                at_ms: self.clock.now(),
            };
        }
        if self.stalls > 0 || self.observer.is_none() {
            return RunError::Stuck {
                at_ms: self.clock.now(),
                stack: self.describe_stacks(),
            };
        }
        RunError::Violation {
            violation: Violation {
                invariant: crate::observe::names::PROGRESS,
                message: format!(
                    "nothing is scheduled and no call stalled, but a conversation waits: {}",
                    self.describe_stacks()
                ),
            },
            step: self.steps,
            at_ms: self.clock.now(),
        }
    }

    /// What the runtime persisted so far: `state.json` (if written) and `context.jsonl`.
    pub fn persisted(&self) -> (Option<&str>, &str) {
        let memory = self.core.persistence();
        (memory.state.as_deref(), &memory.context)
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
        let (state, context) = self.persisted();
        let (state_bytes, context_bytes) = (state.map_or(0, str::len), context.len());
        let broken = |message: String| RunError::Violation {
            violation: Violation {
                invariant: crate::observe::names::RESTART_EQUIVALENCE,
                message,
            },
            step: self.steps,
            at_ms: self.clock.now(),
        };
        let rt = match state {
            Some(state) => Runtime::restore(catalog, config, state, context, self.clock.now())
                .map_err(|e| broken(format!("the persisted state does not restore: {e}")))?,
            None => Runtime::new(catalog, config),
        };
        if let Err(difference) = same_conversations(&self.rt, &rt) {
            return Err(broken(format!(
                "the restored runtime differs from the one that stopped: {difference}"
            )));
        }
        // What the old runtime had in flight is lost with it; the restored runtime issues those
        // calls again and gets the same answers.
        let in_flight = std::mem::take(&mut self.in_flight);
        self.lost = in_flight
            .into_iter()
            .filter_map(|(call, answer)| Some((in_flight_key(&self.rt, call)?, answer)))
            .collect();
        if let Some(c) = &mut self.coverage {
            c.restart(
                self.rt
                    .stacks()
                    .entries()
                    .iter()
                    .any(|e| !e.stack.is_empty()),
            );
        }
        self.rt = rt;
        // The old process's timers died with it; the restored runtime set its own (one set again
        // under the same id keeps the tie-break it was drawn, and draws nothing).
        self.rearm = self.clock.drop_timers().into_iter().collect();
        self.note(Note::Restart {
            state_bytes,
            context_bytes,
        });
        self.settle()
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
        let limits = self.core.limits();
        if self.steps > limits.max_steps {
            return Err(RunError::StepLimit {
                limit: limits.max_steps,
                at_ms: self.clock.now(),
                stack: self.describe_stacks(),
            });
        }
        if !self.in_flight.is_empty() {
            if let Input::LlmReply { call, .. }
            | Input::LlmError { call, .. }
            | Input::LlmEnd { call, .. }
            | Input::ToolDone { call, .. } = &input
            {
                self.in_flight.remove(call);
            }
        }
        self.rt.set_now(self.clock.now());
        if let Some(observer) = &mut self.observer {
            observer.before_input(&self.rt, &input);
        }
        self.rt.handle(input);
        self.settle()
    }

    /// Checks the invariants on what the runtime just did, records it, and applies its effects.
    #[inline]
    fn settle(&mut self) -> Result<(), RunError> {
        let limits = self.core.limits();
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
        if let Some(c) = &mut self.coverage {
            c.step(self.rt.events());
        }
        self.flush_events();
        while let Some(effect) = self.rt.poll_effect() {
            self.apply(effect)?;
        }
        for entry in self.rt.stacks().entries() {
            if entry.stack.depth() > limits.max_depth {
                return Err(RunError::DepthLimit {
                    limit: limits.max_depth,
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

    /// Applies one effect: the shared core handles limits, stale calls and persistence; what it
    /// leaves is answered here from the backends (with faults and recording wrapped around them
    /// when the run asks for them) and scheduled on the virtual clock.
    fn apply(&mut self, effect: Effect) -> Result<(), RunError> {
        let Sim {
            rt,
            core,
            clock,
            rng,
            model,
            tools,
            faults,
            materialized,
            notes,
            in_flight,
            lost,
            records,
            record,
            steps,
            coverage,
            stalls,
            store,
            sessions,
            callbacks,
            rearm,
            ..
        } = self;
        let steps = *steps;
        let now = clock.now();
        let at = || (steps, describe(rt));
        match core.take(rt, effect, at)? {
            Work::CallModel { call, request } => {
                // Only after a restart: the answer its frame's call lost in flight.
                let again = if lost.is_empty() {
                    None
                } else {
                    in_flight_key(rt, call).and_then(|what| lost.remove(&what))
                };
                let answer = match again {
                    Some(Pending::Model(answer)) => Ok(answer),
                    _ => answer_model(&mut **model, faults, materialized, &request, notes),
                };
                if let Ok(ModelAnswer {
                    delivery: Delivery::Stall,
                    ..
                }) = answer
                {
                    notes.push(Note::LlmStall {
                        agent: request.agent.name.clone(),
                    });
                    *stalls += 1;
                    if let Some(c) = coverage {
                        c.stalled(true);
                    }
                }
                flush_notes(notes, records, *record, clock.now(), steps);
                let answer = answer.map_err(|e| backend_error(e, rt))?;
                if rt.config().persist {
                    in_flight.insert(call, Pending::Model(answer.clone()));
                }
                schedule_reply(clock, rng, call, answer);
            }
            Work::RunTool { call, run } => {
                let again = if lost.is_empty() {
                    None
                } else {
                    in_flight_key(rt, call).and_then(|what| lost.remove(&what))
                };
                let step = match again {
                    Some(Pending::Tool(step)) => Ok(step),
                    _ => run_tool(&mut **tools, faults, materialized, &run, notes),
                };
                if let Ok(ToolStep {
                    behavior: ToolBehavior::Hang,
                    ..
                }) = step
                {
                    notes.push(Note::ToolHang {
                        tool: run.name.clone(),
                    });
                    *stalls += 1;
                    if let Some(c) = coverage {
                        c.stalled(false);
                    }
                }
                flush_notes(notes, records, *record, clock.now(), steps);
                let step = step.map_err(|e| backend_error(e, rt))?;
                if rt.config().persist {
                    in_flight.insert(call, Pending::Tool(step.clone()));
                }
                schedule_tool(clock, rng, call, step);
            }
            Work::SetTimer { timer, after_ms } => {
                let order = match rearm.remove(&timer) {
                    Some(order) => order,
                    None => rng.next_u64(),
                };
                clock.schedule(after_ms, order, Input::Timer { timer });
            }
            Work::CancelTimer { timer } => clock.cancel_timer(timer),
            Work::Session(op) => {
                let policy = rt.config().callbacks.policy;
                apply_session(store, sessions, callbacks, &policy, notes, *op, now)
                    .map_err(|e| RunError::Store(e.to_string()))?;
                flush_notes(notes, records, *record, now, steps);
            }
            Work::Output | Work::Done => {}
        }
        Ok(())
    }
}

/// Records what the runtime told the store of async sessions, and the order of sessions and
/// their questions (which `async_answer` steps count by).
fn apply_session(
    store: &mut crate::store::MemoryQuestions,
    sessions: &mut Vec<(uuid::Uuid, Vec<uuid::Uuid>)>,
    callbacks: &mut Callbacks,
    policy: &crate::agents::session::CallbackPolicy,
    notes: &mut Vec<Note>,
    op: crate::protocol::SessionOp,
    now: u64,
) -> Result<(), crate::store::questions::StoreError> {
    use crate::protocol::SessionOp;
    crate::store::questions::record(store, &op, now)?;
    match op {
        SessionOp::Started { session, .. } => sessions.push((session, Vec::new())),
        SessionOp::Asked {
            session,
            question,
            text,
            context,
            agent,
            callback,
        } => {
            if let Some((_, asked)) = sessions.iter_mut().find(|(s, _)| *s == session) {
                asked.push(question);
            }
            if let Some(url) = callback {
                let replies = &mut callbacks.replies;
                let attempts = crate::agents::session::callback_attempts(policy, || {
                    replies.pop_front().unwrap_or(CallbackReply::Status(200))
                });
                let sent = SentCallback {
                    session,
                    question,
                    body: crate::agents::session::callback_body(
                        session,
                        &agent,
                        question,
                        &text,
                        context.as_deref(),
                        SIM_PUBLIC_URL,
                    ),
                    agent,
                    url,
                    attempts,
                };
                notes.push(Note::Callback {
                    summary: sent.timeline(),
                });
                callbacks.sent.push(sent);
            }
        }
        SessionOp::TimedOut { .. } | SessionOp::Withdrawn { .. } | SessionOp::Ended { .. } => {}
    }
    Ok(())
}

/// Moves the notes a backend left into the transcript.
fn flush_notes(
    notes: &mut Vec<Note>,
    records: &mut Vec<Record>,
    record: bool,
    t_ms: u64,
    step: u64,
) {
    if notes.is_empty() {
        return;
    }
    if record {
        records.extend(notes.drain(..).map(|note| Record {
            t_ms,
            step,
            entry: Entry::Sim(note),
        }));
    } else {
        notes.clear();
    }
}

/// A backend that cannot answer, as the reason the run stopped.
fn backend_error(error: BackendError, rt: &Runtime) -> RunError {
    error.into_run_error(|| describe(rt))
}

/// Schedules a model reply (or error, or stream) for `call`; a stall schedules nothing.
fn schedule_reply(clock: &mut Clock, rng: &mut SimRng, call: CallId, answer: ModelAnswer) {
    let order = rng.next_u64();
    let ModelAnswer {
        delivery,
        after_ms: after,
        usage,
    } = answer;
    match delivery {
        Delivery::Content(content) => {
            let reply = LlmReply { content, usage };
            clock.schedule(after, order, Input::LlmReply { call, reply });
        }
        Delivery::Stream(chunks) => {
            let mut at = after;
            for (delay, block) in chunks {
                at = at.saturating_add(delay);
                let chunk = match block {
                    Block::Text { text } => Chunk::Text(text),
                    other => Chunk::ToolUse(other),
                };
                clock.schedule(at, order, Input::LlmChunk { call, chunk });
            }
            clock.schedule(at, order, Input::LlmEnd { call, usage });
        }
        Delivery::Error { kind, message } => {
            let error = LlmError {
                kind,
                message: message.to_string(),
            };
            clock.schedule(after, order, Input::LlmError { call, error });
        }
        Delivery::Stall => {}
    }
}

/// Schedules a tool's outcome for `call`; a hang schedules nothing.
fn schedule_tool(clock: &mut Clock, rng: &mut SimRng, call: CallId, step: ToolStep) {
    let order = rng.next_u64();
    let result = match step.behavior {
        ToolBehavior::Result { content, is_error } => {
            Ok(crate::agents::tools::ToolOutput { content, is_error })
        }
        ToolBehavior::Fail(message) => Err(crate::agents::tools::ToolError(message.to_string())),
        ToolBehavior::Hang => return,
    };
    clock.schedule(step.after_ms, order, Input::ToolDone { call, result });
}

/// The model's answer, through the fault and recording wrappers the run asked for.
fn answer_model(
    model: &mut dyn OwnedModel,
    faults: &mut Option<FaultPlan>,
    record: &mut Option<Materialized>,
    request: &LlmRequest<'_>,
    notes: &mut Vec<Note>,
) -> Result<ModelAnswer, BackendError> {
    match (faults.as_mut(), record.as_mut()) {
        (None, None) => model.answer(request, notes),
        (Some(plan), None) => WithFaults { inner: model, plan }.answer(request, notes),
        (None, Some(record)) => Recording {
            inner: model,
            record,
        }
        .answer(request, notes),
        (Some(plan), Some(record)) => Recording {
            inner: WithFaults { inner: model, plan },
            record,
        }
        .answer(request, notes),
    }
}

/// The tools' outcome, through the fault and recording wrappers the run asked for.
fn run_tool(
    tools: &mut dyn OwnedTools,
    faults: &mut Option<FaultPlan>,
    record: &mut Option<Materialized>,
    run: &ToolRun<'_>,
    notes: &mut Vec<Note>,
) -> Result<ToolStep, BackendError> {
    match (faults.as_mut(), record.as_mut()) {
        (None, None) => tools.run(run, notes),
        (Some(plan), None) => WithFaults { inner: tools, plan }.run(run, notes),
        (None, Some(record)) => Recording {
            inner: tools,
            record,
        }
        .run(run, notes),
        (Some(plan), Some(record)) => Recording {
            inner: WithFaults { inner: tools, plan },
            record,
        }
        .run(run, notes),
    }
}

/// Every stack, as `key: [main, skill:research]`.
fn describe(rt: &Runtime) -> String {
    let stacks = rt.stacks();
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

/// Whether `restored` holds the conversations `crashed` held: the same stacks of frames (ids,
/// sessions, iterations), main sessions and queued messages. `Err` says the first difference.
fn same_conversations(crashed: &Runtime, restored: &Runtime) -> Result<(), String> {
    for (slot, old) in crashed.stacks().views().enumerate() {
        let key = old.key();
        let Some(new) = restored.stack(key) else {
            return Err(format!("conversation {key} is gone"));
        };
        if old.entry().inbox != new.entry().inbox {
            return Err(format!("conversation {key}: its queued messages differ"));
        }
        // Between turns the main session waits in the conversation; during one, in the main frame.
        if old.is_empty() && old.entry().main_session != new.entry().main_session {
            return Err(format!("conversation {key}: the main session differs"));
        }
        if old.depth() != new.depth() {
            return Err(format!(
                "conversation {key}: {} became {}",
                old.describe(),
                new.describe()
            ));
        }
        for (a, b) in old.frames().zip(new.frames()) {
            let name = a.agent_name();
            if a.frame_id() != b.frame_id() {
                return Err(format!("conversation {key}: frame {name} has another id"));
            }
            same_frame(key, a, b)?;
        }
        let (forks, restored_forks) = (crashed.stacks().forks(slot), restored.stacks().forks(slot));
        if forks.len() != restored_forks.len() {
            return Err(format!(
                "conversation {key}: {} forks ran, {} restored",
                forks.len(),
                restored_forks.len()
            ));
        }
        for (a, b) in forks.into_iter().zip(restored_forks) {
            if a.frame_id() != b.frame_id() {
                return Err(format!(
                    "conversation {key}: fork {} has another id",
                    a.agent_name()
                ));
            }
            same_frame(key, a, b)?;
        }
    }
    Ok(())
}

/// The same frame before a crash and after its restore: its session and its count.
fn same_frame(
    key: &str,
    a: &crate::agents::frame::StackFrame,
    b: &crate::agents::frame::StackFrame,
) -> Result<(), String> {
    let name = a.agent_name();
    if a.session() != b.session() {
        return Err(format!(
            "conversation {key}: the session of {name} differs ({} messages became {})",
            a.session().messages.len(),
            b.session().messages.len()
        ));
    }
    if a.iteration() != b.iteration() {
        return Err(format!(
            "conversation {key}: {name} used {} iterations, restored {}",
            a.iteration(),
            b.iteration()
        ));
    }
    Ok(())
}

/// What `call` of `rt` answers, if its frame still waits for it: the frame's model call, or its
/// run of one tool use (a restored frame issues the same call again under a new id).
fn in_flight_key(rt: &Runtime, call: CallId) -> Option<InFlight> {
    let frame = rt
        .stacks()
        .frame_at(crate::model::ids::call_frame(call))?
        .frame_id();
    if rt.request(call).is_some() {
        return Some(InFlight::Model(frame));
    }
    let run = rt.tool_run(call)?;
    Some(InFlight::Tool(frame, run.tool_use_id.clone()))
}
