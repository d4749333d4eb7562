//! `agentsim record SCENARIO --runtime CMD`: tests/runtimes/fake.py driven through the runtime
//! protocol by a scenario's user steps, its model requests recorded through the proxy from an
//! upstream `agentsim mock-llm`; the written file has the recorded scripts and the user's
//! messages as steps with `sent` expectations, and `agentsim run FILE --runtime CMD` replays it
//! against the same runtime and passes. A run that fails writes nothing.
#![cfg(all(feature = "http-model", feature = "mock-server"))]

use std::path::{Path, PathBuf};
use std::process::Output;

use agentsim::mock_llm::server::{self, Options};
use agentsim::scenario;

const RUNTIME: &str = "python3 tests/runtimes/fake.py ok";

fn out_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentsim-record-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

async fn agentsim(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::cli::agentsim(&args)
    })
    .await
    .unwrap()
}

/// Records `skeleton` (a file of tests/runtimes/) driving [`RUNTIME`] against mock-llm serving
/// the same file: the command's output and the written file's path.
async fn record(skeleton: &str, runtime: &str, out: &Path) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(skeleton);
    let served = scenario::load(&path).unwrap();
    let upstream = server::start(&served, Options::default()).await.unwrap();
    let o = agentsim(vec![
        "record".into(),
        skeleton.into(),
        "--runtime".into(),
        runtime.into(),
        "--upstream".into(),
        format!("http://{}", upstream.addr),
        "--out".into(),
        out.display().to_string(),
    ])
    .await;
    upstream.stop();
    let _ = upstream.finish(std::future::pending()).await;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_recorded_through_the_protocol_replays_its_own_recording_and_passes() {
    for (skeleton, steps) in [
        (
            "tests/runtimes/three-turns.yaml",
            "steps:\n  - { user: \"hello\" }\n  - { expect: { sent: [\"Hi there.\"] } }\n  - { user: \"bye\" }\n  - { expect: { sent: [\"Bye.\"] } }\n  - { user: \"again\" }\n  - { expect: { sent: [\"Again.\"] } }\n",
        ),
        (
            "tests/runtimes/one-tool.yaml",
            "steps:\n  - { user: \"weather?\" }\n  - { expect: { sent: [\"It is 4 degrees.\"] } }\n",
        ),
    ] {
        let out = out_path(&format!(
            "{}.yaml",
            Path::new(skeleton).file_stem().unwrap().to_string_lossy()
        ));
        let o = record(skeleton, RUNTIME, &out).await;
        let stderr = super::cli::stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{stderr}");
        let written = std::fs::read_to_string(&out).unwrap();
        assert!(written.ends_with(steps), "{written}");
        assert!(written.contains("llm:\n  main:\n"), "{written}");
        scenario::parse(&written, &out).unwrap_or_else(|e| panic!("{e}\n{written}"));
        // Replayed against the same runtime, with no upstream: the same texts, a pass.
        let o = agentsim(vec![
            "run".into(),
            out.display().to_string(),
            "--runtime".into(),
            RUNTIME.into(),
        ])
        .await;
        let stdout = super::cli::stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{stdout}\n{}", super::cli::stderr(&o));
        assert!(stdout.contains("PASSED"), "{stdout}");
        // The expectations are the runtime's: a runtime that says something else fails them.
        if skeleton.ends_with("one-tool.yaml") {
            // docs/import-record.md shows this file as it is written.
            let page = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/import-record.md"),
            )
            .unwrap();
            assert!(page.contains(&format!("```yaml\n{written}```")), "{written}");
            let changed = written.replace("It is 4 degrees.", "It is 5 degrees.");
            let wrong = out_path("changed.yaml");
            let text = changed.replacen(
                "  - { expect: { sent: [\"It is 5 degrees.\"] } }",
                "  - { expect: { sent: [\"It is 4 degrees.\"] } }",
                1,
            );
            std::fs::write(&wrong, text).unwrap();
            let o = agentsim(vec![
                "run".into(),
                wrong.display().to_string(),
                "--runtime".into(),
                RUNTIME.into(),
            ])
            .await;
            assert_eq!(o.status.code(), Some(1), "{}", super::cli::stdout(&o));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_that_fails_writes_nothing_and_says_why() {
    let out = out_path("failed.yaml");
    let o = record(
        "tests/runtimes/one-tool.yaml",
        "python3 tests/runtimes/fake.py exit-on-user",
        &out,
    )
    .await;
    let stderr = super::cli::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the recorded run failed, so nothing is written: unexpected-exit"),
        "{stderr}"
    );
    assert!(!out.exists());
    // A scenario without --runtime, and --runtime without a scenario, are usage errors.
    let o = agentsim(vec![
        "record".into(),
        "--runtime".into(),
        RUNTIME.into(),
        "--upstream".into(),
        "http://127.0.0.1:9".into(),
        "--out".into(),
        out.display().to_string(),
    ])
    .await;
    assert_eq!(o.status.code(), Some(2));
    assert!(super::cli::stderr(&o).contains("give the SCENARIO too"));
}

#[tokio::test]
async fn requests_that_name_their_agent_in_the_header_are_imported_under_that_name() {
    let served = scenario::parse(
        "name: two agents\nagents:\n  research: { kind: skill }\nllm:\n  main: [Hi.]\n  research: [Found it.]\n",
        Path::new("two.yaml"),
    )
    .unwrap();
    let upstream = server::start(&served, Options::default()).await.unwrap();
    let proxy = agentsim::record::start(agentsim::record::Options {
        upstream: format!("http://{}", upstream.addr),
        ..agentsim::record::Options::default()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    // The reference runtime's system prompts ("You are skill:research.") would name the agent
    // `skill_research`; the header says `research`.
    for (agent, system, first) in [
        ("main", "You are main.", "hello"),
        ("research", "You are skill:research.", "look it up"),
    ] {
        let body = serde_json::json!({"model": agent, "max_tokens": 50, "system": system,
            "messages": [{"role": "user", "content": first}]});
        let r = client
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-agentsim-agent", agent)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    proxy.stop();
    let journal = proxy.finish(std::future::pending()).await.unwrap();
    upstream.stop();
    let _ = upstream.finish(std::future::pending()).await;
    let skills = ["research".to_owned()].into_iter().collect();
    let imported =
        agentsim::import::import_with_skills(journal.as_bytes(), Path::new("j"), "x", &skills)
            .unwrap_or_else(|e| panic!("{e}\n{journal}"));
    assert_eq!(imported.agents, ["main", "research"], "{}", imported.yaml);
    assert!(
        imported.yaml.contains("  research:\n    kind: skill\n"),
        "{}",
        imported.yaml
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_scenarios_agent_settings_and_unseen_agents_are_carried_over() {
    let skeleton = out_path("skeleton.yaml");
    let one_tool = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/runtimes/one-tool.yaml"),
    )
    .unwrap();
    std::fs::write(
        &skeleton,
        one_tool.replace(
            "llm:\n",
            "agents:\n  main: { max_iterations: 4, tools: [weather] }\n  helper: { kind: skill, description: Helps. }\nllm:\n",
        ),
    )
    .unwrap();
    let out = out_path("with-settings.yaml");
    let o = record(&skeleton.display().to_string(), RUNTIME, &out).await;
    assert_eq!(o.status.code(), Some(0), "{}", super::cli::stderr(&o));
    let written = std::fs::read_to_string(&out).unwrap();
    for expected in [
        "    max_iterations: 4\n    tools: [\"weather\"]\n",
        "  helper:\n    # declared by the scenario recorded; no request went to it\n    kind: skill\n    description: \"Helps.\"\nllm:\n",
    ] {
        assert!(written.contains(expected), "{expected:?} missing from:\n{written}");
    }
    let served = scenario::parse(&written, &out).unwrap_or_else(|e| panic!("{e}\n{written}"));
    assert_eq!(served.catalog.main.max_iterations, 4);
    assert!(served.catalog.skills.contains_key("helper"));
    let o = agentsim(vec![
        "run".into(),
        out.display().to_string(),
        "--runtime".into(),
        RUNTIME.into(),
    ])
    .await;
    assert_eq!(o.status.code(), Some(0), "{}", super::cli::stdout(&o));
}
