//! `agentsim record`: a proxy with mock-llm's surfaces in front of a real provider (or any
//! compatible server); at shutdown, what went through is imported into a scenario file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentsim::report::printable;
use agentsim::{import, record};

use super::shared::{async_runtime, check_outputs, stop_signal, write_imported, write_output};

#[derive(clap::Args)]
pub(crate) struct RecordArgs {
    /// The upstream's base URL: a provider (https://api.anthropic.com, https://api.openai.com)
    /// or any compatible server. Requests go to it with their headers (keys included, never
    /// written anywhere).
    #[arg(long)]
    upstream: String,
    /// Where to write the scenario at shutdown (written whole or not at all).
    #[arg(long)]
    out: PathBuf,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: std::net::SocketAddr,
    /// Also write the journal of every exchange here (mock-llm's format; `agentsim import`
    /// reads it).
    #[arg(long)]
    journal: Option<PathBuf>,
    /// The scenario's `name` (default: "recorded from UPSTREAM").
    #[arg(long)]
    name: Option<String>,
    /// The largest request body taken, in bytes; larger ones get the provider's 413.
    #[arg(long, default_value_t = agentsim::mock_llm::server::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// A host name the control route (/_agentsim/shutdown) also answers to, besides loopback
    /// names and the address listened on; repeat it for more, `*` for any.
    #[arg(long = "allow-host", value_name = "NAME")]
    allow_hosts: Vec<String>,
}

/// Runs `agentsim record` with its flags: exit 0 when the scenario is written, 1 when what was
/// recorded cannot be imported, 2 for a usage error.
pub(crate) fn command(args: RecordArgs) -> ExitCode {
    let RecordArgs {
        upstream,
        out,
        addr,
        journal,
        name,
        body_limit,
        allow_hosts,
    } = args;
    let mut outputs: Vec<(&str, &Path)> = vec![("--out", &out)];
    if let Some(j) = &journal {
        outputs.push(("--journal", j));
    }
    if let Err(code) = check_outputs(&[], &outputs) {
        return code;
    }
    let runtime = match async_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let options = record::Options {
        addr,
        upstream: upstream.clone(),
        body_limit,
        allow_hosts,
    };
    let recorded = runtime.block_on(async {
        let stop = stop_signal();
        let running = record::start(options).await?;
        println!("listening on http://{}", running.addr);
        eprintln!("recording: forwarding to {}", printable(&upstream));
        running.finish(stop).await
    });
    let text = match recorded {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &journal {
        if let Err(code) = write_output(path, text.as_bytes()) {
            return code;
        }
    }
    let name = name.unwrap_or_else(|| format!("recorded from {upstream}"));
    let source = Path::new("recorded journal");
    let imported = match import::import(text.as_bytes(), source, &name) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {}", printable(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    write_imported(&out, &imported, &|line| {
        format!("exchange at journal line {line}")
    })
}
