//! The agents the runtime runs: a [`frame`] per running agent, the [`stack`] of one conversation,
//! the built-in [`tools`] an agent calls to delegate (a spawn is a value), and seed 004's
//! [`watchdog`]. Data and the transitions that belong to it; the orchestration that moves
//! between frames is the runtime's.

pub mod frame;
pub mod session;
pub mod stack;
pub mod tools;
pub mod tree;
pub mod watchdog;
pub mod workflow;
