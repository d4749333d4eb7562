//! `agentsim mock-llm`: serves a scenario's model scripts over HTTP until stopped, then reports
//! what was broken, missed or never served.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentsim::mock_llm::server;
use agentsim::scenario;

use super::shared::{async_runtime, refuse_outputs_over_inputs, stop_signal, write_atomic};

#[derive(clap::Args)]
pub(crate) struct MockLlmArgs {
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
    /// A host name the control routes (/_agentsim/*) also answer to (in Host and Origin),
    /// besides loopback names and the address listened on; repeat it for more, `*` for any.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
}

/// Runs `agentsim mock-llm` with its flags.
pub(crate) fn command(args: MockLlmArgs) -> ExitCode {
    let MockLlmArgs {
        scenario,
        addr,
        journal,
        report,
        transcript,
        body_limit,
        faults,
        seed,
        allow_hosts,
    } = args;
    let mut outputs: Vec<(&str, &Path)> = Vec::new();
    for (flag, path) in [
        ("--journal", &journal),
        ("--report", &report),
        ("--transcript", &transcript),
    ] {
        if let Some(path) = path {
            outputs.push((flag, path));
        }
    }
    if let Err(e) = refuse_outputs_over_inputs(&[&scenario], &outputs) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let faults = faults.map(|rate| agentsim::mock_llm::server::RandomFaults::errors(rate, seed));
    let options = server::Options {
        addr,
        journal,
        body_limit,
        faults,
        transcript: transcript.is_some(),
        time_scale: 1.0,
        allow_hosts,
        keep_journal: false,
        scripted_usage_only: false,
    };
    mock_llm(&scenario, options, report.as_deref(), transcript.as_deref())
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("`{s}` is not a rate from 0 to 1")),
    }
}

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
            eprintln!("error: {}", agentsim::report::terminal(&e.to_string()));
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
    print!("{}", agentsim::report::terminal(&report.text()));
    if let Some(path) = transcript_path {
        if let Err(e) = write_atomic(path, transcript.as_bytes()) {
            eprintln!("error: cannot write the transcript {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if let Some(path) = report_path {
        let json = serde_json::to_string_pretty(&report).expect("a report serialises");
        let json = agentsim::report::escape::json(&json).into_owned();
        if let Err(e) = write_atomic(path, (json + "\n").as_bytes()) {
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
