//! The observer: checks the named invariants of DESIGN §4 after every step.
//!
//! It keeps its own model of every stack, built only from the runtime's push and pop events, and
//! compares the runtime against it; so a runtime bug that corrupts its stack is seen as a
//! divergence, not trusted. Every check is incremental: a step costs time proportional to what the
//! step did, not to the length of the sessions or the depth of the stacks (DESIGN §7).
//!
//! This file holds the [`Observer`], which reads each event once and hands it to the family of
//! invariants it concerns; each family is a file:
//!
//! - `stack.rs`: the model of each stack; `main-at-bottom`, `stack-linkage`, `routing`, `cleanup`.
//! - `delivery.rs`: results entering a session; `single-delivery`, `no-display-leak`.
//! - `calls.rs`: a frame's model calls; `tool-pairing`, `iteration-bound`.
//! - `input.rs`, `step.rs`, `semantic.rs`, `journal.rs`, `batch.rs`: the semantic invariants, which
//!   hold when every structure is valid but the runtime still says something false
//!   (`error-propagation`, `tool-execution`, `message-delivery`, `iteration-accounting`,
//!   `journal-before-state`, `batch-answer`).
//! - `tree.rs` and `forks.rs`: the agent tree; `status-transitions`, `tree-consistency`,
//!   `fork-wait`.
//! - `sessions.rs`: seed 003's async sessions; `session-lifecycle`.
//! - `tools.rs`: external tool runs; `tool-runs`.
//!
//! A driver tells the observer what it feeds with [`Observer::before_input`] and shows it each
//! step with [`Observer::after_step`], before it takes the step's effects.

mod batch;
mod calls;
pub mod coverage;
mod delivery;
mod forks;
mod input;
mod journal;
pub mod names;
mod semantic;
mod sessions;
mod stack;
mod step;
#[cfg(test)]
mod tests;
mod tools;
mod tree;

use std::fmt;
use std::sync::Arc;

use uuid::Uuid;

use crate::model::agent::AgentDef;
use crate::model::hash::FxHashMap;
use crate::model::ids::{CallId, FrameId};
use crate::model::messages;
use crate::protocol::Event;
use crate::runtime::Runtime;
use crate::wire::pairing::Pairing;

use delivery::Delivery;
use stack::{KeyModel, ModelFrame};

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

/// Whether `content` is one of the documented skip results.
fn is_skip(content: &str) -> bool {
    matches!(
        content,
        messages::SKIPPED_AFTER_COMPLETE
            | messages::SKIPPED_AFTER_LIMIT
            | messages::CANCELLED_BY_USER
            | messages::TOOL_INTERRUPTED
            | messages::AGENT_DELETED
    )
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
    partials: FxHashMap<CallId, input::Partial>,
    /// The last agent and declared tool the refusal check found allowed: replies repeat their
    /// tools, and the definitions and settings it read do not change under one observer (a
    /// restart restores the same ones). The agent is held, so that its address names no other.
    allowed: Option<(Arc<AgentDef>, Arc<str>)>,
    /// The reply this step's input carries.
    stash: Option<input::Stashed>,
    /// What the current step did, for the semantic checks.
    step: step::StepFacts,
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
                self.step = step::StepFacts::default();
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
            } => self.check_push(key, frame, *depth, *frame_ref)?,
            Event::Pop {
                key,
                frame,
                reason,
                iterations,
                from,
                ..
            } => self.check_pop(key, frame, *reason, *iterations, *from)?,
            Event::ToolResult {
                key,
                frame,
                frame_id,
                session_id,
                tool_use_id,
                content,
                is_error,
            } => self.check_result(
                rt,
                key,
                frame,
                *frame_id,
                *session_id,
                tool_use_id,
                content,
                *is_error,
            )?,
            Event::LlmRequest {
                key,
                frame,
                frame_id,
                session_id,
                call,
                iteration,
                max_iterations,
                ..
            } => self.check_request(
                rt,
                key,
                frame,
                *frame_id,
                *session_id,
                *call,
                *iteration,
                *max_iterations,
            )?,
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
            } => self.check_routing(rt, key, frame, *frame_id, text)?,
            Event::Response { key, .. } | Event::Cancelled { key, .. } => {
                self.check_cleanup(key, event)?
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
            self.step = step::StepFacts::default();
            self.cancel_sent = false;
            return Err(v);
        }
        if self.step.is_empty() && self.pending_keys.is_empty() && !self.cancel_sent {
            return Ok(());
        }
        let cancel_sent = std::mem::take(&mut self.cancel_sent);
        self.semantic_end(rt, cancel_sent)
    }
}
