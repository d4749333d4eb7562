//! `agentsim explore FILE --runtime CMD`: the scenario under many seeds against a runtime under
//! test, each run a fresh process with the seed's faults (model faults from the mock server, kills
//! and restarts), and each finding shrunk by running the runtime again into a plain scenario file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentsim::explore::outside::{self, OutsideSettings, SeedRun, Verdict};
use agentsim::explore::outside_generated::{self, Expressible};
use agentsim::outside_run::{join_command, NotRun, Options};
use agentsim::report;
use agentsim::scenario::Scenario;

use super::explore_turns::NoTurnFaults;
use super::shared::{write_new_with, Written};

/// What is explored: one scenario file under many seeds, or a generated scenario per seed.
pub(crate) enum Subject {
    /// The scenario file.
    File(Box<Scenario>),
    /// `--generated`: a scenario per seed, kept to what the runtime's capabilities express.
    Generated,
}

/// What `explore --runtime` was asked.
pub(crate) struct Asked<'a> {
    pub file: &'a Path,
    pub first: u64,
    pub runs: u64,
    pub jobs: usize,
    /// Faults on at all (`--no-faults` turns them off).
    pub faults: bool,
    /// `--no-fault llm-error`.
    pub no_model_faults: bool,
    /// `--no-fault llm-stall`.
    pub no_model_stalls: bool,
    /// `--no-fault llm-latency`.
    pub no_model_latency: bool,
    /// `--no-fault restart`.
    pub no_restarts: bool,
    /// `--no-fault tool-error`.
    pub no_tool_errors: bool,
    /// `--no-fault tool-latency` (also the hangs of tools with a `timeout`).
    pub no_tool_latency: bool,
    /// `--no-fault user-message`, `--no-fault cancel`, `--no-fault restart-mid-turn`.
    pub no_turns: NoTurnFaults,
    pub time: Option<Duration>,
    pub out: Option<&'a Path>,
    pub shrink_runs: usize,
    pub shrink_time: Duration,
    /// Keep a process per job and `reset` it between runs, when the runtime offers `reset`
    /// (`--no-reset` turns it off).
    pub reset: bool,
    /// `--determinism`: each seed run twice and compared.
    pub determinism: Option<super::explore_determinism::Determinism>,
}

impl Asked<'_> {
    /// The flags that repeat the fault settings in a rerun command.
    fn fault_flags(&self) -> String {
        let mut flags = String::new();
        if !self.faults {
            flags.push_str(" --no-faults");
        }
        if self.faults && self.no_model_faults {
            flags.push_str(" --no-fault llm-error");
        }
        if self.faults && self.no_model_stalls {
            flags.push_str(" --no-fault llm-stall");
        }
        if self.faults && self.no_model_latency {
            flags.push_str(" --no-fault llm-latency");
        }
        if self.faults && self.no_restarts {
            flags.push_str(" --no-fault restart");
        }
        if self.faults && self.no_tool_errors {
            flags.push_str(" --no-fault tool-error");
        }
        if self.faults && self.no_tool_latency {
            flags.push_str(" --no-fault tool-latency");
        }
        if self.faults {
            flags.push_str(&self.no_turns.flags());
        }
        if let Some(d) = &self.determinism {
            flags.push_str(&d.flags());
        }
        flags
    }
}

/// `--runtime CMD` and its flags, as a command line repeats them.
fn runtime_flags(options: &Options) -> String {
    format!(
        "--runtime {}{}",
        join_command(&[options.display()]),
        options.rerun_flags()
    )
}

/// Runs the exploration.
pub(crate) fn command(subject: Subject, options: Options, asked: Asked<'_>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let file = match &subject {
        Subject::File(_) => report::terminal(&asked.file.display().to_string()).into_owned(),
        Subject::Generated => "generated scenarios".to_owned(),
    };
    // What the runtime offers decides which faults it can take: a run with no steps asks it.
    let mut probe = match &subject {
        Subject::File(scenario) => (**scenario).clone(),
        Subject::Generated => outside_generated::generate(0, Expressible::default()),
    };
    probe.steps.clear();
    probe.expect_violation = None;
    let capabilities = match rt.block_on(agentsim::outside_run::run(&probe, &options)) {
        Ok(o) => match &o.failure {
            Some(f) if !matches!(outside::verdict(&o), Verdict::Limit(_)) => {
                println!(
                    "FAIL: the runtime did not start and stop cleanly with no step to play: {}",
                    report::terminal(&f.message)
                );
                for line in o.stderr.iter().rev().take(20).rev() {
                    println!("  | {}", report::terminal(line));
                }
                return ExitCode::FAILURE;
            }
            _ => o.capabilities,
        },
        Err(e) => return not_run(&e),
    };
    let settings = OutsideSettings {
        model_faults: asked.faults && !asked.no_model_faults,
        model_stalls: asked.faults && !asked.no_model_stalls,
        model_latency: asked.faults && !asked.no_model_latency,
        restarts: asked.faults && !asked.no_restarts && capabilities.iter().any(|c| c == "restart"),
        tool_errors: asked.faults && !asked.no_tool_errors,
        tool_latency: asked.faults && !asked.no_tool_latency,
        tool_hangs: asked.faults
            && !asked.no_tool_latency
            && capabilities.iter().any(|c| c == "tool-timeouts"),
        turns: asked
            .no_turns
            .settings(asked.faults, !asked.no_restarts, &capabilities),
    };
    let explored = match &subject {
        Subject::File(scenario) => Some(outside::explored(scenario)),
        Subject::Generated => None,
    };
    let expressible = Expressible::from_capabilities(&capabilities);
    let explored_is_generated = explored.is_none();
    let reuse = super::explore_reset::Reusing::new(asked.reset, &capabilities);
    let started = Instant::now();
    let cpu_before = super::cpu::cpu();
    let stopping = std::sync::Arc::new(AtomicBool::new(false));
    {
        let stopping = std::sync::Arc::clone(&stopping);
        let handler = move || {
            if stopping.swap(true, Ordering::SeqCst) {
                eprintln!("\ninterrupted again: quitting");
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupted: the runs in flight finish (each is bounded by the runtime's timeouts); what was found is still summarized, shrunk and written (Ctrl-C again quits at once)"
            );
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            eprintln!("warning: cannot catch Ctrl-C ({e}); it will quit without a summary");
        }
    }
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let faults = AtomicU64::new(0);
    let out_of_time = AtomicBool::new(false);
    // Per finding: how many runs, and the run of its lowest seed.
    let found: Mutex<BTreeMap<String, (u64, SeedRun)>> = Mutex::new(BTreeMap::new());
    let limits: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    let refused: Mutex<Option<NotRun>> = Mutex::new(None);
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) && asked.runs > 1 {
        indicatif::ProgressBar::with_draw_target(
            Some(asked.runs),
            indicatif::ProgressDrawTarget::stderr(),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("[{bar:30}] {pos}/{len} runs ({elapsed})")
            .expect("a valid template")
            .progress_chars("#> "),
    );
    let work = || {
        let options = reuse.job(&options);
        loop {
            if stopping.load(Ordering::SeqCst) {
                break;
            }
            if asked.time.is_some_and(|t| started.elapsed() >= t) {
                out_of_time.store(true, Ordering::SeqCst);
                break;
            }
            let i = next.fetch_add(1, Ordering::SeqCst);
            if i >= asked.runs {
                break;
            }
            let seed = asked.first.wrapping_add(i);
            let generated;
            let explored = match &explored {
                Some(explored) => explored,
                None => {
                    generated = outside_generated::generate(seed, expressible);
                    &generated
                }
            };
            let run = match rt.block_on(outside::run_seed(explored, seed, &options, settings)) {
                Ok(mut run) => match &asked.determinism {
                    Some(d) => {
                        match super::explore_determinism::check(
                            &rt, &mut run, explored, &options, settings, d,
                        ) {
                            Ok(()) => run,
                            Err(e) => {
                                *refused.lock().expect("no worker panics") = Some(e);
                                stopping.store(true, Ordering::SeqCst);
                                break;
                            }
                        }
                    }
                    None => run,
                },
                Err(NotRun::Unrunnable(_)) if explored_is_generated => {
                    // A generated scenario the runtime cannot run: counted, not a finding.
                    *limits
                        .lock()
                        .expect("no worker panics")
                        .entry("not-expressible".to_owned())
                        .or_insert(0) += 1;
                    done.fetch_add(1, Ordering::SeqCst);
                    bar.inc(1);
                    continue;
                }
                Err(e) => {
                    *refused.lock().expect("no worker panics") = Some(e);
                    stopping.store(true, Ordering::SeqCst);
                    break;
                }
            };
            if asked.runs == 1 {
                print!("{}", run.outcome.text());
                let lines = run.fault_lines();
                if !lines.is_empty() {
                    println!("faults of seed {seed}:");
                    for l in lines {
                        println!("  {l}");
                    }
                }
            }
            faults.fetch_add(
                (outside::injected(&run.outcome).len()
                    + run.plan.restarts_after.len()
                    + run.turns.interjections.len()
                    + run.outcome.tool_faults.len()) as u64,
                Ordering::SeqCst,
            );
            match run.verdict() {
                Verdict::Passed => {}
                Verdict::Limit(kind) => {
                    *limits
                        .lock()
                        .expect("no worker panics")
                        .entry(kind)
                        .or_insert(0) += 1;
                }
                Verdict::Found(kind) => {
                    let mut found = found.lock().expect("no worker panics");
                    match found.get_mut(&kind) {
                        Some((n, first)) => {
                            *n += 1;
                            if seed < first.seed {
                                *first = run;
                            }
                        }
                        None => {
                            found.insert(kind, (1, run));
                        }
                    }
                }
            }
            done.fetch_add(1, Ordering::SeqCst);
            bar.inc(1);
        }
        reuse.finish(&rt, &options);
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..asked.jobs.max(1))
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        if workers.is_empty() {
            work();
        }
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    bar.finish_and_clear();
    if let Some(e) = refused.into_inner().expect("no worker panics") {
        return not_run(&e);
    }
    let runs_done = done.load(Ordering::SeqCst);
    let interrupted = stopping.load(Ordering::SeqCst);
    let ran = if interrupted {
        format!("interrupted after {runs_done} of {} runs", asked.runs)
    } else if out_of_time.load(Ordering::SeqCst) && runs_done < asked.runs {
        format!("{runs_done} of {} runs in the time budget", asked.runs)
    } else {
        format!("{} runs", asked.runs)
    };
    let kinds: Vec<&str> = [
        (settings.model_faults, "model errors"),
        (settings.model_stalls, "model stalls"),
        (settings.model_latency, "model latency"),
        (settings.restarts, "kill -9 and restart"),
        (settings.tool_errors, "tool errors"),
        (settings.tool_latency, "tool latency"),
        (settings.tool_hangs, "tool hangs"),
        (settings.turns.user_messages, "user interjections"),
        (settings.turns.cancels, "cancel words"),
        (settings.turns.kills_mid_turn, "kills mid-turn"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, k)| *k)
    .collect();
    println!(
        "explored {file} against `{}`: {ran} from seed {}, {} jobs, faults {}",
        report::terminal(&options.display()),
        asked.first,
        asked.jobs.max(1),
        if kinds.is_empty() {
            "off".to_owned()
        } else {
            kinds.join(", ")
        }
    );
    if asked.faults && !asked.no_restarts && !settings.restarts {
        println!("  (no kills: the runtime does not offer the `restart` capability)");
    }
    if let Some(d) = &asked.determinism {
        println!(
            "  determinism: each seed that did not fail run a second time with the same faults and compared; a difference is reported, not shrunk{}",
            if d.given.is_empty() && d.from_config.is_empty() {
                String::new()
            } else {
                let all: Vec<&str> = d
                    .from_config
                    .iter()
                    .chain(&d.given)
                    .map(String::as_str)
                    .collect();
                format!(
                    "; ignored as known nondeterminism: {}",
                    report::terminal(&all.join(", "))
                )
            }
        );
    }
    println!("  {}", reuse.summary());
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "  {elapsed:.2}s, {:.1} runs/s, {} faults injected",
        runs_done as f64 / elapsed.max(1e-9),
        faults.load(Ordering::SeqCst)
    );
    println!("  {}", cpu_line(cpu_before, runs_done));
    let limits = limits.into_inner().expect("no worker panics");
    if !limits.is_empty() {
        let list: Vec<String> = limits.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!(
            "  stopped at a clean limit (the faults took the run where the script has no reply, or left replies unused): {}",
            list.join(", ")
        );
    }
    let found = found.into_inner().expect("no worker panics");
    let reset_broken = reuse.report_failures();
    if found.is_empty() && reset_broken {
        return ExitCode::FAILURE;
    }
    if found.is_empty() {
        println!("  findings: none");
        return if interrupted {
            ExitCode::from(130)
        } else {
            ExitCode::SUCCESS
        };
    }
    println!("  findings:");
    for (kind, (n, run)) in &found {
        println!("    {kind}: {n} runs (first at seed {})", run.seed);
    }
    let runtime = runtime_flags(&options);
    // Shrinking reruns the runtime many times: on one kept process too, when it offers `reset`.
    let shrink_options = reuse.job(&options);
    for (kind, (_, run)) in found {
        let message = run
            .outcome
            .failure
            .as_ref()
            .map_or(String::new(), |f| f.message.clone());
        println!(
            "FAIL seed {}: {kind}: {}",
            run.seed,
            report::terminal(&message)
        );
        if matches!(kind.as_str(), "unexpected-exit" | "timeout") {
            for line in run.outcome.stderr.iter().rev().take(10).rev() {
                println!("  | {}", report::terminal(line));
            }
        }
        for line in run.fault_lines() {
            println!("  fault: {line}");
        }
        println!(
            "  rerun: agentsim explore {} {runtime}{} --seed {} --runs 1",
            join_command(&[asked.file.display().to_string()]),
            asked.fault_flags(),
            run.seed
        );
        if kind == agentsim::explore::outside_determinism::DETERMINISM {
            println!(
                "  not shrunk: a runtime that does not repeat itself under the same inputs cannot be shrunk against; make it deterministic, or declare what varies with --nondeterministic PATTERN"
            );
        } else if let Some(dir) = asked.out {
            shrink_and_write(&rt, &run, &kind, &shrink_options, &asked, dir, &runtime);
        }
    }
    reuse.finish(&rt, &shrink_options);
    ExitCode::FAILURE
}

/// Shrinks a finding against the runtime and writes it under `dir`.
fn shrink_and_write(
    rt: &tokio::runtime::Runtime,
    run: &SeedRun,
    kind: &str,
    options: &Options,
    asked: &Asked<'_>,
    dir: &Path,
    runtime: &str,
) {
    let failing = outside::materialize(&run.played, &run.outcome);
    // An outside runtime runs in real time, so its shrinking has a deadline in real time.
    let deadline = Instant::now() + asked.shrink_time;
    let out_of_time = move || Instant::now() >= deadline;
    let budget = outside::Budget {
        runs: asked.shrink_runs,
        out_of_time: Some(&out_of_time),
    };
    let Some(shrunk) = outside::shrink(failing, options, kind, budget, rt) else {
        println!(
            "  not shrunk: with its faults made scripted errors and restart steps, the run no longer fails with {kind} (the runtime is not deterministic under scripted inputs, or the failure depends on timing{}); rerun the seed with the command above",
            if options.reuse.is_some() {
                ", or on the runs its process served before its `reset`: --no-reset gives each run a process of its own"
            } else {
                ""
            }
        );
        return;
    };
    let yaml = agentsim::scenario::write::to_yaml(&shrunk.scenario);
    let explored = format!(
        "agentsim explore {} {runtime}{} --seed {} --runs 1",
        join_command(&[asked.file.display().to_string()]),
        asked.fault_flags(),
        run.seed
    );
    let contents = |path: &Path| {
        format!(
            "# Found by exploring a runtime, its faults made explicit (scripted model errors, restart\n# steps), and shrunk against that runtime: it fails with {kind} while the bug is there.\n# Found by:\n#   {explored}\n# Rerun:\n#   agentsim run {} {runtime}\n{yaml}",
            join_command(&[path.display().to_string()]),
        )
    };
    let steps = shrunk.scenario.steps.len();
    match write_new_with(dir, &format!("{kind}-{}", run.seed), &contents) {
        Ok(Written::Known(path)) => {
            println!(
                "  shrunk to {steps} steps ({} runs of the runtime): known, {} holds exactly this file (not written again)",
                shrunk.attempts,
                path.display()
            );
            println!(
                "  run it: agentsim run {} {runtime}",
                join_command(&[path.display().to_string()])
            );
        }
        Ok(Written::New(path, taken)) => {
            if let Some(taken) = taken {
                println!(
                    "  {} exists and is kept; writing a new file",
                    taken.display()
                );
            }
            println!(
                "  shrunk to {steps} steps ({} runs of the runtime): {}",
                shrunk.attempts,
                path.display()
            );
            println!(
                "  run it: agentsim run {} {runtime}",
                join_command(&[path.display().to_string()])
            );
        }
        Err(e) => println!("  could not write into {}: {e}", dir.display()),
    }
}

/// The CPU time of agentsim and of the runtime's processes since `before`, per run, and
/// agentsim's share (the processes still running are not counted: every job has stopped its own
/// by now).
fn cpu_line(before: (f64, f64), runs: u64) -> String {
    let after = super::cpu::cpu();
    let (ours, theirs) = (after.0 - before.0, after.1 - before.1);
    let per_run = |s: f64| s * 1000.0 / runs.max(1) as f64;
    format!(
        "CPU: agentsim {ours:.2} s ({:.2} ms a run), the runtime's processes {theirs:.2} s ({:.2} ms a run): agentsim's share {:.0}%",
        per_run(ours),
        per_run(theirs),
        if ours + theirs > 0.0 { ours / (ours + theirs) * 100.0 } else { 0.0 }
    )
}

fn not_run(e: &NotRun) -> ExitCode {
    eprintln!("error: {}", report::terminal(&e.to_string()));
    ExitCode::from(2)
}
