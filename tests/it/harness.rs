//! The facade a user's own tests call: inline YAML, scenarios built in code, and what a failing
//! run reports.

use agentsim::model::llm::LlmErrorKind;
use agentsim::{run_yaml, Reply, ScenarioBuilder};

#[test]
fn a_malformed_inline_scenario_is_a_located_error() {
    let err = run_yaml("name: x\nsteps:\n  - usr: hi\n").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("<inline>:3:"), "{text}");
}

#[test]
fn an_error_cascades_from_a_child_to_the_user_as_the_error_banner() {
    let run = ScenarioBuilder::new("an llm error in a skill reaches main as an error result")
        .skill("research")
        .reply("main", Reply::use_skill("research", "go"))
        .reply("main", Reply::text("The research failed."))
        .reply("research", Reply::error(LlmErrorKind::Overloaded))
        .user("research something")
        .run();
    run.assert_passed();
    assert_eq!(run.sent(), ["The research failed."]);
    assert!(run
        .transcript()
        .contains("main ← result toolu_01 error: \"LLM error: "));
}

#[test]
fn a_broken_expectation_fails_and_names_the_step() {
    let run = run_yaml(
        "name: t\nllm: { main: [hi] }\nsteps:\n  - user: x\n  - expect: { sent: [bye] }\n",
    )
    .unwrap();
    assert!(!run.passed());
    let failure = run.failure().unwrap().to_string();
    assert!(failure.contains("step 2 (line 5"), "{failure}");
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run.assert_passed();
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("rerun: agentsim run <inline> --seed 0"),
        "{message}"
    );
}

#[test]
fn an_expected_violation_is_reported_as_the_invariant_that_broke() {
    let run = run_yaml(
        "name: t\nsettings: { planted_bug: iteration-off-by-one }\nexpect_violation: iteration-bound\nagents: { main: { max_iterations: 1 } }\nllm: { main: [{ tool_use: { name: t, input: {} } }, hi] }\ntools: { t: ok }\nsteps:\n  - user: x\n",
    )
    .unwrap();
    run.assert_passed();
    assert_eq!(run.violation(), Some("iteration-bound"));
}

#[test]
fn a_run_without_invariants_cannot_claim_an_expected_violation_was_kept() {
    let s = agentsim::scenario::parse(
        "name: t\nexpect_violation: iteration-bound\nllm: { main: [hi] }\nsteps:\n  - user: x\n",
        std::path::Path::new("t.yaml"),
    )
    .unwrap();
    let outcome = agentsim::scenario::run(
        &s,
        agentsim::scenario::RunOptions {
            seed: None,
            observe: false,
        },
    );
    assert!(matches!(
        outcome.failure,
        Some(agentsim::scenario::Failure::InvariantsOff { .. })
    ));
    assert!(outcome.rerun_command().ends_with("--no-invariants"));
}

/// Every expectation a scenario file can write is checked: one that does not hold fails the run
/// and names itself. (A key that was parsed but never compared would pass any file.)
#[test]
fn every_expectation_key_fails_the_run_when_it_does_not_hold() {
    let base = "name: t
agents:
  main: { fork: true }
  helper: { kind: agent }
llm:
  main:
    - tool_use: { name: use_agent, input: { agent: helper, message: do it } }
    - tool_use: [{ name: fork, input: { prompt: later } }, { name: wait, input: { handle: 1 } }]
    - text: done
    - text: done again
  helper:
    - tool_use: { name: complete, input: { result: ok } }
  main#1:
    - text: forked
steps:
  - user: go
  - expect: { sent: [done], agents: { main: { status: completed } } }
  - user: again
";
    let holds = run_yaml(&format!("{base}  - expect: {{ idle: true }}\n")).unwrap();
    holds.assert_passed();
    let wrong = [
        ("sent", "{ sent: [nope] }"),
        ("depth", "{ depth: 3 }"),
        ("top", "{ top: nope }"),
        ("stack", "{ stack: [nope] }"),
        (
            "tool_result",
            "{ tool_result: { agent: main, content: nope } }",
        ),
        (
            "tool_results",
            "{ tool_results: [{ agent: main, content: nope }] }",
        ),
        ("iterations", "{ iterations: { main: 9 } }"),
        ("llm_calls", "{ llm_calls: { main: 9 } }"),
        ("response", "{ response: { text: nope } }"),
        ("response", "{ response: { iterations: 9 } }"),
        ("response", "{ response: { tool_calls: [nope] } }"),
        ("stream", "{ stream: [nope] }"),
        ("idle", "{ idle: false }"),
        ("time", "{ time: 9s }"),
        ("usage", "{ usage: { input_tokens: 9, output_tokens: 9 } }"),
        ("tree", "{ tree: [{ name: main }] }"),
        ("agents.main.name", "{ agents: { main: { name: nope } } }"),
        (
            "agents.main.status",
            "{ agents: { main: { status: error } } }",
        ),
        (
            "agents.agent:helper.parent",
            "{ agents: { \"agent:helper\": { parent: none } } }",
        ),
        (
            "agents.main.result",
            "{ agents: { main: { result: nope } } }",
        ),
        (
            "agents.main.user_comment",
            "{ agents: { main: { user_comment: nope } } }",
        ),
        (
            "agents.main.user_content",
            "{ agents: { main: { user_content: nope } } }",
        ),
        (
            "agents.main.subagents",
            "{ agents: { main: { subagents: [nope] } } }",
        ),
        (
            "agents.main.metadata_subagents",
            "{ agents: { main: { metadata_subagents: [] } } }",
        ),
        ("agents.nope", "{ agents: { nope: { status: completed } } }"),
        ("agent_states", "{ agent_states: [nope] }"),
        ("interventions", "{ interventions: [nope] }"),
        ("questions", "{ questions: [nope] }"),
        ("answers", "{ answers: [nope] }"),
        ("sessions", "{ sessions: [nope] }"),
        ("pending", "{ pending: [nope] }"),
        ("callbacks", "{ callbacks: [nope] }"),
    ];
    for (what, expect) in wrong {
        let run = run_yaml(&format!("{base}  - expect: {expect}\n")).unwrap();
        let failure = run
            .failure()
            .unwrap_or_else(|| panic!("`{expect}` does not hold, yet the run passed"))
            .to_string();
        assert!(
            failure.contains(&format!("\n    {what}")),
            "{expect}: {failure}"
        );
    }
}

/// A `usage` expectation compares each count it gives and only those.
#[test]
fn a_usage_expectation_checks_the_counts_it_gives() {
    let base = "name: t\nllm: { main: [{ text: hi, usage: { input_tokens: 10, output_tokens: 5 } }] }\nsteps:\n  - user: x\n";
    for (expect, holds) in [
        ("{ usage: { output_tokens: 5 } }", true),
        ("{ usage: { input_tokens: 10 } }", true),
        ("{ usage: { input_tokens: 10, output_tokens: 5 } }", true),
        ("{ usage: { output_tokens: 6 } }", false),
        ("{ usage: { input_tokens: 0 } }", false),
    ] {
        let run = run_yaml(&format!("{base}  - expect: {expect}\n")).unwrap();
        assert_eq!(
            run.passed(),
            holds,
            "{expect}: {:?}",
            run.failure().map(|f| f.to_string())
        );
    }
}
