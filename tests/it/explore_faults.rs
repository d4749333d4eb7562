//! `explore --runtime` with the faults that take time: model stalls (no answer for seconds, then a
//! dropped connection), model latency, and tool calls that never answer (only for a tool with a
//! `timeout`, against a runtime that offers `tool-timeouts`). Each found bug is shrunk into a file
//! that replays the fault with no fault plan, fails against the buggy runtime and passes against
//! the fixed one.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::support::{agentsim, text};

fn fresh(name: &str) -> PathBuf {
    super::support::fresh_dir("explore-faults", name)
}

fn fake(mode: &str, caps: &str) -> String {
    format!("python3 tests/runtimes/fake.py {mode} {caps}")
}

/// Explores `subject` against `runtime` with only the fault kinds not in `off`.
fn explore(subject: &str, runtime: &str, runs: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "explore",
        subject,
        "--runtime",
        runtime,
        "--runs",
        runs,
        "--jobs",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    agentsim(&args)
}

/// The one file written into `out` (its path as text), and its text.
fn written(out: &Path) -> (String, String) {
    let (file, text) = super::support::the_file_in(out);
    (file.to_str().unwrap().to_owned(), text)
}

const ONLY_STALLS: [&str; 12] = [
    "--no-fault",
    "llm-error",
    "--no-fault",
    "llm-latency",
    "--no-fault",
    "tool-error",
    "--no-fault",
    "tool-latency",
    "--no-fault",
    "user-message",
    "--no-fault",
    "cancel",
];

#[test]
fn a_runtime_that_crashes_on_a_stalled_model_call_is_found_and_the_stall_is_replayed_as_a_late_dropped_connection(
) {
    let out = fresh("stall");
    let buggy = fake("crash-on-model-error", "");
    let o = explore(
        "tests/runtimes/one-tool.yaml",
        &buggy,
        "20",
        &out,
        &ONLY_STALLS,
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains(", faults model stalls\n"), "{all}");
    assert!(all.contains("    unexpected-exit: "), "{all}");
    assert!(
        all.contains("model fault injected: a stall of ")
            && all.contains(" ms, then a dropped connection"),
        "{all}"
    );
    let (file, yaml) = written(&out);
    // The stall, as a scripted dropped connection after the stall's length, before the reply
    // the runtime never got; the replies after it are kept for a runtime that retries.
    assert!(yaml.contains(r#""error":{"kind":"network""#), "{yaml}");
    assert!(
        ["\"after\":1000", "\"after\":2000", "\"after\":4000"]
            .iter()
            .any(|a| yaml.contains(a)),
        "{yaml}"
    );
    assert!(yaml.contains("It is 4 degrees."), "{yaml}");
    let again = agentsim(&["run", &file, "--runtime", &buggy]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("the runtime exited (status 3)"),
        "{}",
        text(&again)
    );
    let fixed = agentsim(&["run", &file, "--runtime", &fake("retry", "")]);
    assert_eq!(fixed.status.code(), Some(0), "{}", text(&fixed));
}

#[test]
fn a_tool_call_that_never_answers_is_found_against_a_runtime_that_ignores_the_timeout_it_offers() {
    let out = fresh("hang");
    let buggy = fake("ignore-tool-timeouts", "tool-timeouts");
    // Tool hangs only (they ride with tool latency).
    let mut flags = Vec::new();
    for kind in [
        "llm-error",
        "llm-stall",
        "llm-latency",
        "tool-error",
        "user-message",
        "cancel",
    ] {
        flags.extend(["--no-fault", kind]);
    }
    flags.extend(["--idle-timeout", "2s"]);
    let o = explore(
        "tests/runtimes/one-tool-timeout.yaml",
        &buggy,
        "10",
        &out,
        &flags,
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains(", faults tool latency, tool hangs\n"), "{all}");
    assert!(all.contains("    timeout: "), "{all}");
    assert!(all.contains("never answers"), "{all}");
    // The rerun command repeats the idle timeout it was found with.
    assert!(all.contains("--idle-timeout 2s --no-fault"), "{all}");
    let (file, yaml) = written(&out);
    assert!(yaml.contains(r#""hang":true"#), "{yaml}");
    // The reply a fixed runtime asks for once the call timed out is kept, though the buggy
    // runtime never got that far.
    assert!(
        yaml.contains("It is 4 degrees, or I could not tell."),
        "{yaml}"
    );
    let again = agentsim(&["run", &file, "--runtime", &buggy, "--idle-timeout", "2s"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    let fixed = agentsim(&["run", &file, "--runtime", &fake("ok", "tool-timeouts")]);
    assert_eq!(fixed.status.code(), Some(0), "{}", text(&fixed));
}

#[test]
fn no_tool_hangs_against_a_runtime_that_does_not_offer_tool_timeouts() {
    // Without `tool-timeouts` a scenario with a `timeout` is not runnable at all; a scenario
    // without one gets no hangs, whatever the runtime offers.
    let out = fresh("no-hangs");
    let o = explore(
        "tests/runtimes/one-tool.yaml",
        &fake("ok", "tool-timeouts"),
        "6",
        &out,
        &["--no-fault", "llm-stall"],
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(all.contains("tool hangs"), "{all}");
    assert!(!all.contains("never answers"), "{all}");
    let o = explore(
        "tests/runtimes/one-tool-timeout.yaml",
        &fake("ok", ""),
        "2",
        &out,
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("tool-timeouts"), "{}", text(&o));
}
