"""``run_scenario`` and the ``agentsim_run`` fixture: a scenario against a runtime through
``agentsim run --runtime``, with its report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentsim_runtime import NotRunnable, find_agentsim, run_scenario

HERE = Path(__file__).parent
ECHO = [sys.executable, str(HERE / "echo_runtime.py")]
SCENARIO = HERE / "scenarios" / "echo.yaml"

pytestmark = pytest.mark.skipif(find_agentsim() is None, reason="no agentsim binary")


def test_a_runtime_that_does_what_the_scenario_says_passes(agentsim_run) -> None:  # type: ignore[no-untyped-def]
    result = agentsim_run("scenarios/echo.yaml", ECHO)
    assert result.passed and result.failure is None
    assert 'runtime → user default: "you said: bye"' in result.transcript


def test_a_failing_run_is_reported_with_its_step(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(SCENARIO.read_text().replace('["you said: bye"]', '["you said: ciao"]'))
    result = run_scenario(wrong, ECHO)
    assert not result.passed
    assert result.failure is not None and result.failure["kind"] == "expectation"
    assert result.failure["step"] == 4
    assert "rerun: agentsim run" in result.summary


def test_a_key_the_runtime_cannot_be_judged_by_is_refused(tmp_path: Path) -> None:
    needs = tmp_path / "needs.yaml"
    needs.write_text(SCENARIO.read_text().replace("idle: true", "tool_results: []"))
    with pytest.raises(NotRunnable, match="needs the runtime capability `tool-results`"):
        run_scenario(needs, ECHO)


def test_the_fixture_fails_the_test_with_the_report(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", wrong=SCENARIO.read_text().replace('["you said: bye"]', '["you said: ciao"]'))
    pytester.makepyfile(
        test_echo=f"""
        def test_wrong(agentsim_run):
            agentsim_run("wrong.yaml", {ECHO!r})
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*agentsim run --runtime failed (wrong.yaml)*sent: expected*you said: ciao*"])
