//! `agentsim serve`'s question callbacks over loopback, against a real receiver: posted with their
//! session, retried until delivered, never delaying the service when the receiver hangs or
//! refuses, and brought level with the runtime after a restart. The helpers are `serve.rs`'s.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::path::Path;
use std::time::Duration;

use agentsim::serve::{Options, Running};
use serde_json::{json, Value};

use super::serve::{
    get_json, memory, options, poll, post_json, serve_yaml, trigger, wait_pending, Child,
};

/// A receiver of question callbacks on loopback: what it got (the `X-Agent-Session` header and
/// the body of each POST), replying 503 to the first `fail_first` and 200 after, or never
/// replying at all when `hang`.
pub(super) struct Receiver {
    pub(super) url: String,
    pub(super) got: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

pub(super) async fn receiver(fail_first: usize, hang: bool) -> Receiver {
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
    pub(super) async fn wait_for(&self, n: usize) -> Vec<(String, Value)> {
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
    // No context of its own: the callback's is the list's, never null beside it.
    assert_eq!(
        body["question"]["context"],
        pending["questions"][0]["context"]
    );
    assert!(!body["question"]["context"].is_null(), "{body}");
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
    // The same scenario before and after: the model's scripts go on from where they were
    // (`scripted.json` beside the state).
    let yaml = "name: reconcile\nagents:\n  main: {}\n  quick: { kind: agent }\n  \
                poet: { kind: agent, async_questions: true }\nllm:\n  \
                quick: ['{\"done\": true}']\n  poet:\n    - ask_user: Which style?\n    \
                - Wrote a haiku.\n";
    let running = start_with_state(yaml, &state).await;
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
    let running = start_with_state(yaml, &state).await;
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
