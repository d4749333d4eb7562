//! The observer: checks the named invariants of DESIGN §4 after every step.
//!
//! It keeps its own model of every stack, built only from the runtime's push and pop events, and
//! compares the runtime against it; so a runtime bug that corrupts its stack is seen as a
//! divergence, not trusted. Every check is incremental: a step costs time proportional to what the
//! step did, not to the length of the sessions or the depth of the stacks (DESIGN §7).
//!
//! The structural invariants (pairing, linkage, delivery, routing, cleanup, the bound) are in this
//! file; the semantic ones (error propagation, tool execution, message delivery, iteration
//! accounting, journal before state) in [`semantic`]. A driver tells the observer what it feeds
//! with [`Observer::before_input`] and shows it each step with [`Observer::after_step`], before it
//! takes the step's effects.

mod batch;
pub mod coverage;
mod semantic;
mod sessions;
mod tools;
mod tree;

use std::fmt;
use std::sync::Arc;

use uuid::Uuid;

use crate::agents::tree::Status;
use crate::model::agent::{AgentDef, AgentKind};
use crate::model::hash::FxHashMap;
use crate::model::ids::{CallId, FrameId};
use crate::protocol::{Event, FrameInfo, PopReason};
use crate::runtime::Runtime;
use crate::wire::pairing::Pairing;

/// Names of the invariants, as printed when one breaks.
pub mod names {
    /// Every model request is valid under the Anthropic and OpenAI message rules.
    pub const TOOL_PAIRING: &str = "tool-pairing";
    /// Each frame above the bottom names an unresolved `tool_use` of the frame below.
    pub const STACK_LINKAGE: &str = "stack-linkage";
    /// A non-empty stack has exactly one main frame, at the bottom.
    pub const MAIN_AT_BOTTOM: &str = "main-at-bottom";
    /// No frame runs more model iterations than its limit.
    pub const ITERATION_BOUND: &str = "iteration-bound";
    /// Each popped frame delivers exactly one result to exactly its parent.
    pub const SINGLE_DELIVERY: &str = "single-delivery";
    /// Each user message goes to the frame on top, or to main when the stack is empty, or to the
    /// fork with a question open that the top frame's parked `wait` leads to.
    pub const ROUTING: &str = "routing";
    /// After the main agent answers, or after an unwind, no frame of that session remains.
    pub const CLEANUP: &str = "cleanup";
    /// No user-facing or display-only string enters a conversation as model-visible content.
    pub const NO_DISPLAY_LEAK: &str = "no-display-leak";
    /// Restoring the persisted state at a quiescent point continues as the uninterrupted run (a
    /// restore that fails breaks it; a restore that continues differently is caught by the other
    /// invariants and by the restart property test).
    pub const RESTART_EQUIVALENCE: &str = "restart-equivalence";
    /// A frame that fails delivers an error result, one that completes a success, and a main
    /// frame that fails tells the user so.
    pub const ERROR_PROPAGATION: &str = "error-propagation";
    /// Every `tool_use` of a reply is run, or skipped for the documented reason in the documented
    /// situation (after `complete`, at the limit on resuming, on a cancel, on an interruption).
    pub const TOOL_EXECUTION: &str = "tool-execution";
    /// Every user message is delivered to one frame or dropped by a cancel word by the time its
    /// conversation is idle.
    pub const MESSAGE_DELIVERY: &str = "message-delivery";
    /// A frame's iteration count is the number of passes it made.
    pub const ITERATION_ACCOUNTING: &str = "iteration-accounting";
    /// Every session operation is journaled before the state that follows it is written.
    pub const JOURNAL_BEFORE_STATE: &str = "journal-before-state";
    /// A run never waits in vain: when nothing is scheduled, every conversation is idle, unless
    /// a model call stalled or a tool hung (checked by the simulator, which knows).
    pub const PROGRESS: &str = "progress";
    /// The runtime has as many live frames as the events left agents alive, and every agent a
    /// step touched agrees with the runtime: a live one has its frame with its status under a
    /// parent that lists it, an ended one leaves no fork running.
    pub const TREE_CONSISTENCY: &str = "tree-consistency";
    /// Every status change is one the status machine allows, from the status the agent had;
    /// terminal statuses are absorbing.
    pub const STATUS_TRANSITIONS: &str = "status-transitions";
    /// A `wait(h)` answers only once fork `h` of its caller has ended, with exactly that fork's
    /// result and error flag (`No fork with handle <h>` when the caller starts no such fork; a
    /// skip text only when the caller ends in the step).
    pub const FORK_WAIT: &str = "fork-wait";
    /// An async session (seed 003) moves only `running → pending_input → running → completed |
    /// failed` or `pending_input → failed`, one question at a time, and agrees with the runtime.
    pub const SESSION_LIFECYCLE: &str = "session-lifecycle";
    /// An external tool run's result is the output its tool gave, or its timeout text once its
    /// deadline passed with no output before it, or a documented skip; and it joins the session
    /// as soon as its run is in (for a parallel batch, once every run of the batch is in).
    pub const TOOL_RUNS: &str = "tool-runs";
    /// A batch child's answer is its final text, or, when that is blank, what its agent's
    /// empty-answer policy makes of it (its latest non-blank text, or one request for a summary);
    /// its caller receives exactly that answer.
    pub const BATCH_ANSWER: &str = "batch-answer";

    /// Every invariant the observer checks, in a stable order.
    pub const ALL: [&str; 21] = [
        TOOL_PAIRING,
        STACK_LINKAGE,
        MAIN_AT_BOTTOM,
        ITERATION_BOUND,
        SINGLE_DELIVERY,
        ROUTING,
        CLEANUP,
        NO_DISPLAY_LEAK,
        RESTART_EQUIVALENCE,
        ERROR_PROPAGATION,
        TOOL_EXECUTION,
        MESSAGE_DELIVERY,
        ITERATION_ACCOUNTING,
        JOURNAL_BEFORE_STATE,
        PROGRESS,
        TREE_CONSISTENCY,
        STATUS_TRANSITIONS,
        FORK_WAIT,
        SESSION_LIFECYCLE,
        TOOL_RUNS,
        BATCH_ANSWER,
    ];

    /// A request to `agentsim mock-llm` replays the assistant turns the server sent in its
    /// conversation, unchanged and complete.
    pub const REPLAYED_HISTORY: &str = "replayed-history";
    /// A request to `agentsim mock-llm` is a well-formed request of its provider.
    pub const REQUEST_FORMAT: &str = "request-format";

    /// The invariants `agentsim mock-llm` checks on a foreign runtime's requests, besides
    /// `tool-pairing`.
    pub const WIRE: [&str; 2] = [REPLAYED_HISTORY, REQUEST_FORMAT];
}

/// Whether two texts are equal (the same `Arc` most of the time, as the runtime shares them).
#[inline]
fn same_text(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// The fork a `wait` names: a number, or a string holding one (DESIGN §8).
fn fork_handle(handle: &serde_json::Value) -> Option<u32> {
    let n = match handle {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }?;
    u32::try_from(n).ok()
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's stable name.
    pub invariant: &'static str,
    /// What was seen.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant, self.message)
    }
}

fn violation(invariant: &'static str, message: impl Into<String>) -> Violation {
    Violation {
        invariant,
        message: message.into(),
    }
}

/// A child popped in this step, waiting for its one delivery.
#[derive(Clone, Debug)]
struct Delivery {
    child: FrameInfo,
    parent_session: Uuid,
    parent_name: Arc<str>,
    count: u32,
    /// Whether the result delivered was an error.
    is_error: Option<bool>,
    /// Whether it must be (`None`: the observer cannot tell).
    expect_error: Option<bool>,
    /// The content it must have (a batch child's answer; see `batch-answer`).
    expect_content: Option<Arc<str>>,
}

/// One frame of the observer's model of a stack.
#[derive(Clone, Debug)]
struct ModelFrame {
    info: FrameInfo,
    /// Model calls this frame made, as the observer counted them.
    calls: u32,
    /// Validation state of a child's session (the main session's lives in [`KeyModel::main`],
    /// since it outlives each main frame).
    pairing: Pairing,
    /// Passes through the loop head, as the observer counted them (model calls, and the passes
    /// that only run the tool uses left when a child returned).
    passes: u32,
    /// The frame's iteration limit, as its model calls state it.
    limit: u32,
    /// Its model call in flight.
    call: Option<CallId>,
    /// The tool uses of its latest reply.
    uses: smallvec::SmallVec<[semantic::Use; 1]>,
    /// A `complete` of its latest reply succeeded.
    completed: bool,
    /// It resumed at the loop head with tool uses left and no pass left: it must end there.
    at_limit: bool,
    /// The watchdog interrupted it: its passes are not checked (seed 004's continuation prompts
    /// add passes the observer does not model).
    lenient: bool,
    /// A batch child's model (`batch-answer`).
    batch: Option<Box<batch::BatchModel>>,
}

impl ModelFrame {
    fn new(info: FrameInfo) -> ModelFrame {
        ModelFrame {
            info,
            calls: 0,
            pairing: Pairing::default(),
            passes: 0,
            limit: 0,
            call: None,
            uses: smallvec::SmallVec::new(),
            completed: false,
            at_limit: false,
            lenient: false,
            batch: None,
        }
    }
}

/// The observer's model of one conversation.
#[derive(Clone, Debug)]
struct KeyModel {
    key: Arc<str>,
    frames: Vec<ModelFrame>,
    /// The main session and its validation state.
    main: Option<(Uuid, Pairing)>,
    /// Pushed or popped in this step (its depth is compared with the runtime's at the end).
    touched: bool,
    /// User messages sent and not yet delivered or dropped.
    pending: u32,
    /// Cancel words sent in this step to its active stack.
    cancels: u32,
    /// Cancel words among the pending messages (sent while no stack was active).
    pending_cancels: u32,
    /// Listed in [`Observer::pending_keys`].
    listed: bool,
    /// The tool uses of the main session's latest reply and the main agent's limit, kept between
    /// turns (the main session outlives each main frame).
    main_uses: smallvec::SmallVec<[semantic::Use; 1]>,
    main_limit: u32,
    /// A trigger started it (seed 003): its questions go to the store.
    session: bool,
}

/// Checks the invariants. Feed it every step's events with [`Observer::after_step`].
#[derive(Clone, Debug, Default)]
pub struct Observer {
    /// Conversations in the order they appeared; `by_key` finds one (once there are two), `last`
    /// caches the latest.
    keys: Vec<KeyModel>,
    by_key: FxHashMap<Arc<str>, usize>,
    last: usize,
    /// Call counts and validation state of frames that are not on their model stack (a broken
    /// stack is reported by the stack checks; these keep the other checks running).
    stray_calls: FxHashMap<Uuid, u32>,
    stray_pairing: FxHashMap<Uuid, Pairing>,
    deliveries: Vec<Delivery>,
    /// Results already delivered by popped children, by the parent session they went to.
    delivered: FxHashMap<Uuid, smallvec::SmallVec<[Arc<str>; 1]>>,
    /// Frames pushed in this step: conversation index, frame id and place in the runtime.
    pushed: Vec<(usize, Uuid, FrameId)>,
    /// Conversations pushed or popped in this step.
    touched: Vec<usize>,
    /// Replies being streamed, by call.
    partials: FxHashMap<CallId, semantic::Partial>,
    /// The last agent and declared tool the refusal check found allowed: replies repeat their
    /// tools, and the definitions and settings it read do not change under one observer (a
    /// restart restores the same ones). The agent is held, so that its address names no other.
    allowed: Option<(Arc<AgentDef>, Arc<str>)>,
    /// The reply this step's input carries.
    stash: Option<semantic::Stashed>,
    /// What the current step did, for the semantic checks.
    step: semantic::StepFacts,
    /// Conversations with messages not yet delivered.
    pending_keys: Vec<usize>,
    /// A cancel word was sent in this step.
    cancel_sent: bool,
    /// The agent an intervention of this step deletes.
    delete_target: Option<Uuid>,
    /// The observer's own model of the agent tree (`status-transitions`, `tree-consistency`).
    tree: tree::TreeModel,
    /// The observer's own model of the async sessions (`session-lifecycle`).
    sessions: sessions::SessionModel,
    /// The observer's own model of the external tool runs in flight (`tool-runs`).
    tools: tools::ToolRuns,
    /// The runtime persists (so the journal is checked).
    persist: bool,
    /// Unit tests feed made-up events with no runtime behind them: the comparison of the
    /// runtime's stacks with the model is skipped.
    #[cfg(test)]
    no_runtime: bool,
}

impl Observer {
    /// A fresh observer.
    pub fn new() -> Observer {
        Observer::default()
    }

    /// A fresh observer for `rt`, with what it reads once from the definitions read already
    /// (so that copies of it made before the first step do not read them again).
    pub fn for_runtime(rt: &Runtime) -> Observer {
        let mut observer = Observer::default();
        observer.tools.prepare(rt);
        observer
    }

    /// Where a run stops with nothing scheduled at `now`: what was due by then and never came
    /// (a tool run whose batch was in; see `tool-runs`).
    pub fn check_stuck(&self, now: u64) -> Result<(), Violation> {
        self.tools.find_due(now, true, |id| self.tree.name_of(id))
    }

    /// Checks one step: its events in order, then the runtime's state at the end of the step.
    pub fn after_step(&mut self, rt: &Runtime, events: &[Event]) -> Result<(), Violation> {
        let result = self.check_step(rt, events);
        self.delete_target = None;
        result
    }

    fn check_step(&mut self, rt: &Runtime, events: &[Event]) -> Result<(), Violation> {
        self.persist = rt.config().persist;
        self.take_stash(events);
        for event in events {
            // The observer is opaque to the optimizer at each event, so that the addresses of its
            // parts are worked out where an event needs them: otherwise dozens of them are
            // worked out ahead of the loop and kept on the stack, at every step, for the few that
            // a step uses.
            let this = std::hint::black_box(&mut *self);
            if let Err(v) = this.on_event(rt, event) {
                self.step = semantic::StepFacts::default();
                self.cancel_sent = false;
                return Err(v);
            }
        }
        self.end_of_step(rt)
    }

    /// The index of `key`'s model: the cached one when it is the same `Arc` (the runtime hands
    /// out one per conversation), else one hash lookup.
    #[inline]
    fn key_index(&mut self, key: &Arc<str>) -> usize {
        if let Some(m) = self.keys.get(self.last) {
            if Arc::ptr_eq(&m.key, key) {
                return self.last;
            }
        }
        self.key_index_slow(key, true)
    }

    /// [`Observer::key_index`] for a key a driver's input names: its `Arc` is the driver's, so it
    /// is compared by content and never replaces the runtime's, which the step's events use.
    #[inline]
    fn input_key_index(&mut self, key: &Arc<str>) -> usize {
        if let Some(m) = self.keys.get(self.last) {
            if *m.key == **key {
                return self.last;
            }
        }
        self.key_index_slow(key, false)
    }

    #[cold]
    fn key_index_slow(&mut self, key: &Arc<str>, keep: bool) -> usize {
        // A lone conversation is found without the map, which is filled when a second comes.
        let found = match &self.keys[..] {
            [only] => (*only.key == **key).then_some(0),
            _ => self.by_key.get(&**key).copied(),
        };
        let i = match found {
            Some(i) => {
                // Keep the latest `Arc` an event named it with (the runtime's), so that the
                // runtime's events take the fast path.
                if keep {
                    self.keys[i].key = key.clone();
                }
                i
            }
            None => {
                self.keys.push(KeyModel {
                    key: key.clone(),
                    frames: Vec::new(),
                    main: None,
                    touched: false,
                    pending: 0,
                    cancels: 0,
                    pending_cancels: 0,
                    listed: false,
                    main_uses: smallvec::SmallVec::new(),
                    main_limit: 0,
                    session: false,
                });
                let i = self.keys.len() - 1;
                if i == 1 {
                    self.by_key.insert(self.keys[0].key.clone(), 0);
                }
                if i >= 1 {
                    self.by_key.insert(key.clone(), i);
                }
                i
            }
        };
        self.last = i;
        i
    }

    fn model(&mut self, key: &Arc<str>) -> &mut Vec<ModelFrame> {
        let i = self.key_index(key);
        &mut self.keys[i].frames
    }

    fn touch(&mut self, key: &Arc<str>) -> usize {
        let i = self.key_index(key);
        if !self.keys[i].touched {
            self.keys[i].touched = true;
            self.touched.push(i);
        }
        i
    }

    #[inline(always)]
    fn on_event(&mut self, rt: &Runtime, event: &Event) -> Result<(), Violation> {
        use names::*;
        match event {
            // A stacked frame's start or end is judged from its push or pop (the detailed
            // events add its `agent-state` for the transcript).
            Event::AgentState { implied: true, .. } => {}
            Event::AgentState {
                agent_id,
                frame_ref,
                frame,
                from,
                status,
                ..
            } => {
                self.tree
                    .on_state(*agent_id, *frame_ref, frame, *from, *status)?;
                if status.is_terminal() {
                    self.tools.on_ended(*agent_id);
                }
            }
            Event::ForkStarted {
                caller,
                caller_id,
                handle,
                frame,
                ..
            } => {
                // The caller's script name, from its definition (a triggered agent runs as
                // `main`); a caller gone by the end of the step is not judged on it.
                let script = rt
                    .find_agent(*caller_id)
                    .and_then(|f| rt.frame(f))
                    .map(|f| f.agent().name.clone());
                self.tree.on_fork_started(
                    *caller_id,
                    caller,
                    script.as_deref(),
                    *handle,
                    frame.frame_id,
                    &frame.name,
                )?
            }
            Event::ForkEnded {
                frame,
                result,
                status,
                ..
            } => {
                let failed = *status != crate::agents::tree::Status::Completed;
                self.tree.on_fork_ended(frame.frame_id, result, failed);
            }
            Event::Wait {
                frame_id,
                tool_use_id,
                handle: read,
                ..
            } => {
                // The handle as the model wrote it (a number, or a numeric string), read by the
                // observer itself from the caller's session, never from the runtime's reading.
                let handle = rt
                    .find_agent(*frame_id)
                    .and_then(|f| rt.frame(f))
                    .and_then(|f| {
                        let session = f.session();
                        session.tool_use_at(session.tool_use_by_id(tool_use_id)?)
                    })
                    .map(|u| u.input.get("handle").and_then(fork_handle));
                // (A caller gone by the end of the step is judged on the runtime's reading.)
                self.tree
                    .on_wait(*frame_id, tool_use_id, handle.unwrap_or(*read))
            }
            Event::Question {
                key,
                agent_id,
                tool_use_id,
                frame,
                ..
            } => {
                if tool_use_id.is_none() {
                    self.on_workflow_decision(*agent_id);
                }
                self.sessions.on_question(key, frame, *agent_id, rt)?;
                self.tree.on_question(*agent_id, tool_use_id)
            }
            Event::Answer {
                key,
                agent_id,
                question_id,
                frame,
                accepted,
                ..
            } => {
                self.tree
                    .on_answer_event(*question_id, *agent_id, frame, *accepted)?;
                if let (Some(agent_id), true) = (agent_id, accepted) {
                    if let Some(key) = key {
                        self.sessions.on_answer(key)?;
                    }
                    self.tree.on_answered(*agent_id)
                }
            }
            Event::WaitSubagents {
                frame_id, waiting, ..
            } => {
                self.on_workflow_decision(*frame_id);
                self.tree.on_wait_all(*frame_id, *waiting)
            }
            Event::Triggered {
                key,
                agent,
                started,
            } => {
                self.sessions.on_triggered(agent, *started)?;
                if let (Some(key), true) = (key, started) {
                    self.sessions.on_started(key, agent, rt.now())?;
                    self.on_triggered(key)
                }
            }
            Event::QuestionTimedOut {
                key,
                answer,
                expired,
                ..
            } => {
                self.sessions
                    .judge_timeout(key, answer.as_ref(), *expired, rt)?;
                self.sessions.on_timed_out(key, answer.is_some())?
            }
            Event::QuestionWithdrawn { key, .. } => self.sessions.on_withdrawn(key)?,
            Event::SessionEnded { key, completed, .. } => {
                self.sessions.on_ended(key, *completed)?
            }
            Event::WorkflowStep {
                frame,
                frame_id,
                step,
                ..
            } => {
                self.on_workflow_decision(*frame_id);
                if *step == crate::agents::workflow::Step::Main
                    && self.tree.at_subquestions(*frame_id)
                {
                    // The decision is the reply the agent just gave, read from its session and
                    // parsed as the workflow reads subquestions.
                    if let Some(f) = rt.find_agent(*frame_id).and_then(|f| rt.frame(f)) {
                        let text = crate::agents::workflow::question_of(f.session());
                        let count = crate::agents::workflow::subquestions(&text).len();
                        self.tree.on_subquestions(*frame_id, frame, count);
                    }
                }
                self.tree.on_workflow_step(*frame_id, *step)
            }
            Event::WorkflowDone {
                frame, frame_id, ..
            } => {
                self.tree.on_workflow_done(*frame_id, frame)?;
                // A main frame's summary is its answer to the user, judged as one.
                if &**frame != "main" {
                    self.on_workflow_done(*frame_id);
                }
            }
            Event::Push {
                key,
                frame,
                depth,
                frame_ref,
                ..
            } => {
                let k = self.touch(key);
                let model = &mut self.keys[k].frames;
                match (frame.kind, model.first()) {
                    (AgentKind::Main, Some(bottom)) => {
                        return Err(violation(
                            MAIN_AT_BOTTOM,
                            format!(
                                "main pushed on top of {} at depth {depth}",
                                bottom.info.name
                            ),
                        ));
                    }
                    (AgentKind::Main, None) => {}
                    (_, None) => {
                        return Err(violation(
                            MAIN_AT_BOTTOM,
                            format!("{} pushed on an empty stack", frame.name),
                        ));
                    }
                    (_, Some(_)) if frame.parent_tool_use_id.is_none() => {
                        return Err(violation(
                            STACK_LINKAGE,
                            format!("{} has no parent_tool_use_id", frame.name),
                        ));
                    }
                    _ => {}
                }
                if let (Some(link), Some(parent)) =
                    (&frame.parent_tool_use_id, self.keys[k].frames.last_mut())
                {
                    if let Some(u) = parent.uses.iter_mut().find(|u| same_text(&u.id, link)) {
                        u.pushed = true;
                        if u.delegation == semantic::Delegation::Passthrough {
                            return Err(violation(
                                names::TOOL_EXECUTION,
                                format!("{} pushed {} to answer {link}, a use_skill of a passthrough skill (one external run, never a frame)", parent.info.name, frame.name),
                            ));
                        }
                    }
                }
                let mut new = ModelFrame::new(frame.clone());
                if frame.kind == AgentKind::Main {
                    new.uses = std::mem::take(&mut self.keys[k].main_uses);
                    new.limit = self.keys[k].main_limit;
                }
                let model = &mut self.keys[k].frames;
                model.push(new);
                if *depth != model.len() {
                    return Err(violation(
                        STACK_LINKAGE,
                        format!(
                            "push reported depth {depth}, the stack holds {}",
                            model.len()
                        ),
                    ));
                }
                self.pushed.push((k, frame.frame_id, *frame_ref));
                if frame.parent_tool_use_id.is_some() {
                    self.expect("agent_session", frame.session_id, None, None, &frame.name);
                }
                // Its agent started (the `agent-state` the push stands for).
                self.tree.on_pushed(frame.frame_id, &frame.name)?;
            }
            Event::Pop {
                key,
                frame,
                reason,
                iterations,
                from,
                ..
            } => {
                // Its agent ended (the `agent-state` the pop stands for, which comes first).
                self.tree
                    .on_popped(frame.frame_id, &frame.name, *from, reason.ended_as())?;
                self.tools.on_ended(frame.frame_id);
                let k = self.touch(key);
                self.sessions.on_left(key, frame.frame_id);
                let model = &mut self.keys[k].frames;
                match model.last() {
                    Some(top) if top.info.frame_id == frame.frame_id => {}
                    Some(top) => {
                        return Err(violation(
                            STACK_LINKAGE,
                            format!("popped {} but {} is on top", frame.name, top.info.name),
                        ));
                    }
                    None => {
                        return Err(violation(
                            STACK_LINKAGE,
                            format!("popped {} from an empty stack", frame.name),
                        ));
                    }
                }
                let popped = model.pop().expect("the top was just matched");
                let parent = model
                    .last()
                    .map(|p| (p.info.session_id, p.info.name.clone()));
                if !self.stray_calls.is_empty() {
                    self.stray_calls.remove(&frame.frame_id);
                }
                if frame.kind == AgentKind::Main && *reason == PopReason::Completed {
                    return Err(violation(
                        SINGLE_DELIVERY,
                        "the main frame completed: there is no parent to deliver its result to",
                    ));
                }
                match (frame.kind, parent) {
                    (AgentKind::Main, Some((_, below))) => {
                        return Err(violation(
                            MAIN_AT_BOTTOM,
                            format!("main popped with {below} still below it"),
                        ));
                    }
                    (AgentKind::Main, None) => {}
                    (_, None) => {
                        return Err(violation(
                            MAIN_AT_BOTTOM,
                            format!("{} popped with no frame below it", frame.name),
                        ));
                    }
                    (_, Some((parent_session, parent_name))) => {
                        // The child's own validation state went with its model frame.
                        if !self.stray_pairing.is_empty() {
                            self.stray_pairing.remove(&frame.session_id);
                        }
                        let expect_error = self.on_pop(k, &popped, *reason, *iterations);
                        let expect_content = match (reason, popped.batch) {
                            (PopReason::Completed, Some(b)) => b.answer,
                            _ => None,
                        };
                        self.deliveries.push(Delivery {
                            child: frame.clone(),
                            parent_session,
                            parent_name,
                            count: 0,
                            is_error: None,
                            expect_error,
                            expect_content,
                        });
                        return Ok(());
                    }
                }
                self.on_pop(k, &popped, *reason, *iterations);
                self.sessions.on_main_left(key, *reason);
                if popped.info.kind == AgentKind::Main {
                    self.keys[k].main_uses = popped.uses;
                }
            }
            Event::ToolResult {
                key,
                frame,
                frame_id,
                session_id,
                tool_use_id,
                content,
                is_error,
            } => {
                if let Some(display) = crate::model::messages::display_only(content) {
                    return Err(violation(
                        NO_DISPLAY_LEAK,
                        format!(
                            "the display-only string {display:?} entered {frame}'s session {session_id} as the result of {tool_use_id}"
                        ),
                    ));
                }
                self.tree
                    .on_result(*frame_id, frame, tool_use_id, content, *is_error)?;
                self.tools.on_result(
                    *frame_id,
                    frame,
                    tool_use_id,
                    content,
                    *is_error,
                    rt.now(),
                )?;
                let mut delivery = false;
                for d in &mut self.deliveries {
                    if d.child.parent_tool_use_id.as_ref() == Some(tool_use_id) {
                        if d.parent_session != *session_id {
                            return Err(violation(
                                SINGLE_DELIVERY,
                                format!(
                                    "{} delivered its result to {frame} instead of its parent {}",
                                    d.child.name, d.parent_name
                                ),
                            ));
                        }
                        d.count += 1;
                        d.is_error = Some(*is_error);
                        delivery = true;
                        if let Some(want) = &d.expect_content {
                            if !same_text(want, content) || *is_error {
                                return Err(violation(
                                    BATCH_ANSWER,
                                    format!(
                                        "{} answered {want:?}, but {frame} received {content:?}{}",
                                        d.child.name,
                                        if *is_error { " as an error" } else { "" }
                                    ),
                                ));
                            }
                        }
                    }
                }
                let again = !self.delivered.is_empty()
                    && self
                        .delivered
                        .get(session_id)
                        .is_some_and(|ids| ids.contains(tool_use_id));
                if again {
                    return Err(violation(
                        SINGLE_DELIVERY,
                        format!("a second result for {tool_use_id} reached {frame} after its child was gone"),
                    ));
                }
                // A result for the link of a child that is still on the stack breaks the link.
                let model = self.model(key);
                if let Some(i) = model.iter().rposition(|f| f.info.session_id == *session_id) {
                    if let Some(child) = model.get(i + 1).map(|c| &c.info) {
                        if child.parent_tool_use_id.as_ref() == Some(tool_use_id) {
                            return Err(violation(
                                STACK_LINKAGE,
                                format!(
                                    "{frame} got a result for {tool_use_id} while its child {} is still active",
                                    child.name
                                ),
                            ));
                        }
                    }
                }
                let k = self.key_index(key);
                let seen = semantic::ResultSeen {
                    frame_id: *frame_id,
                    session: *session_id,
                    tool_use_id,
                    content,
                    is_error: *is_error,
                };
                self.on_tool_result(k, seen, delivery);
            }
            Event::LlmRequest {
                key,
                frame,
                frame_id,
                session_id,
                call,
                iteration,
                max_iterations,
                ..
            } => {
                let k = self.key_index(key);
                let KeyModel { frames, main, .. } = &mut self.keys[k];
                // The caller is on top of its model stack, unless the stack is broken.
                let (calls, pairing) = match frames
                    .iter_mut()
                    .rev()
                    .find(|f| f.info.frame_id == *frame_id)
                {
                    Some(f) if f.info.kind == AgentKind::Main => {
                        let main = main.get_or_insert_with(|| (*session_id, Pairing::default()));
                        if main.0 != *session_id {
                            *main = (*session_id, Pairing::default());
                        }
                        (&mut f.calls, &mut main.1)
                    }
                    Some(f) if f.info.session_id == *session_id => (&mut f.calls, &mut f.pairing),
                    Some(f) => (
                        &mut f.calls,
                        self.stray_pairing.entry(*session_id).or_default(),
                    ),
                    None => (
                        self.stray_calls.entry(*frame_id).or_insert(0),
                        self.stray_pairing.entry(*session_id).or_default(),
                    ),
                };
                *calls += 1;
                if *calls > *max_iterations || iteration > max_iterations {
                    return Err(violation(
                        ITERATION_BOUND,
                        format!(
                            "{frame} made model call {} (iteration {iteration}) over its limit of {max_iterations}",
                            *calls
                        ),
                    ));
                }
                let mut batch = None;
                if let Some(request) = rt.request(*call) {
                    pairing
                        .check_request(request.messages)
                        .map_err(|m| violation(TOOL_PAIRING, format!("{frame}: {m}")))?;
                    if request.agent.workflow.is_none() {
                        batch = request.agent.batch;
                    }
                }
                self.on_request(k, *frame_id, *call, *iteration, *max_iterations, batch);
            }
            Event::Reissued {
                key,
                frame_id,
                call,
                what: "model call",
                ..
            } => {
                let k = self.key_index(key);
                self.on_reissued(k, *frame_id, *call);
            }
            Event::Reissued {
                what: "tool run", ..
            } => self.tools.on_reissued(),
            Event::LlmError { frame_id, .. } => self.on_llm_error(*frame_id),
            Event::Watchdog { key, frame, .. } => {
                let k = self.key_index(key);
                self.on_watchdog(k, frame);
            }
            Event::Delegation {
                key,
                frame,
                what,
                text,
            } => {
                let k = self.key_index(key);
                self.on_delegation(k, frame, what, text);
            }
            Event::Sent { key, text, .. } => {
                let k = self.key_index(key);
                self.on_sent(k, text);
            }
            Event::UserMessage {
                key,
                frame,
                frame_id,
                text,
            } => {
                let k = self.key_index(key);
                let model = &self.keys[k].frames;
                match model.last() {
                    Some(top) if top.info.frame_id == *frame_id => {}
                    // The fork the top frame waits on, which asked the user.
                    Some(top) if self.tree.waits_on(top.info.frame_id, *frame_id) => {}
                    Some(top) => {
                        return Err(violation(
                            ROUTING,
                            format!(
                                "a user message went to {frame}, but {} is on top",
                                top.info.name
                            ),
                        ));
                    }
                    None => {
                        return Err(violation(
                            ROUTING,
                            format!("a user message went to {frame} with no main frame"),
                        ));
                    }
                }
                self.tree.on_answered(*frame_id);
                self.tree.on_user_message(*frame_id);
                self.on_user_message(rt, k, *frame_id, text);
            }
            Event::Response { key, .. } | Event::Cancelled { key, .. } => {
                let what = if matches!(event, Event::Response { .. }) {
                    "the main agent answered"
                } else {
                    "the stack was unwound"
                };
                let model = self.model(key);
                if let Some(left) = model.last() {
                    return Err(violation(
                        CLEANUP,
                        format!(
                            "{what} but {} (depth {}) remains",
                            left.info.name,
                            model.len()
                        ),
                    ));
                }
                let k = self.key_index(key);
                match event {
                    Event::Response { response, .. } => self.on_response(k, &response.text),
                    Event::Cancelled { dropped, .. } => self.on_cancelled(k, *dropped),
                    _ => {}
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn end_of_step(&mut self, rt: &Runtime) -> Result<(), Violation> {
        #[cfg(test)]
        if self.no_runtime {
            // Events fed without a runtime behind them: the tree is not compared with one.
            self.tree.forget_touched();
        }
        self.tools.on_effects(rt);
        if let Err(v) = self
            .structural_end(rt)
            .and_then(|()| self.tree.end_of_step(rt))
            .and_then(|()| self.sessions.end_of_step(rt))
            .and_then(|()| {
                let tree = &self.tree;
                self.tools.check_due(rt.now(), false, |id| tree.name_of(id))
            })
        {
            self.step = semantic::StepFacts::default();
            self.cancel_sent = false;
            return Err(v);
        }
        if self.step.is_empty() && self.pending_keys.is_empty() && !self.cancel_sent {
            return Ok(());
        }
        let cancel_sent = std::mem::take(&mut self.cancel_sent);
        self.semantic_end(rt, cancel_sent)
    }

    fn structural_end(&mut self, rt: &Runtime) -> Result<(), Violation> {
        use names::*;
        if self.deliveries.is_empty() && self.pushed.is_empty() && self.touched.is_empty() {
            return Ok(()); // No frame was pushed or popped in this step: nothing to check.
        }
        for d in self.deliveries.drain(..) {
            if d.count != 1 {
                return Err(violation(
                    SINGLE_DELIVERY,
                    format!(
                        "{} was popped and delivered {} results to {}",
                        d.child.name, d.count, d.parent_name
                    ),
                ));
            }
            if let (Some(got), Some(want)) = (d.is_error, d.expect_error) {
                if got != want && self.step.deferred.is_none() {
                    self.step.mark(semantic::fact::DEFERRED).deferred = Some(violation(
                        ERROR_PROPAGATION,
                        format!(
                            "{} delivered {} to {}, but it {}",
                            d.child.name,
                            if got { "an error" } else { "a success" },
                            d.parent_name,
                            if want { "failed" } else { "completed" }
                        ),
                    ));
                }
            }
            if let Some(id) = d.child.parent_tool_use_id {
                self.delivered.entry(d.parent_session).or_default().push(id);
            }
        }
        // The two lists below are cleared, not dropped, so that their buffers serve every step.
        let linked = self
            .pushed
            .iter()
            .try_for_each(|&(k, frame_id, at)| self.check_link(rt, k, frame_id, at));
        self.pushed.clear();
        linked?;
        // The runtime's stacks must be the ones its events describe.
        let matched = self
            .touched
            .iter()
            .try_for_each(|&k| self.check_depth(rt, k));
        for &k in &self.touched {
            self.keys[k].touched = false;
        }
        self.touched.clear();
        matched
    }

    /// A frame pushed in this step and still present must name an unresolved `tool_use` of the
    /// frame below it.
    fn check_link(
        &self,
        rt: &Runtime,
        k: usize,
        frame_id: Uuid,
        at: FrameId,
    ) -> Result<(), Violation> {
        #[cfg(test)]
        if self.no_runtime {
            return Ok(());
        }
        let KeyModel { key, frames, .. } = &self.keys[k];
        let Some(i) = frames.iter().rposition(|f| f.info.frame_id == frame_id) else {
            return Ok(());
        };
        // Its agent, started by the push, lives in the runtime as the events tell (unless it
        // moved since, which the touched-agent check judges).
        let frame = rt.frame(at).filter(|f| f.frame_id() == frame_id);
        let Some(frame) = frame else {
            return Err(self.pushed_lost(i, k, frame_id));
        };
        if frame.status() != Status::Running && !self.tree.moved(frame_id) {
            return Err(violation(
                names::TREE_CONSISTENCY,
                format!(
                    "{} ({frame_id}) is {}, but its agent-state events left it running",
                    frames[i].info.name,
                    frame.status()
                ),
            ));
        }
        if i == 0 {
            return Ok(());
        }
        // Its parent is the frame below it.
        tree::check_listed(rt, frame, frames[i - 1].info.frame_id, &frames[i].info.name)?;
        let child = &frames[i].info;
        let link: &str = child.parent_tool_use_id.as_deref().unwrap_or("");
        let below = rt.stack(key).and_then(|v| v.get(i - 1));
        match below {
            Some(parent) if parent.session.is_unresolved(link) => Ok(()),
            Some(parent) => Err(violation(
                names::STACK_LINKAGE,
                format!(
                    "{} names {link}, which is not an unresolved tool_use of {}",
                    child.name, parent.agent.frame_name
                ),
            )),
            None => Err(violation(
                names::STACK_LINKAGE,
                format!("{} has no frame below it in the runtime", child.name),
            )),
        }
    }

    /// The violation when frame `frame_id`, `i`-th on conversation `k`'s stack by the events,
    /// has no frame at the place its push named.
    #[cold]
    fn pushed_lost(&self, i: usize, k: usize, frame_id: Uuid) -> Violation {
        violation(
            names::TREE_CONSISTENCY,
            format!(
                "{} ({frame_id}) lives by its push, but the runtime has no frame for it (gone without ending)",
                self.keys[k].frames[i].info.name
            ),
        )
    }

    /// The runtime's stack for conversation `k` has the depth and top frame of the model.
    fn check_depth(&self, rt: &Runtime, k: usize) -> Result<(), Violation> {
        #[cfg(test)]
        if self.no_runtime {
            return Ok(());
        }
        let KeyModel {
            key, frames: model, ..
        } = &self.keys[k];
        let (depth, top) = match rt.stack(key) {
            Some(v) => (v.depth(), v.top().map(|f| f.frame_id)),
            None => (0, None),
        };
        if depth != model.len() || top != model.last().map(|f| f.info.frame_id) {
            return Err(violation(
                names::STACK_LINKAGE,
                format!(
                    "the runtime's stack for {key} has depth {depth} but its push/pop events give {}",
                    model.len()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::agent::Catalog;

    #[test]
    fn a_waits_handle_is_a_number_or_a_string_holding_one() {
        use serde_json::json;
        assert_eq!(fork_handle(&json!(2)), Some(2));
        assert_eq!(fork_handle(&json!("2")), Some(2));
        assert_eq!(fork_handle(&json!(" 3 ")), Some(3));
        for none in [
            json!("two"),
            json!(-1),
            json!(1.5),
            json!(null),
            json!([1]),
            json!(1u64 << 40),
        ] {
            assert_eq!(fork_handle(&none), None, "{none}");
        }
    }
    use crate::model::llm::LlmReply;
    use crate::model::messages;
    use crate::model::transcript::Block;
    use crate::protocol::{Effect, Input};
    use crate::runtime::RuntimeConfig;

    fn rt() -> Runtime {
        Runtime::new(Arc::new(Catalog::default()), RuntimeConfig::default())
    }

    fn frame(name: &str, kind: AgentKind, n: u128, parent: Option<&str>) -> FrameInfo {
        FrameInfo {
            frame_id: Uuid::from_u128(n),
            name: name.into(),
            kind,
            parent_tool_use_id: parent.map(Into::into),
            session_id: Uuid::from_u128(1000 + n),
        }
    }

    fn key() -> Arc<str> {
        "k".into()
    }

    fn push(f: &FrameInfo, depth: usize) -> Event {
        Event::Push {
            key: key(),
            frame: f.clone(),
            depth,
            frame_ref: FrameId::new(depth as u32, 0),
        }
    }

    fn pop(f: &FrameInfo, depth: usize) -> Event {
        popped(f, depth, PopReason::Completed, 1)
    }

    fn result(session: &FrameInfo, id: &str) -> Event {
        Event::ToolResult {
            key: key(),
            frame: session.name.clone(),
            frame_id: session.frame_id,
            session_id: session.session_id,
            tool_use_id: id.into(),
            content: "r".into(),
            is_error: false,
        }
    }

    fn first_violation(events: &[Event]) -> Option<&'static str> {
        let rt = rt();
        let mut o = Observer::new();
        for e in events {
            if let Err(v) = o.on_event(&rt, e) {
                return Some(v.invariant);
            }
        }
        o.end_of_step(&rt).err().map(|v| v.invariant)
    }

    /// A pushed frame's agent must live in the runtime, at the place its push named and with
    /// the status its events left it (running, unless an `agent-state` moved it since): a push
    /// the runtime has no frame for, or a frame whose status moved with no event, breaks
    /// `tree-consistency`.
    #[test]
    fn a_pushed_agent_lives_in_the_runtime_as_its_events_tell() {
        let main = frame("main", AgentKind::Main, 1, None);
        let v = first_violation(&[push(&main, 1)]);
        assert_eq!(v, Some(names::TREE_CONSISTENCY), "no frame in the runtime");

        let config = RuntimeConfig {
            record_events: true,
            ..RuntimeConfig::default()
        };
        let mut rt = Runtime::new(Arc::new(Catalog::default()), config);
        let go = user("go");
        rt.handle(go.clone());
        let pushed = rt.events().to_vec();
        rt.clear_events();
        let call = std::iter::from_fn(|| rt.poll_effect())
            .find_map(|e| match e {
                Effect::CallLlm { call } => Some(call),
                _ => None,
            })
            .expect("main calls its model");
        let ask = Block::tool_use(
            "q1",
            "ask_user",
            serde_json::json!({ "question": "which?" }),
        );
        let reply = Input::LlmReply {
            call,
            reply: LlmReply {
                content: vec![ask].into_iter().collect(),
                usage: Default::default(),
            },
        };
        rt.handle(reply);
        let asked = rt.events().to_vec();
        assert!(
            asked.iter().any(|e| matches!(
                e,
                Event::AgentState {
                    status: Status::AwaitingUser,
                    implied: false,
                    ..
                }
            )),
            "main awaits the user: {asked:?}"
        );
        // The push's step judged against the runtime one step later: main awaits the user, with
        // no event of that move among the step's.
        let mut o = Observer::for_runtime(&rt);
        o.before_input(&rt, &go);
        let v = o.after_step(&rt, &pushed).unwrap_err();
        assert_eq!(v.invariant, names::TREE_CONSISTENCY, "{v}");
        assert!(v.message.contains("awaiting_user"), "{v}");
        // With the event of the move in the step, the same runtime agrees.
        let mut o = Observer::for_runtime(&rt);
        o.before_input(&rt, &go);
        let moved: Vec<Event> = pushed
            .iter()
            .cloned()
            .chain(
                asked
                    .iter()
                    .filter(|e| matches!(e, Event::AgentState { .. }))
                    .cloned(),
            )
            .collect();
        let v = o.after_step(&rt, &moved).err();
        assert_ne!(v.map(|v| v.invariant), Some(names::TREE_CONSISTENCY));
    }

    /// A push starts its frame's agent and a pop ends it, from the status the pop names: one
    /// the agent did not have, or a start after the end, breaks `status-transitions`.
    #[test]
    fn a_push_and_a_pop_move_their_agent_as_its_status_allows() {
        let main = frame("main", AgentKind::Main, 1, None);
        let answered = popped(&main, 0, PopReason::Answered, 0);
        // (A turn of no model call breaks other invariants, but not this one.)
        assert_ne!(
            first_violation(&[push(&main, 1), answered.clone()]),
            Some(names::STATUS_TRANSITIONS)
        );
        let mut from_elsewhere = answered.clone();
        if let Event::Pop { from, .. } = &mut from_elsewhere {
            *from = Status::AwaitingUser;
        }
        assert_eq!(
            first_violation(&[push(&main, 1), from_elsewhere]),
            Some(names::STATUS_TRANSITIONS)
        );
        assert_eq!(
            first_violation(&[push(&main, 1), answered.clone(), push(&main, 1)]),
            Some(names::STATUS_TRANSITIONS)
        );
        assert_eq!(
            first_violation(&[push(&main, 1), answered.clone(), answered]),
            Some(names::STATUS_TRANSITIONS),
            "an agent ends once"
        );
    }

    #[test]
    fn a_child_on_an_empty_stack_or_a_second_main_breaks_main_at_bottom() {
        let main = frame("main", AgentKind::Main, 1, None);
        let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
        assert_eq!(
            first_violation(&[push(&child, 1)]),
            Some(names::MAIN_AT_BOTTOM)
        );
        let main2 = frame("main", AgentKind::Main, 3, None);
        assert_eq!(
            first_violation(&[push(&main, 1), push(&main2, 2)]),
            Some(names::MAIN_AT_BOTTOM)
        );
    }

    #[test]
    fn a_popped_child_must_deliver_exactly_once_to_its_parent() {
        let main = frame("main", AgentKind::Main, 1, None);
        let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
        let other = frame("agent:x", AgentKind::Agent, 3, None);
        // No delivery at all.
        let events = [push(&main, 1), push(&child, 2), pop(&child, 1)];
        assert_eq!(first_violation(&events), Some(names::SINGLE_DELIVERY));
        // Two deliveries.
        let events = [
            push(&main, 1),
            push(&child, 2),
            pop(&child, 1),
            result(&main, "t1"),
            result(&main, "t1"),
        ];
        assert_eq!(first_violation(&events), Some(names::SINGLE_DELIVERY));
        // Delivered to the wrong session.
        let events = [
            push(&main, 1),
            push(&child, 2),
            pop(&child, 1),
            result(&other, "t1"),
        ];
        assert_eq!(first_violation(&events), Some(names::SINGLE_DELIVERY));
    }

    #[test]
    fn popping_a_frame_that_is_not_on_top_breaks_stack_linkage() {
        let main = frame("main", AgentKind::Main, 1, None);
        let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
        let events = [push(&main, 1), push(&child, 2), pop(&main, 1)];
        assert_eq!(first_violation(&events), Some(names::STACK_LINKAGE));
        // A result for the link while the child is still active.
        let events = [push(&main, 1), push(&child, 2), result(&main, "t1")];
        assert_eq!(first_violation(&events), Some(names::STACK_LINKAGE));
    }

    #[test]
    fn a_message_to_a_frame_below_the_top_breaks_routing() {
        let main = frame("main", AgentKind::Main, 1, None);
        let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
        let to_main = Event::UserMessage {
            key: key(),
            frame: "main".into(),
            frame_id: main.frame_id,
            text: "hi".into(),
        };
        assert_eq!(
            first_violation(&[push(&main, 1), push(&child, 2), to_main.clone()]),
            Some(names::ROUTING)
        );
        assert_eq!(first_violation(&[to_main]), Some(names::ROUTING));
    }

    #[test]
    fn an_answer_with_frames_left_breaks_cleanup() {
        let main = frame("main", AgentKind::Main, 1, None);
        let cancelled = Event::Cancelled {
            key: key(),
            text: "stop".into(),
            frames: 1,
            dropped: 0,
        };
        assert_eq!(
            first_violation(&[push(&main, 1), cancelled]),
            Some(names::CLEANUP)
        );
    }

    #[test]
    fn one_call_over_the_limit_breaks_iteration_bound() {
        let main = frame("main", AgentKind::Main, 1, None);
        let request = |i: u32| Event::LlmRequest {
            key: key(),
            frame: "main".into(),
            frame_id: main.frame_id,
            session_id: main.session_id,
            call: 99,
            iteration: i,
            max_iterations: 2,
            messages: 1,
        };
        assert_eq!(first_violation(&[request(1), request(2)]), None);
        // The observer counts calls itself: a runtime that forgets to count is still caught.
        assert_eq!(
            first_violation(&[request(1), request(1), request(1)]),
            Some(names::ITERATION_BOUND)
        );
    }

    // The semantic invariants, each on a broken sequence next to its sound twin.

    /// Feeds steps (an input the driver is about to send, then the events it caused) and returns
    /// the first invariant broken. `persist` turns the journal check on, with `effects` as every
    /// step's effects.
    fn semantic(steps: &[(Option<Input>, Vec<Event>)], persist: bool) -> Option<&'static str> {
        semantic_with(Catalog::default(), steps, persist)
    }

    /// [`semantic`] with these definitions.
    fn semantic_with(
        catalog: Catalog,
        steps: &[(Option<Input>, Vec<Event>)],
        persist: bool,
    ) -> Option<&'static str> {
        let config = RuntimeConfig {
            persist,
            ..RuntimeConfig::default()
        };
        semantic_in(catalog, config, steps)
    }

    /// [`semantic`] with these definitions and settings.
    fn semantic_in(
        catalog: Catalog,
        config: RuntimeConfig,
        steps: &[(Option<Input>, Vec<Event>)],
    ) -> Option<&'static str> {
        let rt = Runtime::new(Arc::new(catalog), config);
        let mut o = Observer::new();
        o.no_runtime = true;
        for (input, events) in steps {
            if let Some(input) = input {
                o.before_input(&rt, input);
            }
            if let Err(v) = o.after_step(&rt, events) {
                return Some(v.invariant);
            }
        }
        None
    }

    /// The first step of a turn: "go" reaches a new main frame (limit `max`), which calls the
    /// model (call 1).
    fn opened(main: &FrameInfo, max: u32) -> (Option<Input>, Vec<Event>) {
        (
            Some(user("go")),
            vec![
                push(main, 1),
                delivered(main, "go"),
                request(main, 1, 1, max),
            ],
        )
    }

    fn request(f: &FrameInfo, call: u64, iteration: u32, max: u32) -> Event {
        Event::LlmRequest {
            key: key(),
            frame: f.name.clone(),
            frame_id: f.frame_id,
            session_id: f.session_id,
            call,
            iteration,
            max_iterations: max,
            messages: 1,
        }
    }

    fn reply(call: u64, uses: &[(&str, &str)]) -> Input {
        let content = uses
            .iter()
            .map(|(id, name)| Block::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input: Arc::new(serde_json::json!({})),
            })
            .collect();
        Input::LlmReply {
            call,
            reply: LlmReply {
                content,
                usage: Default::default(),
            },
        }
    }

    fn answered(session: &FrameInfo, id: &str, content: &str, is_error: bool) -> Event {
        Event::ToolResult {
            key: key(),
            frame: session.name.clone(),
            frame_id: session.frame_id,
            session_id: session.session_id,
            tool_use_id: id.into(),
            content: content.into(),
            is_error,
        }
    }

    fn popped(f: &FrameInfo, depth: usize, reason: PopReason, iterations: u32) -> Event {
        Event::Pop {
            key: key(),
            frame: f.clone(),
            depth,
            reason,
            iterations,
            from: Status::Running,
        }
    }

    fn user(text: &str) -> Input {
        Input::User {
            key: key(),
            text: text.into(),
        }
    }

    fn delivered(f: &FrameInfo, text: &str) -> Event {
        Event::UserMessage {
            key: key(),
            frame: f.name.clone(),
            frame_id: f.frame_id,
            text: text.into(),
        }
    }

    /// main asks for skill:r (`t1`); the child's model call fails; its result reaches main.
    fn failing_child(delivered_as_error: bool) -> Vec<(Option<Input>, Vec<Event>)> {
        let main = frame("main", AgentKind::Main, 1, None);
        let child = frame("skill:r", AgentKind::Skill, 2, Some("t1"));
        let error = Event::LlmError {
            key: key(),
            frame: child.name.clone(),
            frame_id: child.frame_id,
            kind: crate::model::llm::LlmErrorKind::Network,
            message: "down".into(),
        };
        vec![
            opened(&main, 5),
            (
                Some(reply(1, &[("t1", "use_skill")])),
                vec![push(&child, 2), request(&child, 2, 1, 5)],
            ),
            (
                None,
                vec![
                    error,
                    popped(&child, 1, PopReason::Error, 1),
                    answered(&main, "t1", "LLM error: down", delivered_as_error),
                    request(&main, 3, 2, 5),
                ],
            ),
        ]
    }

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
        let run = |query_user: crate::runtime::QueryUser,
                   steps: Vec<(Option<Input>, Vec<Event>)>| {
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
}
