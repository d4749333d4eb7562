//! `agentsim serve` over loopback with a real HTTP client (reqwest): conversations, the agent
//! tree, interventions, the event stream, and every kind of bad request, each answered with a JSON
//! error. Loops that wait for the server are bounded and stop by themselves.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::path::Path;
use std::time::Duration;

use agentsim::drive::scripted::MockLlm;
use agentsim::drive::tokio_driver::Backend;
use agentsim::scenario;
use agentsim::serve::{self, Options, Running};
use serde_json::{json, Value};

const SCENARIO: &str = r#"
name: serve
agents:
  main: {}
  researcher: { kind: agent }
tools:
  # The first search takes long enough to be seen in the tree; the second never ends, so that
  # the researcher running it can be deleted.
  search:
    - { result: three results, after: 1s }
    - { hang: true }
llm:
  main:
    - use_agent: { agent: researcher, message: find hotels }
    - The researcher says three hotels.
    - use_agent: { agent: researcher, message: find restaurants }
    - The researcher was stopped.
  researcher:
    - tool_use: { name: search, input: { q: hotels } }
    - complete: three hotels
    - tool_use: { name: search, input: { q: restaurants } }
steps: []
"#;

/// Starts the service on the scenario `yaml` (its scripts answer the model) on a free loopback
/// port, with `store` and these options.
pub(super) async fn serve_yaml(yaml: &str, store: serve::Store, options: Options) -> Running {
    let s = scenario::parse(yaml, Path::new("serve.yaml")).unwrap();
    let mut setup = s.driver_setup();
    setup.limits.max_llm_calls = u64::MAX;
    let backend = Backend::Scripted(MockLlm::new(s.scripts.clone()));
    serve::start(setup, backend, store, options).await.unwrap()
}

/// The options of a test service: a free loopback port, no token, the default body limit, in
/// memory.
pub(super) fn options() -> Options {
    Options::default()
}

pub(super) fn memory() -> serve::Store {
    Box::new(agentsim::store::MemoryQuestions::new())
}

async fn start(token: Option<&str>, body_limit: usize) -> Running {
    let options = Options {
        token: token.map(str::to_owned),
        body_limit,
        ..options()
    };
    serve_yaml(SCENARIO, memory(), options).await
}

pub(super) const SESSIONS: &str = r#"
name: sessions
agents:
  main: {}
  poet: { kind: agent, async_questions: true }
tools:
  # Writing takes a while: answers that arrive meanwhile find the session running.
  write: { result: written, after: 8s }
llm:
  poet:
    - ask_user: { question: What style would you prefer?, options: [free verse, haiku] }
    - tool_use: { name: write, input: { path: poem/love-haiku.md } }
    - '{"poem_path": "poem/love-haiku.md"}'
steps: []
"#;

async fn start_sessions(db: Option<&Path>) -> Running {
    let store: serve::Store = match db {
        Some(path) => Box::new(agentsim::store::SqliteQuestions::open(path).unwrap()),
        None => memory(),
    };
    serve_yaml(SESSIONS, store, options()).await
}

#[tokio::test]
async fn a_webhook_session_asks_waits_for_its_answer_and_completes() {
    let dir = std::env::temp_dir().join(format!("agentsim-serve-db-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("sessions.db");
    let _ = std::fs::remove_file(&db);
    let running = start_sessions(Some(&db)).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();

    let r = client
        .post(format!("{base}/webhook/poet"))
        .json(&json!({ "topic": "love" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let accepted: Value = r.json().await.unwrap();
    assert_eq!(
        (&accepted["ok"], &accepted["status"], &accepted["agent"]),
        (&json!(true), &json!("accepted"), &json!("poet"))
    );
    let sid = accepted["session_id"].as_str().unwrap().to_owned();

    let pending = wait_pending(&client, &base, 1).await;
    let q = &pending["questions"][0];
    assert_eq!(
        (&q["session_id"], &q["agent_name"]),
        (&json!(sid), &json!("poet"))
    );
    assert_eq!(
        q["question"],
        "What style would you prefer?\n- free verse\n- haiku"
    );
    assert_eq!(q["context"]["options"], json!(["free verse", "haiku"]));
    let qid = q["id"].as_str().unwrap().to_owned();
    let s: Value = get_json(&client, format!("{base}/agent/session/{sid}")).await;
    assert_eq!(
        (&s["status"], &s["result"], &s["questions_asked"]),
        (&json!("pending_input"), &Value::Null, &json!(1))
    );
    assert_eq!(s["completed_at"], Value::Null);

    // An answer to a question of another session, or of no session, is not found.
    let r = client
        .post(format!("{base}/agent/answer/{}", uuid::Uuid::nil()))
        .json(&json!({ "question_id": qid, "answer": "haiku" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .post(format!("{base}/agent/answer/{sid}"))
        .json(&json!({ "question_id": "q-unknown", "answer": "haiku" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .post(format!("{base}/agent/answer/{sid}"))
        .json(&json!({ "answer": "haiku" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    let r = client
        .post(format!("{base}/agent/answer/{sid}"))
        .json(&json!({ "question_id": qid, "answer": "haiku" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({ "ok": true, "status": "resumed", "session_id": sid })
    );

    let done = poll(&client, &format!("{base}/agent/session/{sid}"), |s| {
        s["status"] == "completed"
    })
    .await;
    // A JSON object result is the object (B10).
    assert_eq!(done["result"], json!({ "poem_path": "poem/love-haiku.md" }));
    assert!(done["completed_at"].is_string());
    // Once completed, the session takes no answer.
    let r = client
        .post(format!("{base}/agent/answer/{sid}"))
        .json(&json!({ "question_id": qid, "answer": "sonnet" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Unknown agents and sessions.
    let r = client
        .post(format!("{base}/webhook/nobody"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"],
        "agent not found: nobody"
    );
    let r = client
        .post(format!("{base}/webhook/poet"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "an empty body");
    let r = client
        .get(format!("{base}/agent/session/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .get(format!("{base}/agent/questions?status=answered"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    running.stop();
    running.finish().await.unwrap();

    // The database keeps what was acknowledged.
    use agentsim::store::QuestionStore;
    let store = agentsim::store::SqliteQuestions::open(&db).unwrap();
    let row = store.session(&sid).unwrap().unwrap();
    assert_eq!(row.status.as_str(), "completed");
    let questions = store.questions(&sid).unwrap();
    assert_eq!(questions[0].answer.as_deref(), Some("haiku"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_answers_resume_the_session_once() {
    let running = start_sessions(None).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let sid = trigger(&client, &base, "poet", json!({ "topic": "rain" })).await;
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    let mut tasks = Vec::new();
    // All within the eight seconds the agent spends writing after the first answer (even a
    // debug build on a busy machine sends a thousand answers over loopback well within that).
    for i in 0..1000 {
        let (client, url, qid) = (
            client.clone(),
            format!("{base}/agent/answer/{sid}"),
            qid.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&json!({ "question_id": qid, "answer": format!("style {i}") }))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()["status"]
                .as_str()
                .unwrap()
                .to_owned()
        }));
    }
    let mut resumed = 0;
    let mut duplicates = 0;
    for t in tasks {
        match t.await.unwrap().as_str() {
            "resumed" => resumed += 1,
            "duplicate_ignored" => duplicates += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((resumed, duplicates), (1, 999));
    // The session resumed once: its script's one reply after the answer completed it (a second
    // resumption would have found no reply and failed the session).
    let done = poll(&client, &format!("{base}/agent/session/{sid}"), |s| {
        s["status"] != "pending_input" && s["status"] != "running"
    })
    .await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["questions_asked"], 1);
    running.stop();
    running.finish().await.unwrap();
}

/// Triggers a session of `agent` with `payload` on the service at `base`: its id.
pub(super) async fn trigger(
    client: &reqwest::Client,
    base: &str,
    agent: &str,
    payload: Value,
) -> String {
    let accepted = post_json(client, format!("{base}/webhook/{agent}"), &payload).await;
    assert_eq!(accepted["status"], "accepted", "{accepted}");
    accepted["session_id"].as_str().unwrap().to_owned()
}

/// Waits until the service at `base` lists `n` pending questions: the listing.
pub(super) async fn wait_pending(client: &reqwest::Client, base: &str, n: usize) -> Value {
    let url = format!("{base}/agent/questions?status=pending");
    poll(client, &url, |q| {
        q["questions"].as_array().is_some_and(|a| a.len() == n)
    })
    .await
}

/// GETs `url`'s JSON body.
pub(super) async fn get_json(client: &reqwest::Client, url: impl reqwest::IntoUrl) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// POSTs `body` to `url` and reads the JSON reply.
pub(super) async fn post_json<B: serde::Serialize + ?Sized>(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    body: &B,
) -> Value {
    client
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// GETs `path` until `done` holds of its JSON body (at most fifteen seconds).
pub(super) async fn poll(
    client: &reqwest::Client,
    url: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..750 {
        last = get_json(client, url).await;
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{url} never reached the state waited for; last: {last}");
}

#[tokio::test]
async fn a_conversation_runs_its_tree_is_visible_and_a_deletion_resumes_the_parent() {
    let running = start(None, serve::DEFAULT_BODY_LIMIT).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();

    let r = client
        .post(format!("{base}/conversations/c1/messages"))
        .json(&json!({ "text": "plan a trip" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "queued");

    // While the researcher's search runs, the tree has main and the researcher under it.
    let tree = poll(&client, &format!("{base}/agent/tree"), |t| {
        t.as_array().is_some_and(|a| a.len() == 2)
    })
    .await;
    let (main, researcher) = (&tree[0], &tree[1]);
    assert_eq!(main["name"], "main");
    assert_eq!(researcher["name"], "agent:researcher");
    assert_eq!(researcher["parent_id"], main["agent_id"]);
    assert_eq!(main["subagents"], json!([researcher["agent_id"]]));
    assert!(tree
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n.get("messages").is_none()));
    // One agent has its messages.
    let id = researcher["agent_id"].as_str().unwrap();
    let one: Value = get_json(&client, format!("{base}/agent/{id}")).await;
    assert_eq!(one["messages"][0]["role"], "user");

    let done = poll(&client, &format!("{base}/conversations/c1"), |c| {
        c["idle"] == true && c["sent"].as_array().is_some_and(|s| !s.is_empty())
    })
    .await;
    assert_eq!(done["sent"], json!(["The researcher says three hotels."]));
    // The ended researcher is still readable, completed with its result.
    let ended: Value = get_json(&client, format!("{base}/agent/{id}")).await;
    assert_eq!(
        (&ended["status"], &ended["result"]),
        (&json!("completed"), &json!("three hotels"))
    );

    // A second turn: the researcher's search hangs long enough to be deleted.
    client
        .post(format!("{base}/conversations/c1/messages"))
        .json(&json!({ "text": "and restaurants?" }))
        .send()
        .await
        .unwrap();
    let tree = poll(&client, &format!("{base}/agent/tree"), |t| {
        t.as_array().is_some_and(|a| a.len() == 2)
    })
    .await;
    let id = tree[1]["agent_id"].as_str().unwrap().to_owned();
    let refused = client
        .post(format!("{base}/agent/{id}/intervene"))
        .json(&json!({ "status": "completed" }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    let r = client
        .post(format!("{base}/agent/{id}/intervene"))
        .json(&json!({ "user_comment": "delete" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["outcome"], "accepted");
    let done = poll(&client, &format!("{base}/conversations/c1"), |c| {
        c["sent"].as_array().is_some_and(|s| s.len() == 2)
    })
    .await;
    assert_eq!(done["sent"][1], "The researcher was stopped.");
    // An ended agent cannot be intervened on.
    let r = client
        .post(format!("{base}/agent/{id}/intervene"))
        .json(&json!({ "user_comment": "delete" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["outcome"], "not_found");

    running.stop();
    running.finish().await.unwrap();
}

#[tokio::test]
async fn the_stream_carries_agent_states_and_messages_as_server_sent_events() {
    let running = start(None, serve::DEFAULT_BODY_LIMIT).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let mut stream = client
        .get(format!("{base}/agent/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert!(stream.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    client
        .post(format!("{base}/conversations/c9/messages"))
        .json(&json!({ "text": "plan a trip" }))
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !text.contains("event: message") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("the stream's events come within five seconds")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: agent-state"), "{text}");
    let states: Vec<Value> = text
        .split("\n\n")
        .filter(|e| e.lines().any(|l| l == "event: agent-state"))
        .filter_map(|e| {
            e.split_once("data: ")
                .map(|(_, d)| serde_json::from_str(d).unwrap())
        })
        .collect();
    assert_eq!(states[0]["status"], "running");
    assert_eq!(states[0]["key"], "c9");
    assert!(states.iter().all(|s| s.get("messages").is_none()));
    assert!(
        states
            .iter()
            .any(|s| s["name"] == "agent:researcher" && s["status"] == "completed"),
        "{text}"
    );
    assert!(
        text.contains(r#""text":"The researcher says three hotels.""#),
        "{text}"
    );
    // Stopping the server ends the stream instead of waiting on it.
    running.stop();
    running.finish().await.unwrap();
}

#[tokio::test]
async fn bad_requests_get_json_errors_with_the_right_status() {
    let running = start(Some("s3cret"), 64).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let auth = |r: reqwest::RequestBuilder| {
        r.bearer_auth("s3cret")
            .header("content-type", "application/json")
    };
    async fn status_and_error(r: reqwest::RequestBuilder) -> (u16, String) {
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.expect("every error is JSON");
        assert_eq!(body["ok"], false);
        (
            status,
            body["error"].as_str().unwrap_or_default().to_owned(),
        )
    }
    let msg = format!("{base}/conversations/c1/messages");
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            client.get(format!("{base}/agent/tree")),
            401,
            "unauthorized",
        ),
        (
            client
                .get(format!("{base}/agent/tree"))
                .bearer_auth("wrong"),
            401,
            "unauthorized",
        ),
        (auth(client.post(&msg)).body("{\"text\": "), 400, "not JSON"),
        (
            auth(client.post(&msg)).body("{}"),
            400,
            "missing field `text`",
        ),
        (
            auth(client.post(&msg)).body("{\"text\": 7}"),
            400,
            "invalid type",
        ),
        (
            auth(client.post(&msg)).body(format!("{{\"text\": \"{}\"}}", "x".repeat(100))),
            413,
            "limit",
        ),
        (
            auth(client.get(format!("{base}/agent/not-a-uuid"))),
            400,
            "not an agent id",
        ),
        (
            auth(client.get(format!("{base}/agent/{}", uuid::Uuid::nil()))),
            404,
            "agent not found",
        ),
        (
            auth(client.get(format!("{base}/conversations/nobody"))),
            404,
            "conversation not found",
        ),
        (
            auth(client.post(format!("{base}/agent/{}/intervene", uuid::Uuid::nil())))
                .body("{\"status\": \"asleep\"}"),
            400,
            "not a status",
        ),
        (
            auth(client.get(format!("{base}/v1/nothing"))),
            404,
            "no such endpoint",
        ),
        (
            auth(client.delete(format!("{base}/agent/tree"))),
            405,
            "does not take DELETE",
        ),
    ];
    for (request, status, fragment) in cases {
        let (got, error) = status_and_error(request).await;
        assert_eq!(got, status, "{error}");
        assert!(error.contains(fragment), "{status}: {error}");
    }
    // With the token, a good request is taken.
    let r = auth(client.post(&msg))
        .body("{\"text\": \"hi\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    running.stop();
    running.finish().await.unwrap();
}

#[test]
fn the_cli_serves_until_interrupted_and_exits_cleanly() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("agentsim-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("serve.yaml");
    std::fs::write(&file, SCENARIO).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["serve", file.to_str().unwrap(), "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_owned();
    // A request over a plain TCP connection: the server answers.
    {
        use std::io::{Read, Write};
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.write_all(b"GET /agent/tree HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        tcp.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }
    // SIGINT stops it gracefully, with success.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let mut status = None;
    for _ in 0..250 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let Some(status) = status else {
        let _ = child.kill();
        panic!("agentsim serve did not stop within five seconds of SIGINT");
    };
    assert!(status.success(), "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cli_says_what_is_missing() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/spec/async-question-callback-is-posted-once.yaml"
    );
    let cases: [(&[&str], &str); 4] = [
        (&["serve", "--addr", "127.0.0.1:0"], "needs a SCENARIO"),
        (
            &["serve", "--llm", "anthropic", "--addr", "127.0.0.1:0"],
            "need --base-url",
        ),
        (
            &[
                "serve",
                file,
                "--addr",
                "127.0.0.1:0",
                "--question-callback",
                "ftp://x",
            ],
            "--question-callback ftp://x: not an http:// or https:// URL with a host",
        ),
        (
            &[
                "serve",
                file,
                "--addr",
                "127.0.0.1:0",
                "--public-url",
                "not a url",
            ],
            "--public-url not a url:",
        ),
    ];
    for (args, says) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsim"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// A child process that is killed when the test ends, however it ends.
pub(super) struct Child(pub(super) std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary with `args` and reads its `listening on http://ADDR` line.
pub(super) fn spawn_listening(args: &[&str]) -> (Child, String) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(args)
        .env("ANTHROPIC_API_KEY", "test-key")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_owned();
    (Child(child), addr)
}

/// `agentsim bench serve --seconds S --connections N --json`, which must succeed: what it
/// measured.
fn bench_serve(seconds: &str, connections: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["bench", "serve", "--seconds", seconds])
        .args(["--connections", connections, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_service_benchmark_runs_whole_sessions_and_reports_them() {
    let m = bench_serve("0.5", "2");
    let n = m["completed"].as_u64().unwrap();
    assert!(n >= 1, "{m}");
    assert_eq!(m["triggered"], m["answered"], "{m}");
    assert_eq!(m["answered"], json!(n), "{m}");
    assert!(m["session"]["p99_us"].as_u64().unwrap() >= m["session"]["p50_us"].as_u64().unwrap());
}

/// Many sessions in flight at once (forty clients, each running seed 003's flow in a loop)
/// each finish as their own: the benchmark's clients check every session's result and question
/// count, and fail on the first that differs.
#[test]
fn many_sessions_in_flight_at_once_each_finish_correctly() {
    let m = bench_serve("1", "40");
    assert_eq!(m["clients"], 40, "{m}");
    let n = m["completed"].as_u64().unwrap();
    assert!(n >= 40, "every client completed a session at least: {m}");
    assert_eq!(m["triggered"], json!(n), "{m}");
    assert_eq!(m["answered"], json!(n), "{m}");
}
