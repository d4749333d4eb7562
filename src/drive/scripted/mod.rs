//! The scripted backend of a scenario: one script of replies per agent ([`MockLlm`]) and one
//! script of outcomes per tool ([`MockTools`]), consumed in order. A script that runs out is an
//! error naming what was asked for, never a silent default.

mod model;
mod tools;

pub use model::{
    Answer, Attempts, Exhausted, MockLlm, MoreReplies, ReplyKind, ScriptBlock, ScriptChunk,
    ScriptedReply,
};
pub use tools::{MockTools, ToolExhausted, ToolScript};

pub use crate::drive::backend::{ToolBehavior, ToolStep};
