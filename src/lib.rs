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
//! use agentsim::agent::{AgentDef, AgentKind, Catalog};
//! use agentsim::llm::Usage;
//! use agentsim::sim::mock_llm::{MockLlm, ReplyKind, ScriptBlock, ScriptedReply};
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
//! let stack = &sim.runtime().stacks().get("default").unwrap().stack;
//! assert_eq!(stack.describe(), "[main, skill:research]");
//! ```
//!
//! Modules, in reading order:
//!
//! - [`transcript`]: messages, content blocks and the [`transcript::Session`].
//! - [`llm`]: model replies, stream chunks, errors, token usage.
//! - [`agent`]: agent definitions, the catalog, seed 002's config and response types.
//! - [`tools`]: tool outcomes (a spawn is a value), the `Tool` trait, `use_skill` / `use_agent`.
//! - [`messages`]: the exact strings the runtime writes and sends.
//! - [`stack`]: frames, the stack, the per-key stack manager, `TurnAction` / `TurnResult`.
//! - [`turn`]: `execute_turn`, the agent core loop as a resumable state machine.
//! - [`watchdog`]: seed 004's activity watchdog and interruption model, with `legacy` and `fixed` presets.
//! - [`runtime`]: the sans-IO runtime: inputs, effects, events, the orchestration loop.
//! - [`planted`]: realistic stack bugs the runtime can be configured to have (for the explorer's tests).
//! - [`persist`]: `state.json` and `context.jsonl`: the journal, the frame metadata, restore, the file store.
//! - [`ids`]: seeded id source.
//! - [`hash`]: the fast fixed hasher for lookup-only sets.
//! - [`sim`]: the deterministic driver: virtual clock, seeded RNG, mock model and tools.
//! - [`invariants`]: the observer that checks the named invariants after every step.
//! - [`scenario`]: scenario files: format, loading with located errors, running, expectations.
//! - [`explore`]: many seeds with faults; a failing run materialized into a plain scenario.
//! - [`generate`]: random scenarios from a seed, for property tests and exploration.
//! - [`shrink`]: minimise a failing scenario while it still breaks the same invariant.
//! - [`render`]: the transcript's text and JSON renderings.
//! - [`workloads`]: the benchmark workloads shared by `cargo bench` and `agentsim bench`.
#![deny(missing_docs)]

pub mod agent;
pub mod explore;
pub mod generate;
pub mod hash;
pub mod ids;
pub mod invariants;
pub mod llm;
pub mod messages;
pub mod persist;
pub mod planted;
pub mod render;
pub mod runtime;
pub mod scenario;
pub mod shrink;
pub mod sim;
pub mod stack;
pub mod tools;
pub mod transcript;
pub mod turn;
pub mod watchdog;
pub mod workloads;
