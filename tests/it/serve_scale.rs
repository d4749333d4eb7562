//! `agentsim serve` at scale (issue 42, items 7, 8 and 11): the runtime's state holds only the
//! sessions that still run or wait (ended ones leave it, kept by the database or beside the
//! state), payloads are stored once, retention deletes ended sessions, and a callback's own
//! answer token answers its question and no other. The binary runs over loopback; every wait is
//! bounded. The helpers are `serve.rs`'s, the fixture `serve_support.rs`'s.
#![cfg(all(feature = "mock-server", feature = "http-model", feature = "sqlite"))]

use std::path::Path;

use serde_json::{json, Value};

use super::serve::{get_json, poll, post_json, wait_pending};
use super::serve_support::{run_bounded, Served};

/// An agent that asks once and answers, `sessions` times over (one session after another: the
/// scripted model goes through its script across sessions).
fn asks_once(sessions: usize) -> String {
    let mut yaml = "name: scale\nagents:\n  main: {}\n  poet: { kind: agent, async_questions: true }\nllm:\n  poet:\n".to_owned();
    for _ in 0..sessions {
        yaml.push_str("    - ask_user: Which style?\n    - Wrote the poem.\n");
    }
    yaml.push_str("steps: []\n");
    yaml
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// One session through the flow: triggered with `payload`, its question answered, seen
/// completed. Its id.
async fn one_session(client: &reqwest::Client, base: &str, payload: &Value) -> String {
    let accepted = post_json(client, format!("{base}/webhook/poet"), payload).await;
    let sid = accepted["session_id"].as_str().unwrap().to_owned();
    let url = format!("{base}/agent/session/{sid}");
    poll(client, &url, |s| s["status"] == "pending_input").await;
    let pending = get_json(client, format!("{base}/agent/questions?status=pending")).await;
    let qid = pending["questions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["session_id"] == sid.as_str())
        .and_then(|q| q["id"].as_str())
        .unwrap()
        .to_owned();
    let answered = post_json(
        client,
        format!("{base}/agent/answer/{sid}"),
        &json!({ "question_id": qid, "answer": "haiku" }),
    )
    .await;
    assert_eq!(answered["status"], "resumed", "{answered}");
    let done = poll(client, &url, |s| s["status"] == "completed").await;
    assert_eq!(done["result"]["raw_result"], "Wrote the poem.", "{done}");
    sid
}

#[tokio::test]
async fn ended_sessions_leave_the_runtime_state_and_payloads_are_stored_once() {
    let mut served = Served::new("serve-scale-state", &asks_once(60))
        .with_db()
        .with_state();
    let (db, state) = (served.db(), served.state());
    let client = reqwest::Client::new();
    // Payloads of 64 KiB each: forty of them kept in the state would make it megabytes.
    let big = "x".repeat(64 * 1024);
    let base = served.start();
    let mut sids = Vec::new();
    let mut sizes = Vec::new();
    for n in 0..40 {
        let payload = json!({ "n": n, "text": big });
        sids.push(one_session(&client, &base, &payload).await);
        sizes.push(size(&state.join("state.json")));
    }
    // The state holds no ended session and no payload: smaller than one payload, and no
    // larger after forty sessions than after ten.
    let last = *sizes.last().unwrap();
    assert!(last < 16 * 1024, "state.json is {last} bytes: {sizes:?}");
    assert!(last <= sizes[9] + 1024, "state.json grew: {sizes:?}");
    // The journal loses the lines of ended sessions when it doubles: it never holds the forty
    // payloads (2.5 MiB and more).
    let journal = size(&state.join("context.jsonl"));
    assert!(journal < 1536 * 1024, "context.jsonl is {journal} bytes");
    // A session that waits is in the state, with its question; its payload is not.
    let accepted = post_json(
        &client,
        format!("{base}/webhook/poet"),
        &json!({ "text": big }),
    )
    .await;
    let waiting = accepted["session_id"].as_str().unwrap().to_owned();
    wait_pending(&client, &base, 1).await;
    let saved = std::fs::read_to_string(state.join("state.json")).unwrap();
    assert!(saved.contains(&waiting), "{saved}");
    assert!(
        saved.len() < 16 * 1024,
        "state.json holds a payload: {} bytes",
        saved.len()
    );

    // Restarted on both: every ended session is the database's, the waiting one the runtime's,
    // its payload read back from the journal.
    let base = served.restart();
    for sid in &sids {
        let s = get_json(&client, format!("{base}/agent/session/{sid}")).await;
        assert_eq!(s["status"], "completed", "{s}");
    }
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    let answered = post_json(
        &client,
        format!("{base}/agent/answer/{waiting}"),
        &json!({ "question_id": qid, "answer": "haiku" }),
    )
    .await;
    assert_eq!(answered["status"], "resumed", "{answered}");
    let url = format!("{base}/agent/session/{waiting}");
    poll(&client, &url, |s| s["status"] == "completed").await;
    let conn = rusqlite::Connection::open(&db).unwrap();
    let payload: String = conn
        .query_row(
            "SELECT original_payload FROM agent_sessions WHERE id = ?1",
            [&waiting],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        payload.contains(&big),
        "the payload in the database is whole"
    );
}

#[tokio::test]
async fn with_state_alone_ended_sessions_are_kept_beside_it_and_come_back_after_a_kill() {
    let mut served = Served::new("serve-scale-alone", &asks_once(60)).with_state();
    let state = served.state();
    let client = reqwest::Client::new();
    let base = served.start();
    let mut sids = Vec::new();
    for n in 0..12 {
        sids.push(one_session(&client, &base, &json!({ "n": n })).await);
    }
    // The runtime forgets a session just after the store took its end (which the client may
    // see first): the state is rewritten without it at once.
    let mut saved = String::new();
    for _ in 0..250 {
        saved = std::fs::read_to_string(state.join("state.json")).unwrap();
        if sids.iter().all(|sid| !saved.contains(sid.as_str())) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for sid in &sids {
        assert!(
            !saved.contains(sid.as_str()),
            "an ended session in the state: {saved}"
        );
    }

    let base = served.restart();
    for sid in &sids {
        let s = get_json(&client, format!("{base}/agent/session/{sid}")).await;
        assert_eq!(s["status"], "completed", "{s}");
        assert_eq!(s["result"]["raw_result"], "Wrote the poem.", "{s}");
        assert_eq!(s["questions_asked"], 1, "{s}");
    }
    // And the service goes on.
    one_session(&client, &base, &json!({ "n": "after" })).await;
}

#[tokio::test]
async fn retention_deletes_ended_sessions_and_their_questions_and_keeps_the_others() {
    let mut served = Served::new("serve-scale-retention", &asks_once(10))
        .with_db()
        .with_state()
        .with(&["--retention", "1s"]);
    let db = served.db();
    let client = reqwest::Client::new();
    let base = served.start();
    let ended = one_session(&client, &base, &json!({ "n": 1 })).await;
    // One that waits for its answer stays, however long it waits.
    let accepted = post_json(&client, format!("{base}/webhook/poet"), &json!({ "n": 2 })).await;
    let waiting = accepted["session_id"].as_str().unwrap().to_owned();
    let pending = wait_pending(&client, &base, 1).await;
    let qid = pending["questions"][0]["id"].as_str().unwrap().to_owned();
    // Deleted a second after it ended (the sweep runs every quarter of the retention).
    let url = format!("{base}/agent/session/{ended}");
    let mut status = 0;
    for _ in 0..150 {
        status = client.get(&url).send().await.unwrap().status().as_u16();
        if status == 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(status, 404, "the ended session is still there");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let count = |sql: &str, id: &str| -> i64 { conn.query_row(sql, [id], |r| r.get(0)).unwrap() };
    assert_eq!(
        count("SELECT COUNT(*) FROM agent_sessions WHERE id = ?1", &ended),
        0
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM agent_questions WHERE session_id = ?1",
            &ended
        ),
        0
    );
    // The waiting one is older than the retention and still answers.
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM agent_questions WHERE session_id = ?1",
            &waiting
        ),
        1
    );
    let answered = post_json(
        &client,
        format!("{base}/agent/answer/{waiting}"),
        &json!({ "question_id": qid, "answer": "haiku" }),
    )
    .await;
    assert_eq!(answered["status"], "resumed", "{answered}");
    poll(&client, &format!("{base}/agent/session/{waiting}"), |s| {
        s["status"] == "completed"
    })
    .await;
}

#[tokio::test]
async fn with_state_alone_a_deleted_session_does_not_come_back_after_a_restart() {
    let mut served = Served::new("serve-scale-retention-alone", &asks_once(10)).with_state();
    let state = served.state();
    let client = reqwest::Client::new();
    let base = served.start();
    let sid = one_session(&client, &base, &json!({ "n": 1 })).await;
    served.kill();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // A start with a retention the session is past deletes it at once, and from beside the
    // state too: the next start does not bring it back.
    served
        .args
        .extend(["--retention".to_owned(), "1".to_owned()]);
    let base = served.start();
    let url = format!("{base}/agent/session/{sid}");
    assert_eq!(client.get(&url).send().await.unwrap().status(), 404);
    served.args.truncate(served.args.len() - 2);
    let base = served.restart();
    let url = format!("{base}/agent/session/{sid}");
    assert_eq!(client.get(&url).send().await.unwrap().status(), 404);
    let ended = std::fs::read_to_string(state.join("sessions-ended.jsonl")).unwrap();
    assert!(!ended.contains(&sid), "{ended}");
}

#[test]
fn a_retention_that_is_not_a_duration_is_refused() {
    for bad in ["0", "abc", "5w", "0.5s", "-3d"] {
        let (code, stderr) = run_bounded(&[
            "serve".to_owned(),
            format!("--retention={bad}"),
            "--addr".to_owned(),
            "127.0.0.1:0".to_owned(),
        ]);
        assert_eq!(code, Some(2), "--retention {bad}: {stderr}");
        assert!(stderr.contains("--retention"), "{stderr}");
    }
}

/// POSTs an answer with `bearer` (if any): the status and the reply.
async fn answer_with(
    client: &reqwest::Client,
    base: &str,
    (sid, qid): (&str, &str),
    bearer: Option<&str>,
) -> (u16, Value) {
    let mut request = client
        .post(format!("{base}/agent/answer/{sid}"))
        .json(&json!({ "question_id": qid, "answer": "haiku" }));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Starts the binary with a token and a callback receiver, triggers two sessions and waits for
/// both callbacks: the running service and each session's (id, question id, answer token).
async fn two_called_back(name: &str, extra: &[&str]) -> (Served, Vec<(String, String, String)>) {
    // Two sessions at once: both ask first (the scripted model's replies go in order of calls).
    let yaml = "name: tokens\nagents:\n  main: {}\n  poet: { kind: agent, async_questions: true }\n\
                llm:\n  poet: [{ ask_user: Which style? }, { ask_user: Which style? }, Wrote the poem., Wrote the poem.]\n";
    let receiver = super::serve_callbacks::receiver(0, false).await;
    let mut served = Served::new(name, yaml)
        .with(&["--token", "s3cret", "--question-callback", &receiver.url])
        .with(extra);
    let base = served.start();
    let client = reqwest::Client::new();
    for n in 0..2 {
        let r = client
            .post(format!("{base}/webhook/poet"))
            .bearer_auth("s3cret")
            .json(&json!({ "n": n }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let got = receiver.wait_for(2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let called: Vec<(String, String, String)> = got
        .iter()
        .map(|(sid, body)| {
            let token = body["answer_token"].as_str();
            let token = token.unwrap_or_else(|| panic!("no answer_token: {body}"));
            let qid = body["question"]["id"].as_str().unwrap();
            (sid.clone(), qid.to_owned(), token.to_owned())
        })
        .collect();
    (served, called)
}

#[tokio::test]
async fn a_callbacks_answer_token_answers_its_own_question_and_nothing_else() {
    let (served, called) = two_called_back("serve-scale-answer-token", &[]).await;
    let base = served.base.clone();
    let client = reqwest::Client::new();
    let [(a_sid, a_qid, a_token), (b_sid, b_qid, b_token)] = &called[..] else {
        unreachable!()
    };
    assert_ne!(a_token, b_token);
    // Without a token, with another question's token, or with a token for another session:
    // 401, and nothing is answered.
    let (status, _) = answer_with(&client, &base, (a_sid, a_qid), None).await;
    assert_eq!(status, 401);
    let (status, _) = answer_with(&client, &base, (a_sid, a_qid), Some(b_token)).await;
    assert_eq!(status, 401, "B's token answered A's question");
    let (status, _) = answer_with(&client, &base, (b_sid, a_qid), Some(a_token)).await;
    assert_eq!(status, 401, "A's token answered under B's session");
    let (status, _) = answer_with(&client, &base, (a_sid, b_qid), Some(a_token)).await;
    assert_eq!(status, 401, "A's token answered B's question");
    // It opens no other endpoint.
    let r = client
        .get(format!("{base}/agent/questions?status=pending"))
        .bearer_auth(a_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let pending = client
        .get(format!("{base}/agent/questions?status=pending"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        pending["questions"].as_array().unwrap().len(),
        2,
        "{pending}"
    );
    // Its own question: answered, once.
    let (status, reply) = answer_with(&client, &base, (a_sid, a_qid), Some(a_token)).await;
    assert_eq!(
        (status, &reply["status"]),
        (200, &json!("resumed")),
        "{reply}"
    );
    // Again: still authorized; `duplicate_ignored`, or 404 once the session completed.
    let (status, reply) = answer_with(&client, &base, (a_sid, a_qid), Some(a_token)).await;
    assert!(
        (status == 200 && reply["status"] == "duplicate_ignored") || status == 404,
        "{status} {reply}"
    );
    let (status, reply) = answer_with(&client, &base, (b_sid, b_qid), Some(b_token)).await;
    assert_eq!(
        (status, &reply["status"]),
        (200, &json!("resumed")),
        "{reply}"
    );
}

#[tokio::test]
async fn with_an_answer_secret_the_token_is_its_hmac_of_the_session_and_question() {
    let (_served, called) = two_called_back(
        "serve-scale-answer-secret",
        &["--answer-secret", "answers-key"],
    )
    .await;
    for (sid, qid, token) in &called {
        assert_eq!(
            *token,
            agentsim::serve::answer_token(b"answers-key", sid, qid),
            "session {sid}"
        );
    }
}

#[tokio::test]
async fn pending_questions_come_in_pages_and_the_tree_gives_absolute_times() {
    // Five sessions at once, each asking first.
    let yaml = "name: pages\nagents:\n  main: {}\n  poet: { kind: agent, async_questions: true }\n\
                llm:\n  poet: [{ ask_user: a? }, { ask_user: b? }, { ask_user: c? }, { ask_user: d? }, { ask_user: e? }]\n";
    let mut served = Served::new("serve-scale-pages", yaml);
    let base = served.start();
    let client = reqwest::Client::new();
    for n in 0..5 {
        post_json(&client, format!("{base}/webhook/poet"), &json!({ "n": n })).await;
    }
    let all = wait_pending(&client, &base, 5).await;
    let ids = |page: &Value| -> Vec<String> {
        page["questions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["id"].as_str().unwrap().to_owned())
            .collect()
    };
    // Pages of two: 2, 2, 1, in the list's order, the last without a next.
    let mut paged = Vec::new();
    let mut url = format!("{base}/agent/questions?status=pending&limit=2");
    let mut pages = 0;
    loop {
        let page = get_json(&client, &url).await;
        pages += 1;
        paged.extend(ids(&page));
        match page["next"].as_str() {
            Some(next) => {
                url = format!("{base}/agent/questions?status=pending&limit=2&after={next}")
            }
            None => {
                assert!(page["next"].is_null(), "{page}");
                break;
            }
        }
        assert!(pages < 5, "pages never end");
    }
    assert_eq!(pages, 3);
    let mut listed = ids(&all);
    let mut sorted = paged.clone();
    listed.sort();
    sorted.sort();
    assert_eq!(listed, sorted, "the pages hold every question once");
    for bad in ["limit=0", "limit=1001", "after=nonsense", "page=2"] {
        let r = client
            .get(format!("{base}/agent/questions?status=pending&{bad}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad}");
    }
    // The tree's times are ISO 8601 UTC, of today, not ms since the service started.
    let tree = get_json(&client, format!("{base}/agent/tree")).await;
    let created = tree[0]["created_at"]
        .as_str()
        .unwrap_or_else(|| panic!("{tree}"));
    let year = agentsim::store::questions::iso_timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    )[..4]
        .to_owned();
    assert!(
        created.starts_with(&year) && created.ends_with('Z'),
        "{created}"
    );
    let id = tree[0]["agent_id"].as_str().unwrap();
    let one = get_json(&client, format!("{base}/agent/{id}")).await;
    assert_eq!(one["created_at"], created);
}
