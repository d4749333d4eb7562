//! `agentsim serve` fit for a deployment (issue 42), over loopback with a real client: webhook
//! idempotency, the event stream's ids and replay. Every wait is bounded.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::path::Path;
use std::time::Duration;

use agentsim::serve::Running;
use serde_json::{json, Value};

use super::serve::{options, serve_yaml, wait_pending, SESSIONS};

async fn start_sessions(db: &Path) -> Running {
    let store = Box::new(agentsim::store::SqliteQuestions::open(db).unwrap());
    serve_yaml(SESSIONS, store, options()).await
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agentsim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// POSTs a webhook to `agent` with the header `header: key` (if any): the status, the
/// `Idempotent-Replayed` header and the body.
async fn webhook(
    client: &reqwest::Client,
    base: &str,
    agent: &str,
    header: Option<(&str, &str)>,
) -> (u16, Option<String>, Value) {
    let mut request = client
        .post(format!("{base}/webhook/{agent}"))
        .json(&json!({ "topic": "love" }));
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let r = request.send().await.unwrap();
    let replayed = r
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), replayed, r.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_sent_twice_with_one_event_id_starts_one_session_also_after_a_restart() {
    let dir = temp_dir("serve-idempotency");
    let db = dir.join("sessions.db");
    let running = start_sessions(&db).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();

    let (status, replayed, first) =
        webhook(&client, &base, "poet", Some(("X-Event-Id", "evt-1"))).await;
    assert_eq!((status, replayed), (200, None), "{first}");
    assert_eq!(first["status"], "accepted");
    assert!(first.get("replayed").is_none(), "{first}");
    let sid = first["session_id"].as_str().unwrap().to_owned();

    // The same event again: the first's session and its status, marked as a replay.
    let (status, replayed, again) =
        webhook(&client, &base, "poet", Some(("X-Event-Id", "evt-1"))).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (200, Some("true")),
        "{again}"
    );
    assert_eq!(
        (&again["session_id"], &again["replayed"], &again["status"]),
        (&json!(sid), &json!(true), &json!("accepted"))
    );
    assert!(
        matches!(
            again["session_status"].as_str(),
            Some("running" | "pending_input")
        ),
        "{again}"
    );

    // Twenty at once with one new key: one session among them.
    let key = ("Idempotency-Key", "order-7");
    let all =
        futures_util::future::join_all((0..20).map(|_| webhook(&client, &base, "poet", Some(key))))
            .await;
    let ids: std::collections::BTreeSet<&str> = all
        .iter()
        .map(|(s, _, b)| {
            assert_eq!(*s, 200, "{b}");
            b["session_id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids.len(), 1, "{all:?}");
    assert_ne!(ids.first().copied(), Some(sid.as_str()));
    let replays = all.iter().filter(|(_, r, _)| r.is_some()).count();
    assert_eq!(replays, 19);

    // No key: a new session each time; an empty key is refused.
    let (_, _, unkeyed) = webhook(&client, &base, "poet", None).await;
    assert!(unkeyed["session_id"] != json!(sid));
    let (status, _, refused) = webhook(&client, &base, "poet", Some(("X-Event-Id", " "))).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["ok"], false);
    // The same key for another agent is another event: not found here, nothing replayed.
    let (status, _, other) = webhook(&client, &base, "nobody", Some(("X-Event-Id", "evt-1"))).await;
    assert_eq!(status, 404, "{other}");

    // The first session asks (the script's one question); three sessions in all.
    wait_pending(&client, &base, 1).await;
    running.stop();
    running.finish().await.unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(count("SELECT COUNT(*) FROM agent_sessions"), 3);
    assert_eq!(count("SELECT COUNT(*) FROM agentsim_webhook_keys"), 2);
    drop(conn);

    // Restarted on its database alone (no runtime state: its open sessions are abandoned):
    // the key still names the first session, now failed.
    let store = Box::new(agentsim::store::SqliteQuestions::open(&db).unwrap());
    let abandon = agentsim::serve::Options {
        abandon_sessions: true,
        ..options()
    };
    let running = serve_yaml(SESSIONS, store, abandon).await;
    let base = format!("http://{}", running.addr);
    let (status, replayed, after) =
        webhook(&client, &base, "poet", Some(("X-Event-Id", "evt-1"))).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (200, Some("true")),
        "{after}"
    );
    assert_eq!(after["session_id"], json!(sid));
    assert_eq!(after["session_status"], "failed");
    running.stop();
    running.finish().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_key_store_keeps_the_newest_keys_only() {
    use agentsim::store::questions::{QuestionStore, WEBHOOK_KEYS_KEPT};
    let mut store = agentsim::store::MemoryQuestions::new();
    for n in 0..WEBHOOK_KEYS_KEPT + 2 {
        store.remember_key(&format!("k{n}"), "s", 0).unwrap();
    }
    assert_eq!(store.session_of_key("k0").unwrap(), None);
    assert_eq!(store.session_of_key("k1").unwrap(), None);
    assert_eq!(store.session_of_key("k2").unwrap().as_deref(), Some("s"));
}

const CHATTY: &str = r#"
name: chatty
agents:
  main: {}
llm:
  main:
    - one
    - two
    - three
    - four
    - five
    - six
steps: []
"#;

/// One server-sent event: its id, its type and its data.
#[derive(Clone, Debug, PartialEq)]
struct Sse {
    id: Option<String>,
    event: String,
    data: Value,
}

/// Reads the stream `r` until `done` holds of the events read (at most five seconds).
async fn read_until(r: &mut reqwest::Response, done: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let (mut text, mut events) = (String::new(), Vec::new());
    while !done(&events) {
        let chunk = tokio::time::timeout_at(deadline, r.chunk())
            .await
            .unwrap_or_else(|_| panic!("the events waited for never came; got {events:#?}"))
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some((block, rest)) = text.split_once("\n\n") {
            let (mut id, mut event, mut data) = (None, String::new(), Value::Null);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("event: ") {
                    event = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap();
                }
            }
            if !event.is_empty() {
                events.push(Sse { id, event, data });
            }
            text = rest.to_owned();
        }
    }
    events
}

async fn stream_from(
    client: &reqwest::Client,
    base: &str,
    last: Option<&str>,
) -> reqwest::Response {
    let mut request = client.get(format!("{base}/agent/stream"));
    if let Some(id) = last {
        request = request.header("Last-Event-ID", id);
    }
    let r = request.send().await.unwrap();
    assert_eq!(r.status(), 200);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_events_have_ids_a_reconnect_replays_after_its_id_and_a_gap_is_announced() {
    let options = agentsim::serve::Options {
        event_buffer: 8,
        ..options()
    };
    let running = serve_yaml(CHATTY, super::serve::memory(), options).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let mut live = stream_from(&client, &base, None).await;
    for n in 0..6 {
        let r = client
            .post(format!("{base}/conversations/c{n}/messages"))
            .json(&json!({ "text": "hello" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    let seen = read_until(&mut live, |e| {
        e.iter().filter(|e| e.event == "message").count() == 6
    })
    .await;
    // Every event has an id, one run's prefix, counting up by one.
    let ids: Vec<(String, u64)> = seen
        .iter()
        .map(|e| {
            let id = e.id.as_deref().unwrap_or_else(|| panic!("no id: {e:?}"));
            let (run, n) = id.split_once('-').unwrap();
            (run.to_owned(), n.parse().unwrap())
        })
        .collect();
    assert!(ids.len() > 8, "{seen:#?}");
    let run = ids[0].0.clone();
    assert!(ids.iter().all(|(r, _)| *r == run));
    assert!(ids.windows(2).all(|w| w[1].1 == w[0].1 + 1), "{ids:?}");
    let last = ids.last().unwrap().1;

    // A reconnect after the third-newest event gets the two after it, the same ones.
    let after = format!("{run}-{}", last - 2);
    let mut again = stream_from(&client, &base, Some(&after)).await;
    let replayed = read_until(&mut again, |e| e.len() >= 2).await;
    assert_eq!(replayed[..2], seen[seen.len() - 2..]);

    // A reconnect after an id the buffer no longer holds: told how many it missed, then the
    // eight the buffer holds (events may have come after the ones `live` read).
    let first = ids[0].1;
    let as_seen = |e: &Sse| -> Option<Sse> {
        let n: u64 = e.id.as_deref()?.split_once('-')?.1.parse().ok()?;
        seen.get(usize::try_from(n.checked_sub(first)?).ok()?)
            .cloned()
    };
    let mut behind = stream_from(&client, &base, Some(&format!("{run}-{first}"))).await;
    let got = read_until(&mut behind, |e| e.len() == 9).await;
    assert_eq!(got[0].event, "dropped", "{got:#?}");
    assert_eq!(got[0].id, None);
    let resumes: u64 = got[0].data["resumes_at"].as_str().unwrap()[run.len() + 1..]
        .parse()
        .unwrap();
    assert!(resumes + 7 >= last, "{got:#?}");
    assert_eq!(got[0].data["dropped"], json!(resumes - first - 1));
    assert_eq!(
        got[1].id.as_deref(),
        Some(format!("{run}-{resumes}").as_str())
    );
    for e in &got[1..] {
        if let Some(was) = as_seen(e) {
            assert_eq!(*e, was);
        }
    }

    // An id of no event of this run (another run's, or none at all): the gap is unknown.
    let mut stranger = stream_from(&client, &base, Some("12-3")).await;
    let strange = read_until(&mut stranger, |e| e.len() == 9).await;
    assert_eq!(strange[0].event, "dropped");
    assert_eq!(strange[0].data["dropped"], Value::Null);
    assert_eq!(strange[1..], got[1..]);

    running.stop();
    running.finish().await.unwrap();
}

/// Sends `head` (a request's line and headers, without the blank line) and `body` over a raw
/// socket to `addr`: the status and the body. Bounded: five seconds.
async fn raw(addr: std::net::SocketAddr, head: &str, body: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "{head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    };
    let out = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .expect("an answer within five seconds");
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_in_the_browser_cannot_drive_the_service() {
    let options = agentsim::serve::Options {
        allow_hosts: vec!["agents.internal".to_owned()],
        ..options()
    };
    let running = serve_yaml(SESSIONS, super::serve::memory(), options).await;
    let addr = running.addr;
    let hook = "POST /webhook/poet HTTP/1.1";
    let body = r#"{"topic": "love"}"#;
    // A cross-origin form post as a browser sends it (text/plain: no preflight).
    let (status, e) = raw(
        addr,
        &format!(
            "{hook}\r\nhost: {addr}\r\norigin: https://evil.example\r\ncontent-type: text/plain"
        ),
        body,
    )
    .await;
    assert_eq!((status, &e["ok"]), (403, &json!(false)), "{e}");
    assert!(e["error"].as_str().unwrap().contains("evil.example"), "{e}");
    // The same from a page of the user's own machine, but as text/plain: 415.
    let (status, e) = raw(
        addr,
        &format!("{hook}\r\nhost: localhost:{}\r\norigin: http://localhost:3000\r\ncontent-type: text/plain;charset=UTF-8", addr.port()),
        body,
    )
    .await;
    assert_eq!(status, 415, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("application/json"),
        "{e}"
    );
    // DNS rebinding: the page's own name in Host, on a GET too.
    let (status, e) = raw(
        addr,
        "GET /agent/questions HTTP/1.1\r\nhost: rebind.evil.example:8080",
        "",
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("rebind.evil.example"),
        "{e}"
    );
    let (status, _) = raw(addr, "GET /agent/questions HTTP/1.0", "").await;
    assert_eq!(status, 400, "no Host at all");
    let (status, e) = raw(
        addr,
        "GET /agent/stream HTTP/1.1\r\nhost: localhost\r\norigin: null",
        "",
    )
    .await;
    assert_eq!(status, 403, "{e}");
    // What a client of the service sends is taken: loopback names, the address, the allow-list.
    for host in [
        addr.to_string(),
        format!("localhost:{}", addr.port()),
        "AGENTS.internal".into(),
    ] {
        let (status, e) = raw(
            addr,
            &format!("{hook}\r\nhost: {host}\r\norigin: http://agents.internal\r\ncontent-type: application/json; charset=utf-8"),
            body,
        )
        .await;
        assert_eq!(status, 200, "{host}: {e}");
    }
    running.stop();
    running.finish().await.unwrap();
}

#[test]
fn listening_beyond_loopback_without_a_token_is_refused_unless_said_so() {
    let dir = temp_dir("serve-insecure");
    let file = dir.join("sessions.yaml");
    std::fs::write(&file, SESSIONS).unwrap();
    let file = file.to_str().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["serve", file, "--addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("without a token") && stderr.contains("--insecure-no-token"),
        "{stderr}"
    );
    // With a token, or saying so, it listens.
    for extra in [&["--token", "t0ken"][..], &["--insecure-no-token"][..]] {
        let mut args = vec!["serve", file, "--addr", "0.0.0.0:0"];
        args.extend_from_slice(extra);
        let (child, _) = super::serve::spawn_listening(&args);
        drop(child);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_llm_control_routes_refuse_pages_and_rebinding_but_its_provider_routes_do_not() {
    use agentsim::mock_llm::server;
    let scenario = agentsim::scenario::parse(CHATTY, Path::new("chatty.yaml")).unwrap();
    let running = server::start(&scenario, server::Options::default())
        .await
        .unwrap();
    let addr = running.addr;
    let (status, e) = raw(
        addr,
        &format!("POST /_agentsim/shutdown HTTP/1.1\r\nhost: {addr}\r\norigin: https://evil.example\r\ncontent-type: application/json"),
        "{}",
    )
    .await;
    assert_eq!(status, 403, "{e}");
    let (status, _) = raw(
        addr,
        &format!("POST /_agentsim/shutdown HTTP/1.1\r\nhost: {addr}\r\ncontent-type: text/plain"),
        "",
    )
    .await;
    assert_eq!(status, 415);
    let (status, _) = raw(
        addr,
        "GET /_agentsim/report HTTP/1.1\r\nhost: rebind.evil.example",
        "",
    )
    .await;
    assert_eq!(status, 400);
    // A provider route takes a request whatever its Host (an SDK sends JSON anyway).
    let turn = r#"{"model":"main","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, reply) = raw(
        addr,
        "POST /v1/messages HTTP/1.1\r\nhost: model.example\r\ncontent-type: application/json",
        turn,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(running.exchanges(), 1);
    let (status, _) = raw(
        addr,
        &format!(
            "GET /_agentsim/report HTTP/1.1\r\nhost: localhost:{}",
            addr.port()
        ),
        "",
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = raw(
        addr,
        &format!(
            "POST /_agentsim/shutdown HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json"
        ),
        "",
    )
    .await;
    assert_eq!(status, 200);
    running.finish(std::future::pending()).await.unwrap();
}

/// Opens a connection to `addr` and sends `text`, then stalls (the caller keeps the socket).
async fn stall(addr: std::net::SocketAddr, text: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(text.as_bytes()).await.unwrap();
    s
}

/// Reads `s` to its end (bounded: five seconds): what the server sent before it closed.
async fn read_to_close(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the server closes a stalled connection within five seconds");
    String::from_utf8_lossy(&out).into_owned()
}

fn timeouts(header_ms: u64, body_ms: u64) -> agentsim::serve::Options {
    agentsim::serve::Options {
        header_timeout: Duration::from_millis(header_ms),
        body_timeout: Duration::from_millis(body_ms),
        ..options()
    }
}

const HALF_HEADERS: &str = "GET /agent/tree HTTP/1.1\r\nHost: localhost\r\n";
const HALF_BODY: &str = "POST /conversations/c1/messages HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"te";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_is_cut_at_its_header_or_body_deadline() {
    let running = serve_yaml(CHATTY, super::serve::memory(), timeouts(300, 300)).await;
    let started = std::time::Instant::now();
    let mut headers = stall(running.addr, HALF_HEADERS).await;
    let mut body = stall(running.addr, HALF_BODY).await;
    let cut = read_to_close(&mut headers).await;
    assert!(!cut.starts_with("HTTP/1.1 200"), "{cut}");
    let late = read_to_close(&mut body).await;
    assert!(late.starts_with("HTTP/1.1 408"), "{late}");
    assert!(late.contains("did not arrive within 300 ms"), "{late}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // A whole request is answered as ever.
    let (status, _) = raw(
        running.addr,
        "GET /agent/tree HTTP/1.1\r\nhost: localhost",
        "",
    )
    .await;
    assert_eq!(status, 200);
    running.stop();
    running.finish().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_get_503_until_stalled_ones_are_cut() {
    let options = agentsim::serve::Options {
        max_connections: 2,
        ..timeouts(800, 800)
    };
    let running = serve_yaml(CHATTY, super::serve::memory(), options).await;
    let _a = stall(running.addr, HALF_HEADERS).await;
    let _b = stall(running.addr, HALF_HEADERS).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, e) = raw(
        running.addr,
        "GET /agent/tree HTTP/1.1\r\nhost: localhost",
        "",
    )
    .await;
    assert_eq!(status, 503, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("--max-connections"),
        "{e}"
    );
    // Once the stalled ones are cut at their deadline, the service answers again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, e) = raw(
        running.addr,
        "GET /agent/tree HTTP/1.1\r\nhost: localhost",
        "",
    )
    .await;
    assert_eq!(status, 200, "{e}");
    running.stop();
    running.finish().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_hold_a_graceful_stop_no_longer_than_its_deadline() {
    let options = agentsim::serve::Options {
        shutdown_timeout: Duration::from_millis(500),
        ..timeouts(60_000, 60_000)
    };
    let running = serve_yaml(CHATTY, super::serve::memory(), options).await;
    let _headers = stall(running.addr, HALF_HEADERS).await;
    let _body = stall(running.addr, HALF_BODY).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    running.stop();
    tokio::time::timeout(Duration::from_secs(5), running.finish())
        .await
        .expect("the service stops within five seconds")
        .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "the stop took {took:?}");
}

/// `text` is an ISO 8601 UTC timestamp with milliseconds, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn is_iso(text: &Value) -> bool {
    let Some(t) = text.as_str() else { return false };
    let b = t.as_bytes();
    b.len() == 24
        && (b[4], b[7], b[10], b[13], b[16], b[19], b[23])
            == (b'-', b'-', b'T', b':', b':', b'.', b'Z')
        && t.chars().filter(char::is_ascii_digit).count() == 17
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_refuse_unknown_fields_comments_take_camel_case_and_times_are_iso_8601() {
    let running = serve_yaml(SESSIONS, super::serve::memory(), options()).await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let (_, _, accepted) = webhook(&client, &base, "poet", None).await;
    let sid = accepted["session_id"].as_str().unwrap().to_owned();
    let pending = wait_pending(&client, &base, 1).await;
    let q = &pending["questions"][0];
    assert!(is_iso(&q["asked_at"]), "{q}");
    let s = super::serve::get_json(&client, format!("{base}/agent/session/{sid}")).await;
    assert!(is_iso(&s["created_at"]), "{s}");
    let answer = |body: Value| {
        client
            .post(format!("{base}/agent/answer/{sid}"))
            .json(&body)
            .send()
    };
    let qid = q["id"].clone();
    let r = answer(json!({ "question_id": qid, "answer": "haiku", "extra": 1 }))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `extra`"),
        "{e}"
    );
    let r = answer(json!({ "question_id": qid, "answer": "haiku" }))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Seed 001's camelCase `userComment` is read as `user_comment`: the body is taken (the
    // agent is unknown: 404, not 400).
    let r = client
        .post(format!("{base}/agent/{}/intervene", uuid::Uuid::nil()))
        .json(&json!({ "userComment": "delete" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "{:?}", r.text().await);
    running.stop();
    running.finish().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_keys_survive_a_restart_on_the_state_directory_alone() {
    let dir = temp_dir("serve-keys-state");
    let state = dir.join("state");
    let start = || {
        let options = agentsim::serve::Options {
            state_dir: Some(state.clone()),
            ..options()
        };
        serve_yaml(SESSIONS, super::serve::memory(), options)
    };
    let running = start().await;
    let base = format!("http://{}", running.addr);
    let client = reqwest::Client::new();
    let (_, _, first) = webhook(&client, &base, "poet", Some(("Idempotency-Key", "k-1"))).await;
    let sid = first["session_id"].as_str().unwrap().to_owned();
    wait_pending(&client, &base, 1).await;
    running.stop();
    running.finish().await.unwrap();
    let lines = std::fs::read_to_string(state.join("webhook-keys.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 1, "{lines}");

    // A torn last line (a kill in the middle of a write) is skipped, the rest read.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(state.join("webhook-keys.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"key\":\"poet\\nk-").unwrap();
    drop(file);
    let running = start().await;
    let base = format!("http://{}", running.addr);
    let (status, replayed, again) =
        webhook(&client, &base, "poet", Some(("Idempotency-Key", "k-1"))).await;
    assert_eq!(
        (status, replayed.as_deref()),
        (200, Some("true")),
        "{again}"
    );
    assert_eq!(again["session_id"], json!(sid));
    assert_eq!(again["session_status"], "pending_input");
    // A key given after the torn line is read back at the next start too.
    let (_, replayed, second) =
        webhook(&client, &base, "poet", Some(("Idempotency-Key", "k-2"))).await;
    assert_eq!(replayed, None);
    running.stop();
    running.finish().await.unwrap();
    let running = start().await;
    let base = format!("http://{}", running.addr);
    for (key, session) in [("k-1", &first), ("k-2", &second)] {
        let (_, replayed, again) =
            webhook(&client, &base, "poet", Some(("Idempotency-Key", key))).await;
        assert_eq!(replayed.as_deref(), Some("true"), "{key}: {again}");
        assert_eq!(again["session_id"], session["session_id"]);
    }
    running.stop();
    running.finish().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A webhook takes any body from a server, as the seed's does: the envelope keeps the content
/// type, the headers (secrets redacted) and the body (JSON as `json`, anything else base64); a
/// browser (a request with `Origin`) must still post JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_envelope_keeps_the_request_and_takes_any_body() {
    let dir = std::env::temp_dir().join(format!("agentsim-envelope-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("sessions.db");
    let store = Box::new(agentsim::store::SqliteQuestions::open(&db).unwrap());
    let running = serve_yaml(SESSIONS, store, options()).await;
    let addr = running.addr;
    let payload_of = |id: &str| -> Value {
        let c = rusqlite::Connection::open(&db).unwrap();
        let text: String = c
            .query_row(
                "SELECT original_payload FROM agent_sessions WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let hook = format!("POST /webhook/poet HTTP/1.1\r\nhost: {addr}");
    let (status, r) = raw(
        addr,
        &format!("{hook}\r\ncontent-type: text/plain\r\nx-github-event: issues\r\nauthorization: Bearer sk-secret"),
        "hello, poet",
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let e = payload_of(r["session_id"].as_str().unwrap());
    assert_eq!(e["content_type"], "text/plain", "{e}");
    assert_eq!(e["headers"]["x-github-event"], "issues", "{e}");
    assert_eq!(e["headers"]["authorization"], "[redacted]", "{e}");
    assert_eq!(e["raw_body_base64"], "aGVsbG8sIHBvZXQ=", "{e}");
    assert!(e.get("json").is_none(), "{e}");
    let (status, r) = raw(
        addr,
        &format!("{hook}\r\ncontent-type: application/json; charset=utf-8"),
        r#"{"topic": "love"}"#,
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let e = payload_of(r["session_id"].as_str().unwrap());
    assert_eq!(e["json"], json!({"topic": "love"}), "{e}");
    assert_eq!(e["content_type"], "application/json; charset=utf-8", "{e}");
    // From a browser, text/plain is refused, as on every POST.
    let (status, _) = raw(
        addr,
        &format!("{hook}\r\norigin: http://{addr}\r\ncontent-type: text/plain"),
        "hi",
    )
    .await;
    assert_eq!(status, 415);
    running.stop();
    running.finish().await.unwrap();
}
