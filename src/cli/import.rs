//! `agentsim import`: a log (mock-llm's journal, provider request bodies) written as a scenario
//! file that `agentsim mock-llm` serves back; what is not in the scripts listed on stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use agentsim::import;
use agentsim::report::printable;

use super::shared::{refuse_outputs_over_inputs, write_atomic};

#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    /// The log: mock-llm's journal (`--journal`, one JSON exchange a line), or a provider request
    /// body (Anthropic Messages, OpenAI Chat, OpenAI Responses) or a JSON list of them.
    input: PathBuf,
    /// Where to write the scenario (never over the input; written whole or not at all).
    #[arg(long)]
    out: PathBuf,
    /// The scenario's `name` (default: "imported from FILE").
    #[arg(long)]
    name: Option<String>,
}

/// Runs `agentsim import` with its flags: exit 0 when the file is written, 1 when the input
/// cannot be imported (said where), 2 for a usage error.
pub(crate) fn command(args: ImportArgs) -> ExitCode {
    let ImportArgs { input, out, name } = args;
    if let Err(e) = refuse_outputs_over_inputs(&[&input], &[("--out", &out)]) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let bytes = match std::fs::read(&input) {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "error: cannot read {}: {e}",
                printable(&input.display().to_string())
            );
            return ExitCode::from(2);
        }
    };
    let name = name.unwrap_or_else(|| {
        let file = input.file_name().map_or_else(
            || input.display().to_string(),
            |f| f.to_string_lossy().into_owned(),
        );
        format!("imported from {file}")
    });
    let imported = match import::import(&bytes, &input, &name) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {}", printable(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    for skip in &imported.skipped {
        eprintln!(
            "skipped: {}:{}: {}",
            printable(&input.display().to_string()),
            skip.line,
            printable(&skip.reason)
        );
    }
    if let Err(e) = write_atomic(&out, imported.yaml.as_bytes()) {
        eprintln!(
            "error: cannot write {}: {e}",
            printable(&out.display().to_string())
        );
        return ExitCode::from(2);
    }
    eprintln!(
        "wrote {}: {} exchanges, agents {}{}",
        printable(&out.display().to_string()),
        imported.exchanges,
        imported.agents.join(", "),
        if imported.skipped.is_empty() {
            String::new()
        } else {
            let n = imported.skipped.len();
            format!(
                "; {n} {} not in the scripts, listed above and in the file",
                if n == 1 { "thing" } else { "things" }
            )
        }
    );
    ExitCode::SUCCESS
}
