"""The reference runtime end to end, tested the way a user tests theirs: `agentsim check --runtime`
and `agentsim run --runtime` start it as a subprocess speaking the runtime protocol, serve its model
calls with the in-process mock server, play the scenarios' user steps and judge their expectations
and checks. With no planted bug it passes every spec scenario of seeds 000 and 002 that an outside
runtime can express, and this folder's own scenarios; each planted bug fails a scenario, named
below, by the check that catches it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentsim_runtime import find_agentsim

HERE = Path(__file__).parent
REPO = HERE.parents[3]
SPEC = REPO / "scenarios" / "spec"
OWN = HERE / "scenarios"
RUNTIME = shlex.join([sys.executable, str(HERE.parent / "runtime.py")])

pytestmark = pytest.mark.skipif(
    find_agentsim() is None,
    reason="no agentsim binary: AGENTSIM_BIN is unset, there is no agentsim on PATH and no "
    "target/release/agentsim in the repository (build it with `cargo build --release`)",
)


def agentsim(*args: str, bug: str | None = None, silent: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(find_agentsim()), *args, "--runtime", RUNTIME]
    if bug:
        command += ["--runtime-env", f"AGENTSIM_PLANTED_BUG={bug}"]
    if silent:
        command += ["--runtime-env", "AGENTSIM_REFERENCE_SILENT=1"]
    return subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=REPO)


def run(scenario: Path, bug: str | None = None, silent: bool = False) -> dict[str, Any]:
    """`agentsim run --runtime ... --format json` of one scenario: its report."""
    p = agentsim("run", str(scenario), "--format", "json", bug=bug, silent=silent)
    assert p.returncode in (0, 1), p.stderr
    report: dict[str, Any] = json.loads(p.stdout)
    assert report["passed"] == (p.returncode == 0)
    return report


def spec_corpus() -> list[Path]:
    return sorted(p for p in SPEC.glob("*.yaml") if p.name.split("-")[0] in ("core", "stack", "persist"))


def test_every_scenario_the_runtime_can_express_passes() -> None:
    p = agentsim("check", "--format", "json", *map(str, spec_corpus()), str(OWN))
    report = json.loads(p.stdout)
    cases = report["scenarios"]
    failed = [c for c in cases if not c["passed"] and "skipped" not in c]
    assert failed == [], json.dumps(failed, indent=2)
    assert p.returncode == 0, p.stderr
    own = [c for c in cases if Path(c["path"]).parent.name == "scenarios" and "tests" in c["path"]]
    assert own and all(c["passed"] for c in own)
    # README.md states how many spec scenarios of seeds 000 and 002 run from outside; every other
    # one is skipped with the reason agentsim gives (a key no outside runtime can be judged by, a
    # capability this runtime does not offer, an instant real time cannot place).
    spec = [c for c in cases if "/spec/" in c["path"]]
    ran = [c for c in spec if c["passed"]]
    skipped = [c for c in spec if "skipped" in c]
    assert len(ran) + len(skipped) == len(spec) == len(spec_corpus())
    readme = (HERE.parent / "README.md").read_text(encoding="utf-8")
    assert f"**{len(ran)} of the {len(spec)}**" in readme
    front = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"| Python, reporting its stack, tool results, turns and usage | {len(ran)} of {len(spec)} |" in front
    assert all("cannot" in c["skipped"] or "capability" in c["skipped"] for c in skipped)


def test_a_runtime_that_reports_nothing_is_judged_from_its_model_requests() -> None:
    """Most runtimes send the user texts and nothing else: with AGENTSIM_REFERENCE_SILENT=1 this one
    offers no `stack`, `tool-results` or `response`, and agentsim reads the stack, the tool results
    and the main frame's turns from its model requests instead. README.md states how many pass."""
    # One at a time: the scenarios judged while a turn runs keep their margins on a busy machine.
    p = agentsim("check", "--format", "json", "--jobs", "1", *map(str, spec_corpus()), str(OWN),
                 silent=True)
    cases = json.loads(p.stdout)["scenarios"]
    spec = [c for c in cases if "/spec/" in c["path"]]
    passed = [c for c in spec if c["passed"]]
    failed = [c for c in cases if not c["passed"] and "skipped" not in c]
    skipped = [c for c in spec if "skipped" in c]
    readme = (HERE.parent / "README.md").read_text(encoding="utf-8")
    assert f"**{len(passed)} of the {len(spec)}** pass with no report" in readme
    front = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"(`AGENTSIM_REFERENCE_SILENT=1`) | {len(passed)} of {len(spec)} |" in front
    # What fails is a tool result no model request can show (appended to a frame that then
    # ended), said as such: never a wrong verdict.
    assert failed and all("cannot be judged from the model requests" in c["failure"]["message"]
                          for c in failed), json.dumps(failed, indent=2)
    # `tool_results` (every result) still needs the runtime's report.
    assert any("`tool_results` lists results appended to frames that then end" in c["skipped"]
               for c in skipped)


def test_without_reports_a_child_error_delivered_as_success_breaks_error_cascade() -> None:
    r = run(OWN / "child-model-error-cascades.yaml", "child-error-as-success", silent=True)
    assert r["failure"]["kind"] == "error-cascade", r["failure"]
    assert "skill:research ended because its model call failed" in r["failure"]["message"]


# --- the planted bugs: each fails a scenario, by the check that names it ---------------------------

def test_empty_reply_replayed_is_refused_by_the_wire_check() -> None:
    r = run(SPEC / "stack-child-empty-reply-sends-nothing-and-waits-for-user.yaml", "empty-reply-replayed")
    # Anthropic's own 400, as the mock server answers it: the stored empty turn is invalid.
    assert r["failure"]["kind"] == "tool-pairing", r["failure"]
    assert "all messages must have non-empty content" in r["failure"]["message"]


def test_unanswered_tool_use_after_cancel_leaves_the_cancelled_frames_without_results() -> None:
    r = run(OWN / "cancel-while-a-tool-runs.yaml", "unanswered-tool-use-after-cancel")
    assert r["failure"]["kind"] == "expectation", r["failure"]
    assert r["failure"]["step"] == 5
    assert "tool_results: expected" in r["failure"]["message"] and "got []" in r["failure"]["message"]


def test_child_error_as_success_breaks_the_error_cascade() -> None:
    # The check on the model requests breaks on the step where the parent receives the result,
    # before the scenario's own `tool_result` expectation is judged.
    r = run(OWN / "child-model-error-cascades.yaml", "child-error-as-success")
    assert r["failure"]["kind"] == "error-cascade", r["failure"]
    assert r["failure"]["step"] == 3, r["failure"]
    assert r["failure"]["message"] == (
        'error-cascade: skill:research ended because its model call failed, but its parent\'s '
        'request #4 carries "LLM error: upstream exploded" as a result that is not an error'
    )


def test_iteration_reset_on_resume_is_seen_in_the_runtimes_stack() -> None:
    r = run(SPEC / "stack-iterations-counted-per-frame-across-user-turns-until-limit.yaml",
            "iteration-reset-on-resume")
    assert r["failure"]["kind"] == "expectation", r["failure"]
    assert "iterations[skill:interviewer]: expected 2, got 1" in r["failure"]["message"]


def test_interruption_leak_puts_the_display_sentinel_into_the_parents_conversation() -> None:
    r = run(OWN / "cancel-while-a-tool-runs.yaml", "interruption-leak")
    assert r["failure"]["kind"] == "no-display-leak", r["failure"]
    assert '"Interrupted. Tell Ally what to do instead."' in r["failure"]["message"]


def test_a_bug_report_about_the_runtime_is_a_passing_file(tmp_path: Path) -> None:
    """expect_violation works for outside runs: the interruption leak, reproduced as a file that
    passes while the bug is there and fails once it is fixed."""
    source = (OWN / "cancel-while-a-tool-runs.yaml").read_text(encoding="utf-8")
    steps = source.index("steps:")
    # The steps up to the cancel, with the expectation of a violation.
    cut = source.index("  - expect:\n      sent: [Cancelled.]")
    report_file = tmp_path / "interruption-leak.yaml"
    report_file.write_text("expect_violation: no-display-leak\n" + source[:cut], encoding="utf-8")
    assert steps < cut
    buggy = run(report_file, "interruption-leak")
    assert buggy["passed"] and buggy["reproduced"] == "no-display-leak", buggy["failure"]
    fixed = run(report_file)
    assert not fixed["passed"] and fixed["failure"]["kind"] == "expected-violation", fixed["failure"]


# --- explore --runtime: every planted bug found from seed 0, and shrunk ---------------------------

# What reveals each planted bug under `agentsim explore --runtime` from seed 0 (the README's table,
# with the runs and steps measured there): the scenario explored, the faults drawn, the budget of
# runs within which the bug is found, and the finding. The budgets here are those of the table,
# and the shrinking budget is small to keep the suite quick: the file must be at most 10 steps
# and still fail with the finding.
ONLY_CANCELS = ("--no-fault", "llm-error", "--no-fault", "llm-stall", "--no-fault", "llm-latency",
                "--no-fault", "tool-error", "--no-fault", "tool-latency", "--no-fault", "restart",
                "--no-fault", "user-message")
EXPLORED_BUGS = {
    # No error is scripted: a model fault fails the skill's call (seed 7).
    "child-error-as-success": (OWN / "explore-a-skill-that-may-fail.yaml",
                               ("--no-fault", "restart", "--no-fault", "user-message", "--no-fault", "cancel",
                                "--no-fault", "llm-stall", "--no-fault", "llm-latency"),
                               8, "error-cascade"),
    # No step cancels: a cancel word interjected while the skill's tool runs (seed 0).
    "interruption-leak": (OWN / "explore-a-skill-with-a-slow-tool.yaml", ONLY_CANCELS, 1, "no-display-leak"),
    "unanswered-tool-use-after-cancel": (OWN / "explore-a-skill-with-a-slow-tool.yaml", ONLY_CANCELS, 1,
                                         "tool-pairing"),
    # The scenario scripts what reveals these two (an empty reply; a skill talked to past its
    # limit); the checks of every run find them, with no fault.
    "empty-reply-replayed": (SPEC / "stack-child-empty-reply-sends-nothing-and-waits-for-user.yaml",
                             ("--no-faults",), 1, "tool-pairing"),
    "iteration-reset-on-resume": (SPEC / "stack-iterations-counted-per-frame-across-user-turns-until-limit.yaml",
                                  ("--no-faults",), 1, "iteration-limit"),
}


def explore(scenario: Path, flags: tuple[str, ...], runs: int, out: Path, bug: str | None = None,
            shrink_runs: int = 4) -> subprocess.CompletedProcess[str]:
    return agentsim("explore", str(scenario), *flags, "--runs", str(runs), "--jobs", "2",
                    "--shrink-runs", str(shrink_runs), "--out", str(out), bug=bug)


@pytest.mark.parametrize("bug", sorted(EXPLORED_BUGS))
def test_explore_finds_each_planted_bug_from_seed_0_and_shrinks_it(bug: str, tmp_path: Path) -> None:
    """The bug is found within its budget of runs from seed 0, and the failing run is shrunk
    against the runtime into a file of at most 10 steps that fails with the same finding while the
    bug is there, and not once it is fixed."""
    scenario, flags, runs, finding = EXPLORED_BUGS[bug]
    p = explore(scenario, flags, runs, tmp_path, bug=bug)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"    {finding}: " in p.stdout, p.stdout
    assert "rerun: agentsim explore " in p.stdout and " --runs 1" in p.stdout
    files = list(tmp_path.glob(f"{finding}-*.yaml"))
    assert len(files) == 1, p.stdout
    text = files[0].read_text(encoding="utf-8")
    steps = text.split("\nsteps:\n")[1]
    assert 1 <= sum(line.startswith("  - ") for line in steps.splitlines()) <= 10, text
    assert f"#   agentsim run {files[0]} --runtime " in text
    assert run(files[0], bug)["failure"]["kind"] == finding
    # Fixed, the finding is gone: the file passes, or (a small shrinking budget leaves replies the
    # bug's path used) stops at a clean limit.
    fixed = run(files[0])
    assert fixed["passed"] or fixed["failure"]["kind"] in ("model-miss", "unused-replies"), fixed["failure"]


@pytest.mark.parametrize("scenario", sorted({(str(s), f, n) for s, f, n, _ in EXPLORED_BUGS.values()}))
def test_explore_finds_nothing_in_the_runtime_without_a_bug(scenario: tuple[str, tuple[str, ...], int],
                                                             tmp_path: Path) -> None:
    path, flags, runs = scenario
    p = explore(Path(path), flags, runs, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "findings: none" in p.stdout
    assert not list(tmp_path.iterdir())


def test_explore_journals_the_interjected_cancel_and_replays_it_from_the_seed(tmp_path: Path) -> None:
    """A conversation fault is a line of the seed's summary and of its transcript, and the seed
    replays it."""
    scenario, flags, _, _ = EXPLORED_BUGS["interruption-leak"]
    p = explore(scenario, flags, 1, tmp_path, bug="interruption-leak")
    assert '  fault: user interjection "cancel" ' in p.stdout, p.stdout
    replay = agentsim("explore", str(scenario), *flags, "--seed", "0", "--runs", "1", "--no-write",
                      bug="interruption-leak")
    assert 'faults of seed 0:\n  user interjection "cancel" ' in replay.stdout, replay.stdout
    assert 'user → default (seq 2): "cancel"' in replay.stdout, replay.stdout
