//! `agentsim serve` fit for a deployment (issue 42), over loopback with a real client: webhook
//! idempotency, the event stream's ids and replay. Every wait is bounded.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::path::Path;

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
    assert_eq!((status, replayed.as_deref()), (200, Some("true")), "{again}");
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
    let all = futures_util::future::join_all(
        (0..20).map(|_| webhook(&client, &base, "poet", Some(key))),
    )
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

    // Restarted on its database: the key still names the first session, now waiting.
    let running = start_sessions(&db).await;
    let base = format!("http://{}", running.addr);
    let (status, replayed, after) =
        webhook(&client, &base, "poet", Some(("X-Event-Id", "evt-1"))).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")), "{after}");
    assert_eq!(after["session_id"], json!(sid));
    assert_eq!(after["session_status"], "pending_input");
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
