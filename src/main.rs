//! The `agentsim` command: run one scenario and print its transcript, check a corpus of
//! scenarios, or print the scenario JSON Schema.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};

use agentsim::render;
use agentsim::scenario::{self, RunOptions};

/// Deterministic simulation and test harness for interactive LLM agent runtimes.
///
/// Scenario files (YAML or JSON) describe agents, scripted model replies, scripted tools and the
/// user's steps with expectations. Every run is a pure function of the scenario and the seed.
#[derive(Parser)]
#[command(name = "agentsim", version, propagate_version = true)]
struct Cli {
    /// Log runtime internals (push/pop with depth, model calls) to stderr.
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
    },
    /// Print the JSON Schema of scenario files.
    Schema,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.verbose {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    match cli.command {
        Command::Run {
            file,
            seed,
            format,
            no_invariants,
        } => run(&file, seed, format, !no_invariants),
        Command::Check { paths, seed } => check(&paths, seed),
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

fn run(file: &Path, seed: Option<u64>, format: Format, observe: bool) -> ExitCode {
    let scenario = match scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = scenario::run(&scenario, RunOptions { seed, observe });
    match format {
        Format::Text => print!("{}", render::text(&outcome)),
        Format::Json => println!("{}", render::json(&outcome)),
    }
    match &outcome.failure {
        None => ExitCode::SUCCESS,
        Some(failure) => {
            eprintln!("FAILED {} (seed {})", outcome.path, outcome.seed);
            eprintln!("  {failure}");
            eprintln!("  rerun: {}", outcome.rerun_command());
            ExitCode::FAILURE
        }
    }
}

/// Scenario files under `path`, sorted, recursively.
fn collect(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for entry in entries {
            collect(&entry, out)?;
        }
    } else if path.is_file() {
        let is_scenario = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if is_scenario {
            out.push(path.to_owned());
        }
    } else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no such file or directory", path.display()),
        ));
    }
    Ok(())
}

fn check(paths: &[PathBuf], seed: Option<u64>) -> ExitCode {
    let started = Instant::now();
    let mut files = Vec::new();
    for path in paths {
        if let Err(e) = collect(path, &mut files) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if files.is_empty() {
        eprintln!("error: no scenario files (.yaml, .yml, .json) found");
        return ExitCode::from(2);
    }
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        let scenario = match scenario::load(file) {
            Ok(s) => s,
            Err(e) => {
                failed += 1;
                println!("FAIL {}", file.display());
                println!("  {e}");
                continue;
            }
        };
        let outcome = scenario::run(
            &scenario,
            RunOptions {
                seed,
                observe: true,
            },
        );
        match &outcome.failure {
            None => {
                passed += 1;
                match &outcome.reproduced {
                    Some(inv) => println!("ok   {} (reproduces {inv})", outcome.path),
                    None => println!("ok   {}", outcome.path),
                }
            }
            Some(failure) => {
                failed += 1;
                println!("FAIL {} (seed {})", outcome.path, outcome.seed);
                println!("  {failure}");
                println!("  rerun: {}", outcome.rerun_command());
            }
        }
    }
    println!(
        "{} scenarios: {passed} passed, {failed} failed ({:.2}s)",
        files.len(),
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
