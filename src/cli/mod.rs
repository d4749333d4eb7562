//! The `agentsim` command line: the commands and their flags (`Cli`, `Command`), and one module
//! per command with what it does; `shared` holds what several commands use.

pub(crate) mod bench;
#[cfg(feature = "mock-server")]
mod bench_cpu;
#[cfg(feature = "mock-server")]
pub(crate) mod bench_runtime;
pub(crate) mod check;
pub(crate) mod check_runtime;
mod cpu;
pub(crate) mod explore;
mod explore_determinism;
mod explore_reset;
mod explore_runtime;
mod explore_turns;
pub(crate) mod import;
#[cfg(feature = "mock-server")]
pub(crate) mod mock_llm;
#[cfg(all(feature = "mock-server", feature = "http-model"))]
pub(crate) mod record;
pub(crate) mod run;
#[cfg(feature = "mock-server")]
pub(crate) mod runtime_args;
mod runtime_config;
#[cfg(all(feature = "mock-server", feature = "http-model"))]
pub(crate) mod serve;
mod shared;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use agentsim::scenario;

/// Deterministic simulation and test harness for interactive LLM agent runtimes.
///
/// Scenario files (YAML or JSON) describe agents, scripted model replies, scripted tools and the
/// user's steps with expectations. Every run is a pure function of the scenario and the seed.
#[derive(Parser)]
#[command(name = "agentsim", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Log runtime internals (push/pop with depth, model calls, tool calls) to stderr.
    #[arg(short, long, global = true)]
    pub(crate) verbose: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Format {
    /// Readable text, one line per event.
    Text,
    /// The records as JSON.
    Json,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run one scenario and print its transcript; exit 1 if it fails, showing expected and actual.
    Run(run::RunArgs),
    /// Run every scenario under the given files or directories: one line each, then a total;
    /// exit 1 if any fails.
    Check(check::CheckArgs),
    /// Print the JSON Schema of scenario files.
    Schema,
    /// Serve the reference runtime over HTTP, driven by tokio in real time: send user messages
    /// to conversations, trigger webhook sessions and answer their questions, watch the agent
    /// tree and its stream of events, intervene on agents.
    ///
    /// Endpoints: POST /conversations/{key}/messages {"text"} (202, queued); GET
    /// /conversations/{key} (what it was sent, whether it is idle); POST /webhook/{agent} (a
    /// session; its id); GET /agent/questions?status=pending; POST /agent/answer/{session_id}
    /// {"question_id", "answer"} (resumed, duplicate_ignored, 404); GET /agent/session/{id};
    /// GET /agent/tree; GET /agent/{id}; POST /agent/{id}/intervene {"user_comment",
    /// "user_content", "status"} (200 accepted, 404 not found, 409 refused); GET /agent/stream
    /// (server-sent events). Errors are JSON. Prints `listening on http://ADDR` first; runs until
    /// Ctrl-C or SIGTERM.
    #[cfg(all(feature = "mock-server", feature = "http-model"))]
    Serve(serve::ServeArgs),
    /// Find bugs nobody scripted: run a scenario (faults and timings varied per seed) or freshly
    /// generated scenarios under many seeds, checking every invariant after every step.
    ///
    /// The first failure of each invariant is materialized into a plain scenario, shrunk while it
    /// still breaks the same invariant, and written to --out (default scenarios/regressions/), where
    /// the test suite runs it for good. Exit 1 if any invariant broke.
    Explore(explore::ExploreArgs),
    /// Measure turn throughput of the benchmark workloads (`bench` or `bench turns`), or the
    /// mock server's requests per second and latency (`bench mock-llm`).
    ///
    /// turns: w1 flat (8 tool calls then text), w2 nested (use_skill, 3 calls, complete), w3 deep
    /// (100 nested use_agent frames), w4 long (100 turns on a 10,000-message session), w5 wide (10
    /// parallel tools in one reply), w6 fan-out (10 forks of 3 calls each, main waits for all).
    /// Each workload runs with the invariant observer on and off.
    ///
    /// mock-llm: starts `agentsim mock-llm` on loopback (validation on, as always) and sends it
    /// --connections keep-alive connections of requests, each a new conversation, for --seconds
    /// per API and streaming mode; with --against NAME=URL, the same load goes to another mock
    /// server set up to give the same reply ("It is 18 C and cloudy in Paris." to a request whose
    /// user message mentions the weather), and the table shows the ratio. The server keeps every
    /// conversation (about 650 bytes each, one per request): mind --seconds.
    ///
    /// serve: starts `agentsim serve` on loopback with an SQLite store in a temporary directory
    /// (its model `agentsim mock-llm`, on loopback too) and runs --connections clients for --seconds, each in a loop: trigger a session, wait for
    /// its question (polling), answer it, wait for the session to complete; prints sessions
    /// triggered, questions answered and sessions completed per second, and the p50/p99 latency
    /// of the webhook, of the answer and of a whole session.
    Bench(bench::BenchArgs),
    /// Serve a scenario's model scripts over HTTP, as the Anthropic Messages, OpenAI Chat
    /// Completions and OpenAI Responses APIs (streaming or not), so that an agent runtime in any
    /// language can be tested by pointing its base URL here.
    ///
    /// Each request is checked with its provider's tool-pairing rules (a broken one gets the
    /// provider's own 400) and routed to an agent's script by the agent's `match:` rule (default:
    /// the model name or the system prompt), a conversation (its first user message) and a turn
    /// (the assistant turns it replays). Prints `listening on http://ADDR` first. Runs until
    /// Ctrl-C, SIGTERM or `POST /_agentsim/shutdown`, then prints the report: broken rules,
    /// requests with no scripted reply, replies never served; exit 1 if there is any (or, with
    /// the scenario's `expect_violation`, if that rule did not break).
    #[cfg(feature = "mock-server")]
    MockLlm(mock_llm::MockLlmArgs),
    /// Turn a log into a scenario file that `agentsim mock-llm` serves back: mock-llm's journal
    /// (`--journal`), or a provider request body (Anthropic Messages, OpenAI Chat, OpenAI
    /// Responses) or a JSON list of them, whose assistant turns become the script.
    ///
    /// One agent per routed conversation, with the smallest `match:` rule that routes its
    /// requests; conversations that continue each other linked (`history: continuation`); tools
    /// declared with the results the log carried; comments saying where each entry came from. The
    /// file is checked before it is written: served back to the log's requests, it gives the same
    /// replies. What is not in the scripts (misses, refused requests, unknown records) is listed on
    /// stderr and as comments in the file. Exit 1 with FILE:LINE when the input cannot be imported.
    Import(import::ImportArgs),
    /// Record real traffic: a proxy with mock-llm's surfaces (Anthropic Messages, OpenAI Chat
    /// Completions, OpenAI Responses, streamed or not) that forwards each request to --upstream
    /// and returns its answer unchanged (streams as they arrive), checking each request as
    /// mock-llm does. Authorization headers and keys are forwarded, never written.
    ///
    /// Prints `listening on http://ADDR` first; runs until Ctrl-C, SIGTERM or `POST
    /// /_agentsim/shutdown`, then writes what went through as a scenario (as `agentsim import`
    /// writes a journal) to --out, which `agentsim mock-llm` serves back.
    #[cfg(all(feature = "mock-server", feature = "http-model"))]
    Record(record::RecordArgs),
}

impl Command {
    /// Whether the command runs a runtime under test as a child process (`--runtime`).
    pub(crate) fn talks_to_a_runtime(&self) -> bool {
        match self {
            Command::Run(args) => args.runtime_given(),
            Command::Check(args) => args.runtime_given(),
            Command::Explore(args) => args.runtime_given(),
            #[cfg(all(feature = "mock-server", feature = "http-model"))]
            Command::Record(args) => args.runtime_given(),
            _ => false,
        }
    }
}

/// `agentsim schema`: prints the JSON Schema of scenario files.
pub(crate) fn schema() -> ExitCode {
    let schema = scenario::format::schema();
    println!(
        "{}",
        serde_json::to_string_pretty(&schema).expect("a schema is JSON")
    );
    ExitCode::SUCCESS
}
