//! `agentsim record`: a proxy with mock-llm's surfaces in front of a real provider (or any
//! compatible server); at shutdown, what went through is imported into a scenario file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentsim::report::printable;
use agentsim::{import, record};

use super::runtime_args::RuntimeArgs;
use super::shared::{async_runtime, check_outputs, stop_signal, write_imported, write_output};

#[derive(clap::Args)]
pub(crate) struct RecordArgs {
    /// With --runtime: the scenario whose agents, tools and `user` steps drive your runtime (its
    /// `llm:` scripts are not used: the upstream answers). The written file has its user
    /// messages as steps, each with an `expect` of what your runtime sent.
    scenario: Option<PathBuf>,
    /// The upstream's base URL: a provider (https://api.anthropic.com, https://api.openai.com)
    /// or any compatible server. Requests go to it with their headers (keys included, never
    /// written anywhere).
    #[arg(long)]
    upstream: String,
    /// Where to write the scenario at shutdown (written whole or not at all).
    #[arg(long)]
    out: PathBuf,
    /// Address to listen on (port 0 picks a free port; default 127.0.0.1:8080, or a free
    /// loopback port with --runtime).
    #[arg(long)]
    addr: Option<std::net::SocketAddr>,
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
    #[command(flatten)]
    runtime: RuntimeArgs,
}

impl RecordArgs {
    /// Whether the recording drives a runtime through the protocol (over pipes).
    pub(crate) fn runtime_given(&self) -> bool {
        self.scenario.is_some() || self.runtime.given()
    }
}

/// Runs `agentsim record` with its flags: exit 0 when the scenario is written, 1 when what was
/// recorded cannot be imported, 2 for a usage error.
pub(crate) fn command(args: RecordArgs) -> ExitCode {
    let RecordArgs {
        scenario,
        upstream,
        out,
        addr,
        journal,
        name,
        body_limit,
        allow_hosts,
        runtime: runtime_args,
    } = args;
    let mut outputs: Vec<(&str, &Path)> = vec![("--out", &out)];
    if let Some(j) = &journal {
        outputs.push(("--journal", j));
    }
    let inputs: Vec<&Path> = scenario.as_deref().into_iter().collect();
    if let Err(code) = check_outputs(&inputs, &outputs) {
        return code;
    }
    // Driven through the runtime protocol: a scenario and a runtime, both or neither (a config
    // file's runtime alone leaves the proxy as it is).
    let driven = match (&scenario, runtime_args.options(None)) {
        (_, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        (Some(path), Ok(Some(options))) => match agentsim::scenario::load(path) {
            Ok(s) => Some((s, options)),
            Err(e) => {
                eprintln!("error: {}", printable(&e.to_string()));
                return ExitCode::from(2);
            }
        },
        (Some(_), Ok(None)) => {
            eprintln!("error: a SCENARIO is for a recording driven through your runtime: give --runtime CMD too");
            return ExitCode::from(2);
        }
        (None, Ok(_)) if runtime_args.runtime.is_some() => {
            eprintln!("error: --runtime drives your runtime through a scenario's user steps: give the SCENARIO too");
            return ExitCode::from(2);
        }
        (None, Ok(_)) => None,
    };
    let addr = addr.unwrap_or_else(|| {
        let port = if driven.is_some() { 0 } else { 8080 };
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    });
    let runtime = match async_runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let record_options = record::Options {
        addr,
        upstream: upstream.clone(),
        body_limit,
        allow_hosts,
    };
    if let Some((scenario, options)) = driven {
        return driven_command(
            &runtime,
            &scenario,
            &options,
            record_options,
            &out,
            journal.as_deref(),
            name,
        );
    }
    let recorded = runtime.block_on(async {
        let stop = stop_signal();
        let running = record::start(record_options).await?;
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

/// `agentsim record SCENARIO --runtime CMD`: the runtime driven through the protocol by the
/// scenario's user steps, its model requests through the proxy to the upstream; written: the
/// recorded scripts, and the user's messages as steps with `sent` expectations.
fn driven_command(
    runtime: &tokio::runtime::Runtime,
    scenario: &agentsim::scenario::Scenario,
    options: &agentsim::outside_run::Options,
    record_options: record::Options,
    out: &Path,
    journal: Option<&Path>,
    name: Option<String>,
) -> ExitCode {
    let upstream = record_options.upstream.clone();
    // The upstream answers, so the scenario's scripts are not served (and not missed); its
    // expectations are replaced by what the runtime sends.
    let mut driving = scenario.clone();
    driving.scripts.clear();
    driving.more_replies = None;
    driving.expect_violation = None;
    driving
        .steps
        .retain(|s| !matches!(s.kind, agentsim::scenario::StepKind::Expect(_)));
    let recorded = runtime.block_on(async {
        let running = record::start(record_options)
            .await
            .map_err(|e| e.to_string())?;
        eprintln!(
            "recording: driving `{}` through {}, forwarding to {}",
            printable(&agentsim::outside_run::join_command(&options.command)),
            printable(&scenario.path.display().to_string()),
            printable(&upstream)
        );
        let addr = running.addr;
        let outcome = agentsim::outside_run::run_with_model(&driving, options, Some(addr)).await;
        running.stop();
        let journal = running
            .finish(std::future::pending())
            .await
            .map_err(|e| e.to_string())?;
        let outcome = outcome.map_err(|e| e.to_string())?;
        Ok::<_, String>((outcome, journal))
    });
    let (outcome, text) = match recorded {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", printable(&e));
            return ExitCode::from(2);
        }
    };
    if let Some(path) = journal {
        if let Err(code) = write_output(path, text.as_bytes()) {
            return code;
        }
    }
    if let Some(f) = &outcome.failure {
        eprintln!(
            "error: the recorded run failed, so nothing is written: {}: {}",
            f.kind.name(),
            printable(&f.message)
        );
        return ExitCode::FAILURE;
    }
    let steps = match record::steps_yaml(scenario, &outcome.sent, &outcome.sent_seq) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", printable(&e));
            return ExitCode::FAILURE;
        }
    };
    let skills: std::collections::BTreeSet<String> =
        scenario.catalog.skills.keys().cloned().collect();
    let name = name.unwrap_or_else(|| format!("recorded from {}", scenario.name));
    let source = Path::new("recorded journal");
    let mut imported = match import::import_with_skills(text.as_bytes(), source, &name, &skills) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {}", printable(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    let skeleton = std::fs::read_to_string(&scenario.path).unwrap_or_default();
    match record::with_agent_settings(&imported.yaml, &skeleton) {
        Ok(y) => imported.yaml = y,
        Err(e) => {
            eprintln!("error: {}", printable(&e));
            return ExitCode::FAILURE;
        }
    }
    imported
        .yaml
        .push_str("# The user's messages, and what the runtime sent after each:\n");
    imported.yaml.push_str(&steps);
    write_imported(out, &imported, &|line| {
        format!("exchange at journal line {line}")
    })
}
