"""The mock_llm fixture and MockLlm against the real `agentsim mock-llm` binary."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agentsim_runtime import MockLlm, find_agentsim

HERE = Path(__file__).parent
GREETING = HERE / "scenarios" / "greeting.yaml"

pytestmark = pytest.mark.skipif(
    find_agentsim() is None,
    reason="no agentsim binary: AGENTSIM_BIN is unset, there is no agentsim on PATH and no "
    "target/release/agentsim in the repository (build it with `cargo build --release`)",
)


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "/v1/messages", data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json", "x-api-key": "test", "anthropic-version": "2023-06-01"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(url: str, messages: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    return post(url, {"model": "main", "max_tokens": 64, "system": "You are main.", "messages": messages})


@pytest.mark.agentsim_scenario("scenarios/greeting.yaml")
def test_the_fixture_serves_the_scenario_and_a_good_run_passes(mock_llm: MockLlm) -> None:
    assert mock_llm.anthropic_base_url.startswith("http://127.0.0.1:")
    assert mock_llm.openai_base_url == mock_llm.anthropic_base_url + "/v1"
    assert mock_llm.env()["ANTHROPIC_BASE_URL"] == mock_llm.anthropic_base_url
    status, reply = ask(mock_llm.anthropic_base_url, [{"role": "user", "content": "hi"}])
    assert status == 200
    assert [b["text"] for b in reply["content"] if b["type"] == "text"] == ["Hello there."]
    live = mock_llm.report()
    assert live.passed and live.status is None and live.data["exchanges"] == 1


@pytest.mark.parametrize("mock_llm", [str(GREETING)], indirect=True)
def test_indirect_parametrization_names_the_scenario_and_stop_hands_the_report_to_the_test(mock_llm: MockLlm) -> None:
    # Nothing asked: the scripted reply is never used, so the report fails; the test took it.
    report = mock_llm.stop()
    assert not report.passed
    assert report.status == 1
    assert report.unused == [{"agent": "main", "entries": [1]}]
    assert "never served" in report.text


def test_a_broken_request_is_a_violation_in_the_report() -> None:
    with MockLlm(GREETING) as server:
        status, body = ask(server.anthropic_base_url, [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]},
            {"role": "user", "content": "what now?"},
        ])
        assert status == 400
        assert "tool_result" in body["error"]["message"]
    report = server.report_at_stop
    assert report is not None and not report.passed
    assert report.broken() == ["tool-pairing"]


def test_a_scenario_that_does_not_load_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nllm:\n  main:\n    - nonsense: 1\n")
    with pytest.raises(Exception, match="did not start"):
        MockLlm(bad).start()


def test_at_teardown_a_failing_report_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_scenario_check=f"""
        import pytest

        @pytest.mark.agentsim_scenario({str(GREETING)!r})
        def test_never_asks(mock_llm):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*agentsim mock-llm's report failed (greeting.yaml)*",
                                 "*never served: agent `main`, entry 1*"])


def test_without_a_scenario_the_fixture_says_how_to_name_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_no_scenario(mock_llm):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*needs a scenario*agentsim_scenario*"])
