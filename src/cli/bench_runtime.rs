//! `agentsim bench runtime`: what a run against an outside runtime costs agentsim. It runs a
//! small scenario again and again against a runtime that answers at once (by default a Python
//! runtime of the standard library, `tests/runtimes/fake.py`, built in) and reports runs per
//! second and how the CPU time splits between agentsim and the runtime's processes.

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

/// CPU seconds (user + system) of this process and of its reaped children so far.
fn cpu() -> (f64, f64) {
    fn seconds(who: i32) -> f64 {
        // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return 0.0;
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        t(usage.ru_utime) + t(usage.ru_stime)
    }
    (seconds(libc::RUSAGE_SELF), seconds(libc::RUSAGE_CHILDREN))
}

/// Runs the bench for about `seconds` (at least three runs).
pub(crate) fn bench_runtime(seconds: f64, json: bool, runtime: Option<String>) -> ExitCode {
    let dir = std::env::temp_dir().join(format!("agentsim-bench-runtime-{}", std::process::id()));
    let setup = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("fake.py"), FAKE_RUNTIME))
        .and_then(|()| std::fs::write(dir.join("bench.yaml"), SCENARIO));
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
    let scenario = match scenario::load(&dir.join("bench.yaml")) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = Options::new(words);
    let rt = match super::shared::async_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let (self_before, children_before) = cpu();
    let started = Instant::now();
    let mut runs = 0u32;
    while runs < 3 || started.elapsed() < Duration::from_secs_f64(seconds) {
        match rt.block_on(outside_run::run(&scenario, &options)) {
            Ok(outcome) if outcome.passed() => runs += 1,
            Ok(outcome) => {
                eprintln!(
                    "error: the bench's run failed against `{command}`:\n{}",
                    outcome.text()
                );
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let (self_after, children_after) = cpu();
    let _ = std::fs::remove_dir_all(&dir);
    let ours = self_after - self_before;
    let theirs = children_after - children_before;
    let n = f64::from(runs);
    let share = if ours + theirs > 0.0 {
        ours / (ours + theirs)
    } else {
        0.0
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "runtime": command, "runs": runs, "seconds": wall,
                "runs_per_second": n / wall, "ms_per_run": wall * 1000.0 / n,
                "agentsim_cpu_ms_per_run": ours * 1000.0 / n,
                "runtime_cpu_ms_per_run": theirs * 1000.0 / n,
                "agentsim_share": share,
            })
        );
    } else {
        println!("bench runtime: `{command}`, {runs} runs of a 2-turn scenario in {wall:.1} s");
        println!("  runs/s                 {:>8.1}", n / wall);
        println!("  ms per run (wall)      {:>8.1}", wall * 1000.0 / n);
        println!("  agentsim CPU ms/run    {:>8.2}", ours * 1000.0 / n);
        println!("  runtime CPU ms/run     {:>8.2}", theirs * 1000.0 / n);
        println!("  agentsim's CPU share   {:>7.1}%", share * 100.0);
    }
    ExitCode::SUCCESS
}
