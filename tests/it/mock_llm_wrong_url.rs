//! mock-llm and a runtime pointed at the wrong base URL: every request to a path the server does
//! not serve is a miss in the report, naming the path the runtime meant. The helpers are
//! `mock_llm.rs`'s.
#![cfg(feature = "mock-server")]

use agentsim::mock_llm::server::Options;

use super::mock_llm::{anthropic_turn0, finish, post, serve, WEATHER};

/// A runtime given a base URL without `/v1` (or with one too many) requests paths the server does
/// not serve: each is a 404 naming the path it meant, a miss in the report, and the run fails.
#[tokio::test]
async fn a_wrong_base_url_is_in_the_report_with_the_path_meant_and_fails_the_run() {
    let running = serve(WEATHER, Options::default()).await;
    for (path, meant) in [
        ("/messages", "/v1/messages"),
        ("/v1/v1/chat/completions", "/v1/chat/completions"),
    ] {
        let (status, _, body) = post(&running, path, anthropic_turn0()).await;
        assert_eq!(status, 404, "{path}");
        let text = body.to_string();
        assert!(
            text.contains(&format!("the runtime meant {meant}")),
            "{text}"
        );
    }
    let report = finish(running).await;
    assert!(!report.passed, "{}", report.text());
    assert_eq!(report.misses.len(), 2, "{}", report.text());
    let text = report.text();
    assert!(
        text.contains("no reply at exchange 1: agentsim mock-llm serves no POST /messages")
            && text.contains("the runtime meant /v1/messages"),
        "{text}"
    );
}
