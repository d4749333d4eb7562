"""`agentsim explore --generated --runtime`: generated scenarios, kept to what this runtime's
capabilities express, run against it with seeded faults in one process per job (it offers
`reset`). From seed 0, a small budget finds the planted `child-error-as-success` and shrinks it
into a plain scenario file that fails with the bug and passes without it; the same budget finds
nothing in the runtime without a bug."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentsim_runtime import find_agentsim

HERE = Path(__file__).parent
REPO = HERE.parents[3]
RUNTIME = shlex.join([sys.executable, str(HERE.parent / "runtime.py")])

pytestmark = pytest.mark.skipif(
    find_agentsim() is None,
    reason="no agentsim binary: AGENTSIM_BIN is unset, there is no agentsim on PATH and no "
    "target/release/agentsim in the repository (build it with `cargo build --release`)",
)

# Ten generated scenarios from seed 0, two jobs; no kills and no latencies or stalls, so that a run
# is short and each job stays one process.
BUDGET = ("--runs", "10", "--seed", "0", "--jobs", "2", "--no-fault", "restart",
          "--no-fault", "tool-latency", "--no-fault", "llm-stall", "--no-fault", "llm-latency",
          "--shrink-runs", "40")


def explore(*args: str, bug: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(find_agentsim()), "explore", "--generated", "--runtime", RUNTIME, *BUDGET, *args]
    if bug:
        command += ["--runtime-env", f"AGENTSIM_PLANTED_BUG={bug}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)


def run(scenario: Path, bug: str | None = None) -> dict[str, object]:
    command = [str(find_agentsim()), "run", str(scenario), "--format", "json", "--runtime", RUNTIME]
    if bug:
        command += ["--runtime-env", f"AGENTSIM_PLANTED_BUG={bug}"]
    p = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert p.returncode in (0, 1), p.stderr
    report: dict[str, object] = json.loads(p.stdout)
    return report


def test_generated_scenarios_find_child_error_as_success_from_seed_0_and_shrink_it(tmp_path: Path) -> None:
    p = explore("--out", str(tmp_path), bug="child-error-as-success")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "explored generated scenarios against" in p.stdout, out
    assert "one process per job, `reset` between runs" in p.stdout, out
    assert "    error-cascade: " in p.stdout, out
    rerun = next(line for line in p.stdout.splitlines() if line.startswith("  rerun: "))
    assert rerun.startswith("  rerun: agentsim explore --generated --runtime "), rerun
    assert "--seed " in rerun and rerun.endswith(" --runs 1"), rerun
    files = list(tmp_path.glob("error-cascade-*.yaml"))
    assert len(files) == 1, out
    text = files[0].read_text(encoding="utf-8")
    assert "#   agentsim explore --generated --runtime " in text, text
    steps = text.split("\nsteps:\n")[1]
    assert 1 <= sum(line.startswith("  - ") for line in steps.splitlines()) <= 10, text
    failed = run(files[0], "child-error-as-success")
    assert failed["failure"]["kind"] == "error-cascade", failed  # type: ignore[index]
    assert run(files[0])["passed"]


def test_generated_scenarios_find_nothing_in_the_runtime_without_a_bug(tmp_path: Path) -> None:
    p = explore("--out", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "findings: none" in p.stdout, p.stdout
    assert "faults model errors, tool errors" in p.stdout, p.stdout
    assert not list(tmp_path.iterdir())


def test_stalls_latencies_and_tool_hangs_find_nothing_in_the_runtime_without_a_bug(tmp_path: Path) -> None:
    """The faults that take time: a model call that stalls and then drops, a reply served late, a
    tool that answers late or never (this runtime offers `tool-timeouts`, and abandons the call at
    its timeout). The runtime takes them all, and nothing is found."""
    only_slow = ("--no-fault", "restart", "--no-fault", "restart-mid-turn", "--no-fault", "llm-error",
                 "--no-fault", "tool-error", "--no-fault", "user-message", "--no-fault", "cancel")
    command = [str(find_agentsim()), "explore", "--generated", "--runtime", RUNTIME, *only_slow]
    p = subprocess.run([*command, "--runs", "8", "--seed", "0", "--jobs", "2", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "faults model stalls, model latency, tool latency, tool hangs" in p.stdout, p.stdout
    assert "findings: none" in p.stdout, p.stdout
    injected = int(p.stdout.split(" faults injected")[0].rsplit(" ", 1)[1])
    assert injected > 0, p.stdout
    assert not list(tmp_path.iterdir())
    # Seed 7 hangs a call of a tool with a 1 s timeout: the runtime abandons it with an error result.
    seed7 = subprocess.run([*command, "--runs", "1", "--seed", "7", "--no-write"],
                           capture_output=True, text=True, timeout=300, cwd=REPO)
    assert "fault injected: call 4 of tool t1 never answers" in seed7.stdout, seed7.stdout
    assert "tool_result to main: \"Tool 't1' timed out after 1s\" (error)" in seed7.stdout, seed7.stdout
