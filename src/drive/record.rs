//! Recording what a run delivered: a wrapper around any backend that keeps every model answer
//! (as the scripted reply that reproduces it, ids and latency included) and every tool outcome, in
//! the order each agent and tool received them. A failing run under faults is written back from
//! this record as a plain scenario that replays it with no fault plan.

use std::collections::BTreeMap;

use crate::drive::backend::{BackendError, Delivery, Model, ModelAnswer, ToolStep, Tools};
use crate::drive::scripted::{Attempts, ReplyKind, ScriptBlock, ScriptChunk, ScriptedReply};
use crate::drive::Note;
use crate::model::llm::LlmRequest;
use crate::model::transcript::Block;
use crate::protocol::ToolRun;

/// What a run actually delivered, in order: the replies per agent and the outcomes per tool,
/// faults included. Scripts made of these replay the run without any fault plan.
#[derive(Clone, Debug, Default)]
pub struct Materialized {
    /// Replies by agent.
    pub replies: BTreeMap<String, Vec<ScriptedReply>>,
    /// Outcomes by tool.
    pub tools: BTreeMap<String, Vec<ToolStep>>,
}

/// A backend whose answers are recorded into a [`Materialized`].
pub struct Recording<'r, B> {
    /// The backend.
    pub inner: B,
    /// The record.
    pub record: &'r mut Materialized,
}

impl<B: Model> Model for Recording<'_, B> {
    fn answer(
        &mut self,
        request: &LlmRequest<'_>,
        notes: &mut Vec<Note>,
    ) -> Result<ModelAnswer, BackendError> {
        let answer = self.inner.answer(request, notes)?;
        self.record
            .replies
            .entry(request.agent.name.clone())
            .or_default()
            .push(scripted(&answer));
        Ok(answer)
    }
}

impl<B: Tools> Tools for Recording<'_, B> {
    fn run(&mut self, run: &ToolRun<'_>, notes: &mut Vec<Note>) -> Result<ToolStep, BackendError> {
        let step = self.inner.run(run, notes)?;
        self.record
            .tools
            .entry(run.name.to_string())
            .or_default()
            .push(step.clone());
        Ok(step)
    }
}

/// The scripted reply that delivers `answer` again, with its ids and latency.
pub fn scripted(answer: &ModelAnswer) -> ScriptedReply {
    let block = |b: &Block| match b {
        Block::Text { text } => ScriptBlock::Text(text.clone()),
        Block::ToolUse { id, name, input } => ScriptBlock::ToolUse {
            id: Some(id.clone()),
            name: name.clone(),
            input: input.clone(),
        },
        // A model reply holding a tool_result is rejected by the runtime; keep it as text so the
        // replay still delivers a reply at this point.
        Block::ToolResult { content, .. } => ScriptBlock::Text(content.clone()),
    };
    let kind = match &answer.delivery {
        Delivery::Content(blocks) => ReplyKind::Content(blocks.iter().map(block).collect()),
        Delivery::Stream(chunks) => ReplyKind::Stream(
            chunks
                .iter()
                .map(|(after_ms, b)| ScriptChunk {
                    block: block(b),
                    after_ms: *after_ms,
                })
                .collect(),
        ),
        Delivery::Error { kind, message } => ReplyKind::Error {
            kind: *kind,
            message: message.clone(),
            mid_stream: false,
            times: Attempts::default(),
            retry_after_ms: None,
        },
        Delivery::Stall => ReplyKind::Stall,
    };
    ScriptedReply {
        kind,
        after_ms: answer.after_ms,
        usage: answer.usage,
    }
}
