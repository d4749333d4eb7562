//! Fuzzing the scenario loader on stable, with proptest: arbitrary bytes, and structure-aware
//! mutations of every scenario file in `scenarios/` (YAML tokens and scalars inserted, lines
//! deleted, duplicated, swapped, re-indented, spliced from other files, truncations).
//!
//! Whatever the input, the loader returns a scenario or an error located at a line and column,
//! and never panics. A mutated file that loads is written back with the regression writer (which
//! must give a file that loads and writes the same again) and run, with small limits, through the
//! runtime and the invariant observer: that must not panic either.
//!
//! CI runs a few thousand cases. A soak runs millions:
//! `AGENTSIM_FUZZ_CASES=5000000 cargo test --release --test it fuzz_loader::` (per property; the
//! README gives the figures of the last soak).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agentsim::scenario::{self, write, RunOptions};
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("AGENTSIM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

/// Every scenario file of the repository, as bytes: the seeds of the structure-aware mutations.
fn corpus() -> &'static [(PathBuf, Vec<u8>)] {
    static CORPUS: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut files = Vec::new();
        let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("scenarios/ is readable") {
                let path = entry.expect("a readable entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "yaml" || e == "json") {
                    let bytes = std::fs::read(&path).expect("a readable file");
                    files.push((path, bytes));
                }
            }
        }
        files.sort();
        assert!(files.len() > 20, "the corpus is the scenarios/ tree");
        files
    })
}

/// Pieces of YAML and of the scenario format that mutations insert: structure, anchors and tags,
/// YAML 1.1 look-alikes, numbers at the edges, control and bidirectional characters, keys and steps
/// of the format, nonsense values for its settings.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\n",
    "  ",
    "    ",
    "\t",
    "#",
    "# c\n",
    "&a ",
    "*a",
    "<<: *a",
    "!!str ",
    "!!binary ",
    "!!int ",
    "!custom ",
    "~",
    "null",
    "yes",
    "off",
    "012",
    "0x1F",
    "1e309s",
    "1.5ms",
    "-1",
    "0",
    "0.5",
    "18446744073709551616",
    "\"",
    "'",
    "\\",
    "|",
    "|-\n  x\n",
    ">",
    "---\n",
    "...\n",
    "\0",
    "\u{202e}",
    "é",
    "\u{1F600}",
    "\r\n",
    "\r",
    "%YAML 1.2\n",
    "? ",
    "!",
    "@",
    "`",
    "%",
    "user: x",
    "user: cancel",
    "wait: false",
    "expect: {}",
    "expect: { sent: [x] }",
    "advance: 1ms",
    "advance: 1h",
    "restart: true",
    "run: 3",
    "run: 0",
    "key: k2",
    "tool_use: {name: t}",
    "tool_use: {name: complete, input: {}}",
    "use_agent: {agent: main}",
    "ask_user: q",
    "complete: r",
    "error: rate_limit",
    "stall: true",
    "chunks: [a, b]",
    "empty: true",
    "after: 5s",
    "kind: skill",
    "kind: agent",
    "max_iterations: 0",
    "max_iterations: 1",
    "batch: accept_empty",
    "passthrough: x",
    "parallel_tools: true",
    "persist: true",
    "planted_bug: display-leak",
    "interruptions: {timeout: 1s, check_every: 1ms}",
    "expect_violation: routing",
    "timeout: 1ms",
    "hang: true",
    "calls: []",
    "result: r",
    "is_error: true",
    "main",
    "agent:x",
    "skill:",
    "\"\"",
];

/// One edit of a file.
#[derive(Clone, Debug)]
enum Mutation {
    /// Insert a token at a fraction of the length.
    Insert(f64, usize),
    /// Delete bytes.
    Delete(f64, usize),
    /// Overwrite one byte with an arbitrary one.
    Byte(f64, u8),
    /// Replace the rest of a line after its first `: ` with a token.
    Scalar(f64, usize),
    /// Delete a line.
    DeleteLine(f64),
    /// Duplicate a line.
    DuplicateLine(f64),
    /// Swap two lines.
    SwapLines(f64, f64),
    /// Indent (or dedent) a line by two spaces.
    Indent(f64, bool),
    /// Insert a line of another corpus file.
    Splice(usize, f64, f64),
    /// Cut the file here.
    Truncate(f64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0.0..1.0f64;
    let token = 0..TOKENS.len();
    prop_oneof![
        4 => (at.clone(), token.clone()).prop_map(|(a, t)| Mutation::Insert(a, t)),
        2 => (at.clone(), 1..16usize).prop_map(|(a, n)| Mutation::Delete(a, n)),
        2 => (at.clone(), any::<u8>()).prop_map(|(a, b)| Mutation::Byte(a, b)),
        4 => (at.clone(), token).prop_map(|(a, t)| Mutation::Scalar(a, t)),
        2 => at.clone().prop_map(Mutation::DeleteLine),
        2 => at.clone().prop_map(Mutation::DuplicateLine),
        1 => (at.clone(), at.clone()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        2 => (at.clone(), any::<bool>()).prop_map(|(a, b)| Mutation::Indent(a, b)),
        2 => (any::<usize>(), at.clone(), at.clone()).prop_map(|(f, a, b)| Mutation::Splice(f, a, b)),
        1 => at.prop_map(Mutation::Truncate),
    ]
}

fn place(fraction: f64, len: usize) -> usize {
    ((fraction * len as f64) as usize).min(len)
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    match *m {
        Mutation::Insert(at, t) => {
            let i = place(at, bytes.len());
            bytes.splice(i..i, TOKENS[t].bytes());
        }
        Mutation::Delete(at, n) => {
            let i = place(at, bytes.len());
            let end = (i + n).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::Byte(at, b) => {
            if !bytes.is_empty() {
                let i = place(at, bytes.len() - 1);
                bytes[i] = b;
            }
        }
        Mutation::Scalar(at, t) => {
            let mut ls = lines(bytes);
            if ls.is_empty() {
                return;
            }
            let l = place(at, ls.len() - 1);
            let line = &mut ls[l];
            if let Some(i) = line.windows(2).position(|w| w == b": ") {
                let newline = line.last() == Some(&b'\n');
                line.truncate(i + 2);
                line.extend_from_slice(TOKENS[t].as_bytes());
                if newline {
                    line.push(b'\n');
                }
            }
            *bytes = ls.concat();
        }
        Mutation::DeleteLine(at) => {
            let mut ls = lines(bytes);
            if !ls.is_empty() {
                let l = place(at, ls.len() - 1);
                ls.remove(l);
            }
            *bytes = ls.concat();
        }
        Mutation::DuplicateLine(at) => {
            let mut ls = lines(bytes);
            if !ls.is_empty() {
                let l = place(at, ls.len() - 1);
                ls.insert(l, ls[l].clone());
            }
            *bytes = ls.concat();
        }
        Mutation::SwapLines(a, b) => {
            let mut ls = lines(bytes);
            if !ls.is_empty() {
                let (a, b) = (place(a, ls.len() - 1), place(b, ls.len() - 1));
                ls.swap(a, b);
            }
            *bytes = ls.concat();
        }
        Mutation::Indent(at, deeper) => {
            let mut ls = lines(bytes);
            if !ls.is_empty() {
                let l = place(at, ls.len() - 1);
                if deeper {
                    ls[l].splice(0..0, *b"  ");
                } else if ls[l].starts_with(b"  ") {
                    ls[l].drain(..2);
                }
            }
            *bytes = ls.concat();
        }
        Mutation::Splice(file, from, to) => {
            let corpus = corpus();
            let other = lines(&corpus[file % corpus.len()].1);
            let mut ls = lines(bytes);
            if !other.is_empty() {
                let line = other[place(from, other.len() - 1)].clone();
                let at = place(to, ls.len());
                ls.insert(at, line);
            }
            *bytes = ls.concat();
        }
        Mutation::Truncate(at) => {
            let i = place(at, bytes.len());
            bytes.truncate(i);
        }
    }
}

/// What must hold for any input: a scenario, or an error located in the file; a scenario that
/// loads writes back to a file that loads and writes the same, and runs without panicking.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    let path = Path::new("fuzzed.yaml");
    let s = match scenario::parse_bytes(bytes, path) {
        Ok(s) => s,
        Err(e) => {
            prop_assert!(e.line >= 1 && e.column >= 1, "unlocated: {}", e);
            prop_assert!(!e.message.is_empty());
            return Ok(());
        }
    };
    let yaml = write::to_yaml(&s);
    let again = scenario::parse(&yaml, Path::new("written.yaml"));
    prop_assert!(
        again.is_ok(),
        "the written file does not load: {:?}\n{}",
        again.err(),
        yaml
    );
    let again = again.unwrap();
    prop_assert_eq!(write::to_yaml(&again), yaml);
    let mut small = s;
    small.limits.max_steps = small.limits.max_steps.min(5_000);
    small.limits.max_llm_calls = small.limits.max_llm_calls.min(500);
    small.limits.max_depth = small.limits.max_depth.min(16);
    let _ = scenario::run(&small, RunOptions::default());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_load_or_fail_located(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        check(&bytes)?;
    }

    #[test]
    fn mutated_scenario_files_load_or_fail_located(
        file in any::<usize>(),
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let corpus = corpus();
        let mut bytes = corpus[file % corpus.len()].1.clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check(&bytes)?;
    }
}

/// Every scenario file of the repository that loads writes back to a file that loads as the same
/// scenario: nothing a file says (callbacks, expiry, workflows, ...) is dropped by the writer
/// that shrinking and `explore --out` use.
#[test]
fn every_scenario_file_writes_back_to_the_same_scenario() {
    let mut written = 0;
    for (path, bytes) in corpus() {
        let Ok(s) = scenario::parse_bytes(bytes, path) else {
            continue;
        };
        let yaml = write::to_yaml(&s);
        let again = scenario::parse(&yaml, Path::new("written.yaml")).unwrap_or_else(|e| {
            panic!(
                "{}: the written file does not load: {e}\n{yaml}",
                path.display()
            )
        });
        assert_eq!(write::to_yaml(&again), yaml, "{}", path.display());
        assert_eq!(
            format!("{:?}", again.config),
            format!("{:?}", s.config),
            "{}: settings lost",
            path.display()
        );
        assert_eq!(
            again.callback_replies,
            s.callback_replies,
            "{}",
            path.display()
        );
        written += 1;
    }
    assert!(written > 100, "{written} files written back");
}
