//! `agentsim bench runtime`: what a run against an outside runtime costs agentsim, and the turn
//! throughput of that runtime. By default it runs a small scenario again and again against a
//! runtime that answers at once (a Python runtime of the standard library,
//! `tests/runtimes/fake.py`, built in) and reports runs per second and how the CPU time splits
//! between agentsim and the runtime's processes. With `--workload w1` or `w2` it plays the
//! simulator's workloads W1 (eight tool rounds, then text) and W2 (a skill with three tool rounds
//! that completes) as user messages to the runtime, with a scripted model that answers at once,
//! and reports model turns per second and each message's latency.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use agentsim::outside_run::{self, split_command, Options};
use agentsim::scenario;

/// The built-in runtime: stdlib Python that asks the mock server and answers at once.
const FAKE_RUNTIME: &str = include_str!("../../tests/runtimes/fake.py");

/// The scenario: two user turns, one with a tool call.
const SCENARIO: &str = "name: bench runtime
llm:
  main:
    - tool_use: { name: lookup, input: { q: x } }
    - Found it.
    - Bye.
tools:
  lookup: a result
steps:
  - user: find x
  - expect: { sent: [Found it.] }
  - user: bye
  - expect: { sent: [Bye.] }
";

/// User messages in one run of a W1 or W2 scenario (one runtime process serves them all, each in
/// a conversation of its own).
const MESSAGES: usize = 20;

/// A scenario of `MESSAGES` user messages, each one `workload` (`w1` or `w2`), and its model turns
/// per message.
fn workload_scenario(workload: &str) -> Option<(String, u64)> {
    let mut main = String::new();
    let mut child = String::new();
    let mut steps = String::new();
    for m in 1..=MESSAGES {
        // Each message in a conversation of its own, as each run of the simulator's workload
        // is: the history a request replays stays the workload's, not the bench's length.
        steps.push_str(&format!("  - user: go {m}\n    key: c{m}\n"));
        match workload {
            "w1" => {
                for i in 1..=8 {
                    main.push_str(&format!(
                        "    - tool_use: {{ name: echo, input: {{ n: {i} }} }}\n"
                    ));
                }
                main.push_str(&format!("    - done {m}\n"));
            }
            "w2" => {
                main.push_str(&format!(
                    "    - use_skill: {{ skill: child, message: go {m} }}\n    - done {m}\n"
                ));
                for i in 1..=3 {
                    child.push_str(&format!(
                        "    - tool_use: {{ name: echo, input: {{ n: {i} }} }}\n"
                    ));
                }
                child.push_str("    - complete: ok\n");
            }
            _ => return None,
        }
    }
    let (agents, turns) = if workload == "w2" {
        ("agents:\n  child: { kind: skill }\n", 6)
    } else {
        ("", 9)
    };
    let child = if child.is_empty() {
        String::new()
    } else {
        format!("  child:\n{child}")
    };
    Some((
        format!(
            "name: bench runtime {workload}\n{agents}llm:\n  main:\n{main}{child}tools:\n  echo: ok\nsteps:\n{steps}"
        ),
        turns,
    ))
}

/// The value at `q` (0..1) of sorted `values`, in ms.
fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Runs the bench for about `seconds` (at least three runs) with the default scenario, or once
/// per workload (`w1`, `w2`) for about `seconds` each.
pub(crate) fn bench_runtime(
    seconds: f64,
    json: bool,
    runtime: Option<String>,
    workloads: &[&'static str],
) -> ExitCode {
    let dir = std::env::temp_dir().join(format!("agentsim-bench-runtime-{}", std::process::id()));
    let mut files = vec![("bench.yaml".to_owned(), SCENARIO.to_owned(), None)];
    for w in workloads {
        let Some((yaml, turns)) = workload_scenario(w) else {
            eprintln!("error: `bench runtime` plays the workloads w1 and w2 (the others need what protocol 1 cannot express or a runtime with forks and batches); got {w}");
            return ExitCode::from(2);
        };
        files.push((format!("{w}.yaml"), yaml, Some((*w, turns))));
    }
    if !workloads.is_empty() {
        files.remove(0);
    }
    let setup = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("fake.py"), FAKE_RUNTIME))
        .and_then(|()| {
            files
                .iter()
                .try_for_each(|(name, yaml, _)| std::fs::write(dir.join(name), yaml))
        });
    if let Err(e) = setup {
        eprintln!(
            "error: cannot write the bench's files in {}: {e}",
            dir.display()
        );
        return ExitCode::from(2);
    }
    let command = runtime.unwrap_or_else(|| {
        format!(
            "python3 {} ok",
            outside_run::options::join_command(&[dir.join("fake.py").display().to_string()])
        )
    });
    let words = match split_command(&command) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: --runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match super::shared::async_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let options = Options::new(words);
    let mut results = Vec::new();
    for (name, _, workload) in &files {
        let scenario = match scenario::load(&dir.join(name)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        match measure(&rt, &scenario, &options, &command, seconds, *workload) {
            Ok(r) => results.push(r),
            Err(code) => return code,
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if json {
        let all: Vec<_> = results.iter().map(|r| r.json(&command)).collect();
        let out = if all.len() == 1 {
            all.into_iter().next().expect("one")
        } else {
            serde_json::Value::Array(all)
        };
        println!("{out}");
    } else {
        for r in &results {
            r.print(&command);
        }
    }
    ExitCode::SUCCESS
}

/// What one scenario measured.
struct Measured {
    workload: Option<(&'static str, u64)>,
    runs: u32,
    wall: f64,
    ours: f64,
    theirs: f64,
    /// Every user message's latency, sorted.
    messages: Vec<Duration>,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    scenario: &scenario::Scenario,
    options: &Options,
    command: &str,
    seconds: f64,
    workload: Option<(&'static str, u64)>,
) -> Result<Measured, ExitCode> {
    let (self_before, children_before) = super::cpu::cpu();
    let started = Instant::now();
    let mut runs = 0u32;
    let mut messages = Vec::new();
    let least = if workload.is_some() { 1 } else { 3 };
    while runs < least || started.elapsed() < Duration::from_secs_f64(seconds) {
        match rt.block_on(outside_run::run(scenario, options)) {
            Ok(outcome) if outcome.passed() => {
                runs += 1;
                messages.extend(outcome.user_steps.iter().copied());
            }
            Ok(outcome) => {
                eprintln!(
                    "error: the bench's run failed against `{command}`:\n{}",
                    outcome.text()
                );
                return Err(ExitCode::FAILURE);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(2));
            }
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let (self_after, children_after) = super::cpu::cpu();
    messages.sort();
    Ok(Measured {
        workload,
        runs,
        wall,
        ours: self_after - self_before,
        theirs: children_after - children_before,
        messages,
    })
}

impl Measured {
    fn share(&self) -> f64 {
        if self.ours + self.theirs > 0.0 {
            self.ours / (self.ours + self.theirs)
        } else {
            0.0
        }
    }

    /// Model turns per second of message time, and the mean turn of the median message, in ms.
    fn turns(&self) -> Option<(f64, f64)> {
        let (_, turns) = self.workload?;
        let busy: f64 = self.messages.iter().map(Duration::as_secs_f64).sum();
        let n = self.messages.len() as f64 * turns as f64;
        Some((n / busy, quantile(&self.messages, 0.5) / turns as f64))
    }

    fn json(&self, command: &str) -> serde_json::Value {
        let n = f64::from(self.runs);
        let mut v = serde_json::json!({
            "runtime": command, "runs": self.runs, "seconds": self.wall,
            "runs_per_second": n / self.wall, "ms_per_run": self.wall * 1000.0 / n,
            "agentsim_cpu_ms_per_run": self.ours * 1000.0 / n,
            "runtime_cpu_ms_per_run": self.theirs * 1000.0 / n,
            "agentsim_share": self.share(),
        });
        if let (Some((name, turns)), Some((per_second, turn_ms))) = (self.workload, self.turns()) {
            v["workload"] = name.into();
            v["turns_per_message"] = turns.into();
            v["messages"] = self.messages.len().into();
            v["turns_per_second"] = per_second.into();
            v["message_ms_p50"] = quantile(&self.messages, 0.5).into();
            v["message_ms_p99"] = quantile(&self.messages, 0.99).into();
            v["turn_ms_p50"] = turn_ms.into();
        }
        v
    }

    fn print(&self, command: &str) {
        let n = f64::from(self.runs);
        match (self.workload, self.turns()) {
            (Some((name, turns)), Some((per_second, turn_ms))) => {
                println!(
                    "bench runtime {name}: `{command}`, {} messages of {turns} model turns in {} runs, {:.1} s",
                    self.messages.len(),
                    self.runs,
                    self.wall
                );
                println!("  model turns/s          {per_second:>8.1}");
                println!(
                    "  message ms p50 / p99   {:>8.1} / {:.1}",
                    quantile(&self.messages, 0.5),
                    quantile(&self.messages, 0.99)
                );
                println!("  ms per turn (p50 msg)  {turn_ms:>8.2}");
            }
            _ => {
                println!(
                    "bench runtime: `{command}`, {} runs of a 2-turn scenario in {:.1} s",
                    self.runs, self.wall
                );
                println!("  runs/s                 {:>8.1}", n / self.wall);
                println!("  ms per run (wall)      {:>8.1}", self.wall * 1000.0 / n);
            }
        }
        println!("  agentsim CPU ms/run    {:>8.2}", self.ours * 1000.0 / n);
        println!("  runtime CPU ms/run     {:>8.2}", self.theirs * 1000.0 / n);
        println!("  agentsim's CPU share   {:>7.1}%", self.share() * 100.0);
    }
}
