"""The reference runtime end to end: a subprocess speaking the runtime protocol to the driver
(tests/driver.py, a stand-in for `agentsim run --runtime`), its model calls served by the real
`agentsim mock-llm`. With no planted bug it passes every spec scenario of seeds 000 and 002 that
an outside runtime can express, and this folder's own scenarios; each planted bug fails a
scenario, named below, by the check that catches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsim_runtime import find_agentsim
from driver import Run, expressible, load, reference_runtime

HERE = Path(__file__).parent
REPO = HERE.parents[3]
SPEC = REPO / "scenarios" / "spec"
OWN = HERE / "scenarios"

pytestmark = pytest.mark.skipif(
    find_agentsim() is None,
    reason="no agentsim binary: AGENTSIM_BIN is unset, there is no agentsim on PATH and no "
    "target/release/agentsim in the repository (build it with `cargo build --release`)",
)

# Spec scenarios the driver can express but not judge from outside, and why: each judges an
# expectation at the exact virtual moment a scripted latency ends, or right after a `wait: false`
# delivery (`advance: 0ms`). The simulator's virtual time places that moment; real time cannot,
# since the runtime's own work (its model calls, in milliseconds) comes after it.
AT_A_LATENCY_BOUNDARY = "judged at the virtual moment a latency ends"
NOT_FROM_OUTSIDE: dict[str, str] = {
    "core-multiple-tools-in-one-reply-run-sequentially-in-order.yaml": AT_A_LATENCY_BOUNDARY,
    "core-multiple-tools-one-failing-still-runs-the-rest-and-combines-results.yaml": AT_A_LATENCY_BOUNDARY,
    "core-parallel-tools-finish-out-of-order-results-in-reply-order.yaml": AT_A_LATENCY_BOUNDARY,
    "core-text-next-to-tool-use-is-recorded-but-not-sent.yaml": AT_A_LATENCY_BOUNDARY,
    "core-tool-execution-failure-gives-tool-execution-failed-and-loop-continues.yaml": AT_A_LATENCY_BOUNDARY,
    "core-tool-outside-agent-whitelist-is-not-available.yaml": "advance: 0ms after wait: false",
    "stack-ask-user-in-child-parks-frame-and-next-message-becomes-tool-result.yaml": "advance: 0ms after wait: false",
}


def spec_scenarios() -> list[Path]:
    files = sorted(p for p in SPEC.glob("*.yaml") if p.name.split("-")[0] in ("core", "stack", "persist"))
    return [p for p in files if expressible(load(p)) is None and p.name not in NOT_FROM_OUTSIDE]


def play(scenario: Path, bug: str | None = None, **kwargs: object) -> Run:
    env = {"AGENTSIM_PLANTED_BUG": bug} if bug else {}
    run = Run(scenario, reference_runtime(), env=env, **kwargs)  # type: ignore[arg-type]
    run.failures = run.play()
    return run


@pytest.mark.parametrize("scenario", spec_scenarios(), ids=lambda p: p.stem)
def test_spec_scenario_passes(scenario: Path) -> None:
    run = play(scenario)
    assert run.failures == [], "\n".join(run.failures)
    assert run.report.passed, run.report.text
    assert run.display_leaks() == []


@pytest.mark.parametrize("scenario", sorted(OWN.glob("*.yaml")), ids=lambda p: p.stem)
def test_own_scenario_passes(scenario: Path) -> None:
    run = play(scenario)
    assert run.failures == [], "\n".join(run.failures)
    assert run.report.passed, run.report.text
    assert run.display_leaks() == []


def test_the_spec_corpus_share_is_what_the_readme_says() -> None:
    """README.md states how many spec scenarios of seeds 000 and 002 run from outside."""
    ours = [p for p in SPEC.glob("*.yaml") if p.name.split("-")[0] in ("core", "stack", "persist")]
    runs = spec_scenarios()
    readme = (HERE.parent / "README.md").read_text(encoding="utf-8")
    assert f"{len(runs)} of the {len(ours)}" in readme


# --- the planted bugs: each fails a scenario, by the check that names it ---------------------------

def test_empty_reply_replayed_is_rejected_by_the_mock_servers_wire_check() -> None:
    run = play(SPEC / "core-empty-llm-reply-returns-early-and-sends-nothing.yaml", "empty-reply-replayed")
    # Anthropic's own 400, as the mock server answers it: the stored empty turn is invalid.
    assert run.report.broken() == ["tool-pairing"], run.report.text
    assert "all messages must have non-empty content" in run.report.violations[0]["message"]
    assert run.failures == ["step 4: sent: expected ['Sorry, here is the answer now.'], got "
                            "['LLM error: messages.1: all messages must have non-empty content except "
                            "for the optional final assistant message']"]


def test_unanswered_tool_use_after_cancel_breaks_tool_pairing() -> None:
    run = play(OWN / "cancel-while-a-tool-runs.yaml", "unanswered-tool-use-after-cancel")
    assert run.report.broken() == ["tool-pairing"], run.report.text
    assert any("tool_results" in f for f in run.failures)


def test_child_error_as_success_breaks_the_error_cascade() -> None:
    run = play(SPEC / "stack-llm-error-in-child-turn-cascades-error-result-to-parent.yaml", "child-error-as-success")
    assert run.failures == [
        "step 4: tool_result: expected {'agent': 'main', 'content': 'LLM error: upstream exploded', "
        "'is_error': True}, got {'type': 'event', 'conversation': 'default', 'kind': 'tool_result', "
        "'frame': 'main', 'tool_use_id': " + repr(run.last_main_result_id()) + ", "
        "'content': 'LLM error: upstream exploded', 'is_error': False}"
    ]


def test_iteration_reset_on_resume_runs_past_the_limit() -> None:
    run = play(SPEC / "stack-iterations-counted-per-frame-across-user-turns-until-limit.yaml", "iteration-reset-on-resume")
    assert not run.report.passed
    assert [m["address"]["agent"] for m in run.report.misses] == ["interviewer"], (
        "a fourth model call of the skill, which its script does not have")
    assert "step 4: iterations[skill:interviewer]: expected 2, got 1" in run.failures


def test_interruption_leak_puts_the_display_sentinel_into_the_parents_conversation() -> None:
    run = play(OWN / "cancel-while-a-tool-runs.yaml", "interruption-leak")
    assert run.display_leaks() == ["Interrupted. Tell Ally what to do instead."]
    assert any(f.startswith("step 5: sent") for f in run.failures)
