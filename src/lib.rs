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
//! # The public API
//!
//! What a user's test needs, documented here and kept stable within a minor version:
//!
//! - [`harness`]: the facade: [`run_yaml`], [`run_file`], [`ScenarioBuilder`] and [`Reply`],
//!   [`Run`] with its assertions, and [`harness::run_file_against`] for a runtime of your own.
//! - [`scenario`]: scenario files: [`scenario::parse`], [`scenario::run()`] with
//!   [`scenario::RunOptions`], the [`scenario::Outcome`] and [`scenario::Failure`] of a run.
//! - [`model`]: the vocabulary a scenario and its run speak: messages and sessions, model
//!   replies and errors ([`model::llm::LlmErrorKind`]), agent definitions, ids.
//! - [`protocol`]: what a run records: the runtime's inputs, effects and events.
//! - [`sim`]: the deterministic driver a run went through ([`Run::sim`], [`sim::Record`]).
//! - [`outside_run`] (feature `mock-server`): a scenario run against your runtime through the
//!   runtime protocol, with its [`outside_run::Options`].
//! - [`wire`]: provider request formats: [`wire::validate`] a request body by the rules of
//!   `tool-pairing`, [`wire::encode::request`] builds one.
//! - [`drive`]: the model and tool backends: `drive::http::HttpModel` (feature `http-model`)
//!   calls a provider or `agentsim mock-llm` over HTTP, `drive::tokio_driver` runs the reference
//!   runtime under tokio in real time.
//!
//! The other modules are the `agentsim` command's internals (`#[doc(hidden)]`: the binary, its
//! integration tests and benches reach them; no stability promise), or private to the crate.
//! ARCHITECTURE.md maps them all:
//!
//! - `agents`: frames, the stack of a conversation, the built-in delegation tools, the watchdog.
//! - `runtime`: the sans-IO reference runtime: routing, the orchestration loop, the turn, tool
//!   dispatch, interruptions, persistence and restore, planted bugs.
//! - `persist`: the journal and state formats (pure), and replaying the journal into sessions.
//! - `observe`: the observer that checks the named invariants after every step.
//! - `outside`: agentsim's side of the runtime protocol: the JSON-lines codec and the
//!   order of an exchange (pure).
//! - `mock_llm`: `agentsim mock-llm`, a scenario's scripts served over the providers' wire
//!   formats (the HTTP server behind the `mock-server` feature).
//! - `import`: `agentsim import`: a log turned into a scenario that mock-llm serves back.
//! - `record` (features `mock-server` and `http-model`): `agentsim record`, a proxy to a real
//!   provider that keeps mock-llm's journal.
//! - `store`: where persisted bytes go on disk.
//! - `explore`: many seeds with faults, generated scenarios, shrinking, planted bugs.
//! - `report`: the transcript's text and JSON renderings.
//! - `serve` (features `mock-server` and `http-model`): `agentsim serve`, the reference runtime
//!   as an HTTP service.
//! - `http_guard` (private): what every loopback HTTP server of agentsim checks first.
//! - `workloads`: the benchmark workloads shared by `cargo bench` and `agentsim bench`.
#![deny(missing_docs)]

// The public API (see the crate's documentation above).
pub mod drive;
pub mod harness;
pub mod model;
#[cfg(feature = "mock-server")]
pub mod outside_run;
pub mod protocol;
pub mod scenario;
pub mod sim;
pub mod wire;

// The `agentsim` command's internals, reached by the binary (src/main.rs, src/cli/), the
// integration tests and the benches: not part of the public API.
#[doc(hidden)]
pub mod agents;
#[doc(hidden)]
pub mod explore;
#[doc(hidden)]
pub mod import;
#[doc(hidden)]
pub mod mock_llm;
#[doc(hidden)]
pub mod observe;
#[doc(hidden)]
pub mod outside;
#[doc(hidden)]
pub mod persist;
#[cfg(all(feature = "mock-server", feature = "http-model"))]
#[doc(hidden)]
pub mod record;
#[doc(hidden)]
pub mod report;
#[doc(hidden)]
pub mod runtime;
#[cfg(all(feature = "mock-server", feature = "http-model"))]
#[doc(hidden)]
pub mod serve;
#[doc(hidden)]
pub mod store;
#[doc(hidden)]
pub mod workloads;

// Private to the crate.
#[cfg(feature = "mock-server")]
pub(crate) mod http_guard;

pub use harness::{run_file, run_yaml, Reply, Run, ScenarioBuilder};
