//! What passes between the runtime and a model: replies, stream chunks, errors and token usage.
//!
//! The runtime never calls a model itself: it emits [`crate::protocol::Effect::CallLlm`] and is fed
//! the reply as an [`crate::protocol::Input`]. The request is borrowed from the frame's session
//! through [`crate::runtime::Runtime::request`], so nothing copies a conversation per call.

use std::fmt;
use std::ops::AddAssign;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::transcript::{Block, Content, Message};

/// Token usage of one or more model calls (seed 002's cost tracking).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// Saturating: a total that would pass `u64::MAX` stays there, in every build (a scenario's
/// scripts are refused at load when their usage could add up that far; see
/// [`Usage::checked_add`]).
impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

impl Usage {
    /// The sum of two usages, or `None` if either count would pass `u64::MAX`.
    pub fn checked_add(self, other: Usage) -> Option<Usage> {
        Some(Usage {
            input_tokens: self.input_tokens.checked_add(other.input_tokens)?,
            output_tokens: self.output_tokens.checked_add(other.output_tokens)?,
        })
    }

    /// Whether nothing was counted.
    pub(crate) fn is_zero(&self) -> bool {
        self.input_tokens == 0 && self.output_tokens == 0
    }
}

/// A complete model reply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LlmReply {
    /// Content blocks; empty for an empty reply.
    pub content: Content,
    /// Token usage, if the model reported it.
    pub usage: Usage,
}

/// One piece of a streamed reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Chunk {
    /// A text delta, appended to the reply's current text block.
    Text(Arc<str>),
    /// A whole `tool_use` block.
    ToolUse(Block),
}

/// Why a model call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmErrorKind {
    /// HTTP 429.
    RateLimit,
    /// HTTP 529 / 503.
    Overloaded,
    /// Connection reset, DNS failure, timeout.
    Network,
    /// Anything else.
    Other,
}

impl LlmErrorKind {
    /// The message a provider typically gives for this kind.
    pub(crate) fn default_message(self) -> &'static str {
        match self {
            LlmErrorKind::RateLimit => "rate limit exceeded (429)",
            LlmErrorKind::Overloaded => "overloaded (529)",
            LlmErrorKind::Network => "network error: connection reset",
            LlmErrorKind::Other => "unknown error",
        }
    }
}

/// A failed model call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmError {
    /// The category.
    pub kind: LlmErrorKind,
    /// The provider's message.
    pub message: String,
}

impl fmt::Display for LlmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A borrowed view of one model request: what a real client would send.
#[derive(Clone, Copy, Debug)]
pub struct LlmRequest<'a> {
    /// Session key of the conversation.
    pub key: &'a Arc<str>,
    /// The calling agent.
    pub agent: &'a Arc<crate::model::agent::AgentDef>,
    /// The frame's cached system prompt.
    pub system: &'a str,
    /// The conversation, borrowed from the frame's session.
    pub messages: &'a [Message],
    /// Model name, if the agent sets one.
    pub model: Option<&'a str>,
}
