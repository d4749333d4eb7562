"""The README's Python quick start, `examples/quickstart/`, runs and passes as printed (through the
helper's `agentsim_run` fixture, as a user's test would)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentsim_runtime import find_agentsim

QUICKSTART = Path(__file__).parents[4] / "examples" / "quickstart"

pytestmark = pytest.mark.skipif(find_agentsim() is None, reason="no agentsim binary")


def test_the_quick_start_passes(agentsim_run) -> None:  # type: ignore[no-untyped-def]
    result = agentsim_run(QUICKSTART / "hello.yaml", [sys.executable, str(QUICKSTART / "my_agent.py")])
    assert 'runtime → user default: "You said hello."' in result.transcript


def test_a_wrong_expectation_in_the_quick_start_fails(tmp_path: Path, agentsim_run) -> None:  # type: ignore[no-untyped-def]
    wrong = tmp_path / "hello.yaml"
    wrong.write_text((QUICKSTART / "hello.yaml").read_text().replace("[You said hello.]", "[You said bye.]"))
    result = agentsim_run(wrong, [sys.executable, str(QUICKSTART / "my_agent.py")], expect_pass=False)
    assert not result.passed and result.failure is not None
    assert result.failure["step"] == 4
