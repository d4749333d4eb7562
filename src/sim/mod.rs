//! The deterministic driver: it runs the [`Runtime`] against a scripted model and scripted tools on
//! a virtual clock, with one seeded generator, checking the invariants after every step.
//!
//! A *step* feeds the runtime one input (a user message, or the next item due on the clock) and
//! applies every effect it answers with. [`Sim::run_until_idle`] and [`Sim::advance`] are loops
//! over [`Sim::step`], so a test can stop between any two steps and look. Limits on steps, stack
//! depth and model calls turn a runaway run into an error that shows the current stack; a run
//! never hangs.
//!
//! This file holds the [`Sim`] and its step; its settings are `builder.rs`, seed 003's sessions
//! and callbacks `sessions.rs`, restarts `restart.rs`, the virtual clock [`clock`].

mod builder;
pub mod clock;
mod restart;
mod sessions;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::drive::backend::{
    BackendError, Delivery, Model, ModelAnswer, OwnedModel, OwnedTools, ToolBehavior, ToolStep,
    Tools,
};
use crate::drive::faults::{FaultPlan, WithFaults};
use crate::drive::record::{Materialized, Recording};
use crate::drive::scripted::{MockLlm, MockTools};
use crate::drive::{Core, Memory, Work};
use crate::model::ids::CallId;
use crate::model::llm::{Chunk, LlmError, LlmReply, LlmRequest};
use crate::model::rng::SimRng;
use crate::model::transcript::Block;
use crate::observe::coverage::RunCoverage;
use crate::observe::{Observer, Violation};
use crate::protocol::{Effect, Event, Input, ToolRun};
use crate::runtime::Runtime;

use clock::Clock;
use restart::{in_flight_key, InFlight, Pending};
use sessions::{apply_session, Callbacks};

pub use crate::drive::{Limits, Note, RunError};
pub use builder::SimBuilder;
pub use sessions::{SentCallback, SIM_PUBLIC_URL};

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
    /// What the run delivered so far, if the builder asked to record it.
    pub fn materialized(&self) -> Option<&Materialized> {
        self.materialized.as_ref()
    }

    /// The behaviours the run reached so far, if the builder asked to record them.
    pub fn coverage(&self) -> Option<&RunCoverage> {
        self.coverage.as_ref()
    }

    /// The fault plan, if any.
    pub(crate) fn fault_plan(&mut self) -> Option<&mut FaultPlan> {
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
    pub(crate) fn replace_llm(&mut self, llm: MockLlm) {
        self.model = Box::new(llm);
    }

    /// The scripted model, if the model is the scripted one (to see what was used).
    pub fn llm(&self) -> Option<&MockLlm> {
        self.model.as_any().downcast_ref()
    }

    /// The scripted tools, if the tools are the scripted ones (to see what was used).
    pub(crate) fn mock_tools(&self) -> Option<&MockTools> {
        self.tools.as_any().downcast_ref()
    }

    /// Every stack, as `key: [main, skill:research]`.
    pub(crate) fn describe_stacks(&self) -> String {
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
    pub(crate) fn check_progress(&mut self) -> Result<(), RunError> {
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
