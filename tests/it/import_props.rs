//! A property of `agentsim import` over generated runs of the reference runtime: the runtime
//! (under tokio, its model calls over HTTP) is run against `agentsim mock-llm` serving a generated
//! scenario, with a journal; the journal is imported; the imported file, served to the same
//! runtime with the same user messages, gives the same exchanges (every request and reply of the
//! second journal equal to the first's), the same messages to the user, and a passing report.
//! And a real journal damaged anywhere (bytes changed or deleted, cut, lines repeated or swapped)
//! is imported into a file that loads, or refused at a line of it; never a panic.
#![cfg(all(feature = "http-model", feature = "mock-server"))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentsim::drive::http::HttpModel;
use agentsim::drive::tokio_driver::{run_conversation, Backend, Driven};
use agentsim::import;
use agentsim::mock_llm::server::{self, Options, Report};
use agentsim::scenario::{self, Scenario};
use agentsim::wire::Provider;
use proptest::prelude::*;
use serde_json::Value;

fn cases() -> u32 {
    std::env::var("AGENTSIM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(12, |n: u32| n.min(200))
}

/// What main does before its answer to one user message.
#[derive(Clone, Debug)]
enum Move {
    /// Calls tool `t<n>`.
    Tool(u8),
    /// Hands a task to `helper`, which calls this many tools, then completes.
    Delegate(u8),
}

fn moves() -> impl Strategy<Value = Vec<Vec<Move>>> {
    let one = prop_oneof![
        (0u8..3).prop_map(Move::Tool),
        (0u8..3).prop_map(Move::Delegate)
    ];
    prop::collection::vec(prop::collection::vec(one, 0..4), 1..4)
}

/// The scenario of these moves (one list per user message) and its user messages.
fn scenario_of(turns: &[Vec<Move>]) -> (String, Vec<String>) {
    let mut main = Vec::new();
    let mut helper = Vec::new();
    let mut users = Vec::new();
    for (u, moves) in turns.iter().enumerate() {
        users.push(format!("request {u}"));
        for (m, mv) in moves.iter().enumerate() {
            match mv {
                Move::Tool(t) => main.push(format!(
                    "    - {{ tool_use: {{ name: t{t}, input: {{ n: {m} }} }} }}"
                )),
                Move::Delegate(calls) => {
                    main.push(format!(
                        "    - {{ use_agent: {{ agent: helper, message: \"task {u}.{m}\" }} }}"
                    ));
                    for c in 0..*calls {
                        helper.push(format!(
                            "    - {{ tool_use: {{ name: t{}, input: {{ c: {c} }} }} }}",
                            c % 3
                        ));
                    }
                    helper.push(format!("    - {{ complete: \"done {u}.{m}\" }}"));
                }
            }
        }
        main.push(format!("    - \"answer {u}\""));
    }
    let mut yaml = String::from(
        "name: generated\nagents:\n  main: {}\n  helper: { kind: agent }\nllm:\n  main:\n",
    );
    yaml.push_str(&main.join("\n"));
    yaml.push('\n');
    if helper.is_empty() {
        yaml.push_str("  helper: []\n");
    } else {
        yaml.push_str("  helper:\n");
        yaml.push_str(&helper.join("\n"));
        yaml.push('\n');
    }
    yaml.push_str("tools:\n  t0: { result: r0 }\n  t1: { result: r1 }\n  t2: { result: r2 }\n");
    (yaml, users)
}

/// The runtime of `runtime_scenario` driven against mock-llm serving `served`: what the user was
/// sent, the report, and the journal's (request, response) pairs.
async fn run(
    runtime_scenario: &Scenario,
    served: &Scenario,
    users: &[String],
    provider: Provider,
    journal: &Path,
) -> (Driven, Report, Vec<(Value, Value)>) {
    let options = Options {
        journal: Some(journal.to_owned()),
        ..Options::default()
    };
    let running = server::start(served, options).await.unwrap();
    let model = HttpModel::new(
        provider,
        &format!("http://{}", running.addr),
        "key",
        Duration::from_secs(10),
    )
    .unwrap();
    let mut backend = Backend::Http(model);
    let driven = run_conversation(
        &runtime_scenario.driver_setup(),
        &mut backend,
        "default",
        users,
        Duration::from_secs(10),
    )
    .await
    .expect("the runtime runs");
    running.stop();
    let report = running.finish(std::future::pending()).await.unwrap();
    let exchanges = std::fs::read_to_string(journal)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["request"].clone(), v["response"].clone())
        })
        .collect();
    (driven, report, exchanges)
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentsim-import-props-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn an_imported_journal_served_back_reproduces_the_same_exchanges(
        turns in moves(),
        chat in any::<bool>(),
    ) {
        let provider = if chat { Provider::OpenAiChat } else { Provider::Anthropic };
        let (yaml, users) = scenario_of(&turns);
        let original = scenario::parse(&yaml, Path::new("generated.yaml")).unwrap();
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let first = temp("first.jsonl");
        let (driven, report, exchanges) =
            tokio.block_on(run(&original, &original, &users, provider, &first));
        prop_assert!(report.passed, "{}\n{yaml}", report.text());
        let bytes = std::fs::read(&first).unwrap();
        let imported = import::import(&bytes, &first, "imported").unwrap();
        prop_assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
        let served = scenario::parse(&imported.yaml, Path::new("imported.yaml"))
            .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
        let second = temp("second.jsonl");
        let (again, report, replayed) =
            tokio.block_on(run(&original, &served, &users, provider, &second));
        prop_assert!(report.passed, "{}\n{}", report.text(), imported.yaml);
        prop_assert_eq!(&again.sent, &driven.sent);
        prop_assert!(exchanges.len() >= users.len());
        prop_assert_eq!(replayed.len(), exchanges.len());
        for (i, (a, b)) in exchanges.iter().zip(&replayed).enumerate() {
            prop_assert_eq!(a, b, "exchange {} differs\n{}", i + 1, imported.yaml);
        }
    }
}

/// A real journal: the conversations of `import.rs` served from its scenario.
fn journal_fixture() -> &'static [u8] {
    static JOURNAL: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    JOURNAL.get_or_init(|| {
        let path = temp("fixture.jsonl");
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio.block_on(super::import::serve_and_drive(
            super::import::ORIGINAL,
            &path,
        ));
        std::fs::read(&path).unwrap()
    })
}

/// One edit of a journal's bytes.
#[derive(Clone, Debug)]
enum Edit {
    /// Replace the byte at this place (modulo the length) with this one.
    Set(usize, u8),
    /// Delete a byte.
    Delete(usize),
    /// Cut the journal there.
    Cut(usize),
    /// Repeat a line (by index, modulo their number) at the end.
    Repeat(usize),
    /// Swap two lines.
    Swap(usize, usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Set(p, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Cut),
        any::<usize>().prop_map(Edit::Repeat),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap(a, b)),
    ];
    prop::collection::vec(edit, 1..6)
}

fn apply(bytes: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for e in edits {
        if out.is_empty() {
            break;
        }
        let n = out.len();
        match *e {
            Edit::Set(p, b) => out[p % n] = b,
            Edit::Delete(p) => {
                out.remove(p % n);
            }
            Edit::Cut(p) => out.truncate(p % n),
            Edit::Repeat(_) | Edit::Swap(..) => {
                let mut lines: Vec<Vec<u8>> =
                    out.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
                let m = lines.len();
                match *e {
                    Edit::Repeat(i) => lines.push(lines[i % m].clone()),
                    Edit::Swap(a, b) => lines.swap(a % m, b % m),
                    _ => unreachable!(),
                }
                out = lines.join(&b'\n');
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() * 8, failure_persistence: None, ..ProptestConfig::default() })]

    /// A journal damaged anywhere imports into a file that loads, or is refused with a place in
    /// it; never a panic.
    #[test]
    fn a_damaged_journal_is_imported_or_refused_with_its_place_never_a_panic(edits in edits()) {
        let bytes = apply(journal_fixture(), &edits);
        match import::import(&bytes, Path::new("j.jsonl"), "damaged") {
            Ok(imported) => {
                prop_assert!(scenario::parse(&imported.yaml, Path::new("d.yaml")).is_ok());
            }
            Err(e) => {
                let lines = bytes.split(|&b| b == b'\n').count();
                prop_assert!(e.line <= lines, "{e}");
                prop_assert!(!e.message.is_empty());
            }
        }
    }
}
