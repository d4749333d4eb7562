//! The effect-applying core that every driver shares: it takes the runtime's [`Effect`]s one at a
//! time and handles what does not depend on how a driver talks to the world, once: the limits
//! (model calls), stale calls (a call nobody waits for any more is dropped), and persistence (the
//! journal and the state go to a [`Persistence`], in the order they were emitted). What remains is
//! [`Work`] for the driver: a model call or a tool run to start, with the request borrowed from the
//! runtime; a timer to set or cancel; output for the user.
//!
//! The simulator answers that work from its scripted backend on a virtual clock; the tokio driver
//! answers it with real backends and real time. Neither duplicates what is here.

use crate::model::ids::CallId;
use crate::model::llm::LlmRequest;
use crate::observe::Violation;
use crate::protocol::{Effect, ToolRun};
use crate::runtime::Runtime;

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
    /// What the runtime persisted could not be written.
    #[error("persisting failed: {0}")]
    Persist(String),
    /// The store of async sessions refused what the runtime told it (seed 003's lifecycle).
    #[error("the session store refused: {0}")]
    Store(String),
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
    /// A short name of what stopped the run (`step-limit`, `script-exhausted`, `violation`, ...),
    /// for machine-readable reports.
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::StepLimit { .. } => "step-limit",
            RunError::DepthLimit { .. } => "depth-limit",
            RunError::LlmCallLimit { .. } => "model-call-limit",
            RunError::ScriptExhausted { .. } => "script-exhausted",
            RunError::ToolScriptExhausted { .. } => "tool-script-exhausted",
            RunError::Stuck { .. } => "stuck",
            RunError::Restore(_) => "restore",
            RunError::Persist(_) => "persist",
            RunError::Store(_) => "store",
            RunError::Violation { .. } => "violation",
        }
    }

    /// The broken invariant, if that is what stopped the run.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            RunError::Violation { violation, .. } => Some(violation),
            _ => None,
        }
    }
}

/// Where persistence effects go. A driver makes each journal append durable before it writes a
/// later state, and writes the state atomically (see [`crate::protocol`]).
pub trait Persistence {
    /// Appends journal lines (newline-terminated).
    fn append_context(&mut self, lines: &str) -> std::io::Result<()>;
    /// Replaces the state.
    fn write_state(&mut self, json: &str) -> std::io::Result<()>;
}

/// Persistence in memory: the bytes a file store would hold (the simulator's, so that restarts
/// are fast and exact).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// The last state written, if any.
    pub state: Option<String>,
    /// The journal.
    pub context: String,
}

impl Persistence for Memory {
    fn append_context(&mut self, lines: &str) -> std::io::Result<()> {
        self.context.push_str(lines);
        Ok(())
    }

    fn write_state(&mut self, json: &str) -> std::io::Result<()> {
        self.state = Some(json.to_owned());
        Ok(())
    }
}

impl Persistence for crate::store::FileStore {
    fn append_context(&mut self, lines: &str) -> std::io::Result<()> {
        crate::store::FileStore::append_context(self, lines)
    }

    fn write_state(&mut self, json: &str) -> std::io::Result<()> {
        crate::store::FileStore::write_state(self, json)
    }
}

/// Persistence in memory or in files, chosen when a driver starts.
#[derive(Clone, Debug)]
pub enum Persist {
    /// In memory (gone with the process).
    Memory(Memory),
    /// `state.json` and `context.jsonl` in a directory.
    Files(crate::store::FileStore),
}

impl Persistence for Persist {
    fn append_context(&mut self, lines: &str) -> std::io::Result<()> {
        match self {
            Persist::Memory(m) => m.append_context(lines),
            Persist::Files(f) => Persistence::append_context(f, lines),
        }
    }

    fn write_state(&mut self, json: &str) -> std::io::Result<()> {
        match self {
            Persist::Memory(m) => m.write_state(json),
            Persist::Files(f) => Persistence::write_state(f, json),
        }
    }
}

/// What an effect leaves for the driver to do.
#[derive(Debug)]
pub enum Work<'r> {
    /// Call the model with this request (borrowed from the runtime until its next input).
    CallModel {
        /// The call to answer.
        call: CallId,
        /// What to send.
        request: LlmRequest<'r>,
    },
    /// Run this tool.
    RunTool {
        /// The run to answer.
        call: CallId,
        /// What to run.
        run: ToolRun<'r>,
    },
    /// Feed [`crate::protocol::Input::Timer`] after `after_ms`.
    SetTimer {
        /// The timer.
        timer: CallId,
        /// Delay in ms.
        after_ms: u64,
    },
    /// Withdraw a timer.
    CancelTimer {
        /// The timer.
        timer: CallId,
    },
    /// Text or a stream event for the user (the runtime's events already record it).
    Output,
    /// Record this in the store of async sessions.
    Session(Box<crate::protocol::SessionOp>),
    /// Nothing left to do: the effect was handled here (persistence), or it named a stale call.
    Done,
}

/// The shared core of a driver: limits, stale calls and persistence.
#[derive(Clone, Debug)]
pub struct Core<P> {
    limits: Limits,
    llm_calls: u64,
    persistence: P,
}

impl<P: Persistence> Core<P> {
    /// A core with these limits, persisting to `persistence`.
    pub fn new(limits: Limits, persistence: P) -> Core<P> {
        Core {
            limits,
            llm_calls: 0,
            persistence,
        }
    }

    /// The limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Model calls started so far.
    pub fn llm_calls(&self) -> u64 {
        self.llm_calls
    }

    /// Where persistence goes.
    pub fn persistence(&self) -> &P {
        &self.persistence
    }

    /// Takes one effect of `rt`. `at` describes where the run is (step and stacks), for an error.
    #[inline]
    pub fn take<'r>(
        &mut self,
        rt: &'r Runtime,
        effect: Effect,
        at: impl FnOnce() -> (u64, String),
    ) -> Result<Work<'r>, RunError> {
        Ok(match effect {
            Effect::CallLlm { call } => {
                self.llm_calls += 1;
                if self.llm_calls > self.limits.max_llm_calls {
                    let (step, stack) = at();
                    return Err(RunError::LlmCallLimit {
                        limit: self.limits.max_llm_calls,
                        step,
                        stack,
                    });
                }
                match rt.request(call) {
                    Some(request) => Work::CallModel { call, request },
                    None => Work::Done, // Nobody waits for this call any more.
                }
            }
            Effect::RunTool { call } => match rt.tool_run(call) {
                Some(run) => Work::RunTool { call, run },
                None => Work::Done, // Nobody waits for this run any more.
            },
            Effect::SetTimer { timer, after_ms } => Work::SetTimer { timer, after_ms },
            Effect::CancelTimer { timer } => Work::CancelTimer { timer },
            Effect::AppendContext { line } => {
                self.persistence
                    .append_context(&line)
                    .map_err(|e| RunError::Persist(e.to_string()))?;
                Work::Done
            }
            Effect::WriteState { json } => {
                self.persistence
                    .write_state(&json)
                    .map_err(|e| RunError::Persist(e.to_string()))?;
                Work::Done
            }
            Effect::Send { .. } | Effect::Stream { .. } => Work::Output,
            Effect::Session(op) => Work::Session(op),
        })
    }
}
