//! `benches/compare.sh`'s report (`benches/compare.py`) on the sample run in
//! `benches/compare-sample/`, whose figures are round so that every ratio is known: the report
//! prints each ratio of docs/performance.md, says what was skipped and why, and refuses a file it
//! cannot read with its name. Nothing is measured here (speed is never asserted by a test).

use std::path::Path;
use std::process::Command;

fn report(dir: &Path) -> (Option<i32>, String, String) {
    let out = Command::new("python3")
        .arg("benches/compare.py")
        .arg(dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_report_prints_every_ratio_of_the_sample_run() {
    let (code, out, err) = report(Path::new("benches/compare-sample"));
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "# agentsim performance, quick run, 2026-11-28T18:00Z, commit 0000000, 2 CPUs, measured in 95s",
        // Turns: observer off over on, by time and by instructions, and the three targets.
        "W1         1,000,000       1,000    2,000,000          500   2.00x",
        "W3              8,400         4,200   2.00x      100 / 100",
        "  W1 >= 2,000,000 turns/s: 1,000,000 turns/s, 0.50x of the target (not met)",
        "  W4 per-turn cost within 1.5x of W1: 1.10x by instructions (met)",
        "  W3 per-turn cost within 1.5x of W2: 1.20x by instructions (met)",
        // mock-llm: requests per second and CPU per request against each peer, each in its run.
        "  VidaiMock's published 50,000 req/s: agentsim's slowest mode 60,000 req/s, 1.20x (met)",
        "  5x aimock with validation on: 4.00x to 4.00x (not met)",
        // serve and the runtime bench.
        "16             600.0       600.0        599.0     4.0 / 9.3 ms    3.5 / 7.0 ms   26.0 / 47.5 ms",
        "the two-turn scenario against the built-in stdlib runtime: 4.0 runs/s, 250 ms per run, agentsim's CPU 4.0 ms per run (2.0% of the run's CPU)",
        "  runtime-typescript: examples/runtimes/typescript is not built (npm ci && npm run build there)",
    ] {
        assert!(out.lines().any(|l| l == line), "missing line {line:?} in:\n{out}");
    }
    let plain = out
        .lines()
        .find(|l| l.starts_with("openai-chat ") && !l.contains("streamed"))
        .unwrap_or_else(|| panic!("no openai-chat row:\n{out}"));
    let cells: Vec<&str> = plain
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    // agentsim, aimock, req/s ratio, CPU ratio, VidaiMock, req/s ratio, CPU ratio.
    assert_eq!(
        (cells[3], cells[4], cells[6], cells[7]),
        ("4.00x", "5.00x", "1.50x", "1.50x"),
        "{plain}"
    );
    let streamed = out
        .lines()
        .find(|l| l.starts_with("openai-chat, streamed"))
        .unwrap();
    assert!(
        streamed.contains("paced"),
        "VidaiMock's streams are not compared: {streamed}"
    );
    // A peer without a CPU figure gets none, not a made-up ratio.
    assert!(streamed.contains("4.00x          -"), "{streamed}");
}

#[test]
fn a_file_the_report_cannot_read_is_named() {
    let dir = std::env::temp_dir().join(format!("agentsim-compare-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("turns.json"), "{ not json").unwrap();
    let (code, out, err) = report(&dir);
    assert_eq!(code, Some(1), "{out}");
    assert!(err.contains("turns.json"), "{err}");
    let (code, _, err) = report(&dir.join("absent"));
    assert_eq!(code, Some(1));
    assert!(err.contains("no such directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_sh_is_valid_bash_and_prints_an_earlier_run_with_from() {
    let root = env!("CARGO_MANIFEST_DIR");
    let syntax = Command::new("bash")
        .args(["-n", "benches/compare.sh"])
        .current_dir(root)
        .status()
        .unwrap();
    assert!(syntax.success());
    let out = Command::new("bash")
        .args(["benches/compare.sh", "--from", "benches/compare-sample"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("5x aimock with validation on: 4.00x"));
    let bad = Command::new("bash")
        .args(["benches/compare.sh", "--fast"])
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown argument: --fast"));
}
