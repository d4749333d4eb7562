//! `agentsim serve`'s stores across a SIGKILL: a service restarted on its database and state loses
//! nothing it acknowledged, and a corrupt database or state stops the start with a message naming
//! it. The helpers are `serve.rs`'s.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use serde_json::{json, Value};

use agentsim::serve;

use super::serve::{get_json, poll, post_json, spawn_listening, wait_pending, SESSIONS};

#[tokio::test]
async fn a_killed_service_restarted_on_its_database_and_state_loses_nothing_acknowledged() {
    let dir = std::env::temp_dir().join(format!("agentsim-serve-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The model is `agentsim mock-llm` over HTTP: it answers a conversation by the turns it
    // replays, so a call the restarted service issues again gets the same reply.
    let file = dir.join("sessions.yaml");
    // The benchmark's scenario: an agent that asks once, then answers (its script is per
    // conversation, for agentsim mock-llm).
    std::fs::write(&file, serve::bench::SCENARIO).unwrap();
    let file = file.to_str().unwrap().to_owned();
    let (_mock, mock) = spawn_listening(&["mock-llm", &file, "--addr", "127.0.0.1:0"]);
    let base_url = format!("http://{mock}/v1");
    let (db, state) = (dir.join("sessions.db"), dir.join("state"));
    let (db, state) = (
        db.to_str().unwrap().to_owned(),
        state.to_str().unwrap().to_owned(),
    );
    let serve_args = [
        "serve",
        &file,
        "--llm",
        "anthropic",
        "--base-url",
        &base_url,
        "--db",
        &db,
        "--state",
        &state,
        "--addr",
        "127.0.0.1:0",
    ];
    let client = reqwest::Client::new();

    // 1. Killed between a question and its answer.
    let (mut server, addr) = spawn_listening(&serve_args);
    let base = format!("http://{addr}");
    let accepted: Value = post_json(
        &client,
        format!("{base}/webhook/poet"),
        &json!({ "topic": "love" }),
    )
    .await;
    let first = accepted["session_id"].as_str().unwrap().to_owned();
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    server.0.kill().unwrap(); // SIGKILL
    server.0.wait().unwrap();
    let (server, addr) = spawn_listening(&serve_args);
    let base = format!("http://{addr}");
    let still: Value = get_json(&client, format!("{base}/agent/questions?status=pending")).await;
    assert_eq!(still["questions"][0]["id"], json!(qid));
    let r = client
        .post(format!("{base}/agent/answer/{first}"))
        .json(&json!({ "question_id": qid, "answer": "haiku" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "resumed");
    let done = poll(&client, &format!("{base}/agent/session/{first}"), |s| {
        s["status"] == "completed"
    })
    .await;
    assert_eq!(done["result"], json!({ "raw_result": "Wrote the poem." }));

    // 2. Killed right after an acknowledged answer: the restart gives it to the agent again.
    let accepted: Value = post_json(
        &client,
        format!("{base}/webhook/poet"),
        &json!({ "topic": "rain" }),
    )
    .await;
    let second = accepted["session_id"].as_str().unwrap().to_owned();
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    let mut server = server;
    let r = client
        .post(format!("{base}/agent/answer/{second}"))
        .json(&json!({ "question_id": qid, "answer": "free verse" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "resumed");
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let (_server, addr) = spawn_listening(&serve_args);
    let base = format!("http://{addr}");
    let done = poll(&client, &format!("{base}/agent/session/{second}"), |s| {
        s["status"] == "completed"
    })
    .await;
    assert_eq!(done["result"], json!({ "raw_result": "Wrote the poem." }));
    assert_eq!(done["questions_asked"], 1);
    // The first session is as it was.
    let first: Value = get_json(&client, format!("{base}/agent/session/{first}")).await;
    assert_eq!(first["status"], "completed");
    drop(_server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_database_or_state_stops_the_start_with_a_message_naming_it() {
    let dir = std::env::temp_dir().join(format!("agentsim-serve-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let file = dir.join("serve.yaml");
    std::fs::write(&file, SESSIONS).unwrap();
    let db = dir.join("sessions.db");
    std::fs::write(
        &db,
        b"this is not an SQLite database, it only has the name of one.....",
    )
    .unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentsim"))
            .args(args)
            .output()
            .unwrap()
    };
    let (file, db_path) = (file.to_str().unwrap(), db.to_str().unwrap());
    let out = run(&["serve", file, "--db", db_path, "--addr", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sessions.db"), "{err}");
    // The bytes that were there are still there.
    assert!(std::fs::read(&db).unwrap().starts_with(b"this is not"));

    std::fs::write(dir.join("state/state.json"), b"{\"version\": 1, \"ids\": ").unwrap();
    let state = dir.join("state");
    let out = run(&[
        "serve",
        file,
        "--state",
        state.to_str().unwrap(),
        "--addr",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("state.json"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
