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
async fn serve_yaml(yaml: &str, store: serve::Store, options: Options) -> Running {
    let s = scenario::parse(yaml, Path::new("serve.yaml")).unwrap();
    let mut setup = s.driver_setup();
    setup.limits.max_llm_calls = u64::MAX;
    let backend = Backend::Scripted(MockLlm::new(s.scripts.clone()));
    serve::start(setup, backend, store, options).await.unwrap()
}

/// The options of a test service: a free loopback port, no token, the default body limit, in
/// memory.
fn options() -> Options {
    Options {
        addr: "127.0.0.1:0".parse().unwrap(),
        token: None,
        body_limit: serve::DEFAULT_BODY_LIMIT,
        state_dir: None,
        public_url: None,
    }
}

fn memory() -> serve::Store {
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

const SESSIONS: &str = r#"
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
async fn trigger(client: &reqwest::Client, base: &str, agent: &str, payload: Value) -> String {
    let accepted = post_json(client, format!("{base}/webhook/{agent}"), &payload).await;
    assert_eq!(accepted["status"], "accepted", "{accepted}");
    accepted["session_id"].as_str().unwrap().to_owned()
}

/// Waits until the service at `base` lists `n` pending questions: the listing.
async fn wait_pending(client: &reqwest::Client, base: &str, n: usize) -> Value {
    let url = format!("{base}/agent/questions?status=pending");
    poll(client, &url, |q| {
        q["questions"].as_array().is_some_and(|a| a.len() == n)
    })
    .await
}

/// GETs `url`'s JSON body.
async fn get_json(client: &reqwest::Client, url: impl reqwest::IntoUrl) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// POSTs `body` to `url` and reads the JSON reply.
async fn post_json<B: serde::Serialize + ?Sized>(
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
async fn poll(client: &reqwest::Client, url: &str, done: impl Fn(&Value) -> bool) -> Value {
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
        .filter(|e| e.starts_with("event: agent-state"))
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
    let auth = |r: reqwest::RequestBuilder| r.bearer_auth("s3cret");
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
        tcp.write_all(b"GET /agent/tree HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
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
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary with `args` and reads its `listening on http://ADDR` line.
fn spawn_listening(args: &[&str]) -> (Child, String) {
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

/// A receiver of question callbacks on loopback: what it got (the `X-Agent-Session` header and
/// the body of each POST), replying 503 to the first `fail_first` and 200 after, or never
/// replying at all when `hang`.
struct Receiver {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

async fn receiver(fail_first: usize, hang: bool) -> Receiver {
    use axum::http::{HeaderMap, StatusCode};
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
    let seen = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let session = headers
                    .get("x-agent-session")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push((session, body.0));
                    seen.len()
                };
                if hang {
                    // Longer than any attempt's timeout: the sender gives up first.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                if n <= fail_first {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver { url, got }
}

impl Receiver {
    /// Waits (at most ten seconds) until it got `n` callbacks; what it got.
    async fn wait_for(&self, n: usize) -> Vec<(String, Value)> {
        for _ in 0..500 {
            if self.got.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.got.lock().unwrap().clone()
    }
}

/// Starts the service on `yaml` (scripted model, memory store).
async fn start_yaml(yaml: &str) -> Running {
    serve_yaml(yaml, memory(), options()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_callback_is_posted_with_its_session_and_retried_until_delivered() {
    let hook = receiver(2, false).await;
    let yaml = format!(
        r#"
name: callbacks
settings:
  question_callback_url: "{}"
  callbacks: {{ backoff: 50ms, timeout: 2s }}
agents:
  main: {{}}
  poet: {{ kind: agent, async_questions: true }}
llm:
  poet:
    - ask_user: {{ question: Which style?, options: [free verse, haiku] }}
    - Wrote a haiku.
"#,
        hook.url
    );
    let running = start_yaml(&yaml).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let sid = trigger(&client, &base, "poet", json!({ "topic": "love" })).await;

    // Two 503s, then delivered: three POSTs of the same callback, and no fourth.
    let got = hook.wait_for(3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hook.got.lock().unwrap().len(),
        3,
        "no attempt after a delivery"
    );
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap();
    for (session, body) in &got {
        assert_eq!(session, &sid);
        assert_eq!(body, &got[0].1, "every attempt posts the same body");
    }
    let body = &got[0].1;
    assert_eq!(body["event"], "question_pending");
    assert_eq!(body["session_id"], sid.as_str());
    assert_eq!(body["agent_name"], "poet");
    assert_eq!(body["question"]["id"], qid);
    assert_eq!(body["question"]["options"], json!(["free verse", "haiku"]));
    assert_eq!(
        body["answer_url"],
        format!("{base}/agent/answer/{sid}").as_str()
    );

    // The answer URL the callback names is the one that answers.
    let answered: Value = post_json(
        &client,
        body["answer_url"].as_str().unwrap(),
        &json!({ "question_id": qid, "answer": "haiku" }),
    )
    .await;
    assert_eq!(answered["status"], "resumed");
    let done = poll(&client, &format!("{base}/agent/session/{sid}"), |s| {
        s["status"] == "completed"
    })
    .await;
    assert_eq!(done["questions_asked"], 1);
    running.stop();
    running.finish().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_url_that_hangs_or_refuses_delays_nothing_and_its_question_stays_listed() {
    let hanging = receiver(0, true).await;
    // A port nobody listens on: the connection is refused.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/hook", listener.local_addr().unwrap())
    };
    let yaml = format!(
        r#"
name: callbacks
settings:
  callbacks: {{ retries: 1, backoff: 50ms, timeout: 300ms }}
agents:
  main: {{}}
  slow: {{ kind: agent, async_questions: true, question_callback: "{}" }}
  gone: {{ kind: agent, async_questions: true, question_callback: "{refused}" }}
llm:
  slow:
    - ask_user: {{ question: Deploy now? }}
    - Deployed.
  gone:
    - ask_user: {{ question: Close it? }}
    - Closed.
"#,
        hanging.url
    );
    let running = start_yaml(&yaml).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let mut sessions = Vec::new();
    for agent in ["slow", "gone"] {
        let accepted: Value =
            post_json(&client, format!("{base}/webhook/{agent}"), &json!({})).await;
        sessions.push(accepted["session_id"].as_str().unwrap().to_owned());
    }
    // Both questions are listed while their callbacks fail.
    let pending = wait_pending(&client, &base, 2).await;
    // The hanging receiver gets the first attempt and the one retry, each cut at the timeout.
    assert_eq!(hanging.wait_for(2).await.len(), 2);
    for q in pending["questions"].as_array().unwrap() {
        let sid = q["session_id"].as_str().unwrap();
        assert!(sessions.iter().any(|s| s == sid));
        let r = client
            .post(format!("{base}/agent/answer/{sid}"))
            .json(&json!({ "question_id": q["id"], "answer": "yes" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    for (sid, result) in sessions.iter().zip(["Deployed.", "Closed."]) {
        let s = poll(&client, &format!("{base}/agent/session/{sid}"), |s| {
            s["status"] == "completed"
        })
        .await;
        assert_eq!(s["result"]["raw_result"], result, "{s}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        hanging.got.lock().unwrap().len(),
        2,
        "one attempt and one retry, no more"
    );
    running.stop();
    running.finish().await.unwrap();
}

/// Starts the service on `yaml` with its runtime persisted in `state` and a store that starts
/// empty (memory): as if the store had heard nothing of what the runtime persisted.
async fn start_with_state(yaml: &str, state: &Path) -> Running {
    let options = Options {
        state_dir: Some(state.to_owned()),
        ..options()
    };
    serve_yaml(yaml, memory(), options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_behind_the_runtime_after_a_restart_is_brought_level_with_it() {
    let state = std::env::temp_dir().join(format!("agentsim-reconcile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    // The same agents before and after; the model's scripts go on from where they were.
    let agents = "name: reconcile\nagents:\n  main: {}\n  quick: { kind: agent }\n  \
                  poet: { kind: agent, async_questions: true }\n";
    let before = format!(
        "{agents}llm:\n  quick: ['{{\"done\": true}}']\n  poet:\n    - ask_user: Which style?\n"
    );
    let running = start_with_state(&before, &state).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let mut sids = Vec::new();
    for agent in ["quick", "poet"] {
        sids.push(trigger(&client, &base, agent, json!({ "n": 1 })).await);
    }
    poll(&client, &format!("{base}/agent/session/{}", sids[0]), |s| {
        s["status"] == "completed"
    })
    .await;
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    running.stop();
    running.finish().await.unwrap();

    // The same runtime state, a store that lost everything: the service stores both sessions
    // again from the runtime's state, the ended one with its outcome, the waiting one with its
    // question, and the session goes on when it is answered.
    let after = format!("{agents}llm:\n  poet: [Wrote a haiku.]\n");
    let running = start_with_state(&after, &state).await;
    let base = format!("http://{}", running.addr);
    let quick: Value = get_json(&client, format!("{base}/agent/session/{}", sids[0])).await;
    assert_eq!(quick["status"], "completed", "{quick}");
    assert_eq!(quick["agent_name"], "quick");
    assert_eq!(quick["result"], json!({ "done": true }));
    let poet: Value = get_json(&client, format!("{base}/agent/session/{}", sids[1])).await;
    assert_eq!(poet["status"], "pending_input", "{poet}");
    let pending: Value = get_json(&client, format!("{base}/agent/questions?status=pending")).await;
    assert_eq!(pending["questions"][0]["id"], qid.as_str(), "{pending}");
    let answered: Value = post_json(
        &client,
        format!("{base}/agent/answer/{}", sids[1]),
        &json!({ "question_id": qid, "answer": "haiku" }),
    )
    .await;
    assert_eq!(answered["status"], "resumed");
    let done = poll(&client, &format!("{base}/agent/session/{}", sids[1]), |s| {
        s["status"] == "completed"
    })
    .await;
    assert_eq!(done["result"]["raw_result"], "Wrote a haiku.");
    running.stop();
    running.finish().await.unwrap();
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_says_on_stderr_what_became_of_a_question_callback() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("agentsim-serve-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("callbacks.yaml");
    std::fs::write(
        &file,
        "name: callbacks\nsettings:\n  callbacks: { retries: 1, backoff: 50ms, timeout: 300ms }\n\
         agents:\n  main: {}\n  poet: { kind: agent, async_questions: true }\n\
         llm:\n  poet:\n    - ask_user: Which style?\n",
    )
    .unwrap();
    // A port nobody listens on: the callback is refused, retried once, and given up.
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/hook", listener.local_addr().unwrap())
    };
    let child = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["serve", file.to_str().unwrap(), "--addr", "127.0.0.1:0"])
        .args(["--question-callback", &refused])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed when the test ends, whatever happens in it.
    let mut child = Child(child);
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap()
        .to_owned();
    let client = reqwest::Client::new();
    let r = client
        .post(format!("http://{addr}/webhook/poet"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_pending(&client, &format!("http://{addr}"), 1).await;
    // Two attempts 50 ms apart, each refused at once: well within a second.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    unsafe {
        libc::kill(child.0.id() as i32, libc::SIGINT);
    }
    let mut status = None;
    for _ in 0..250 {
        status = child.0.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = status.expect("agentsim serve stops within five seconds of SIGINT");
    assert!(status.success(), "{status}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(
        stderr.matches("question callback failed").count(),
        2,
        "{stderr}"
    );
    assert!(stderr.contains("question callback given up"), "{stderr}");
    assert!(stderr.contains(&refused), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
