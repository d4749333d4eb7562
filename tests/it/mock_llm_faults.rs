//! mock-llm's faults injected at random: errors in place of replies (rate limits, overloads,
//! dropped connections, broken streams), stalls that end in a dropped connection, and latencies;
//! each decision a function of the seed and of where the request was routed, journaled, and the
//! retry gets the reply.

use agentsim::mock_llm::server::{self, Options, Running};
use serde_json::json;

use super::mock_llm::{finish, serve};

/// Plays a six-turn text conversation, retrying each turn until it gets its reply (at most 30
/// attempts); returns what each attempt got (a status, or "dropped").
async fn play_with_retries(running: &Running, stream: bool) -> Vec<String> {
    let client = reqwest::Client::new();
    let mut messages = vec![json!({"role": "user", "content": "turn 0"})];
    let mut seen = Vec::new();
    for turn in 0..6 {
        let mut done = false;
        for _ in 0..30 {
            let body =
                json!({"model": "main", "max_tokens": 10, "stream": stream, "messages": messages});
            let sent = client
                .post(format!("http://{}/v1/messages", running.addr))
                .json(&body)
                .send()
                .await;
            let Ok(response) = sent else {
                seen.push("dropped".to_owned());
                continue;
            };
            let status = response.status().as_u16();
            let text = match response.text().await {
                Ok(t) => t,
                Err(_) => {
                    seen.push("dropped".to_owned());
                    continue;
                }
            };
            let complete = if stream {
                text.contains("event: message_stop")
            } else {
                status == 200
            };
            if status == 200 && stream && !complete {
                seen.push(
                    if text.contains("event: error") {
                        "stream-error"
                    } else {
                        "stream-cut"
                    }
                    .to_owned(),
                );
                continue;
            }
            seen.push(status.to_string());
            if complete {
                messages.push(json!({"role": "assistant", "content": format!("reply {turn}")}));
                messages.push(json!({"role": "user", "content": format!("turn {}", turn + 1)}));
                done = true;
                break;
            }
        }
        assert!(done, "turn {turn} never got its reply: {seen:?}");
    }
    seen
}

const SIX: &str =
    "name: six\nllm:\n  main: [reply 0, reply 1, reply 2, reply 3, reply 4, reply 5]\n";

#[tokio::test]
async fn random_faults_are_seeded_journaled_and_the_retry_gets_the_reply() {
    let faults = |seed| Options {
        faults: Some(server::RandomFaults::errors(0.5, seed)),
        ..Options::default()
    };
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let running = serve(SIX, faults(seed)).await;
        let seen = play_with_retries(&running, true).await;
        let report = finish(running).await;
        assert!(report.passed, "{}", report.text());
        let summary = report.faults.clone().expect("faults are reported");
        assert_eq!(summary.seed, seed);
        assert_eq!(summary.injected as usize, seen.len() - 6, "{seen:?}");
        assert!(report
            .text()
            .contains(&format!("replay: --faults 0.5 --seed {seed}")));
        runs.push(seen);
    }
    assert_eq!(runs[0], runs[1], "the same seed gives the same faults");
    assert_ne!(runs[0], runs[2], "another seed gives others");
    let all: Vec<&String> = runs.iter().flatten().collect();
    assert!(
        all.iter().any(|s| *s != "200"),
        "some faults were injected: {all:?}"
    );
}

#[test]
fn fault_decisions_follow_the_rate_and_the_request_kind() {
    let address = |turn| agentsim::mock_llm::book::Address {
        agent: "main".into(),
        conversation: 1,
        turn,
        entry: Some(1),
    };
    let never = server::RandomFaults::errors(0.0, 1);
    let always = server::RandomFaults::errors(1.0, 1);
    let mut kinds = std::collections::BTreeSet::new();
    for turn in 0..200 {
        assert_eq!(never.decide(&address(turn), 1, true), None);
        let plain = always.decide(&address(turn), 1, false).unwrap();
        assert!(!matches!(
            plain,
            server::InjectedFault::StreamError | server::InjectedFault::StreamCut
        ));
        kinds.insert(always.decide(&address(turn), 1, true).unwrap().name());
    }
    assert_eq!(kinds.len(), 6, "every kind is drawn: {kinds:?}");
}

#[test]
fn stalls_and_latencies_are_drawn_apart_from_the_errors() {
    let address = |turn| agentsim::mock_llm::book::Address {
        agent: "main".into(),
        conversation: 1,
        turn,
        entry: Some(1),
    };
    let errors = server::RandomFaults::errors(0.3, 5);
    let stalls = server::RandomFaults {
        stall_rate: 1.0,
        ..errors
    };
    let late = server::RandomFaults {
        latency_rate: 1.0,
        ..errors
    };
    let mut lengths = std::collections::BTreeSet::new();
    for turn in 0..100 {
        let a = address(turn);
        // Turning delays on changes no error decision.
        assert_eq!(stalls.decide(&a, 1, true), errors.decide(&a, 1, true));
        assert_eq!(late.decide(&a, 2, false), errors.decide(&a, 2, false));
        assert_eq!(errors.delay(&a, 1), None);
        match stalls.delay(&a, 1) {
            Some(server::Delay::Stall(ms)) => assert!(server::STALL_MS.contains(&ms)),
            other => panic!("{other:?}"),
        }
        match late.delay(&a, 1) {
            Some(server::Delay::Latency(ms)) => {
                lengths.insert(ms);
                assert!(server::LATENCY_MS.contains(&ms));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            late.delay(&a, 1),
            late.delay(&a, 1),
            "a function of the seed"
        );
    }
    assert_eq!(lengths.len(), 3, "every length is drawn: {lengths:?}");
}

#[tokio::test]
async fn a_stall_drops_its_connection_after_its_length_and_the_retry_gets_the_reply() {
    // Half the replies stall (no errors); at a time scale of 0.01 a stall lasts 20 to 100 ms.
    let options = |seed| Options {
        faults: Some(server::RandomFaults {
            stall_rate: 0.5,
            ..server::RandomFaults::errors(0.0, seed)
        }),
        time_scale: 0.01,
        keep_journal: true,
        ..Options::default()
    };
    let running = serve(SIX, options(3)).await;
    let seen = play_with_retries(&running, false).await;
    let journal = running.journal_since(0);
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
    let stalls: Vec<&serde_json::Value> = journal
        .iter()
        .filter(|l| l["faults"]["injected"] == "stall")
        .collect();
    assert!(!stalls.is_empty(), "{seen:?}");
    assert_eq!(
        seen.iter().filter(|s| *s == "dropped").count(),
        stalls.len(),
        "each stall is a dropped connection: {seen:?}"
    );
    for line in &stalls {
        assert_eq!(line["outcome"], "fault", "{line}");
        assert_eq!(line["response"]["fault"], "stall", "{line}");
        assert!(server::STALL_MS.contains(&line["faults"]["ms"].as_u64().unwrap()));
    }
    assert_eq!(
        report.faults.expect("faults are reported").injected as usize,
        stalls.len()
    );
}

#[tokio::test]
async fn an_injected_latency_serves_the_reply_late_and_journals_its_length() {
    let running = serve(
        SIX,
        Options {
            faults: Some(server::RandomFaults {
                latency_rate: 1.0,
                ..server::RandomFaults::errors(0.0, 9)
            }),
            time_scale: 0.01,
            keep_journal: true,
            ..Options::default()
        },
    )
    .await;
    let seen = play_with_retries(&running, true).await;
    assert!(seen.iter().all(|s| s == "200"), "{seen:?}");
    let journal = running.journal_since(0);
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
    assert_eq!(journal.len(), 6);
    for line in &journal {
        assert_eq!(line["outcome"], "reply", "{line}");
        assert!(server::LATENCY_MS.contains(&line["faults"]["latency_ms"].as_u64().unwrap()));
        assert!(line["faults"]["injected"].is_null(), "{line}");
    }
}
