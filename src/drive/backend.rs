//! The model and the tools, as a driver sees them: two small traits, [`Model`] and [`Tools`], that
//! answer one call at a time. The scripted backend of a scenario is one implementation
//! ([`crate::drive::scripted`]); fault injection ([`crate::drive::faults::WithFaults`]) and
//! recording ([`crate::drive::record::Recording`]) are wrappers around any implementation.
//!
//! An answer says what to deliver and after how long; the driver delivers it on its own clock
//! (virtual in the simulator, real under tokio). A backend may leave [`Note`]s for the transcript
//! (an injected fault, a stall).

use std::any::Any;
use std::sync::Arc;

use crate::model::llm::{LlmErrorKind, LlmRequest, Usage};
use crate::model::transcript::{Block, Content};
use crate::protocol::ToolRun;

use super::Note;

/// What the driver must deliver for one answered model call, owned so that the script is never
/// copied: content and stream blocks carry their ids, errors their shared message.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// A whole reply.
    Content(Content),
    /// A reply in pieces: each block with its delay after the previous one.
    Stream(Vec<(u64, Block)>),
    /// A failed call.
    Error {
        /// Category.
        kind: LlmErrorKind,
        /// Message.
        message: Arc<str>,
    },
    /// No answer, ever.
    Stall,
}

/// A model call answered.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelAnswer {
    /// What to deliver.
    pub delivery: Delivery,
    /// Latency before the reply (or its first chunk), in ms.
    pub after_ms: u64,
    /// Token usage reported with the reply.
    pub usage: Usage,
}

/// What one tool call does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolBehavior {
    /// Returns this content (an error result if `is_error`).
    Result {
        /// Content.
        content: Arc<str>,
        /// Whether the tool reports an error result.
        is_error: bool,
    },
    /// Fails with this message (the runtime writes `Tool execution failed: <message>`).
    Fail(Arc<str>),
    /// Never finishes (only a timeout or a cancel ends the wait).
    Hang,
}

/// One scripted tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolStep {
    /// The behaviour.
    pub behavior: ToolBehavior,
    /// Latency in ms.
    pub after_ms: u64,
}

/// A call a backend cannot answer: the scenario's script and its steps disagree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// An agent's script ran out.
    #[error("the script of agent '{agent}' has no entry for call {call}")]
    ScriptExhausted {
        /// The agent.
        agent: String,
        /// 1-based call number.
        call: usize,
    },
    /// A tool's per-call script ran out.
    #[error("the script of tool '{tool}' has no entry for call {call}")]
    ToolScriptExhausted {
        /// The tool.
        tool: String,
        /// 1-based call number.
        call: usize,
    },
}

/// Answers model calls.
pub trait Model {
    /// The answer to `request`. `notes` collects what the transcript should show about it.
    fn answer(
        &mut self,
        request: &LlmRequest<'_>,
        notes: &mut Vec<Note>,
    ) -> Result<ModelAnswer, BackendError>;
}

/// Runs tools.
pub trait Tools {
    /// The outcome of `run`. `notes` collects what the transcript should show about it.
    fn run(&mut self, run: &ToolRun<'_>, notes: &mut Vec<Note>) -> Result<ToolStep, BackendError>;
}

impl<M: Model + ?Sized> Model for &mut M {
    fn answer(
        &mut self,
        request: &LlmRequest<'_>,
        notes: &mut Vec<Note>,
    ) -> Result<ModelAnswer, BackendError> {
        (**self).answer(request, notes)
    }
}

impl<T: Tools + ?Sized> Tools for &mut T {
    fn run(&mut self, run: &ToolRun<'_>, notes: &mut Vec<Note>) -> Result<ToolStep, BackendError> {
        (**self).run(run, notes)
    }
}

impl Delivery {
    /// A whole reply of these blocks.
    pub fn content(blocks: impl IntoIterator<Item = Block>) -> Delivery {
        Delivery::Content(blocks.into_iter().collect())
    }
}

impl ModelAnswer {
    /// A text reply, at once.
    pub fn text(text: impl Into<Arc<str>>) -> ModelAnswer {
        ModelAnswer {
            delivery: Delivery::Content(Content::from_iter([Block::Text { text: text.into() }])),
            after_ms: 0,
            usage: Usage::default(),
        }
    }

    /// A failed call.
    pub fn error(kind: LlmErrorKind, message: impl Into<Arc<str>>) -> ModelAnswer {
        ModelAnswer {
            delivery: Delivery::Error {
                kind,
                message: message.into(),
            },
            after_ms: 0,
            usage: Usage::default(),
        }
    }
}

/// A [`Model`] a driver can own, copy and look into (the simulator is `Clone`, and a scenario run
/// asks its scripted model which replies went unused).
pub(crate) trait OwnedModel: Model + Send {
    /// A copy, boxed.
    fn clone_box(&self) -> Box<dyn OwnedModel>;
    /// For downcasting to the concrete backend.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Model + Clone + Send + 'static> OwnedModel for T {
    fn clone_box(&self) -> Box<dyn OwnedModel> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Clone for Box<dyn OwnedModel> {
    fn clone(&self) -> Self {
        (**self).clone_box()
    }
}

impl std::fmt::Debug for dyn OwnedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Model")
    }
}

/// [`Tools`] a driver can own, copy and look into.
pub(crate) trait OwnedTools: Tools + Send {
    /// A copy, boxed.
    fn clone_box(&self) -> Box<dyn OwnedTools>;
    /// For downcasting to the concrete backend.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Tools + Clone + Send + 'static> OwnedTools for T {
    fn clone_box(&self) -> Box<dyn OwnedTools> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Clone for Box<dyn OwnedTools> {
    fn clone(&self) -> Self {
        (**self).clone_box()
    }
}

impl std::fmt::Debug for dyn OwnedTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Tools")
    }
}

impl BackendError {
    /// The error as the reason a run stopped; `stack` describes the stacks at that point.
    pub(crate) fn into_run_error(self, stack: impl FnOnce() -> String) -> super::core::RunError {
        match self {
            BackendError::ScriptExhausted { agent, call } => {
                super::core::RunError::ScriptExhausted {
                    agent,
                    call,
                    stack: stack(),
                }
            }
            BackendError::ToolScriptExhausted { tool, call } => {
                super::core::RunError::ToolScriptExhausted { tool, call }
            }
        }
    }
}
