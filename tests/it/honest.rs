//! A harness that lies is worse than none: expectations that name no conversation, expectations
//! left unchecked behind a reproduced violation, files without steps, and token counts past
//! `u64::MAX` all fail, each with a message that says why.

use agentsim::run_yaml;
use agentsim::scenario::Failure;

const TWO_KEYS: &str = r#"
name: t
llm: { main: [hi, ho] }
steps:
  - user: x
    key: telegram_1
  - user: y
    key: slack
"#;

fn failure_of(yaml: &str) -> String {
    let run = run_yaml(yaml).unwrap();
    assert!(!run.passed(), "the run must fail");
    run.failure().unwrap().to_string()
}

#[test]
fn an_expectation_of_a_conversation_that_never_existed_fails_and_lists_those_that_did() {
    for key in ["telegram1", "\"\"", "Session:1"] {
        let yaml =
            format!("{TWO_KEYS}  - expect: {{ key: {key}, depth: 0, idle: true, sent: [] }}\n");
        let failure = failure_of(&yaml);
        assert!(failure.contains("key:"), "{failure}");
        assert!(
            failure.contains(r#"no such conversation (conversations: "telegram_1", "slack")"#),
            "{failure}"
        );
    }
    // The implied key `default` is held to the same rule when the expectation is about a
    // conversation (here `sent`), and not when it is about the whole run (`idle`).
    let failure = failure_of(&format!("{TWO_KEYS}  - expect: {{ sent: [] }}\n"));
    assert!(
        failure.contains(r#""default" naming a conversation"#),
        "{failure}"
    );
    run_yaml(&format!("{TWO_KEYS}  - expect: {{ idle: true }}\n"))
        .unwrap()
        .assert_passed();
    // A key that exists passes as before.
    run_yaml(&format!(
        "{TWO_KEYS}  - expect: {{ key: telegram_1, sent: [hi], depth: 0 }}\n"
    ))
    .unwrap()
    .assert_passed();
}

#[test]
fn a_key_before_its_conversation_starts_fails_with_none_started_yet() {
    let failure = failure_of(
        "name: t\nllm: { main: [hi] }\nsteps:\n  - expect: { key: later, depth: 0 }\n  - user: x\n    key: later\n",
    );
    assert!(
        failure.contains("no conversation has started yet"),
        "{failure}"
    );
}

const DOUBLE_DELIVERY: &str = r#"
name: t
expect_violation: tool-pairing
settings: { planted_bug: double-delivery }
agents:
  research: { kind: skill }
llm:
  main: [{ use_skill: { skill: research, message: go } }, done]
  research: [{ complete: found }]
steps:
  - user: find it
"#;

#[test]
fn expectations_after_a_reproduced_violation_are_a_failure_not_a_silent_pass() {
    // Reproduced, nothing after it: passes.
    let run = run_yaml(DOUBLE_DELIVERY).unwrap();
    run.assert_passed();
    // An `expect` after the step that broke could never be checked.
    let run = run_yaml(&format!(
        "{DOUBLE_DELIVERY}  - expect: {{ sent: [nonsense] }}\n"
    ))
    .unwrap();
    let failure = run.failure().expect("a failure");
    assert!(
        matches!(failure, Failure::UncheckedExpectations { step: 1, unchecked, .. } if unchecked == &[(2, 12, 5)]),
        "{failure:?}"
    );
    let text = failure.to_string();
    assert!(
        text.contains("were never checked: step 2 (line 12, column 5); move them before step 1"),
        "{text}"
    );
    assert_eq!(failure.to_json()["kind"], "unchecked-expectations");
}

#[test]
fn a_file_without_steps_cannot_run() {
    let err = run_yaml("name: served only\nllm: { main: [hi] }\n").unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("<inline>:1:1: the scenario has no `steps`"),
        "{text}"
    );
    assert!(text.contains("agentsim mock-llm"), "{text}");
    // It is still a valid file: mock-llm serves it.
    agentsim::scenario::parse(
        "name: served only\nllm: { main: [hi] }\n",
        "x.yaml".as_ref(),
    )
    .unwrap();
}

#[test]
fn token_counts_that_would_overflow_are_a_located_load_error() {
    let max = u64::MAX;
    let err = run_yaml(&format!(
        "name: t\nllm:\n  main:\n    - {{ text: a, usage: {{ input_tokens: {max} }} }}\n    - {{ text: b, usage: {{ input_tokens: 1 }} }}\nsteps:\n  - user: x\n  - user: y\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("<inline>:5:7:"), "{err}");
    assert!(err.contains("adds up past 18446744073709551615"), "{err}");
    // Input and output of one reply together count too (OpenAI's `total_tokens`).
    let err = run_yaml(&format!(
        "name: t\nllm:\n  main:\n    - {{ text: a, usage: {{ input_tokens: {max}, output_tokens: 1 }} }}\nsteps:\n  - user: x\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("<inline>:4:7:"), "{err}");
    // At the limit it still counts exactly.
    let run = run_yaml(&format!(
        "name: t\nllm:\n  main:\n    - {{ text: a, usage: {{ input_tokens: {} }} }}\n    - {{ text: b, usage: {{ input_tokens: 1 }} }}\nsteps:\n  - user: x\n  - user: y\n  - expect: {{ usage: {{ input_tokens: {max} }} }}\n",
        max - 1
    ))
    .unwrap();
    run.assert_passed();
}

#[test]
fn usage_adds_saturating_in_every_build() {
    use agentsim::model::llm::Usage;
    let big = Usage {
        input_tokens: u64::MAX,
        output_tokens: 1,
    };
    let mut total = big;
    total += big;
    assert_eq!(total.input_tokens, u64::MAX);
    assert_eq!(total.output_tokens, 2);
    assert_eq!(big.checked_add(big), None);
}
