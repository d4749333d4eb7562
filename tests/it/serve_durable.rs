//! `agentsim serve` across SIGKILLs and beside another instance (issue 42, items 1 to 3): no
//! answer acknowledged that nothing will act on, one owner per database and state directory,
//! scripted replies that go on where they were. The binary runs over loopback; every wait is
//! bounded. The helpers are `serve.rs`'s, the fixture `serve_support.rs`'s.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::time::Duration;

use serde_json::{json, Value};

use super::serve::{get_json, poll, post_json, wait_pending};
use super::serve_support::{run_bounded, text, Served};

/// An agent that asks once, then writes, then answers; twice (scripts are per agent, across
/// sessions).
pub(super) const DURABLE: &str = r#"
name: durable
agents:
  main: {}
  poet: { kind: agent, async_questions: true }
tools:
  write: { result: written, after: 10ms }
llm:
  poet:
    - ask_user: { question: Which style?, options: [free verse, haiku] }
    - tool_use: { name: write, input: { path: poem.md } }
    - Wrote the poem.
    - ask_user: { question: Which style now? }
    - tool_use: { name: write, input: { path: poem2.md } }
    - Wrote the second poem.
steps: []
"#;

async fn answer(client: &reqwest::Client, base: &str, sid: &str, qid: &str) -> (u16, Value) {
    let r = client
        .post(format!("{base}/agent/answer/{sid}"))
        .json(&json!({ "question_id": qid, "answer": "haiku" }))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn a_database_without_its_runtime_state_refuses_the_start_or_its_sessions_are_abandoned() {
    let mut served = Served::new("serve-orphans", DURABLE).with_db();
    let (db, db_only) = (served.db(), served.args.clone());
    let args = served.command();
    let client = reqwest::Client::new();

    // The first service runs with its runtime state in `ran`.
    let ran = served.dir.join("ran");
    served.args.extend(["--state".to_owned(), text(&ran)]);
    let base = served.start();
    let accepted = post_json(&client, format!("{base}/webhook/poet"), &json!({})).await;
    let sid = accepted["session_id"].as_str().unwrap().to_owned();
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    // While it waits, its execution_state names its question and the runtime's state.
    let state: Value = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let text: String = conn
            .query_row(
                "SELECT execution_state FROM agent_sessions WHERE id = ?1",
                [&sid],
                |r| r.get(0),
            )
            .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    assert_eq!(state["waiting_for"], json!(qid), "{state}");
    let ran = std::path::absolute(&ran).unwrap();
    assert_eq!(state["state_dir"], json!(text(&ran)), "{state}");
    served.kill();

    // Started on the database alone, nothing could act on an answer: the start is refused,
    // naming the session and the state it ran with.
    let (code, stderr) = run_bounded(&args);
    assert_eq!(code, Some(2), "it must refuse to start: {stderr}");
    let with_state = format!("--state {}", ran.display());
    for says in [
        sid.as_str(),
        "poet",
        "pending_input",
        &with_state,
        "--abandon-sessions",
    ] {
        assert!(stderr.contains(says), "{says}: {stderr}");
    }

    // Said explicitly: the session ends as failed, and an answer is refused, never "resumed".
    served.args = db_only.clone();
    served.args.push("--abandon-sessions".to_owned());
    let base = served.start();
    let listed = get_json(&client, format!("{base}/agent/questions?status=pending")).await;
    assert_eq!(listed["questions"], json!([]), "{listed}");
    let (status, body) = answer(&client, &base, &sid, &qid).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["ok"], false);
    assert!(
        body["error"].as_str().unwrap().contains("abandoned"),
        "{body}"
    );
    let session = get_json(&client, format!("{base}/agent/session/{sid}")).await;
    assert_eq!(session["status"], "failed", "{session}");
    // Nothing is left to refuse the next start.
    served.args = db_only;
    served.restart();
}

#[tokio::test]
async fn one_instance_owns_a_database_and_a_state_and_a_killed_owner_frees_them() {
    let mut owner = Served::new("serve-owner", DURABLE);
    let (db, state, dir) = (text(&owner.db()), text(&owner.state()), owner.dir.clone());
    let serve = |db: &str, state: &str| -> Vec<String> {
        let mut args = owner.args.clone();
        args.extend(["--db", db, "--state", state, "--addr", "127.0.0.1:0"].map(str::to_owned));
        args
    };
    // Another instance on the same database, or on the same state, is refused at once, told who
    // owns it.
    let other_db = text(&dir.join("other.db"));
    let other_state = text(&dir.join("other-state"));
    let refused = [
        (serve(&db, &other_state), "--db"),
        (serve(&other_db, &state), "--state"),
    ];
    owner = owner.with_db().with_state();
    let base = owner.start();
    let (pid, addr) = (owner.pid(), base.trim_start_matches("http://").to_owned());
    for (args, what) in refused {
        let (code, stderr) = run_bounded(&args);
        assert_eq!(
            code,
            Some(2),
            "{what}: a second owner must be refused: {stderr}"
        );
        for says in [
            what.to_owned(),
            format!("process {pid}"),
            format!("listening on http://{addr}"),
        ] {
            assert!(stderr.contains(&says), "{says}: {stderr}");
        }
    }
    // The refused ones changed nothing: the owner still serves.
    let client = reqwest::Client::new();
    let listed = get_json(&client, format!("{base}/agent/questions?status=pending")).await;
    assert_eq!(listed["questions"], json!([]));

    // Killed, the owner leaves its lock files behind but holds nothing: the next one starts.
    owner.kill();
    assert!(dir.join("sessions.db.lock").exists());
    let base = owner.start();
    let listed = get_json(&client, format!("{base}/agent/questions?status=pending")).await;
    assert_eq!(listed["questions"], json!([]));
}

#[tokio::test]
async fn scripted_replies_go_on_where_they_were_across_sigkills() {
    let mut served = Served::new("serve-scripted-kill", DURABLE)
        .with_db()
        .with_state();
    let client = reqwest::Client::new();
    let mut base = served.start();
    // Two sessions, each killed while it waits for its answer and answered by the next
    // instance: each asks its own question once and ends with its own reply.
    for (asks, wrote) in [
        ("Which style?", "Wrote the poem."),
        ("Which style now?", "Wrote the second poem."),
    ] {
        let accepted = post_json(&client, format!("{base}/webhook/poet"), &json!({})).await;
        let sid = accepted["session_id"].as_str().unwrap().to_owned();
        let pending = wait_pending(&client, &base, 1).await;
        let q = &pending["questions"][0];
        assert!(q["question"].as_str().unwrap().starts_with(asks), "{q}");
        let qid = q["id"].as_str().unwrap().to_owned();
        base = served.restart();
        let (status, body) = answer(&client, &base, &sid, &qid).await;
        assert_eq!(
            (status, &body["status"]),
            (200, &json!("resumed")),
            "{body}"
        );
        let done = poll(&client, &format!("{base}/agent/session/{sid}"), |s| {
            s["status"] != "running"
        })
        .await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"], json!({ "raw_result": wrote }));
        assert_eq!(done["questions_asked"], 1, "{done}");
    }
}

/// One POST a callback receiver got: its idempotency key, signature, session header and body.
#[derive(Clone, Debug)]
struct Got {
    key: String,
    signature: String,
    session: String,
    body: Vec<u8>,
    accepted: bool,
}

/// A callback receiver on loopback that refuses (503) until `accept` is set, then takes.
async fn outbox_receiver() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<Got>>>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use axum::http::{HeaderMap, StatusCode};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let got = Arc::new(Mutex::new(Vec::<Got>::new()));
    let accept = Arc::new(AtomicBool::new(false));
    let (seen, open) = (got.clone(), accept.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (seen, open) = (seen.clone(), open.clone());
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                let accepted = open.load(Ordering::SeqCst);
                seen.lock().unwrap().push(Got {
                    key: header("idempotency-key"),
                    signature: header("x-agentsim-signature"),
                    session: header("x-agent-session"),
                    body: body.to_vec(),
                    accepted,
                });
                if accepted {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got, accept)
}

/// Waits (at most ten seconds) until `got` holds `n` accepted posts; all it holds then.
async fn accepted(got: &std::sync::Mutex<Vec<Got>>, n: usize) -> Vec<Got> {
    for _ in 0..500 {
        if got.lock().unwrap().iter().filter(|g| g.accepted).count() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_not_delivered_before_a_kill_are_delivered_after_it_keyed_and_signed() {
    use hmac::Mac;
    let (url, got, accept) = outbox_receiver().await;
    let mut served = Served::new(
        "serve-outbox",
        "name: outbox\nsettings:\n  callbacks: { retries: 0, timeout: 300ms }\n\
         agents:\n  main: {}\n  poet: { kind: agent, async_questions: true }\n\
         llm:\n  poet:\n    - ask_user: One?\n    - ask_user: Two?\n    - ask_user: Three?\n",
    )
    .with_db()
    .with_state()
    .with(&["--question-callback", &url, "--callback-secret", "s3cret"]);
    let client = reqwest::Client::new();

    // Three questions whose callbacks the receiver refuses, then a kill.
    let base = served.start();
    for _ in 0..3 {
        post_json(&client, format!("{base}/webhook/poet"), &json!({})).await;
    }
    let pending = wait_pending(&client, &base, 3).await;
    let mut questions: Vec<(String, String)> = pending["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let id = q["id"].as_str().unwrap().to_owned();
            (id, q["session_id"].as_str().unwrap().to_owned())
        })
        .collect();
    questions.sort();
    for _ in 0..500 {
        if got.lock().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(got.lock().unwrap().len(), 3, "three refused attempts");
    served.kill();

    // The next instance delivers each from the outbox, once the receiver takes them.
    accept.store(true, std::sync::atomic::Ordering::SeqCst);
    served.start();
    let all = accepted(&got, 3).await;
    let delivered: Vec<&Got> = all.iter().filter(|g| g.accepted).collect();
    let mut keys: Vec<(String, String)> = delivered
        .iter()
        .map(|g| (g.key.clone(), g.session.clone()))
        .collect();
    keys.sort();
    assert_eq!(
        keys, questions,
        "one delivery per question, keyed by its id"
    );
    for g in &all {
        // Signed: the HMAC-SHA256 of the exact body under the secret.
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(&g.body);
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(g.signature, format!("sha256={hex}"));
        let body: Value = serde_json::from_slice(&g.body).unwrap();
        assert_eq!(body["event"], "question_pending");
        assert_eq!(body["question"]["id"], json!(g.key));
        assert_eq!(body["session_id"], json!(g.session));
        // A repeat is the same bytes under the same key.
        let first = all.iter().find(|o| o.key == g.key).unwrap();
        assert_eq!(first.body, g.body);
    }

    // Delivered callbacks leave the outbox (once their replies reached the sender: a kill
    // before that sends one again, which its key makes harmless), and a further kill and start
    // sends none again.
    let conn = rusqlite::Connection::open(served.db()).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    for _ in 0..500 {
        if count("SELECT COUNT(*) FROM agentsim_callbacks WHERE outcome IS NULL") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        count("SELECT COUNT(*) FROM agentsim_callbacks WHERE outcome = 'delivered'"),
        3
    );
    drop(conn);
    let base = served.restart();
    let still = get_json(&client, format!("{base}/agent/questions?status=pending")).await;
    assert_eq!(still["questions"].as_array().unwrap().len(), 3);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(got.lock().unwrap().len(), all.len(), "nothing sent twice");
}

#[tokio::test]
async fn a_scripted_call_in_flight_at_a_kill_gets_the_same_reply_after_it() {
    let mut served = Served::new(
        "serve-scripted-in-flight",
        "name: slow\nagents:\n  main: {}\n  poet: { kind: agent, async_questions: true }\n\
         llm:\n  poet:\n    - ask_user: Which style?\n    \
         - { text: Wrote the poem., after: 1500ms }\n    - The script's next reply.\n",
    )
    .with_db()
    .with_state();
    let client = reqwest::Client::new();
    let base = served.start();
    let accepted = post_json(&client, format!("{base}/webhook/poet"), &json!({})).await;
    let sid = accepted["session_id"].as_str().unwrap().to_owned();
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    let (status, body) = answer(&client, &base, &sid, &qid).await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("resumed")),
        "{body}"
    );
    // Killed while the reply to the answered session's call takes its 1.5 s.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = served.restart();
    let done = poll(&client, &format!("{base}/agent/session/{sid}"), |s| {
        s["status"] != "running"
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"],
        json!({ "raw_result": "Wrote the poem." }),
        "the call issued again gets the lost call's reply, not the script's next one"
    );
}

#[test]
fn a_lock_file_over_an_input_and_an_empty_callback_secret_are_refused() {
    let dir = super::serve_support::temp_dir("serve-lock-input");
    // The scenario is named as the database's lock file would be: never written over.
    let file = dir.join("s.db.lock");
    std::fs::write(&file, DURABLE).unwrap();
    let db = text(&dir.join("s.db"));
    let (code, stderr) = run_bounded(
        &["serve", &text(&file), "--db", &db, "--addr", "127.0.0.1:0"].map(str::to_owned),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("lock file"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), DURABLE);
    let (code, stderr) = run_bounded(
        &[
            "serve",
            &text(&file),
            "--callback-secret",
            " ",
            "--addr",
            "127.0.0.1:0",
        ]
        .map(str::to_owned),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--callback-secret cannot be empty"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_question_gets_its_callback_through_a_loop_of_kills_right_after_it_is_asked() {
    let rounds = 8;
    let asks: String = (1..=rounds)
        .map(|n| format!("    - ask_user: Question {n}?\n"))
        .collect();
    let (url, got, accept) = outbox_receiver().await;
    accept.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut served = Served::new(
        "serve-outbox-loop",
        &format!(
            "name: loop\nagents:\n  main: {{}}\n  poet: {{ kind: agent, async_questions: true }}\n\
             llm:\n  poet:\n{asks}"
        ),
    )
    .with_db()
    .with_state()
    .with(&["--question-callback", &url]);
    let client = reqwest::Client::new();
    let mut questions = std::collections::BTreeSet::new();
    let mut base = served.start();
    for n in 1..=rounds {
        // Killed as soon as the question is listed: its callback may or may not have gone out.
        post_json(&client, format!("{base}/webhook/poet"), &json!({})).await;
        let pending = wait_pending(&client, &base, n).await;
        for q in pending["questions"].as_array().unwrap() {
            questions.insert(q["id"].as_str().unwrap().to_owned());
        }
        base = served.restart();
    }
    assert_eq!(
        questions.len(),
        rounds,
        "one question per session, none asked twice"
    );
    // Every question's callback arrives (some more than once: a repeat has its key).
    let delivered = || -> std::collections::BTreeSet<String> {
        got.lock()
            .unwrap()
            .iter()
            .filter(|g| g.accepted)
            .map(|g| g.key.clone())
            .collect()
    };
    for _ in 0..500 {
        if delivered() == questions {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        delivered(),
        questions,
        "every question's callback delivered"
    );
}
