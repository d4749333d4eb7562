//! Exploration: many seeds of one scenario (or of generated ones) with injected faults, each
//! failure materialized into a plain scenario and shrunk into a regression file.
//!
//! - `run`: one exploration run, and the plain scenario that replays a failing one.
//! - [`generate`]: random scenarios from a seed.
//! - [`outside`]: exploration against a runtime under test (`explore FILE --runtime CMD`).
//! - [`outside_determinism`]: the `determinism` check (`explore --runtime CMD --determinism`):
//!   a seed run twice gives the same exchanges.
//! - [`outside_generated`]: generated scenarios for a runtime under test (`explore --runtime CMD
//!   --generated`), kept to what its capabilities express.
//! - [`shrink`]: greedy minimisation of a failing scenario.
//! - [`planted`]: which invariant catches each planted bug.
//! - [`steer`]: swarm configurations of the generator, weighted by the coverage they reach.

pub mod generate;
pub mod outside;
pub mod outside_determinism;
pub mod outside_generated;
pub mod outside_turns;
pub mod planted;
mod run;
pub mod shrink;
pub mod steer;

pub use run::{randomized_interruptions, run_one, run_watched, RunReport, Settings, Source, Watch};
