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
