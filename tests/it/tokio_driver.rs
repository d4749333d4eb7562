//! The reference runtime under tokio, in real time, talking HTTP to `agentsim mock-llm` serving
//! the same scenario's scripts: for every spec scenario it can express (user messages on one
//! conversation, expectations, scripted tools; no steps that move virtual time or restart, no
//! watchdog, no planted bug, tool latencies kept short), the user is sent exactly what the
//! simulator sends, and the mock server's validator finds nothing wrong with any request and
//! no scripted reply left unused.
#![cfg(all(feature = "http-model", feature = "mock-server"))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentsim::drive::backend::ToolBehavior;
use agentsim::drive::http::HttpModel;
use agentsim::drive::scripted::MockLlm;
use agentsim::drive::scripted::ReplyKind;
use agentsim::drive::tokio_driver::{run_conversation, Backend};
use agentsim::mock_llm::server::{self, Options};
use agentsim::protocol::Event;
use agentsim::scenario::{self, RunOptions, Scenario, StepKind};
use agentsim::sim::Entry;
use agentsim::wire::Provider;

/// The user messages of a scenario the tokio driver can express, if it can.
fn expressible(s: &Scenario) -> Option<Vec<String>> {
    if s.expect_violation.is_some()
        || s.config.planted.is_some()
        || s.config.interruptions.is_some()
        || s.config.persist
    {
        return None;
    }
    let mut users = Vec::new();
    for step in &s.steps {
        match &step.kind {
            StepKind::User { key, text, wait } if key == scenario::DEFAULT_KEY && *wait => {
                users.push(text.clone())
            }
            StepKind::Expect(_) => {}
            _ => return None,
        }
    }
    // Stalls never answer and latencies are slept for real: keep the run short and finite.
    let slow_tool = s.tools.values().any(|t| match t {
        agentsim::drive::scripted::ToolScript::Fixed(step) => {
            step.after_ms > 300 || matches!(step.behavior, ToolBehavior::Hang)
        }
        agentsim::drive::scripted::ToolScript::PerCall(steps) => steps
            .iter()
            .any(|st| st.after_ms > 300 || matches!(st.behavior, ToolBehavior::Hang)),
    });
    let odd_model =
        s.scripts.values().flatten().any(|r| {
            r.after_ms > 300 || matches!(r.kind, ReplyKind::Stall | ReplyKind::Error { .. })
        });
    (!users.is_empty() && !slow_tool && !odd_model).then_some(users)
}

fn sent_by_simulator(s: &Scenario) -> Vec<String> {
    let outcome = scenario::run(
        s,
        RunOptions {
            seed: None,
            observe: true,
        },
    );
    assert!(
        outcome.passed(),
        "{}: the simulator run passes",
        s.path.display()
    );
    outcome
        .records
        .iter()
        .filter_map(|r| match &r.entry {
            Entry::Runtime(Event::Sent { text, .. }) => Some(text.to_string()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_scenarios_run_under_tokio_through_the_mock_server_as_in_the_simulator() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/spec");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut ran = Vec::new();
    for file in &files {
        let s = scenario::load(file).unwrap();
        let Some(users) = expressible(&s) else {
            continue;
        };
        let expected = sent_by_simulator(&s);
        // The scenario's scripts answering directly, in real time.
        let setup = s.driver_setup();
        let mut scripted = Backend::Scripted(MockLlm::new(s.scripts.clone()));
        let driven = run_conversation(
            &setup,
            &mut scripted,
            "default",
            &users,
            Duration::from_secs(10),
        )
        .await
        .unwrap_or_else(|e| panic!("{} (scripted): {e}", file.display()));
        assert_eq!(driven.sent, expected, "{} (scripted)", file.display());
        for provider in [Provider::Anthropic, Provider::OpenAiChat] {
            let running = server::start(&s, Options::default()).await.unwrap();
            let model = HttpModel::new(
                provider,
                &format!("http://{}", running.addr),
                "key",
                Duration::from_secs(10),
            )
            .unwrap();
            let mut backend = Backend::Http(model);
            let driven = run_conversation(
                &setup,
                &mut backend,
                "default",
                &users,
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|e| panic!("{} ({provider:?}): {e}", file.display()));
            let report = running.report();
            running.stop();
            assert_eq!(
                driven.sent,
                expected,
                "{} ({provider:?}): what the user was sent",
                file.display()
            );
            assert!(
                report.passed,
                "{} ({provider:?}): {}",
                file.display(),
                report.text()
            );
        }
        ran.push(file.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert!(
        ran.len() >= 10,
        "at least ten spec scenarios are expressible under tokio: {ran:?}"
    );
    eprintln!(
        "{} spec scenarios under tokio: {}",
        ran.len(),
        ran.join(", ")
    );
}
