//! Running a scenario against a user's runtime, a process that speaks the runtime protocol
//! (docs/runtime-protocol.md): `agentsim run --runtime CMD` and `agentsim check --runtime CMD`.
//!
//! agentsim starts the mock model server in its own process on a loopback port, starts the
//! runtime with exactly the environment the protocol gives it, writes `hello`, plays the
//! scenario's steps as `user` lines, answers `tool_call`s from the scenario's tools after their
//! (scaled) latencies, and judges:
//! - every line of the runtime, in order ([`crate::outside::Session`]): a line that breaks the
//!   protocol ends the run with a located protocol error;
//! - the `expect` steps, against the runtime's `send`, `stack`, `event` and `idle` lines and the
//!   mock server's journal ([`judge`]);
//! - the named checks after every step: the mock server's wire checks (`tool-pairing`,
//!   `replayed-history`, `request-format`), `no-display-leak` (a display-only text carried to a
//!   model as a tool result) and `idle` (nothing after the runtime said it was idle);
//! - the timeouts of section 8: a runtime that hangs, crashes or exits early fails the run with
//!   what was awaited and its last stderr lines, and never hangs agentsim.
//!
//! What no runtime can express through protocol 1, and what needs a capability the runtime did
//! not offer, is a located error before anything is judged ([`needs`]).
//!
//! Files: [`options`] (the command, environment and timeouts), [`needs`], `hello` (the first
//! line), `process` (the child process), `run` (the steps and the lines), [`judge`],
//! [`outcome`] (the result and its renderings), and `page` (its HTML page).

mod hello;
pub mod judge;
mod model_side;
pub mod needs;
pub mod options;
pub mod outcome;
mod page;
mod process;
mod restart_check;
mod run;
mod warm;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::mock_llm::server;
use crate::scenario::{Scenario, ScenarioError};

pub use options::{
    join_command, split_command, EnvEntry, Options, Timeouts, ToolFault, ToolFaults,
};
pub use outcome::{Entry, Failure, FailureKind, Outcome};
pub use warm::{ResetFailure, Reuse};

use outcome::Failure as F;
use run::{Run, Stop};

/// A scenario that cannot run against this runtime, or a run that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    /// The scenario asks what protocol 1 cannot express, or a capability the runtime did not
    /// offer: a located load error.
    #[error("{0}")]
    Unrunnable(ScenarioError),
    /// agentsim could not set up the run (a temporary directory, the mock server's port).
    #[error("{0}")]
    Setup(String),
}

/// A fresh directory for one run (its state directory), removed
/// when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> std::io::Result<WorkDir> {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir = base.join(format!(
                "agentsim-run-{}-{}-{nanos:x}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::create_dir(&dir) {
                Ok(()) => return Ok(WorkDir(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no fresh temporary directory"))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The runtime's environment: the basics of agentsim's own, the allow-list, and the variables
/// of the protocol.
fn environment(options: &Options, addr: SocketAddr, state_dir: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| options::BASIC_ENV.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect();
    for entry in &options.env {
        match entry {
            EnvEntry::Pass(name) => {
                if let Ok(v) = std::env::var(name) {
                    env.push((name.clone(), v));
                }
            }
            EnvEntry::Set(name, value) => env.push((name.clone(), value.clone())),
        }
    }
    let base = format!("http://{addr}");
    env.extend([
        ("ANTHROPIC_BASE_URL".to_owned(), base.clone()),
        ("OPENAI_BASE_URL".to_owned(), format!("{base}/v1")),
        ("ANTHROPIC_API_KEY".to_owned(), "agentsim".to_owned()),
        ("OPENAI_API_KEY".to_owned(), "agentsim".to_owned()),
        ("AGENTSIM_PROTOCOL".to_owned(), "1".to_owned()),
        (
            "AGENTSIM_STATE_DIR".to_owned(),
            state_dir.display().to_string(),
        ),
    ]);
    env
}

/// The time scale when none is given: 1 when an `expect` may be judged while a turn runs (after
/// a `wait: false` step), so that the scenario's margins hold as written; else 0.2.
fn auto_time_scale(scenario: &Scenario) -> f64 {
    let timed = scenario
        .steps
        .iter()
        .any(|s| matches!(s.kind, crate::scenario::StepKind::User { wait: false, .. }));
    if timed {
        1.0
    } else {
        0.2
    }
}

/// Runs `scenario` against the runtime of `options`.
pub async fn run(scenario: &Scenario, options: &Options) -> Result<Outcome, NotRun> {
    run_with_model(scenario, options, None).await
}

/// Runs `scenario` against the runtime of `options`, its model requests sent to `model` (a
/// server with mock-llm's routes: `agentsim record`'s proxy) instead of the mock server, when
/// given. The mock server still runs and sees no request.
pub async fn run_with_model(
    scenario: &Scenario,
    options: &Options,
    model: Option<SocketAddr>,
) -> Result<Outcome, NotRun> {
    if let Some(e) = needs::refusal(scenario) {
        return Err(NotRun::Unrunnable(e));
    }
    let time_scale = options
        .time_scale
        .unwrap_or_else(|| auto_time_scale(scenario));
    let work = WorkDir::new()
        .map_err(|e| NotRun::Setup(format!("cannot make a temporary directory: {e}")))?;
    let state_dir = work.0.join("state");
    std::fs::create_dir(&state_dir)
        .map_err(|e| NotRun::Setup(format!("cannot make the state directory: {e}")))?;
    let server_options = server::Options {
        keep_journal: true,
        scripted_usage_only: true,
        time_scale,
        faults: options.model_faults,
        ..server::Options::default()
    };
    // A process kept from the job's previous run is `reset` on a server at its old address.
    let mut warm = options.reuse.as_ref().and_then(Reuse::take);
    let at_old_address = match &warm {
        Some(w) => warm::start_server_at(scenario, server_options.clone(), w.addr)
            .await
            .ok(),
        None => None,
    };
    let running = match at_old_address {
        Some(running) => running,
        None => {
            // No process kept, or its address is taken: a new process on a new server.
            warm = None;
            server::start(scenario, server_options)
                .await
                .map_err(|e| NotRun::Setup(format!("cannot start the mock model server: {e}")))?
        }
    };
    let env = environment(options, model.unwrap_or(running.addr), &state_dir);
    let seed = options.seed.unwrap_or(scenario.seed);
    let mut run = Run::new(scenario, options, running, state_dir, env, seed, time_scale);
    if let Some(w) = warm {
        run.adopt(w);
    }
    let played = run.play().await;
    // A process is kept after a run that passed, or that failed a check or an expectation with
    // the runtime idle (`release` asks); not after a protocol error, a timeout or an exit.
    let keepable = match &played {
        Ok(()) | Err(Stop::Reproduced { .. }) => true,
        // Not after `idle`: a runtime that makes requests after its `idle` may still be at work.
        Err(Stop::Failed(f)) => match &f.kind {
            FailureKind::Check(check) => check != "idle",
            FailureKind::Expectation => true,
            _ => false,
        },
        Err(Stop::Unrunnable(_)) => false,
    };
    let kept = match (&options.reuse, keepable) {
        (Some(reuse), true) => run.release().map(|w| reuse.put(w)),
        _ => None,
    };
    let stopped = match kept {
        Some(()) => None,
        None => run.stop(played.is_ok()).await,
    };
    run.read_journal();
    let stderr = run.stderr_lines();
    run.server.stop();
    let model = run.server.report();
    let mut reproduced = None;
    let failure = match played {
        Err(Stop::Unrunnable(e)) => return Err(NotRun::Unrunnable(e)),
        Err(Stop::Failed(f)) => Some(f),
        Err(Stop::Reproduced { check, step }) => {
            let unchecked: Vec<usize> = scenario
                .steps
                .iter()
                .enumerate()
                .skip(step)
                .filter(|(_, s)| matches!(s.kind, crate::scenario::StepKind::Expect(_)))
                .map(|(i, _)| i + 1)
                .collect();
            if let Some(&first) = unchecked.first() {
                let s = &scenario.steps[first - 1];
                Some(F {
                    kind: FailureKind::UncheckedExpectations(check.clone()),
                    step: Some(first),
                    location: (s.line, s.column),
                    message: format!(
                        "{check} broke at step {step}, as expected, which ends the run; the `expect` steps after it ({}) were never judged: end the scenario at the step where it breaks",
                        unchecked.iter().map(|n| format!("step {n}")).collect::<Vec<_>>().join(", ")
                    ),
                })
            } else {
                reproduced = Some(check);
                None
            }
        }
        Ok(()) => stopped.or_else(|| final_checks(scenario, &run, &model)),
    };
    Ok(Outcome {
        name: scenario.name.clone(),
        path: scenario.path.display().to_string(),
        seed,
        command: run.command.clone(),
        capabilities: run.capabilities.clone(),
        failure,
        reproduced,
        entries: std::mem::take(&mut run.entries),
        sent: std::mem::take(&mut run.sent),
        sent_seq: std::mem::take(&mut run.sent_seq),
        tool_calls: std::mem::take(&mut run.tool_calls),
        exchanges: run.model_side.take_sorted(),
        model,
        stderr,
        timed_steps: run.timed_steps.clone(),
        tool_steps: std::mem::take(&mut run.tool_steps),
        tool_faults: std::mem::take(&mut run.tool_faults),
        broke_at: run.broke_at,
        time_scale,
        flags: options.rerun_flags(),
        user_steps: std::mem::take(&mut run.user_steps),
    })
}

/// The checks of a run whose steps all passed: requests the scenario had no reply for, script
/// entries never served, tool outcomes never used, and an expected violation that did not come.
fn final_checks(scenario: &Scenario, run: &Run<'_>, model: &server::Report) -> Option<F> {
    let at = |kind, message| {
        Some(F {
            kind,
            step: None,
            location: (0, 0),
            message,
        })
    };
    if let Some(check) = &scenario.expect_violation {
        return at(
            FailureKind::ExpectedViolation(check.clone()),
            format!("the scenario expects {check} to break (expect_violation), and it held"),
        );
    }
    if let Some(miss) = model.misses.first() {
        return at(
            FailureKind::ModelMiss,
            format!(
                "model request #{} has no reply in the scenario: {}",
                miss.exchange, miss.message
            ),
        );
    }
    if !model.unused.is_empty() {
        let list: Vec<String> = model
            .unused
            .iter()
            .map(|u| {
                format!(
                    "{}: {} entr{}",
                    u.agent,
                    u.entries.len(),
                    if u.entries.len() == 1 { "y" } else { "ies" }
                )
            })
            .collect();
        return at(
            FailureKind::UnusedReplies,
            format!(
                "the run passed but left scripted model replies unused ({}): the runtime made fewer model calls than the script has",
                list.join(", ")
            ),
        );
    }
    let unused = run.unused_tool_outcomes();
    if !unused.is_empty() {
        return at(
            FailureKind::UnusedToolOutcomes,
            format!(
                "the run passed but left per-call tool outcomes unused ({})",
                unused.join(", ")
            ),
        );
    }
    None
}

/// Runs `scenario` against the runtime of `options` on a runtime of its own (for callers that
/// are not async).
pub fn run_blocking(scenario: &Scenario, options: &Options) -> Result<Outcome, NotRun> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| NotRun::Setup(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(run(scenario, options))
}
