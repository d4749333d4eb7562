//! `check --runtime` against a runtime that offers `reset`: each job keeps one process and resets
//! it between scenarios, with the results a process per scenario gives; a reset the runtime does
//! not come back from is a failed case of its own, and the scenario after it still runs.

use std::path::{Path, PathBuf};

use super::support::{agentsim, text};

/// A directory of `n` copies of tests/runtimes/three-turns.yaml.
fn scenarios(name: &str, n: usize) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("check-runtime")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string("tests/runtimes/three-turns.yaml").unwrap();
    for i in 0..n {
        std::fs::write(dir.join(format!("turns-{i}.yaml")), &text).unwrap();
    }
    dir
}

fn check(dir: &Path, mode: &str, extra: &[&str]) -> (Option<i32>, String) {
    let runtime = format!("python3 tests/runtimes/fake.py {mode} reset");
    let mut args = vec!["check", dir.to_str().unwrap(), "--runtime", &runtime];
    args.extend_from_slice(extra);
    let o = agentsim(&args);
    (o.status.code(), text(&o))
}

#[test]
fn each_job_keeps_one_process_and_resets_it_between_scenarios() {
    let dir = scenarios("reuse", 4);
    let (code, all) = check(&dir, "ok", &["--jobs", "2"]);
    assert_eq!(code, Some(0), "{all}");
    // Two jobs: each starts one process, and its other scenarios reuse it.
    assert!(
        all.contains("4 scenarios: 4 passed, 0 failed (")
            && all.contains("; 2 on a process reused with `reset`)"),
        "{all}"
    );
    let (code, fresh) = check(&dir, "ok", &["--jobs", "2", "--no-reset"]);
    assert_eq!(code, Some(0), "{fresh}");
    assert!(
        fresh.contains("4 scenarios: 4 passed, 0 failed ("),
        "{fresh}"
    );
    assert!(!fresh.contains("reused"), "{fresh}");
    // JSON and JUnit carry the same cases.
    let junit = dir.join("report.xml");
    let (code, json) = check(
        &dir,
        "ok",
        &[
            "--jobs",
            "1",
            "--format",
            "json",
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{json}");
    let report: serde_json::Value = serde_json::from_str(&json).expect(&json);
    assert_eq!(report["passed"], 4, "{json}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("tests=\"4\"") && xml.contains("failures=\"0\""),
        "{xml}"
    );
}

#[test]
fn a_runtime_that_dies_on_reset_is_a_failed_case_and_every_scenario_still_runs() {
    let dir = scenarios("dies", 3);
    let (code, all) = check(&dir, "reset-dies", &["--jobs", "1"]);
    assert_eq!(code, Some(1), "{all}");
    // Every scenario ran (each after a failed reset in a new process) and passed; each failed
    // reset is a case named after the scenario it was for.
    assert!(
        all.contains("3 scenarios: 3 passed, 0 failed, 2 failed reset(s) of the runtime ("),
        "{all}"
    );
    assert!(all.contains("turns-1.yaml (reset)"), "{all}");
    assert!(all.contains("turns-2.yaml (reset)"), "{all}");
    assert!(
        all.contains("the runtime did not come back from `reset`"),
        "{all}"
    );
    assert!(all.contains("RuntimeError: reset broke"), "{all}");
    // Its rerun: the scenario before it and the scenario it was for, in one job.
    assert!(
        all.contains("turns-0.yaml")
            && all.contains(
                "turns-1.yaml --runtime 'python3 tests/runtimes/fake.py reset-dies reset' --jobs 1"
            ),
        "{all}"
    );
    // --no-reset never resets it.
    let (code, fresh) = check(&dir, "reset-dies", &["--jobs", "1", "--no-reset"]);
    assert_eq!(code, Some(0), "{fresh}");
}

#[test]
fn no_reset_without_a_runtime_is_refused() {
    let o = agentsim(&["check", "tests/runtimes/three-turns.yaml", "--no-reset"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--no-reset is for a check against your runtime"),
        "{}",
        text(&o)
    );
}
