//! `agentsim bench`: turn throughput of the workloads in the simulator (`turns`), and the
//! requests per second and latency of `agentsim mock-llm` (`mock-llm`) and `agentsim serve`
//! (`serve`) over loopback.

#[cfg(feature = "mock-server")]
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use clap::ValueEnum;

#[cfg(feature = "mock-server")]
use agentsim::mock_llm::server;
#[cfg(feature = "mock-server")]
use agentsim::scenario;
use agentsim::workloads::Workload;

#[cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]
use super::shared::async_runtime;

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
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
    /// mock-llm: the process id of an --against server, as NAME=PID, to report its CPU time per
    /// request (read from /proc, Linux); repeatable.
    #[arg(long, value_name = "NAME=PID", value_parser = parse_against_pid)]
    against_pid: Vec<(String, u32)>,
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
    /// mock-llm: also measure agentsim's server on the continuation workload (three-turn tool
    /// loops under `history: continuation`, each request replaying the history before it).
    #[arg(long)]
    continuation: bool,
    /// serve: the runtime persists to a state directory (`--state`), beside the SQLite store.
    #[arg(long)]
    state: bool,
    /// serve: run this many sessions instead of --seconds, and report each window of
    /// --window sessions (rate, latency, the state's size): the cost as sessions accumulate.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    sessions: Option<u64>,
    /// serve: sessions per window with --sessions.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    window: u64,
    /// runtime: the runtime to measure against (default: a built-in Python runtime of the
    /// standard library that answers at once).
    #[arg(long, value_name = "CMD")]
    runtime: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchWhat {
    /// Turn throughput of the runtime in the simulator (workloads w1..w6).
    Turns,
    /// Requests per second and latency of `agentsim mock-llm` over loopback.
    MockLlm,
    /// Seed 003's flow against `agentsim serve` over loopback on an SQLite store.
    Serve,
    /// What a run against an outside runtime costs agentsim (`--runtime`): runs per second and
    /// the CPU split between agentsim and the runtime.
    Runtime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchStream {
    /// Without and with streaming.
    Both,
    /// Plain requests only.
    No,
    /// Streamed requests only.
    Yes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BenchApi {
    /// OpenAI Chat Completions.
    OpenaiChat,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    OpenaiResponses,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum ObserverSetting {
    /// Invariants checked after every step (what scenario runs do).
    On,
    /// No invariant checks.
    Off,
    /// Both, one after the other.
    Both,
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

fn parse_against_pid(s: &str) -> Result<(String, u32), String> {
    let (name, pid) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=PID, e.g. aimock=4242"))?;
    let pid = pid
        .parse()
        .map_err(|_| format!("`{pid}`: a process id is a positive whole number"))?;
    Ok((name.to_owned(), pid))
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    Workload::parse(s)
        .ok_or_else(|| format!("unknown workload `{s}` (expected w1, w2, w3, w4 or w5)"))
}

/// Runs `agentsim bench` with its flags: `turns`, `mock-llm` or `serve`.
pub(crate) fn command(args: BenchArgs) -> ExitCode {
    match args {
        BenchArgs {
            what: BenchWhat::Turns,
            workloads,
            seconds,
            repeat,
            json,
            observer,
            connections: _,
            against,
            against_pid,
            server_threads,
            api,
            stream,
            continuation,
            runtime: _,
            state: _,
            sessions: _,
            window: _,
        } => {
            if !against.is_empty()
                || !against_pid.is_empty()
                || !api.is_empty()
                || server_threads.is_some()
                || stream != BenchStream::Both
                || continuation
            {
                eprintln!("error: --against, --against-pid, --api, --server-threads, --stream and --continuation go with `agentsim bench mock-llm`");
                return ExitCode::from(2);
            }
            bench(workloads, seconds, repeat, json, observer)
        }
        #[cfg(feature = "mock-server")]
        BenchArgs {
            what: BenchWhat::Runtime,
            seconds,
            json,
            runtime,
            workloads,
            ..
        } => {
            let names: Vec<&'static str> = workloads.iter().map(|w| w.name()).collect();
            super::bench_runtime::bench_runtime(seconds, json, runtime, &names)
        }
        #[cfg(not(feature = "mock-server"))]
        BenchArgs {
            what: BenchWhat::Runtime,
            ..
        } => {
            eprintln!("error: `bench runtime` needs the feature mock-server");
            ExitCode::from(2)
        }
        #[cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]
        BenchArgs {
            what: BenchWhat::Serve,
            seconds,
            json,
            connections,
            state,
            sessions,
            window,
            ..
        } => bench_serve(seconds, json, connections, (state, sessions, window)),
        #[cfg(not(all(feature = "mock-server", feature = "http-model", feature = "sqlite")))]
        BenchArgs {
            what: BenchWhat::Serve,
            ..
        } => {
            eprintln!("error: `bench serve` needs the features mock-server, http-model and sqlite");
            ExitCode::from(2)
        }
        BenchArgs {
            what: BenchWhat::MockLlm,
            workloads,
            seconds,
            json,
            connections,
            against,
            against_pid,
            server_threads,
            api,
            stream,
            continuation,
            repeat,
            ..
        } => {
            if !workloads.is_empty() || repeat != 1 {
                eprintln!("error: --workload and --repeat go with `agentsim bench turns`");
                return ExitCode::from(2);
            }
            bench_mock_llm(MockLlmBench {
                seconds,
                json,
                connections,
                against,
                against_pid,
                server_threads,
                apis: api,
                streams: stream,
                continuation,
            })
        }
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

#[cfg(not(feature = "mock-server"))]
fn bench_mock_llm(_: MockLlmBench) -> ExitCode {
    eprintln!("error: this agentsim was built without the `mock-server` feature");
    ExitCode::from(2)
}

#[cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]
fn bench_serve(
    seconds: f64,
    json: bool,
    clients: u32,
    (state, sessions, window): (bool, Option<u64>, u64),
) -> ExitCode {
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
            state_dir: state.then(|| dir.join("state")),
            ..Default::default()
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
        let measured = match sessions {
            None => bench::run(&base, clients, seconds).await.map(Ok),
            Some(total) => {
                let state_dir = state.then(|| dir.join("state"));
                bench::run_growth(&base, clients, total, window, state_dir.as_deref())
                    .await
                    .map(Err)
            }
        };
        running.stop();
        running.finish().await.map_err(|e| e.to_string())?;
        mock.stop();
        measured
    });
    let _ = std::fs::remove_dir_all(&dir);
    let m = match measured {
        Ok(Ok(m)) => m,
        Ok(Err(windows)) => return show_growth(&windows, json, clients, state),
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

/// Prints the windows of a growth run of `bench serve`.
#[cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]
fn show_growth(
    windows: &[agentsim::serve::bench::Window],
    json: bool,
    clients: u32,
    state: bool,
) -> ExitCode {
    if json {
        let out = serde_json::json!({ "clients": clients, "state": state, "windows": windows });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialises")
        );
        return ExitCode::SUCCESS;
    }
    println!(
        "agentsim serve, SQLite store{}, {clients} clients over loopback",
        if state { " and --state" } else { "" }
    );
    println!("  sessions  sessions/s  webhook p50 / p99 ms  answer p50 / p99 ms  state.json  context.jsonl");
    let kb = |b: Option<u64>| b.map_or("-".to_owned(), |b| format!("{:.1} KB", b as f64 / 1024.0));
    let ms = |us: u64| us as f64 / 1000.0;
    for w in windows {
        println!(
            "  {:>8}  {:>10.1}  {:>8.2} / {:>8.2}  {:>8.2} / {:>8.2}  {:>10}  {:>13}",
            w.sessions,
            w.sessions_per_sec,
            ms(w.webhook.p50_us),
            ms(w.webhook.p99_us),
            ms(w.answer.p50_us),
            ms(w.answer.p99_us),
            kb(w.state_bytes),
            kb(w.journal_bytes)
        );
    }
    ExitCode::SUCCESS
}

/// The flags of `agentsim bench mock-llm`.
#[cfg_attr(not(feature = "mock-server"), allow(dead_code))]
struct MockLlmBench {
    seconds: f64,
    json: bool,
    connections: u32,
    against: Vec<(String, std::net::SocketAddr)>,
    against_pid: Vec<(String, u32)>,
    server_threads: Option<u32>,
    apis: Vec<BenchApi>,
    streams: BenchStream,
    continuation: bool,
}

#[cfg(feature = "mock-server")]
fn bench_mock_llm(flags: MockLlmBench) -> ExitCode {
    use agentsim::mock_llm::load;
    let MockLlmBench {
        seconds,
        json,
        connections,
        against,
        against_pid,
        server_threads,
        apis,
        streams,
        continuation,
    } = flags;
    if let Some((name, _)) = against_pid
        .iter()
        .find(|(name, _)| !against.iter().any(|(n, _)| n == name))
    {
        eprintln!("error: --against-pid {name}=...: no --against {name}=URL to go with it");
        return ExitCode::from(2);
    }
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
    use super::bench_cpu::{CpuRow, Server, ServerCpu};
    let mut targets = vec![Server {
        name: "agentsim".into(),
        addr: running.addr,
        cpu: ServerCpu::ThisProcessButMe,
    }];
    targets.extend(against.into_iter().map(|(name, addr)| {
        let cpu = against_pid
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(ServerCpu::Unknown, |&(_, pid)| ServerCpu::Process(pid));
        Server { name, addr, cpu }
    }));
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
            "{:<12} {:<22} {:<6} {:>10} {:>9} {:>9} {:>7} {:>11}",
            "server", "api", "stream", "req/s", "p50 µs", "p99 µs", "errors", "CPU µs/req"
        );
    }
    let result = client_rt.block_on(super::bench_cpu::compare(
        &targets,
        &modes,
        connections as usize,
        std::time::Duration::from_secs_f64(seconds),
        |r| {
            if !json {
                print_row(r);
            }
        },
    ));
    // The continuation workload, agentsim's server alone (the others keep no history).
    let result = result.map(|mut rows| {
        if continuation {
            let measured = client_rt.block_on(load::run_continuation(
                running.addr,
                connections as usize,
                std::time::Duration::from_secs_f64(seconds),
            ));
            let row = CpuRow {
                row: load::Row {
                    server: "agentsim".into(),
                    api: "anthropic-continuation",
                    stream: false,
                    measured,
                },
                cpu_us_per_request: None,
            };
            if !json {
                print_row(&row);
            }
            rows.push(row);
        }
        rows
    });
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
    // Per peer and mode: agentsim's requests per second over the peer's, and the peer's CPU
    // time per request over agentsim's (both "how many times better agentsim is").
    let ratios: Vec<serde_json::Value> = rows
        .iter()
        .filter(|r| r.row.server != "agentsim")
        .filter_map(|other| {
            let ours = rows.iter().find(|r| {
                r.row.server == "agentsim"
                    && r.row.api == other.row.api
                    && r.row.stream == other.row.stream
            })?;
            (other.row.measured.rps > 0.0).then(|| {
                let cpu_ratio = match (ours.cpu_us_per_request, other.cpu_us_per_request) {
                    (Some(o), Some(t)) if o > 0.0 => Some(t / o),
                    _ => None,
                };
                serde_json::json!({"against": other.row.server, "api": other.row.api,
                    "stream": other.row.stream,
                    "ratio": ours.row.measured.rps / other.row.measured.rps,
                    "cpu_ratio": cpu_ratio})
            })
        })
        .collect();
    if json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(&r.row).expect("serialises");
                v["cpu_us_per_request"] = serde_json::json!(r.cpu_us_per_request);
                v
            })
            .collect();
        let out = serde_json::json!({"connections": connections, "seconds": seconds,
            "server_threads": server_threads, "rows": rows, "ratios": ratios});
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialises")
        );
    } else {
        for r in &ratios {
            let cpu = match r["cpu_ratio"].as_f64() {
                Some(c) => format!(", {c:.1}x less CPU per request"),
                None => String::new(),
            };
            println!(
                "agentsim / {} ({}{}): {:.1}x the requests per second{cpu}",
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
    if rows.iter().any(|r| r.row.measured.errors > 0) {
        eprintln!("warning: some requests failed (see the errors column)");
    }
    ExitCode::SUCCESS
}

#[cfg(feature = "mock-server")]
fn print_row(r: &super::bench_cpu::CpuRow) {
    let cpu = r
        .cpu_us_per_request
        .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}"));
    let m = &r.row.measured;
    println!(
        "{:<12} {:<22} {:<6} {:>10.0} {:>9} {:>9} {:>7} {:>11}",
        r.row.server,
        r.row.api,
        if r.row.stream { "yes" } else { "no" },
        m.rps,
        m.p50_us,
        m.p99_us,
        m.errors,
        cpu
    );
}
