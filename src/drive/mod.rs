//! Driving the runtime: what every driver shares.
//!
//! - [`core`]: the effect-applying core: limits, stale calls, persistence, and the [`Work`] left
//!   for the driver.
//! - [`backend`]: the [`Model`](backend::Model) and [`Tools`](backend::Tools) traits a driver
//!   answers calls with.
//! - [`scripted`]: the scripted backend of a scenario.
//! - [`faults`]: seeded fault injection, as a wrapper around any backend.
//! - [`record`]: what a run delivered, as a wrapper around any backend.

pub mod backend;
pub mod core;
pub mod faults;
#[cfg(feature = "http-model")]
pub mod http;
pub mod record;
pub mod scripted;
#[cfg(feature = "http-model")]
pub mod tokio_driver;

use std::sync::Arc;

use serde::Serialize;

pub use self::core::{Core, Limits, Memory, Persistence, RunError, Work};

/// A note of the driver itself in the transcript (the runtime's own entries are [`crate::protocol::Event`]s).
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
    /// An answer to an async session's question that the store did not take (seed 003).
    AsyncAnswer {
        /// The question.
        question: uuid::Uuid,
        /// `duplicate_ignored` or `not_found`.
        outcome: &'static str,
    },
    /// An async question's callback was sent (seed 003's B20): where, and what each attempt
    /// got, as `agent → url: refused, 500, delivered`.
    Callback {
        /// The summary.
        summary: String,
    },
}
