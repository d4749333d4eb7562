//! # agentsim
//!
//! A deterministic simulation and test harness for interactive LLM agent runtimes: a reference
//! runtime for nested, interactive subagents (a stack of frames, `complete(result)`, cascading
//! errors and limits), a simulator that drives it against scripted models and tools in virtual
//! time from one seed, named invariants checked after every step, and YAML scenario files.
//!
//! Scenario files are the usual way in (`agentsim run FILE`, one test per file under
//! `scenarios/`), but the simulator is a library too:
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use agentsim::model::agent::{AgentDef, AgentKind, Catalog};
//! use agentsim::model::llm::Usage;
//! use agentsim::drive::scripted::{MockLlm, ReplyKind, ScriptBlock, ScriptedReply};
//! use agentsim::sim::Sim;
//!
//! let reply = |blocks| ScriptedReply { kind: ReplyKind::Content(blocks), after_ms: 0, usage: Usage::default() };
//! let mut catalog = Catalog::default();
//! catalog.add(AgentDef::new("research", AgentKind::Skill));
//! let scripts = BTreeMap::from([
//!     ("main".to_string(), vec![
//!         reply(vec![ScriptBlock::ToolUse {
//!             id: None,
//!             name: "use_skill".into(),
//!             input: Arc::new(serde_json::json!({"skill": "research", "message": "find APIs"})),
//!         }]),
//!         reply(vec![ScriptBlock::Text("Found them.".into())]),
//!     ]),
//!     ("research".to_string(), vec![reply(vec![ScriptBlock::Text("Which version?".into())])]),
//! ]);
//! let mut sim = Sim::builder(catalog).llm(MockLlm::new(scripts)).seed(7).build();
//! sim.user("default", "research async APIs").unwrap();
//! sim.run_until_idle().unwrap();
//! // The skill took over the conversation: the stack is [main, skill:research].
//! let stack = sim.runtime().stack("default").unwrap();
//! assert_eq!(stack.describe(), "[main, skill:research]");
//! ```
//!
//! Modules, in reading order:
//!
//! - [`model`]: the vocabulary: messages and sessions, model replies, agent definitions, ids, the
//!   exact strings the runtime writes.
//! - [`agents`]: frames, the stack of a conversation, the built-in delegation tools, seed 004's
//!   watchdog.
//! - [`protocol`]: the contract between the runtime and its drivers: inputs, effects, events.
//! - [`runtime`]: the sans-IO reference runtime: routing, the orchestration loop, the turn, tool
//!   dispatch, interruptions, persistence and restore, planted bugs.
//! - [`persist`]: the journal and state formats (pure), and replaying the journal into sessions.
//! - [`observe`]: the observer that checks the named invariants after every step.
//! - [`wire`]: provider request formats and the public `tool-pairing` validator.
//! - [`drive`]: the effect-applying core shared by drivers: model and tool backends, faults,
//!   recording, limits.
//! - [`sim`]: the deterministic driver: virtual clock, seeded RNG, scripted model and tools.
//! - [`store`]: where persisted bytes go on disk.
//! - [`scenario`]: scenario files: format, loading with located errors, the step interpreter,
//!   expectations.
//! - [`explore`]: many seeds with faults, generated scenarios, shrinking, planted bugs.
//! - [`report`]: the transcript's text and JSON renderings.
//! - [`workloads`]: the benchmark workloads shared by `cargo bench` and `agentsim bench`.
#![deny(missing_docs)]

pub mod agents;
pub mod drive;
pub mod explore;
pub mod model;
pub mod observe;
pub mod persist;
pub mod protocol;
pub mod report;
pub mod runtime;
pub mod scenario;
pub mod sim;
pub mod store;
pub mod workloads;
