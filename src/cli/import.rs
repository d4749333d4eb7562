//! `agentsim import`: a log (mock-llm's journal, provider request bodies, seed 000's
//! `context.jsonl` with its `state.json`) written as a scenario file that `agentsim mock-llm`
//! serves back; what is not in the scripts listed on stderr.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentsim::import;
use agentsim::report::printable;

use super::shared::{check_outputs, write_imported};

#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    /// The log: mock-llm's journal (`--journal`, one JSON exchange a line), a provider request
    /// body (Anthropic Messages, OpenAI Chat, OpenAI Responses) or a JSON list of them, seed
    /// 000's `context.jsonl`, or a directory holding `context.jsonl` (and `state.json`).
    input: PathBuf,
    /// Where to write the scenario (never over the input; written whole or not at all).
    #[arg(long)]
    out: PathBuf,
    /// The scenario's `name` (default: "imported from FILE").
    #[arg(long)]
    name: Option<String>,
    /// The `state.json` that goes with a `context.jsonl` input (a directory's own is read
    /// without it).
    #[arg(long)]
    state: Option<PathBuf>,
}

fn read(path: &Path) -> Result<Vec<u8>, ExitCode> {
    std::fs::read(path).map_err(|e| {
        eprintln!(
            "error: cannot read {}: {e}",
            printable(&path.display().to_string())
        );
        ExitCode::from(2)
    })
}

/// Runs `agentsim import` with its flags: exit 0 when the file is written, 1 when the input
/// cannot be imported (said where), 2 for a usage error.
pub(crate) fn command(args: ImportArgs) -> ExitCode {
    let ImportArgs {
        input,
        out,
        name,
        state,
    } = args;
    // A directory of seed 000's persisted files: its context.jsonl, and its state.json if any.
    let (log, state) = if input.is_dir() {
        if state.is_some() {
            eprintln!("error: --state goes with a context.jsonl file; a directory's own state.json is read");
            return ExitCode::from(2);
        }
        let state = input.join("state.json");
        (input.join("context.jsonl"), state.exists().then_some(state))
    } else {
        (input.clone(), state)
    };
    let mut inputs: Vec<&Path> = vec![&input, &log];
    inputs.extend(state.as_deref());
    if let Err(code) = check_outputs(&inputs, &[("--out", &out)]) {
        return code;
    }
    let bytes = match read(&log) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let state_bytes = match &state {
        Some(p) => match read(p) {
            Ok(b) => Some(b),
            Err(code) => return code,
        },
        None => None,
    };
    let name = name.unwrap_or_else(|| {
        let file = input.file_name().map_or_else(
            || input.display().to_string(),
            |f| f.to_string_lossy().into_owned(),
        );
        format!("imported from {file}")
    });
    let with_state = state_bytes.as_deref().zip(state.as_deref());
    let imported = match import::import_with_state(&bytes, &log, with_state, &name) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {}", printable(&e.to_string()));
            return ExitCode::FAILURE;
        }
    };
    let shown = log.display().to_string();
    let shown = printable(&shown);
    write_imported(&out, &imported, &|line| format!("{shown}:{line}"))
}
