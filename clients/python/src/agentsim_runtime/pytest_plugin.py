"""The pytest plugin (registered through the ``pytest11`` entry point): the ``agentsim_run`` and
``mock_llm`` fixtures.

    def test_my_runtime(agentsim_run):
        agentsim_run("scenarios/skill-asks-then-completes.yaml", [sys.executable, "my_agent.py"])

``agentsim_run(scenario, runtime, *, env=None, args=(), expect_pass=True)`` runs ``agentsim run
SCENARIO --runtime RUNTIME`` (see :func:`agentsim_runtime.run_scenario`): the whole scenario
against your runtime, user steps, expectations and checks; the test fails with agentsim's report
when the run fails (or, with ``expect_pass=False``, returns the :class:`RunResult` to judge), and
when agentsim refuses the scenario (what the runtime cannot express).

    @pytest.mark.agentsim_scenario("scenarios/weather.yaml")
    def test_my_agent(mock_llm):
        agent = MyAgent(base_url=mock_llm.anthropic_base_url)
        assert agent.ask("Weather in Paris?") == "18 C and cloudy."

The fixture starts ``agentsim mock-llm SCENARIO --addr 127.0.0.1:0`` (the binary from
``AGENTSIM_BIN``, else ``agentsim`` on ``PATH``), yields the running :class:`MockLlm`, and at
teardown stops it and fails the test with the server's report when the report fails: a broken
wire rule (``tool-pairing``, ``replayed-history``, ``request-format``), a request the scenario had
no reply for, or a scripted reply never used. A test that calls ``mock_llm.stop()`` itself gets
the report and judges it; the teardown then leaves it alone.

The scenario comes from the ``agentsim_scenario`` marker or from indirect parametrization
(``@pytest.mark.parametrize("mock_llm", ["a.yaml", "b.yaml"], indirect=True)``); a relative path
is taken from the test file's directory when it exists there, else from the current directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from typing import Any, Callable, Mapping, Sequence

from .mock_llm import BIN_ENV, MockLlm, find_agentsim
from .runs import NotRunnable, RunResult, run_scenario


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "agentsim_scenario(path): the scenario file the mock_llm fixture serves"
    )


def _beside(request: pytest.FixtureRequest, value: str | Path) -> Path:
    """A relative path from the test file's directory when it exists there, else as given."""
    path = Path(value)
    if not path.is_absolute():
        beside = Path(request.node.path).parent / path
        if beside.exists():
            path = beside
    return path


@pytest.fixture
def agentsim_run(request: pytest.FixtureRequest) -> Callable[..., RunResult]:
    """Runs a scenario against a runtime command with ``agentsim run --runtime``; fails the test
    when the run fails (unless ``expect_pass=False``) or agentsim refuses the scenario."""
    if find_agentsim() is None:
        pytest.fail(f"agentsim_run: no agentsim binary (set {BIN_ENV} or put agentsim on PATH)", pytrace=False)

    def run(scenario: str | Path, runtime: str | Sequence[str], *, env: Mapping[str, str] | None = None,
            args: Sequence[str] = (), expect_pass: bool = True) -> RunResult:
        path = _beside(request, scenario)
        try:
            result = run_scenario(path, runtime, env=env, args=args)
        except NotRunnable as e:
            pytest.fail(f"agentsim refused {path.name}: {e}", pytrace=False)
        if expect_pass and not result.passed:
            failure: Any = result.failure or {}
            stderr = "\n".join(f"  | {line}" for line in result.data.get("stderr", [])[-20:])
            pytest.fail(f"agentsim run --runtime failed ({path.name}): {failure.get('message')}\n"
                        f"{result.summary}\nthe runtime's last stderr lines:\n{stderr}\n\n"
                        f"transcript:\n{result.transcript}", pytrace=False)
        return result

    return run


def _scenario(request: pytest.FixtureRequest) -> Path:
    value = getattr(request, "param", None)
    if value is None:
        marker = request.node.get_closest_marker("agentsim_scenario")
        if marker is None or not marker.args:
            pytest.fail(
                "the mock_llm fixture needs a scenario: @pytest.mark.agentsim_scenario(\"file.yaml\") "
                "or @pytest.mark.parametrize(\"mock_llm\", [\"file.yaml\"], indirect=True)",
                pytrace=False,
            )
        value = marker.args[0]
    path = _beside(request, value)
    if not path.exists():
        pytest.fail(f"mock_llm: scenario {value} not found", pytrace=False)
    return path


@pytest.fixture
def mock_llm(request: pytest.FixtureRequest) -> Iterator[MockLlm]:
    """A running ``agentsim mock-llm`` on the test's scenario; fails the test on a failing report."""
    scenario = _scenario(request)
    if find_agentsim() is None:
        pytest.fail(f"mock_llm: no agentsim binary (set {BIN_ENV} or put agentsim on PATH)", pytrace=False)
    server = MockLlm(scenario).start()
    judged_by_test = False
    try:
        yield server
        judged_by_test = server.report_at_stop is not None
    finally:
        report = server.stop()
    if not judged_by_test and not report.passed:
        pytest.fail(f"agentsim mock-llm's report failed ({scenario.name}):\n{report.text}", pytrace=False)
