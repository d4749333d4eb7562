//! # agentsim
//!
//! A deterministic simulation and test harness for interactive LLM agent runtimes: a reference
//! runtime for nested, interactive subagents (a stack of frames, `complete(result)`, cascading
//! errors and limits), a simulator that drives it against scripted models and tools in virtual
//! time from one seed, named invariants checked after every step, and YAML scenario files.
//!
//! Scenario files are the usual way in (`agentsim run FILE`, one test per file under
//! `scenarios/`), but a Rust test can run a scenario and assert on it in a few lines (see
//! [`harness`] for one built in code):
//!
//! ```
//! let run = agentsim::run_yaml(r#"
//! name: a skill asks, then completes
//! agents:
//!   research: { kind: skill, tools: [web_search] }
//! llm:
//!   main: [{ use_skill: { skill: research, message: find APIs } }, "Found 3 APIs."]
//!   research:
//!     - Which Python version?
//!     - tool_use: { name: web_search, input: { q: "3.13" } }
//!     - complete: 3 APIs
//! tools:
//!   web_search: 3 results
//! steps:
//!   - user: research Python async APIs
//!   - expect: { stack: [main, skill:research] }
//!   - user: "3.13"
//! "#).unwrap();
//! run.assert_passed();
//! assert_eq!(run.sent(), ["Which Python version?", "Found 3 APIs."]);
//! assert!(run.stack("default").is_empty());
//! assert!(run.violation().is_none(), "every invariant held after every step");
//! ```
//!
//! Modules, in reading order:
//!
//! - [`harness`]: the facade for a user's own tests: run a scenario, assert on what happened.
//! - [`model`]: the vocabulary: messages and sessions, model replies, agent definitions, ids, the
//!   exact strings the runtime writes.
//! - [`agents`]: frames, the stack of a conversation, the built-in delegation tools, seed 004's
//!   watchdog.
//! - [`protocol`]: the contract between the runtime and its drivers: inputs, effects, events.
//! - [`runtime`]: the sans-IO reference runtime: routing, the orchestration loop, the turn, tool
//!   dispatch, interruptions, persistence and restore, planted bugs.
//! - [`persist`]: the journal and state formats (pure), and replaying the journal into sessions.
//! - [`observe`]: the observer that checks the named invariants after every step.
//! - [`wire`]: provider request formats and the public `tool-pairing` validator; provider replies,
//!   streams and error envelopes.
//! - [`outside`]: agentsim's side of the runtime protocol for a user's runtime run as a child
//!   process: the JSON-lines codec and the order of an exchange (pure).
//! - `outside_run` (feature `mock-server`): a scenario run against a user's runtime through the
//!   runtime protocol (`agentsim run --runtime CMD`): the process, the steps, the checks.
//! - [`mock_llm`]: `agentsim mock-llm`, a scenario's scripts served over the providers' wire
//!   formats (the HTTP server behind the `mock-server` feature).
//! - [`import`]: `agentsim import`: a log (mock-llm's journal, provider request bodies) turned
//!   into a scenario that mock-llm serves back, checked against the log before it is written.
//! - `record` (features `mock-server` and `http-model`): `agentsim record`, a proxy to a real
//!   provider that keeps mock-llm's journal, imported into a scenario at shutdown.
//! - [`drive`]: the effect-applying core shared by drivers: model and tool backends, faults,
//!   recording, limits.
//! - [`sim`]: the deterministic driver: virtual clock, seeded RNG, scripted model and tools.
//! - [`store`]: where persisted bytes go on disk.
//! - [`scenario`]: scenario files: format, loading with located errors, the step interpreter,
//!   expectations.
//! - [`explore`]: many seeds with faults, generated scenarios, shrinking, planted bugs.
//! - [`report`]: the transcript's text and JSON renderings.
//! - `serve` (features `mock-server` and `http-model`): `agentsim serve`, the reference runtime
//!   as an HTTP service.
//! - [`workloads`]: the benchmark workloads shared by `cargo bench` and `agentsim bench`.
#![deny(missing_docs)]

pub mod agents;
pub mod drive;
pub mod explore;
pub mod harness;
#[cfg(feature = "mock-server")]
pub mod http_guard;
pub mod import;
pub mod mock_llm;
pub mod model;
pub mod observe;
pub mod outside;
#[cfg(feature = "mock-server")]
pub mod outside_run;
pub mod persist;
pub mod protocol;
#[cfg(all(feature = "mock-server", feature = "http-model"))]
pub mod record;
pub mod report;
pub mod runtime;
pub mod scenario;
#[cfg(all(feature = "mock-server", feature = "http-model"))]
pub mod serve;
pub mod sim;
pub mod store;
pub mod wire;
pub mod workloads;

pub use harness::{run_file, run_yaml, Reply, Run, ScenarioBuilder};
