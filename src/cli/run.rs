//! `agentsim run`: one scenario, its transcript (text, JSON or Mermaid) and its HTML page.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentsim::report;
use agentsim::scenario::{self, RunOptions};

use super::runtime_args::RuntimeArgs;
use super::shared::{refuse_outputs_over_inputs, write_atomic};
use super::Format;

#[derive(clap::Args)]
pub(crate) struct RunArgs {
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
    #[command(flatten)]
    runtime: RuntimeArgs,
}

impl RunArgs {
    /// Whether the run may go to an outside runtime (`--runtime`, or a config file).
    pub(crate) fn runtime_given(&self) -> bool {
        self.runtime.given()
    }
}

/// Runs `agentsim run` with its flags.
pub(crate) fn command(args: RunArgs) -> ExitCode {
    let RunArgs {
        file,
        seed,
        format,
        no_invariants,
        html,
        mermaid,
        runtime,
    } = args;
    let outside = match runtime.options(seed) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(options) = outside {
        let refused = [(no_invariants, "--no-invariants"), (mermaid, "--mermaid")];
        if let Some((_, flag)) = refused.iter().find(|(on, _)| *on) {
            eprintln!(
                "error: {flag} is for agentsim's own runtime; it cannot be used with --runtime (or a config file's `runtime:` block)"
            );
            return ExitCode::from(2);
        }
        return run_outside(&file, &options, format, html.as_deref());
    }
    run(
        &file,
        seed,
        if mermaid {
            Output::Mermaid
        } else {
            Output::Format(format)
        },
        !no_invariants,
        html.as_deref(),
    )
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
    if let Some(page) = html {
        if let Err(e) = refuse_outputs_over_inputs(&[file], &[("--html", page)]) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let scenario = match scenario::load(file).and_then(|s| s.runnable().map(|()| s)) {
        Ok(s) => s,
        Err(e) => return load_failure(file, format, &e),
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
        if let Err(e) = write_atomic(path, report::html::page(&outcome).as_bytes()) {
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

/// A scenario that cannot be run: the located error on stderr (and, with `--format json`, as
/// the report on stdout), exit 2.
fn load_failure(file: &Path, format: Format, e: &scenario::ScenarioError) -> ExitCode {
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
            report::escape::json(&serde_json::to_string_pretty(&out).expect("a report is JSON"))
        );
    }
    eprintln!("error: {}", report::terminal(&e.to_string()));
    ExitCode::from(2)
}

/// `run --runtime CMD`: the scenario against the user's runtime.
fn run_outside(
    file: &Path,
    options: &agentsim::outside_run::Options,
    format: Format,
    html: Option<&Path>,
) -> ExitCode {
    use agentsim::outside_run::{self, NotRun};
    if let Some(page) = html {
        if let Err(e) = refuse_outputs_over_inputs(&[file], &[("--html", page)]) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let scenario = match scenario::load(file).and_then(|s| s.runnable().map(|()| s)) {
        Ok(s) => s,
        Err(e) => return load_failure(file, format, &e),
    };
    let outcome = match outside_run::run_blocking(&scenario, options) {
        Ok(o) => o,
        Err(NotRun::Unrunnable(e)) => return load_failure(file, format, &e),
        Err(NotRun::Setup(e)) => {
            eprintln!("error: {}", report::terminal(&e));
            return ExitCode::from(2);
        }
    };
    match format {
        Format::Text => print!("{}", outcome.text()),
        Format::Json => println!(
            "{}",
            report::escape::json(
                &serde_json::to_string_pretty(&outcome.to_json()).expect("a report is JSON")
            )
        ),
    }
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if let Some(path) = html {
        if let Err(e) = write_atomic(path, outcome.html().as_bytes()) {
            eprintln!("error: cannot write the page {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    match &outcome.failure {
        None => ExitCode::SUCCESS,
        Some(failure) => {
            eprintln!(
                "FAILED {} against `{}`",
                report::printable(&outcome.path),
                report::printable(&outcome.command)
            );
            if matches!(format, Format::Json)
                || !std::io::IsTerminal::is_terminal(&std::io::stdout())
            {
                eprintln!("  {}", report::terminal(&failure.message));
            }
            eprintln!("  rerun: {}", report::printable(&outcome.rerun_command()));
            ExitCode::FAILURE
        }
    }
}
