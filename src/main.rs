//! The `agentsim` command: run one scenario and print its transcript, check a corpus of
//! scenarios, or print the scenario JSON Schema.

/// The mock server and its load generator allocate for every request; glibc's allocator spent a
/// third of a benchmark's time under contention, mimalloc far less.
#[cfg(feature = "mock-server")]
#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

#[cfg(feature = "mock-server")]
mod allocator {
    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::c_void;

    use libmimalloc_sys::{
        mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
        mi_zalloc_aligned,
    };

    /// The alignment of every block mimalloc hands out: its sizes are whole words, and the
    /// first block of a page is aligned to 16.
    const WORD: usize = std::mem::size_of::<usize>();

    /// mimalloc, through its plain entry points wherever they give the alignment asked for.
    /// (Its aligned entry points, which the `mimalloc` crate uses for every request, take a
    /// slower path, and when a size class has no free block at hand they allocate `size +
    /// align - 1` bytes from a larger one: about 60 instructions more an allocation.)
    pub struct MiMalloc;

    // SAFETY: every request whose alignment is at most a word goes to the plain entry points,
    // whose blocks are word-aligned; the others to the aligned ones. Every block is freed
    // with `mi_free`, whichever entry point gave it.
    unsafe impl GlobalAlloc for MiMalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= WORD {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= WORD {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            mi_free(ptr.cast::<c_void>());
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if layout.align() <= WORD {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};

use agentsim::explore;
use agentsim::explore::generate::GenConfig;
use agentsim::observe::coverage::Coverage;
use agentsim::report;
use agentsim::scenario::{self, RunOptions};
use agentsim::workloads::Workload;

/// Deterministic simulation and test harness for interactive LLM agent runtimes.
///
/// Scenario files (YAML or JSON) describe agents, scripted model replies, scripted tools and the
/// user's steps with expectations. Every run is a pure function of the scenario and the seed.
#[derive(Parser)]
#[command(name = "agentsim", version, propagate_version = true)]
struct Cli {
    /// Log runtime internals (push/pop with depth, model calls, tool calls) to stderr.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// Readable text, one line per event.
    Text,
    /// The records as JSON.
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchWhat {
    /// Turn throughput of the runtime in the simulator (workloads w1..w6).
    Turns,
    /// Requests per second and latency of `agentsim mock-llm` over loopback.
    MockLlm,
    /// Seed 003's flow against `agentsim serve` over loopback on an SQLite store.
    Serve,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchStream {
    /// Without and with streaming.
    Both,
    /// Plain requests only.
    No,
    /// Streamed requests only.
    Yes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchApi {
    /// OpenAI Chat Completions.
    OpenaiChat,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    OpenaiResponses,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ObserverSetting {
    /// Invariants checked after every step (what scenario runs do).
    On,
    /// No invariant checks.
    Off,
    /// Both, one after the other.
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    /// Seed 004's runtime.
    Legacy,
    /// Its fix.
    Fixed,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scenario and print its transcript; exit 1 if it fails, showing expected and actual.
    Run {
        /// The scenario file.
        file: PathBuf,
        /// Seed (overrides the file's `seed`).
        #[arg(long, env = "AGENTSIM_SEED")]
        seed: Option<u64>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Do not check invariants (to see how far a broken runtime gets).
        #[arg(long)]
        no_invariants: bool,
        /// Also write the run as a self-contained HTML page here: an SVG timeline of each
        /// conversation's stack depth with its events, the sequence of user, frames, model and
        /// tools, and the transcript; a failing run's page marks the violation.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Print the run as a Mermaid sequence diagram instead of the transcript.
        #[arg(long, conflicts_with = "format")]
        mermaid: bool,
    },
    /// Run every scenario under the given files or directories: one line each, then a total;
    /// exit 1 if any fails.
    Check {
        /// Scenario files or directories (searched recursively for .yaml, .yml, .json).
        #[arg(default_value = "scenarios")]
        paths: Vec<PathBuf>,
        /// Seed for every scenario (overrides each file's `seed`).
        #[arg(long, env = "AGENTSIM_SEED")]
        seed: Option<u64>,
        /// Output: a line per scenario (text), or one JSON document at the end (json), with each
        /// failure structured (kind, step, line, column, mismatches, rerun command).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Also write a JUnit XML report here (one test case per scenario file).
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Also write an HTML page per scenario run into this directory (created if missing),
        /// with an index.html listing them.
        #[arg(long, value_name = "DIR")]
        html: Option<PathBuf>,
        /// Run only the files whose path contains this text (repeatable: any of them).
        #[arg(long, value_name = "TEXT")]
        filter: Vec<String>,
        /// Stop starting scenarios after the first failure (with several jobs, those already
        /// running finish).
        #[arg(long)]
        fail_fast: bool,
        /// Scenarios run at once, 1 to 256 (default: the machine's cores); the report keeps the
        /// files' order.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
    },
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
    Serve {
        /// The scenario whose agents, tools and settings to run (and, with `--llm scripted`,
        /// whose `llm` scripts answer the model calls). Without it: only a main agent, no tools.
        scenario: Option<PathBuf>,
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: std::net::SocketAddr,
        /// Who answers the model calls: the scenario's scripts (in real milliseconds), or a
        /// provider's API at --base-url (the key from ANTHROPIC_API_KEY or OPENAI_API_KEY).
        #[arg(long, value_enum, default_value_t = ServeLlm::Scripted)]
        llm: ServeLlm,
        /// The API's base URL, e.g. https://api.anthropic.com/v1 or the address of `agentsim
        /// mock-llm` (http://127.0.0.1:8080/v1).
        #[arg(long)]
        base_url: Option<String>,
        /// A bearer token every request must carry (`Authorization: Bearer T`); 401 without it.
        #[arg(long, env = "AGENTSIM_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// The largest request body taken, in bytes; larger ones get 413.
        #[arg(long, default_value_t = 1 << 20)]
        body_limit: usize,
        /// Keep async sessions and their questions in this SQLite database (seed 003's two
        /// tables; created if missing). Default: in memory.
        #[arg(long)]
        db: Option<PathBuf>,
        /// Persist the runtime (`state.json`, `context.jsonl`) in this directory and resume from
        /// it at start: with --db, a killed service restarted on both loses nothing it
        /// acknowledged. Default: in memory.
        #[arg(long, value_name = "DIR")]
        state: Option<PathBuf>,
        /// Post every async question to this URL (seed 003's callback: `X-Agent-Session` and
        /// a `question_pending` body; retried by the scenario's `callbacks` settings, default
        /// three retries with 1 s, 2 s, 4 s backoff and a 10 s timeout). Agents that name their
        /// own `question_callback` keep it. Default: the scenario's `question_callback_url`.
        #[arg(long, value_name = "URL")]
        question_callback: Option<String>,
        /// This service's address as callback receivers reach it: each callback's
        /// `answer_url` is URL/agent/answer/{session_id}. Default: http:// and --addr.
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
    },
    /// Find bugs nobody scripted: run a scenario (faults and timings varied per seed) or freshly
    /// generated scenarios under many seeds, checking every invariant after every step.
    ///
    /// The first failure of each invariant is materialized into a plain scenario, shrunk while it
    /// still breaks the same invariant, and written to --out (default scenarios/regressions/), where
    /// the test suite runs it for good. Exit 1 if any invariant broke.
    Explore {
        /// The scenario to explore around (or use --generated).
        #[arg(required_unless_present = "generated", conflicts_with = "generated")]
        file: Option<PathBuf>,
        /// Explore freshly generated scenarios, one per seed.
        #[arg(long)]
        generated: bool,
        /// Number of runs (seeds SEED, SEED+1, ...).
        #[arg(long, default_value_t = 1000)]
        runs: u64,
        /// First seed.
        #[arg(long, env = "AGENTSIM_SEED", default_value_t = 0)]
        seed: u64,
        /// Parallel workers, 1 to 256 (default: the machine's cores).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Do not inject faults (vary only the seed).
        #[arg(long)]
        no_faults: bool,
        /// Leave out one kind of fault (repeatable): llm-error, llm-stall, llm-latency,
        /// tool-error, tool-latency, user-message, cancel, restart, restart-mid-turn, intervene.
        /// The other kinds keep the rates each seed draws.
        #[arg(long, value_name = "KIND", value_parser = parse_fault_kind, conflicts_with = "no_faults")]
        no_fault: Vec<agentsim::drive::faults::FaultKind>,
        /// Stop starting runs after this many seconds (runs in flight finish; what was found is
        /// summarized, shrunk and written).
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
        time: Option<f64>,
        /// Explore part I of N of the seeds (a CI matrix of N machines: disjoint ranges of the
        /// --runs seeds, whose summaries add up), e.g. --partition 2/4.
        #[arg(long, value_name = "I/N", value_parser = parse_partition)]
        partition: Option<(u64, u64)>,
        /// With --generated: draw every scenario from the default configuration instead of
        /// steering toward rarely reached behaviour.
        #[arg(long, requires = "generated")]
        no_steer: bool,
        /// With --generated: draw every scenario from this swarm configuration (default, deep,
        /// failing, limits, cancels, batch, questions, tree, workflow, sessions, odd-tools); replay commands name it.
        #[arg(
            long,
            value_name = "NAME",
            requires = "generated",
            conflicts_with = "no_steer"
        )]
        swarm: Option<String>,
        /// Print how many runs reached each coverage feature (the summary always names the rarest
        /// and those never reached).
        #[arg(long)]
        coverage: bool,
        /// Run the runtime with a planted bug, to see the harness find it: drop-cascade-result,
        /// double-delivery, iteration-off-by-one, route-below-top, skip-unresolved-after-child,
        /// main-complete-accepted, display-leak, cancel-leaves-frame, completion-order-results,
        /// empty-reply-recorded, restore-forgets-first-message (structural); child-error-as-success,
        /// main-limit-silent, tools-skipped-on-last-iteration, inbox-cleared-with-turn,
        /// tool-pass-uncounted, restore-resets-iterations, main-messages-unjournaled,
        /// answer-counts-an-iteration, tool-run-never-issued (semantic); wait-returns-early,
        /// wait-resumed-by-any-fork, delete-leaves-tool-uses, deleted-then-ended (the agent tree),
        /// batch-timeout-ignored (tool runs), batch-extracts-user-text (batch delegation).
        #[arg(long, value_name = "NAME")]
        bug: Option<agentsim::runtime::planted::PlantedBug>,
        /// Model seed 004's watchdog and interruptions around this preset, with timings and some
        /// knobs drawn per seed.
        #[arg(long, value_enum, value_name = "PRESET")]
        interruptions: Option<Preset>,
        /// Where to write shrunk failures.
        #[arg(long, default_value = "scenarios/regressions")]
        out: PathBuf,
        /// Report failures without shrinking or writing files.
        #[arg(long)]
        no_write: bool,
        /// Candidate runs the shrinker may try per failure.
        #[arg(long, default_value_t = 3000)]
        shrink_budget: usize,
    },
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
    Bench {
        /// What to measure.
        #[arg(value_enum, default_value_t = BenchWhat::Turns)]
        what: BenchWhat,
        /// Workloads to run (default: all).
        #[arg(long = "workload", value_name = "W", value_parser = parse_workload)]
        workloads: Vec<Workload>,
        /// Seconds to measure each workload and observer setting (per repetition).
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Measure each workload this many times and report the median repetition with the
        /// fastest and slowest (on a shared, noisy machine, 5 or more).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Which observer settings to measure.
        #[arg(long, value_enum, default_value_t = ObserverSetting::Both)]
        observer: ObserverSetting,
        /// mock-llm: concurrent keep-alive connections.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
        connections: u32,
        /// mock-llm: another server to measure with the same load, as NAME=URL (for example
        /// aimock=http://127.0.0.1:4010); repeatable.
        #[arg(long, value_name = "NAME=URL", value_parser = parse_against)]
        against: Vec<(String, std::net::SocketAddr)>,
        /// mock-llm: worker threads of agentsim's server (default: one per CPU, as `agentsim
        /// mock-llm` runs).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
        server_threads: Option<u32>,
        /// mock-llm: the APIs to measure, each without and with streaming (default: openai-chat
        /// and anthropic).
        #[arg(long, value_enum)]
        api: Vec<BenchApi>,
        /// mock-llm: measure plain requests, streamed ones, or both.
        #[arg(long, value_enum, default_value_t = BenchStream::Both)]
        stream: BenchStream,
    },
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
    MockLlm {
        /// The scenario whose `llm` scripts to serve.
        scenario: PathBuf,
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: std::net::SocketAddr,
        /// Write a JSONL journal of every exchange here.
        #[arg(long)]
        journal: Option<PathBuf>,
        /// Write the final report as JSON here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Write a transcript of the exchanges here at shutdown, in agentsim's rendering (also
        /// served at GET /_agentsim/transcript while the server runs).
        #[arg(long)]
        transcript: Option<PathBuf>,
        /// The largest request body taken, in bytes; larger ones get the provider's 413.
        #[arg(long, default_value_t = agentsim::mock_llm::server::DEFAULT_BODY_LIMIT)]
        body_limit: usize,
        /// Replace this share of replies (0 to 1) with faults drawn from --seed: rate limits,
        /// overloads, server errors, dropped connections, and in streams an error event or a cut
        /// part-way. Each decision depends on the seed and where the request was routed, so the
        /// same seed and runtime give the same faults; the journal records each one.
        #[arg(long, value_name = "RATE", value_parser = parse_rate)]
        faults: Option<f64>,
        /// The seed of --faults.
        #[arg(long, default_value_t = 0, env = "AGENTSIM_SEED")]
        seed: u64,
    },
}

/// Who answers `agentsim serve`'s model calls.
#[cfg(all(feature = "mock-server", feature = "http-model"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ServeLlm {
    /// The scenario's `llm` scripts.
    Scripted,
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API.
    Openai,
}

fn parse_against(s: &str) -> Result<(String, std::net::SocketAddr), String> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=URL, e.g. aimock=http://127.0.0.1:4010"))?;
    let hostport = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("`{url}`: only http:// URLs (loopback servers) are measured"))?
        .trim_end_matches('/');
    let hostport = hostport.strip_suffix("/v1").unwrap_or(hostport);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(hostport)
        .map_err(|e| format!("`{url}`: {e}"))?
        .next()
        .ok_or_else(|| format!("`{url}`: no address"))?;
    if name.trim().is_empty() {
        return Err(format!("`{s}`: the name before `=` is empty"));
    }
    Ok((name.to_owned(), addr))
}

fn parse_fault_kind(s: &str) -> Result<agentsim::drive::faults::FaultKind, String> {
    agentsim::drive::faults::FaultKind::parse(s).ok_or_else(|| {
        let known: Vec<&str> = agentsim::drive::faults::FaultKind::ALL
            .iter()
            .map(|k| k.name())
            .collect();
        format!("unknown fault kind `{s}` (known: {})", known.join(", "))
    })
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() && x < 1e9 => Ok(x),
        _ => Err(format!("`{s}` is not a number of seconds above 0")),
    }
}

fn parse_partition(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{s}`: expected I/N with 1 <= I <= N, e.g. 2/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    Workload::parse(s)
        .ok_or_else(|| format!("unknown workload `{s}` (expected w1, w2, w3, w4 or w5)"))
}

fn main() -> ExitCode {
    // Output piped into a program that stops reading (`| head`) ends this one quietly, as it does
    // other command-line tools, instead of a panic at the next print.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts; no handler
    // is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    #[cfg(all(feature = "mock-server", feature = "http-model"))]
    let serving = matches!(cli.command, Command::Serve { .. });
    #[cfg(not(all(feature = "mock-server", feature = "http-model")))]
    let serving = false;
    if cli.verbose {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .without_time()
            .init();
    } else if serving {
        // A service says on stderr what it did on its own (callbacks delivered, retried or
        // given up, what a restart reconciled, an operation the store refused), with the time.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match cli.command {
        Command::Run {
            file,
            seed,
            format,
            no_invariants,
            html,
            mermaid,
        } => run(
            &file,
            seed,
            if mermaid {
                Output::Mermaid
            } else {
                Output::Format(format)
            },
            !no_invariants,
            html.as_deref(),
        ),
        Command::Check {
            paths,
            seed,
            format,
            junit,
            html,
            filter,
            fail_fast,
            jobs,
        } => check(
            &paths,
            CheckOptions {
                seed,
                format,
                junit,
                html,
                filter,
                fail_fast,
                jobs: jobs.map_or_else(
                    || std::thread::available_parallelism().map_or(1, |n| n.get()),
                    |j| j as usize,
                ),
            },
        ),
        Command::Bench {
            what: BenchWhat::Turns,
            workloads,
            seconds,
            repeat,
            json,
            observer,
            connections: _,
            against,
            server_threads,
            api,
            stream,
        } => {
            if !against.is_empty()
                || !api.is_empty()
                || server_threads.is_some()
                || stream != BenchStream::Both
            {
                eprintln!("error: --against, --api, --server-threads and --stream go with `agentsim bench mock-llm`");
                return ExitCode::from(2);
            }
            bench(workloads, seconds, repeat, json, observer)
        }
        #[cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]
        Command::Bench {
            what: BenchWhat::Serve,
            seconds,
            json,
            connections,
            ..
        } => bench_serve(seconds, json, connections),
        #[cfg(not(all(feature = "mock-server", feature = "http-model", feature = "sqlite")))]
        Command::Bench {
            what: BenchWhat::Serve,
            ..
        } => {
            eprintln!("error: `bench serve` needs the features mock-server, http-model and sqlite");
            ExitCode::from(2)
        }
        Command::Bench {
            what: BenchWhat::MockLlm,
            workloads,
            seconds,
            json,
            connections,
            against,
            server_threads,
            api,
            stream,
            repeat,
            ..
        } => {
            if !workloads.is_empty() || repeat != 1 {
                eprintln!("error: --workload and --repeat go with `agentsim bench turns`");
                return ExitCode::from(2);
            }
            bench_mock_llm(
                seconds,
                json,
                connections,
                against,
                server_threads,
                api,
                stream,
            )
        }
        Command::Explore {
            file,
            generated,
            runs,
            seed,
            jobs,
            no_faults,
            no_fault,
            time,
            partition,
            no_steer,
            swarm,
            coverage,
            bug,
            interruptions,
            out,
            no_write,
            shrink_budget,
        } => {
            let configurations = agentsim::explore::steer::configurations();
            let steering = match swarm {
                Some(name) => match configurations.iter().position(|(n, _)| *n == name) {
                    Some(i) => Steering::Fixed(i),
                    None => {
                        let known: Vec<&str> = configurations.iter().map(|(n, _)| *n).collect();
                        eprintln!(
                            "error: --swarm {name}: no such configuration (known: {})",
                            known.join(", ")
                        );
                        return ExitCode::from(2);
                    }
                },
                None if no_steer || !generated => Steering::Fixed(0),
                None => Steering::Adaptive,
            };
            let source = if generated {
                explore::Source::Generated(GenConfig::default())
            } else {
                let file = file.expect("clap requires FILE without --generated");
                match scenario::load(&file) {
                    Ok(s) => explore::Source::Scenario(Box::new(s)),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
            };
            let settings = explore::Settings {
                faults: !no_faults,
                without: no_fault.iter().fold(
                    Default::default(),
                    |set: agentsim::drive::faults::FaultKinds, k| set.with(*k),
                ),
                planted: bug,
                // Replaying one seed shows its transcript, faults and all.
                record: runs == 1,
                interruptions: interruptions.map(|p| match p {
                    Preset::Legacy => agentsim::agents::watchdog::InterruptionConfig::legacy(),
                    Preset::Fixed => agentsim::agents::watchdog::InterruptionConfig::fixed(),
                }),
            };
            let jobs = jobs.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |j| j as usize,
            );
            if !no_write && out.exists() && !out.is_dir() {
                eprintln!(
                    "error: --out {}: not a directory; shrunk failures are written into a directory (created if missing)",
                    out.display()
                );
                return ExitCode::from(2);
            }
            let write = (!no_write).then_some((out.as_path(), shrink_budget));
            // Part I of N: the I-th of N contiguous ranges of the seeds (the first ranges one
            // seed longer when N does not divide --runs).
            let (first, runs) = match partition {
                Some((i, n)) => {
                    let (base, extra) = (runs / n, runs % n);
                    let start = (i - 1) * base + (i - 1).min(extra);
                    let count = base + u64::from(i <= extra);
                    println!(
                        "partition {i}/{n}: seeds {} to {} ({count} of {runs} runs)",
                        seed.wrapping_add(start),
                        seed.wrapping_add(start + count).wrapping_sub(1)
                    );
                    (seed.wrapping_add(start), count)
                }
                None => (seed, runs),
            };
            if runs == 0 {
                println!("no runs in this partition");
                return ExitCode::SUCCESS;
            }
            explore_cmd(
                &source,
                (first, runs),
                jobs,
                settings,
                (steering, coverage),
                write,
                time.map(std::time::Duration::from_secs_f64),
            )
        }
        #[cfg(feature = "mock-server")]
        Command::MockLlm {
            scenario,
            addr,
            journal,
            report,
            transcript,
            body_limit,
            faults,
            seed,
        } => {
            let faults = faults.map(|rate| agentsim::mock_llm::server::RandomFaults { rate, seed });
            let options = server::Options {
                addr,
                journal,
                body_limit,
                faults,
                transcript: transcript.is_some(),
            };
            mock_llm(&scenario, options, report.as_deref(), transcript.as_deref())
        }
        #[cfg(all(feature = "mock-server", feature = "http-model"))]
        Command::Serve {
            scenario,
            addr,
            llm,
            base_url,
            token,
            body_limit,
            db,
            state,
            question_callback,
            public_url,
        } => serve(
            scenario.as_deref(),
            addr,
            (llm, base_url),
            token,
            body_limit,
            (db.as_deref(), state),
            (question_callback, public_url),
        ),
        Command::Schema => {
            let schema = scenario::format::schema();
            println!(
                "{}",
                serde_json::to_string_pretty(&schema).expect("a schema is JSON")
            );
            ExitCode::SUCCESS
        }
    }
}

#[cfg(feature = "mock-server")]
use agentsim::mock_llm::server;

/// The multi-threaded tokio runtime the servers run on; exit code 2, said why, when it cannot
/// start.
#[cfg(feature = "mock-server")]
fn async_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(2)
        })
}

#[cfg(feature = "mock-server")]
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("`{s}` is not a rate from 0 to 1")),
    }
}

#[cfg(feature = "mock-server")]
fn mock_llm(
    file: &Path,
    options: server::Options,
    report_path: Option<&Path>,
    transcript_path: Option<&Path>,
) -> ExitCode {
    use std::io::Write as _;
    let scenario = match scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if scenario.scripts.is_empty() {
        eprintln!(
            "error: {}: the scenario has no `llm` scripts to serve",
            file.display()
        );
        return ExitCode::from(2);
    }
    let runtime = match async_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let faults = options.faults;
    let result = runtime.block_on(async {
        let running = server::start(&scenario, options).await?;
        let signalled = stop_signal();
        println!("listening on http://{}", running.addr);
        if let Some(f) = faults {
            println!("faults: rate {} with seed {}", f.rate, f.seed);
        }
        let _ = std::io::stdout().flush();
        let transcript = running.transcript_handle();
        let report = running.finish(signalled).await?;
        Ok::<_, std::io::Error>((report, transcript()))
    });
    let (report, transcript) = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", report.text());
    if let Some(path) = transcript_path {
        if let Err(e) = std::fs::write(path, transcript) {
            eprintln!("error: cannot write the transcript {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if let Some(path) = report_path {
        let json = serde_json::to_string_pretty(&report).expect("a report serialises");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("error: cannot write the report {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(not(feature = "mock-server"))]
fn bench_mock_llm(
    _: f64,
    _: bool,
    _: u32,
    _: Vec<(String, std::net::SocketAddr)>,
    _: Option<u32>,
    _: Vec<BenchApi>,
    _: BenchStream,
) -> ExitCode {
    eprintln!("error: this agentsim was built without the `mock-server` feature");
    ExitCode::from(2)
}

#[cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]
fn bench_serve(seconds: f64, json: bool, clients: u32) -> ExitCode {
    use agentsim::drive::tokio_driver::Backend;
    use agentsim::serve::bench;
    if !(seconds > 0.0 && seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::from(2);
    }
    let s = scenario::parse(bench::SCENARIO, Path::new("(benchmark scenario)"))
        .expect("the benchmark's scenario loads");
    let mut setup = s.driver_setup();
    setup.limits.max_llm_calls = u64::MAX;
    setup.limits.max_steps = u64::MAX;
    let dir = std::env::temp_dir().join(format!("agentsim-bench-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let store = match agentsim::store::SqliteQuestions::open(&dir.join("sessions.db")) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match async_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let measured = runtime.block_on(async {
        let options = agentsim::serve::Options {
            addr: "127.0.0.1:0".parse().expect("an address"),
            token: None,
            body_limit: agentsim::serve::DEFAULT_BODY_LIMIT,
            state_dir: None,
            public_url: None,
        };
        // The model is `agentsim mock-llm` on loopback too: it answers each session's
        // conversation from the start of the script, whatever order the calls come in.
        let mock = agentsim::mock_llm::server::start(&s, Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let model = agentsim::drive::http::HttpModel::new(
            agentsim::wire::Provider::Anthropic,
            &format!("http://{}/v1", mock.addr),
            "bench",
            std::time::Duration::from_secs(60),
        )
        .map_err(|e| e.to_string())?;
        let running = agentsim::serve::start(setup, Backend::Http(model), Box::new(store), options)
            .await
            .map_err(|e| e.to_string())?;
        let base = format!("http://{}", running.addr);
        let measured = bench::run(&base, clients, seconds).await;
        running.stop();
        running.finish().await.map_err(|e| e.to_string())?;
        mock.stop();
        measured
    });
    let _ = std::fs::remove_dir_all(&dir);
    let m = match measured {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&m).expect("serialises"));
        return ExitCode::SUCCESS;
    }
    let (t, a, c) = m.rates();
    println!(
        "agentsim serve, SQLite store, {} clients over loopback, {:.1} s",
        m.clients, m.seconds
    );
    println!("  sessions triggered  {:>9.1}/s  ({})", t, m.triggered);
    println!("  questions answered  {:>9.1}/s  ({})", a, m.answered);
    println!("  sessions completed  {:>9.1}/s  ({})", c, m.completed);
    let show = |name: &str, l: bench::Latency| {
        println!(
            "  {name:<18}  p50 {:>8.2} ms  p99 {:>8.2} ms",
            l.p50_us as f64 / 1000.0,
            l.p99_us as f64 / 1000.0
        );
    };
    show("webhook", m.webhook);
    show("answer", m.answer);
    show("whole session", m.session);
    ExitCode::SUCCESS
}

#[cfg(feature = "mock-server")]
fn bench_mock_llm(
    seconds: f64,
    json: bool,
    connections: u32,
    against: Vec<(String, std::net::SocketAddr)>,
    server_threads: Option<u32>,
    apis: Vec<BenchApi>,
    streams: BenchStream,
) -> ExitCode {
    use agentsim::mock_llm::load;
    let server_threads = server_threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    use agentsim::wire::Provider;
    if !(seconds > 0.0 && seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::from(2);
    }
    let scenario = match scenario::parse(load::SCENARIO, Path::new("(benchmark scenario)")) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let build = |threads: Option<u32>| {
        let mut b = match threads {
            Some(n) => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n as usize);
                b
            }
            None => tokio::runtime::Builder::new_current_thread(),
        };
        b.enable_all().build()
    };
    // The server runs on its own threads; the load generator on this one.
    let (server_rt, client_rt) = match (build(Some(server_threads)), build(None)) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let running = match server_rt.block_on(server::start(&scenario, server::Options::default())) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut targets = vec![load::Target {
        name: "agentsim".into(),
        addr: running.addr,
    }];
    targets.extend(
        against
            .into_iter()
            .map(|(name, addr)| load::Target { name, addr }),
    );
    let apis = if apis.is_empty() {
        vec![BenchApi::OpenaiChat, BenchApi::Anthropic]
    } else {
        apis
    };
    let modes: Vec<(Provider, bool)> = apis
        .iter()
        .map(|a| match a {
            BenchApi::OpenaiChat => Provider::OpenAiChat,
            BenchApi::Anthropic => Provider::Anthropic,
            BenchApi::OpenaiResponses => Provider::OpenAiResponses,
        })
        .flat_map(|p| [(p, false), (p, true)])
        .filter(|(_, stream)| match streams {
            BenchStream::Both => true,
            BenchStream::No => !stream,
            BenchStream::Yes => *stream,
        })
        .collect();
    if !json {
        println!(
            "{} connections, {seconds} s per server and mode, agentsim on {server_threads} server thread(s), the load generator on 1",
            connections
        );
        println!(
            "{:<12} {:<17} {:<6} {:>10} {:>9} {:>9} {:>7}",
            "server", "api", "stream", "req/s", "p50 µs", "p99 µs", "errors"
        );
    }
    let result = client_rt.block_on(load::compare(
        &targets,
        &modes,
        connections as usize,
        std::time::Duration::from_secs_f64(seconds),
        |r| {
            if !json {
                println!(
                    "{:<12} {:<17} {:<6} {:>10.0} {:>9} {:>9} {:>7}",
                    r.server,
                    r.api,
                    if r.stream { "yes" } else { "no" },
                    r.measured.rps,
                    r.measured.p50_us,
                    r.measured.p99_us,
                    r.measured.errors
                );
            }
        },
    ));
    let report = running.report();
    running.stop();
    drop(server_rt);
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // agentsim's server must have judged every request sound: the load is honest.
    if !report.violations.is_empty() || !report.misses.is_empty() {
        eprintln!(
            "error: agentsim's server found problems in the benchmark's own requests:\n{}",
            report.text()
        );
        return ExitCode::FAILURE;
    }
    let ratios: Vec<serde_json::Value> = rows
        .iter()
        .filter(|r| r.server != "agentsim")
        .filter_map(|other| {
            let ours = rows
                .iter()
                .find(|r| r.server == "agentsim" && r.api == other.api && r.stream == other.stream)?;
            (other.measured.rps > 0.0).then(|| {
                serde_json::json!({"against": other.server, "api": other.api, "stream": other.stream,
                                   "ratio": ours.measured.rps / other.measured.rps})
            })
        })
        .collect();
    if json {
        let out = serde_json::json!({"connections": connections, "seconds": seconds,
            "server_threads": server_threads, "rows": rows, "ratios": ratios});
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialises")
        );
    } else {
        for r in &ratios {
            println!(
                "agentsim / {} ({}{}): {:.1}x the requests per second",
                r["against"].as_str().unwrap_or(""),
                r["api"].as_str().unwrap_or(""),
                if r["stream"] == true {
                    ", streamed"
                } else {
                    ""
                },
                r["ratio"].as_f64().unwrap_or(0.0)
            );
        }
    }
    if rows.iter().any(|r| r.measured.errors > 0) {
        eprintln!("warning: some requests failed (see the errors column)");
    }
    ExitCode::SUCCESS
}

/// Ctrl-C, or SIGTERM on Unix.
#[cfg(feature = "mock-server")]
#[cfg(all(feature = "mock-server", feature = "http-model"))]
fn serve(
    file: Option<&Path>,
    addr: std::net::SocketAddr,
    (llm, base_url): (ServeLlm, Option<String>),
    token: Option<String>,
    body_limit: usize,
    (db, state_dir): (Option<&Path>, Option<PathBuf>),
    (question_callback, public_url): (Option<String>, Option<String>),
) -> ExitCode {
    use agentsim::drive::scripted::MockLlm;
    use agentsim::drive::tokio_driver::Backend;
    use agentsim::wire::Provider;
    use std::io::Write as _;
    let usage = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let scenario = match file.map(scenario::load).transpose() {
        Ok(s) => s,
        Err(e) => return usage(e.to_string()),
    };
    let mut setup = match &scenario {
        Some(s) => s.driver_setup(),
        None => {
            let empty = scenario::parse("name: serve\nsteps: []\n", Path::new("serve"))
                .expect("the empty scenario loads");
            empty.driver_setup()
        }
    };
    // A service has no run budget: it answers as many calls as its users make.
    setup.limits.max_llm_calls = u64::MAX;
    // Its ids (sessions, agents, questions) must not repeat those a previous run stored in the
    // same --db: the id source starts from the clock, as a real service's would.
    setup.config.seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    setup.limits.max_steps = u64::MAX;
    if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return usage("--token cannot be empty".to_owned());
    }
    for (flag, url) in [
        ("--question-callback", &question_callback),
        ("--public-url", &public_url),
    ] {
        if let Some(url) = url {
            if let Err(e) = reqwest::Url::parse(url)
                .map_err(|e| e.to_string())
                .and_then(|u| {
                    if matches!(u.scheme(), "http" | "https") && u.has_host() {
                        Ok(())
                    } else {
                        Err("not an http:// or https:// URL with a host".to_owned())
                    }
                })
            {
                return usage(format!("{flag} {url}: {e}"));
            }
        }
    }
    if let Some(url) = question_callback {
        setup.config.callbacks.url = Some(url.into());
    }
    let backend = match (llm, &scenario, base_url) {
        (ServeLlm::Scripted, _, Some(_)) => {
            return usage("--base-url goes with --llm anthropic or openai".to_owned())
        }
        (ServeLlm::Scripted, None, None) => return usage(
            "--llm scripted (the default) needs a SCENARIO whose `llm` scripts answer the model"
                .to_owned(),
        ),
        (ServeLlm::Scripted, Some(s), None) => {
            Backend::Scripted(MockLlm::new(s.scripts.clone()).with_more(s.more_replies.clone()))
        }
        (_, _, None) => {
            return usage("--llm anthropic and --llm openai need --base-url".to_owned())
        }
        (provider, _, Some(url)) => {
            let (provider, var) = match provider {
                ServeLlm::Anthropic => (Provider::Anthropic, "ANTHROPIC_API_KEY"),
                _ => (Provider::OpenAiChat, "OPENAI_API_KEY"),
            };
            let key = std::env::var(var).unwrap_or_default();
            match agentsim::drive::http::HttpModel::new(
                provider,
                &url,
                &key,
                std::time::Duration::from_secs(120),
            ) {
                Ok(model) => Backend::Http(model),
                Err(e) => return usage(format!("--base-url {url}: {e}")),
            }
        }
    };
    let store: agentsim::serve::Store = match db {
        None => Box::new(agentsim::store::MemoryQuestions::new()),
        #[cfg(feature = "sqlite")]
        Some(path) => match agentsim::store::SqliteQuestions::open(path) {
            Ok(store) => Box::new(store),
            Err(e) => return usage(format!("--db {}: {e}", path.display())),
        },
        #[cfg(not(feature = "sqlite"))]
        Some(_) => return usage("--db needs the `sqlite` feature".to_owned()),
    };
    let runtime = match async_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let options = agentsim::serve::Options {
        addr,
        token,
        body_limit,
        state_dir,
        public_url,
    };
    let result = runtime.block_on(async {
        let running = agentsim::serve::start(setup, backend, store, options).await?;
        let signalled = stop_signal();
        let stop = running.stopper();
        tokio::spawn(async move {
            signalled.await;
            stop();
        });
        println!("listening on http://{}", running.addr);
        let _ = std::io::stdout().flush();
        running.finish().await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Ctrl-C or SIGTERM, registered now (before the caller says it listens), awaited later: a signal
/// that comes right after the `listening on` line is never missed.
#[cfg(feature = "mock-server")]
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let signals = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        async move {
            match signals {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// What `run` prints.
#[derive(Clone, Copy)]
enum Output {
    Format(Format),
    Mermaid,
}

fn run(
    file: &Path,
    seed: Option<u64>,
    output: Output,
    observe: bool,
    html: Option<&Path>,
) -> ExitCode {
    let format = match output {
        Output::Format(f) => f,
        Output::Mermaid => Format::Text,
    };
    let scenario = match scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            if matches!(format, Format::Json) {
                let mut failure = serde_json::json!({"kind": "load", "message": e.to_string()});
                if e.line > 0 {
                    failure["line"] = e.line.into();
                    failure["column"] = e.column.into();
                }
                let out = serde_json::json!({"path": file.display().to_string(),
                                             "passed": false, "failure": failure});
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out).expect("a report is JSON")
                );
            }
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let (Some(invariant), false) = (&scenario.expect_violation, observe) {
        eprintln!(
            "error: {}: the scenario expects invariant {invariant} to break (expect_violation), and --no-invariants checks none; run it without --no-invariants",
            file.display()
        );
        return ExitCode::from(2);
    }
    let outcome = scenario::run(&scenario, RunOptions { seed, observe });
    let stdout_terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    match output {
        Output::Mermaid => print!("{}", report::html::mermaid(&outcome)),
        Output::Format(Format::Text) => print!(
            "{}",
            report::text_colored(&outcome, report::diff::color_wanted(stdout_terminal))
        ),
        Output::Format(Format::Json) => println!("{}", report::json(&outcome)),
    }
    if let Some(path) = html {
        if let Err(e) = std::fs::write(path, report::html::page(&outcome)) {
            eprintln!("error: cannot write the page {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    // The transcript goes to stdout and the failure to stderr: flush the first so that the two
    // come out in order when both go to one place.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    match &outcome.failure {
        None => ExitCode::SUCCESS,
        Some(failure) => {
            eprintln!(
                "FAILED {} (seed {})",
                report::printable(&outcome.path),
                outcome.seed
            );
            // On a terminal the transcript just printed ends with the failure: say it once. When
            // stdout goes elsewhere, stderr is where a person reads why.
            if !matches!(output, Output::Format(Format::Text)) || !stdout_terminal {
                let color = report::diff::color_wanted(std::io::IsTerminal::is_terminal(
                    &std::io::stderr(),
                ));
                eprintln!("  {}", report::diff::failure_text(failure, color));
            }
            eprintln!("  rerun: {}", report::printable(&outcome.rerun_command()));
            ExitCode::FAILURE
        }
    }
}

/// What a walk of the given paths found: scenario files, sorted, and entries that could not be
/// walked or read, each with what was wrong.
#[derive(Default)]
struct Found {
    files: Vec<PathBuf>,
    problems: Vec<(PathBuf, String)>,
    /// Directories entered (canonical), so that a symbolic link loop is walked once.
    seen: std::collections::BTreeSet<PathBuf>,
}

/// Collects the scenario files under `path` (given on the command line: it must exist).
fn collect_root(path: &Path, found: &mut Found) -> std::io::Result<()> {
    if !path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no such file or directory", path.display()),
        ));
    }
    if path.is_file() {
        // A file named on the command line is a scenario, whatever its extension.
        found.files.push(path.to_owned());
        return Ok(());
    }
    collect(path, found);
    Ok(())
}

/// Walks `path`: scenario files (`.yaml`, `.yml`, `.json`) are collected; hidden entries (a name
/// starting with `.`, such as `.git/` or an editor's lock file) are skipped; a JSON Schema (a JSON
/// object with `$schema`) is not a scenario; every entry that cannot be walked or read is recorded
/// as a problem by path, and the walk goes on.
fn collect(path: &Path, found: &mut Found) {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            let what = if std::fs::symlink_metadata(path).is_ok() {
                format!("a symbolic link to nothing ({e})")
            } else {
                format!("cannot be read: {e}")
            };
            found.problems.push((path.to_owned(), what));
            return;
        }
    };
    if meta.is_dir() {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        if !found.seen.insert(canonical) {
            return; // Entered already: a symbolic link loop, or two links to one directory.
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                found.problems.push((
                    path.to_owned(),
                    format!("the directory cannot be read: {e}"),
                ));
                return;
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => paths.push(entry.path()),
                Err(e) => found
                    .problems
                    .push((path.to_owned(), format!("an entry cannot be read: {e}"))),
            }
        }
        paths.sort();
        for entry in paths {
            let hidden = entry
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if !hidden {
                collect(&entry, found);
            }
        }
        return;
    }
    let extension = path.extension().and_then(|e| e.to_str());
    if !matches!(extension, Some("yaml" | "yml" | "json")) {
        return;
    }
    if extension == Some("json") && is_json_schema(path) {
        return;
    }
    found.files.push(path.to_owned());
}

/// Whether a `.json` file is a JSON Schema (such as the one `agentsim schema` prints), not a
/// scenario.
fn is_json_schema(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false; // The loader reports why it cannot be read.
    };
    serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.get("$schema").is_some())
}

struct CheckOptions {
    seed: Option<u64>,
    format: Format,
    junit: Option<PathBuf>,
    html: Option<PathBuf>,
    filter: Vec<String>,
    fail_fast: bool,
    jobs: usize,
}

/// One entry `check` goes through: a scenario file, or a path the walk could not take.
enum CheckEntry {
    File(PathBuf),
    Problem(PathBuf, String),
}

/// Loads and runs one entry (never panics on bad input: a file that cannot be loaded is a
/// broken case); with `color`, also the failure's text with its differences marked.
fn check_one(
    entry: &CheckEntry,
    seed: Option<u64>,
    color: bool,
    html: Option<&Path>,
) -> (report::check::Case, Option<String>) {
    let mut shown = None;
    use report::check::{Case, CaseResult};
    let started = Instant::now();
    let (path, result) = match entry {
        CheckEntry::Problem(path, problem) => (
            path.display().to_string(),
            CaseResult::Broken {
                message: problem.clone(),
                location: None,
            },
        ),
        CheckEntry::File(file) => match scenario::load(file) {
            Err(e) => (
                file.display().to_string(),
                CaseResult::Broken {
                    message: e.to_string(),
                    location: (e.line > 0).then_some((e.line, e.column)),
                },
            ),
            Ok(scenario) => {
                let outcome = scenario::run(
                    &scenario,
                    RunOptions {
                        seed,
                        observe: true,
                    },
                );
                if let Some(dir) = html {
                    let page = dir.join(page_name(&outcome.path));
                    if let Err(e) = std::fs::write(&page, report::html::page(&outcome)) {
                        eprintln!("warning: cannot write {}: {e}", page.display());
                    }
                }
                let result = match &outcome.failure {
                    None => CaseResult::Passed {
                        name: outcome.name.clone(),
                        seed: outcome.seed,
                        reproduced: outcome.reproduced.clone(),
                    },
                    Some(failure) => {
                        if color {
                            shown = Some(report::diff::failure_text(failure, true));
                        }
                        CaseResult::Failed {
                            name: outcome.name.clone(),
                            seed: outcome.seed,
                            failure: failure.to_json(),
                            location: failure.location(),
                            rerun: outcome.rerun_command(),
                        }
                    }
                };
                (outcome.path.clone(), result)
            }
        },
    };
    let case = Case {
        path,
        seconds: started.elapsed().as_secs_f64(),
        result,
    };
    (case, shown)
}

/// The file name of a scenario's page in `check --html DIR`: its path with `/` as `__`.
fn page_name(path: &str) -> String {
    let flat: String = path
        .chars()
        .map(|c| match c {
            '/' | '\\' => '_',
            c if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') => c,
            _ => '-',
        })
        .collect();
    format!("{}.html", flat.trim_start_matches(['.', '_']))
}

/// `check`'s line(s) for one case, as text (`shown`: the failure's text to print instead of its
/// plain message).
fn case_text(case: &report::check::Case, shown: Option<&str>) -> String {
    use report::check::CaseResult;
    let path = report::printable(&case.path);
    match &case.result {
        CaseResult::Passed {
            reproduced: Some(inv),
            ..
        } => format!("ok   {path} (reproduces {inv})\n"),
        CaseResult::Passed { .. } => format!("ok   {path}\n"),
        CaseResult::Failed {
            seed,
            failure,
            rerun,
            ..
        } => format!(
            "FAIL {path} (seed {seed})\n  {}\n  rerun: {}\n",
            shown.unwrap_or_else(|| failure["message"].as_str().unwrap_or("failed")),
            report::printable(rerun)
        ),
        CaseResult::Broken { message, .. } => format!("FAIL {path}\n  {message}\n"),
    }
}

fn check(paths: &[PathBuf], options: CheckOptions) -> ExitCode {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let started = Instant::now();
    let mut found = Found::default();
    for path in paths {
        if let Err(e) = collect_root(path, &mut found) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let Found {
        files, problems, ..
    } = found;
    if files.is_empty() && problems.is_empty() {
        eprintln!("error: no scenario files (.yaml, .yml, .json) found");
        return ExitCode::from(2);
    }
    let keep = |p: &Path| {
        options.filter.is_empty() || {
            let text = p.display().to_string();
            options.filter.iter().any(|f| text.contains(f.as_str()))
        }
    };
    let mut entries: Vec<CheckEntry> = problems
        .into_iter()
        .filter(|(p, _)| keep(p))
        .map(|(p, m)| CheckEntry::Problem(p, m))
        .collect();
    entries.extend(files.into_iter().filter(|f| keep(f)).map(CheckEntry::File));
    if entries.is_empty() {
        eprintln!(
            "error: no scenario file matches --filter {}",
            options.filter.join(", ")
        );
        return ExitCode::from(2);
    }
    let text = matches!(options.format, Format::Text);
    if let Some(dir) = &options.html {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("error: --html {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    }
    // Results land in their slot; the text report prints them in the files' order as soon as
    // every earlier one is in.
    let color =
        text && report::diff::color_wanted(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    type Slot = Option<(report::check::Case, Option<String>)>;
    let slots: Vec<std::sync::Mutex<Slot>> = entries
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    let printed = std::sync::Mutex::new(0usize);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let flush = || {
        let mut printed = printed.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        while *printed < slots.len() {
            let slot = slots[*printed].lock().unwrap_or_else(|e| e.into_inner());
            let Some((case, shown)) = slot.as_ref() else {
                break;
            };
            if text {
                out.push_str(&case_text(case, shown.as_deref()));
            }
            *printed += 1;
        }
        if !out.is_empty() {
            print!("{out}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
    };
    let work = || loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(entry) = entries.get(i) else { return };
        let case = check_one(entry, options.seed, color, options.html.as_deref());
        if options.fail_fast && !case.0.passed() {
            stop.store(true, Ordering::Relaxed);
        }
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(case);
        flush();
    };
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for _ in 0..options.jobs.min(entries.len()) {
            match std::thread::Builder::new().spawn_scoped(scope, work) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    eprintln!("warning: cannot start another worker thread ({e})");
                    break;
                }
            }
        }
        if workers.is_empty() {
            work();
        }
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    // With --fail-fast some slots stay empty: the cases are those that ran, in order.
    let ran: Vec<(report::check::Case, Option<String>)> = slots
        .into_iter()
        .filter_map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    let not_run = entries.len() - ran.len();
    if text {
        // Whatever the ordered printing held back (a gap left by --fail-fast) comes out now.
        let printed = *printed.lock().unwrap_or_else(|e| e.into_inner());
        let mut rest = String::new();
        for (case, shown) in ran.iter().skip(printed) {
            rest.push_str(&case_text(case, shown.as_deref()));
        }
        print!("{rest}");
    }
    let cases: Vec<report::check::Case> = ran.into_iter().map(|(case, _)| case).collect();
    let seconds = started.elapsed().as_secs_f64();
    let passed = cases.iter().filter(|c| c.passed()).count();
    let failed = cases.len() - passed;
    if let Some(dir) = &options.html {
        let mut index = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>agentsim check</title></head>\n<body>\n<h1>agentsim check</h1>\n<ul>\n");
        for case in &cases {
            let status = if case.passed() { "ok" } else { "FAIL" };
            let link = match &case.result {
                report::check::CaseResult::Broken { .. } => report::check::markup(&case.path),
                _ => format!(
                    "<a href=\"{}\">{}</a>",
                    report::check::markup(&page_name(&case.path)),
                    report::check::markup(&case.path)
                ),
            };
            index.push_str(&format!("<li>{status} {link}</li>\n"));
        }
        index.push_str("</ul>\n</body>\n</html>\n");
        if let Err(e) = std::fs::write(dir.join("index.html"), index) {
            eprintln!(
                "error: cannot write {}: {e}",
                dir.join("index.html").display()
            );
            return ExitCode::from(2);
        }
    }
    if let Some(path) = &options.junit {
        if let Err(e) = std::fs::write(path, report::check::junit(&cases, seconds)) {
            eprintln!(
                "error: cannot write the JUnit report {}: {e}",
                path.display()
            );
            return ExitCode::from(2);
        }
    }
    match options.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report::check::json_report(&cases, seconds, not_run))
                .expect("a report is JSON")
        ),
        Format::Text => {
            let skipped = if not_run > 0 {
                format!(", {not_run} not run (--fail-fast)")
            } else {
                String::new()
            };
            println!(
                "{} scenarios: {passed} passed, {failed} failed{skipped} ({seconds:.2}s)",
                entries.len()
            );
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One measured workload and observer setting.
#[derive(serde::Serialize)]
struct BenchRow {
    workload: &'static str,
    observer: bool,
    /// Of the median repetition.
    turns_per_sec: f64,
    /// Of the median repetition.
    ns_per_turn: f64,
    /// Fastest and slowest repetition.
    ns_per_turn_min: f64,
    ns_per_turn_max: f64,
    repeats: u32,
    peak_rss_bytes: Option<u64>,
    /// Over every repetition.
    turns: u64,
    runs: u64,
}

/// Resets the kernel's peak-RSS mark for this process (Linux; a no-op elsewhere).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size since the last reset, from `/proc/self/status`.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One repetition: runs of fresh copies for at least `seconds` of measured time. Each run is copied
/// from the starting point, run and dropped in turn, as `explore` and `check` do with theirs; only
/// the run is timed (the copy and the drop are not). Returns the measured seconds, the model turns
/// and the runs.
fn measure(
    prepared: &agentsim::workloads::Prepared,
    seconds: f64,
) -> Result<(f64, u64, u64), agentsim::sim::RunError> {
    let (mut elapsed, mut turns, mut runs) = (0.0f64, 0u64, 0u64);
    while elapsed < seconds {
        let mut sim = prepared.fresh();
        let start = Instant::now();
        turns += prepared.run(&mut sim)?;
        elapsed += start.elapsed().as_secs_f64();
        runs += 1;
        drop(sim);
    }
    Ok((elapsed, turns, runs))
}

fn bench(
    mut workloads: Vec<Workload>,
    seconds: f64,
    repeat: u32,
    json: bool,
    setting: ObserverSetting,
) -> ExitCode {
    if workloads.is_empty() {
        workloads = Workload::ALL.to_vec();
    }
    if !(seconds > 0.0 && seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::from(2);
    }
    let mut rows = Vec::new();
    for workload in workloads {
        let settings: &[bool] = match setting {
            ObserverSetting::On => &[true],
            ObserverSetting::Off => &[false],
            ObserverSetting::Both => &[true, false],
        };
        for &observer in settings {
            let prepared = workload.prepare(observer);
            reset_peak_rss();
            let (mut ns, mut turns, mut runs) = (Vec::new(), 0u64, 0u64);
            for _ in 0..repeat {
                match measure(&prepared, seconds) {
                    Ok((elapsed, t, r)) => {
                        ns.push(elapsed * 1e9 / t as f64);
                        turns += t;
                        runs += r;
                    }
                    Err(e) => {
                        eprintln!("error: workload {} failed: {e}", workload.name());
                        return ExitCode::FAILURE;
                    }
                }
            }
            ns.sort_by(f64::total_cmp);
            let median = ns[ns.len() / 2];
            rows.push(BenchRow {
                workload: workload.name(),
                observer,
                turns_per_sec: 1e9 / median,
                ns_per_turn: median,
                ns_per_turn_min: ns[0],
                ns_per_turn_max: ns[ns.len() - 1],
                repeats: repeat,
                peak_rss_bytes: peak_rss(),
                turns,
                runs,
            });
            if !json {
                let r = rows.last().expect("just pushed");
                let range = if repeat > 1 {
                    format!(" ({:.0}-{:.0})", r.ns_per_turn_min, r.ns_per_turn_max)
                } else {
                    String::new()
                };
                println!(
                    "{:<3} observer {:<3}  {:>12.0} turns/s  {:>8.1} ns/turn{range}  peak RSS {:>7.1} MiB   {}",
                    r.workload,
                    if observer { "on" } else { "off" },
                    r.turns_per_sec,
                    r.ns_per_turn,
                    r.peak_rss_bytes.map_or(f64::NAN, |b| b as f64 / 1048576.0),
                    workload.description()
                );
            }
        }
    }
    if json {
        let out = serde_json::json!({ "workloads": rows });
        println!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
    }
    ExitCode::SUCCESS
}

/// How generated scenarios are drawn.
#[derive(Clone, Copy, Debug)]
enum Steering {
    /// Every run from this swarm configuration.
    Fixed(usize),
    /// Configurations weighted by the rare behaviour they reach.
    Adaptive,
}

/// The replay command for one exploration seed.
fn replay_command(
    source: &explore::Source,
    seed: u64,
    settings: explore::Settings,
    swarm: usize,
) -> String {
    let what = match source {
        explore::Source::Generated(_) => "--generated".to_owned(),
        explore::Source::Scenario(s) => s.path.display().to_string(),
    };
    let mut cmd = format!("agentsim explore {what} --seed {seed} --runs 1");
    if !settings.faults {
        cmd.push_str(" --no-faults");
    }
    for kind in settings.without.iter() {
        cmd.push_str(&format!(" --no-fault {}", kind.name()));
    }
    if let Some(bug) = settings.planted {
        cmd.push_str(&format!(" --bug {bug}"));
    }
    if let Some(ic) = settings.interruptions {
        let preset = if ic == agentsim::agents::watchdog::InterruptionConfig::legacy() {
            "legacy"
        } else {
            "fixed"
        };
        cmd.push_str(&format!(" --interruptions {preset}"));
    }
    if let (explore::Source::Generated(_), Some((name, _))) = (
        source,
        agentsim::explore::steer::configurations().get(swarm),
    ) {
        cmd.push_str(&format!(" --swarm {name}"));
    }
    cmd
}

fn explore_cmd(
    source: &explore::Source,
    (first, runs): (u64, u64),
    jobs: usize,
    settings: explore::Settings,
    (steering, show_coverage): (Steering, bool),
    write: Option<(&Path, usize)>,
    budget: Option<std::time::Duration>,
) -> ExitCode {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    let started = Instant::now();
    // Ctrl-C stops the runs in flight at their next step; what was found is then summarized,
    // shrunk and written. A second Ctrl-C quits at once.
    let watch = std::sync::Arc::new(explore::Watch::default());
    {
        let watch = std::sync::Arc::clone(&watch);
        let handler = move || {
            if watch.stopping() {
                eprintln!("\ninterrupted again: quitting");
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupted: stopping the runs in flight; what was found is still summarized, shrunk and written (Ctrl-C again quits at once)"
            );
            watch.stop();
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            eprintln!("warning: cannot catch Ctrl-C ({e}); it will quit without a summary");
        }
    }
    let watch = &*watch;
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    // Per invariant: how many runs broke it, and the lowest failing seed with its replay.
    type Found = BTreeMap<&'static str, (u64, u64, String, agentsim::scenario::Scenario, usize)>;
    let steer = agentsim::explore::steer::Steer::new(first);
    let knobs = agentsim::explore::steer::configurations();
    let found: Mutex<Found> = Mutex::new(BTreeMap::new());
    let limits: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());
    let faults = AtomicU64::new(0);
    let coverage: Mutex<Coverage> = Mutex::new(Coverage::default());
    let per_swarm: Mutex<Vec<u64>> = Mutex::new(vec![0; knobs.len()]);
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let out_of_time = std::sync::atomic::AtomicBool::new(false);
    let work = || loop {
        if watch.stopping() {
            break;
        }
        // A time budget stops new runs; those in flight finish.
        if budget.is_some_and(|b| started.elapsed() >= b) {
            out_of_time.store(true, Ordering::Relaxed);
            break;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= runs {
            break;
        }
        let seed = first.wrapping_add(i);
        let (swarm, base) = match (source, steering) {
            (explore::Source::Generated(cfg), steering) => {
                let chosen = match steering {
                    Steering::Fixed(c) => Some((c, knobs[c].1)),
                    Steering::Adaptive => steer.choose(i, || watch.stopping()),
                };
                let Some((c, k)) = chosen else {
                    break;
                };
                let cfg = GenConfig { knobs: k, ..*cfg };
                (c, agentsim::explore::generate::generate(seed, &cfg))
            }
            (explore::Source::Scenario(_), _) => (0, source.scenario(seed)),
        };
        let Some((report, replay)) = explore::run_watched(&base, seed, settings, watch) else {
            // Interrupted in the middle: the run is dropped, not counted.
            break;
        };
        if settings.record {
            print!("{}", report::records_text(&report.records));
        }
        faults.fetch_add(report.faults, Ordering::Relaxed);
        coverage
            .lock()
            .expect("no worker panics")
            .add(report.coverage);
        if matches!(steering, Steering::Adaptive) {
            steer.record(i, swarm, report.coverage);
        }
        per_swarm.lock().expect("no worker panics")[swarm] += 1;
        match (&report.error, replay) {
            (Some(e), Some(replay)) => {
                let v = e.violation().expect("a replay comes with a violation");
                let mut found = found.lock().expect("no worker panics");
                let entry = found.entry(v.invariant).or_insert((
                    0,
                    seed,
                    v.message.clone(),
                    replay.clone(),
                    swarm,
                ));
                entry.0 += 1;
                if seed < entry.1 {
                    entry.1 = seed;
                    entry.2 = v.message.clone();
                    entry.3 = replay;
                    entry.4 = swarm;
                }
            }
            (Some(e), None) => {
                let kind = match e {
                    agentsim::sim::RunError::ScriptExhausted { .. } => "script exhausted",
                    agentsim::sim::RunError::ToolScriptExhausted { .. } => "tool script exhausted",
                    agentsim::sim::RunError::Stuck { .. } => "stuck (stalled model or hung tool)",
                    agentsim::sim::RunError::StepLimit { .. } => "step limit",
                    agentsim::sim::RunError::DepthLimit { .. } => "depth limit",
                    agentsim::sim::RunError::LlmCallLimit { .. } => "model-call limit",
                    agentsim::sim::RunError::Violation { .. } => "violation",
                    agentsim::sim::RunError::Restore(_) => "restore failed",
                    agentsim::sim::RunError::Persist(_) => "persisting failed",
                    agentsim::sim::RunError::Store(_) => "session store refused",
                };
                *limits
                    .lock()
                    .expect("no worker panics")
                    .entry(kind)
                    .or_insert(0) += 1;
            }
            _ => {}
        }
        done.fetch_add(1, Ordering::Relaxed);
    };
    // Steps per run, when known: progress then moves within long runs too.
    let steps_per_run = match source {
        explore::Source::Scenario(s) => s.steps.len() as u64,
        explore::Source::Generated(_) => 0,
    };
    let (finished, ticks) = std::sync::mpsc::channel::<()>();
    // The bar counts runs, or steps when a file's step count is known (then it moves within
    // long runs too).
    let unit = steps_per_run.max(1);
    let bar = if progress {
        indicatif::ProgressBar::with_draw_target(
            Some(runs.saturating_mul(unit)),
            indicatif::ProgressDrawTarget::stderr(),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("[{bar:30}] {msg} ({elapsed})")
            .expect("a valid template")
            .progress_chars("#> "),
    );
    let draw = || {
        let n = done.load(Ordering::Relaxed);
        let steps = watch.steps();
        let position = if steps_per_run > 0 {
            (n * unit).max(steps).min(runs * unit)
        } else {
            n
        };
        bar.set_position(position);
        bar.set_message(format!("{n}/{runs} runs, {steps} steps"));
    };
    let mut started_jobs = 0;
    std::thread::scope(|scope| {
        // Progress is drawn only on a terminal (in a CI log it would be noise), a few times a
        // second, so that one long run shows it is moving.
        if progress {
            let draw = &draw;
            scope.spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    ticks.recv_timeout(std::time::Duration::from_millis(200))
                {
                    if !watch.stopping() {
                        draw();
                    }
                }
            });
        }
        let mut workers = Vec::with_capacity(jobs);
        for _ in 0..jobs {
            match std::thread::Builder::new().spawn_scoped(scope, work) {
                Ok(worker) => workers.push(worker),
                Err(e) if workers.is_empty() => {
                    eprintln!(
                        "warning: cannot start worker threads ({e}); exploring on the main thread"
                    );
                    break;
                }
                Err(e) => {
                    eprintln!(
                        "warning: started {} of {jobs} workers ({e}); going on with those",
                        workers.len()
                    );
                    break;
                }
            }
        }
        started_jobs = workers.len();
        if workers.is_empty() {
            // Not even one thread: work on this one.
            work();
        }
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        // Every worker is done: stop the progress ticker.
        drop(finished);
    });
    let jobs = started_jobs.max(1);
    let interrupted = watch.stopping();
    if progress && !interrupted {
        draw();
        bar.finish();
    } else {
        bar.abandon();
    }
    let runs_done = done.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let what = match source {
        explore::Source::Generated(_) => "generated scenarios".to_owned(),
        explore::Source::Scenario(s) => s.path.display().to_string(),
    };
    let budget_hit = out_of_time.load(Ordering::Relaxed) && runs_done < runs;
    let ran = if interrupted {
        format!("interrupted after {runs_done} of {runs} runs")
    } else if budget_hit {
        format!(
            "{runs_done} of {runs} runs in the time budget of {}s",
            budget.unwrap_or_default().as_secs_f64()
        )
    } else {
        format!("{runs} runs")
    };
    let without: Vec<&str> = settings.without.iter().map(|k| k.name()).collect();
    println!(
        "explored {what}: {ran} from seed {first}, {jobs} jobs, faults {}{}{}",
        if settings.faults { "on" } else { "off" },
        if without.is_empty() {
            String::new()
        } else {
            format!(" (without {})", without.join(", "))
        },
        settings
            .planted
            .map_or(String::new(), |b| format!(", planted bug {b}"))
    );
    println!(
        "  {:.2}s, {:.0} runs/s, {} faults injected",
        elapsed,
        runs_done as f64 / elapsed.max(1e-9),
        faults.load(Ordering::Relaxed)
    );
    let limits = limits.into_inner().expect("no worker panics");
    if !limits.is_empty() {
        let share = |n: u64| 100.0 * n as f64 / runs_done.max(1) as f64;
        let list: Vec<String> = limits
            .iter()
            .map(|(k, n)| format!("{k} {n} ({:.1}%)", share(*n)))
            .collect();
        println!("  stopped early at a clean limit: {}", list.join(", "));
    }
    let coverage = coverage.into_inner().expect("no worker panics");
    if let (explore::Source::Generated(_), Steering::Adaptive) = (source, steering) {
        let per_swarm = per_swarm.into_inner().expect("no worker panics");
        let list: Vec<String> = knobs
            .iter()
            .zip(per_swarm)
            .map(|((name, _), n)| format!("{name} {n}"))
            .collect();
        println!(
            "  steered toward rare behaviour, runs per configuration: {}",
            list.join(", ")
        );
    }
    print_coverage(&coverage, runs_done, show_coverage);
    let found = found.into_inner().expect("no worker panics");
    if found.is_empty() {
        println!("  violations: none");
        // Interrupted is not a pass: the runs asked for did not all happen.
        return if interrupted {
            ExitCode::from(130)
        } else {
            ExitCode::SUCCESS
        };
    }
    println!("  violations by invariant:");
    for (invariant, (count, seed, _, _, _)) in &found {
        println!("    {invariant}: {count} runs (first at seed {seed})");
    }
    for (invariant, (_, seed, message, replay, swarm)) in found {
        println!("FAIL seed {seed}: invariant {invariant} broken: {message}");
        println!(
            "  replay: {}",
            replay_command(source, seed, settings, swarm)
        );
        let Some((dir, budget)) = write else {
            continue;
        };
        let shrunk = agentsim::explore::shrink::shrink(replay, invariant, budget);
        let yaml = agentsim::scenario::write::to_yaml(&shrunk.scenario);
        match write_new(dir, &format!("{invariant}-{seed}"), &yaml) {
            Ok((path, taken)) => {
                if let Some(taken) = taken {
                    println!(
                        "  {} exists and is kept (it may be a regression you edited); writing a new file",
                        taken.display()
                    );
                }
                println!(
                    "  shrunk to {} steps ({} candidate runs): {}",
                    shrunk.scenario.steps.len(),
                    shrunk.attempts,
                    path.display()
                );
                println!("  run it: agentsim run {}", path.display());
            }
            Err(e) => println!("  could not write into {}: {e}", dir.display()),
        }
    }
    ExitCode::FAILURE
}

/// The coverage lines of explore's summary: features reached, the rarest, and those never reached.
fn print_coverage(coverage: &Coverage, runs: u64, every: bool) {
    use agentsim::observe::coverage::{feature_name, FEATURES};
    println!(
        "  coverage: {} of {FEATURES} features reached",
        coverage.reached()
    );
    if every {
        for i in 0..FEATURES {
            println!("    {:>9} runs  {}", coverage.runs[i], feature_name(i));
        }
    }
    let mut rare: Vec<(u64, usize)> = (0..FEATURES)
        .filter(|&i| coverage.runs[i] > 0)
        .map(|i| (coverage.runs[i], i))
        .collect();
    rare.sort_unstable();
    let list: Vec<String> = rare
        .iter()
        .take(5)
        .map(|&(n, i)| {
            format!(
                "{} ({n} runs, {:.2}%)",
                feature_name(i),
                100.0 * n as f64 / runs.max(1) as f64
            )
        })
        .collect();
    if !list.is_empty() {
        println!("    rarest: {}", list.join("; "));
    }
    let never = coverage.never();
    if !never.is_empty() {
        println!("    never reached: {}", never.join("; "));
    }
}

/// Writes `contents` to a file of `dir` named after `stem` that did not exist: `stem.yaml`, or
/// `stem-2.yaml`, `stem-3.yaml`, ... A file already there is never overwritten. Returns the path
/// written and, if `stem.yaml` was taken, that path.
fn write_new(
    dir: &Path,
    stem: &str,
    contents: &str,
) -> std::io::Result<(PathBuf, Option<PathBuf>)> {
    std::fs::create_dir_all(dir)?;
    let first = dir.join(format!("{stem}.yaml"));
    for n in 1..10_000u32 {
        let path = if n == 1 {
            first.clone()
        } else {
            dir.join(format!("{stem}-{n}.yaml"))
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path);
        match file {
            Ok(mut f) => {
                std::io::Write::write_all(&mut f, contents.as_bytes())?;
                let taken = (n > 1).then_some(first);
                return Ok((path, taken));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "every name from {stem}.yaml to {stem}-9999.yaml is taken"
    )))
}
