"""The reference runtime recorded through the runtime protocol: `agentsim record SCENARIO --runtime`
drives it by a scenario's user steps while its model requests go through the recording proxy to an
upstream (here `agentsim mock-llm`, standing in for a provider); the written file has the recorded
scripts, the skill declared as a skill, and the user's messages with what the runtime sent, and
`agentsim run FILE --runtime` replays it against the same runtime with no upstream and passes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentsim_runtime import find_agentsim

HERE = Path(__file__).parent
REPO = HERE.parents[3]
RUNTIME = shlex.join([sys.executable, str(HERE.parent / "runtime.py")])
RECORDED = HERE / "scenarios" / "skill-asks-then-completes.yaml"

pytestmark = pytest.mark.skipif(
    find_agentsim() is None,
    reason="no agentsim binary: AGENTSIM_BIN is unset, there is no agentsim on PATH and no "
    "target/release/agentsim in the repository (build it with `cargo build --release`)",
)


def test_a_recording_driven_through_the_protocol_replays_and_passes(tmp_path: Path) -> None:
    agentsim = str(find_agentsim())
    upstream = subprocess.Popen(
        [agentsim, "mock-llm", str(RECORDED), "--addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
    )
    try:
        assert upstream.stdout is not None
        listening = upstream.stdout.readline().strip()
        assert listening.startswith("listening on http://"), listening
        url = listening.removeprefix("listening on ")
        out = tmp_path / "recorded.yaml"
        recorded = subprocess.run(
            [agentsim, "record", str(RECORDED), "--runtime", RUNTIME, "--upstream", url,
             "--out", str(out)],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )
        assert recorded.returncode == 0, recorded.stderr
    finally:
        upstream.terminate()
        upstream.wait(timeout=30)
    written = out.read_text(encoding="utf-8")
    assert "  research:\n    kind: skill\n" in written, written
    assert written.endswith(
        "steps:\n"
        '  - { user: "research Python async APIs" }\n'
        '  - { expect: { sent: ["Which Python version?"] } }\n'
        '  - { user: "3.13" }\n'
        '  - { expect: { sent: ["Here is what research found: 3 APIs."] } }\n'
    ), written
    replayed = subprocess.run(
        [agentsim, "run", str(out), "--runtime", RUNTIME],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    # The expectations are the runtime's own: a recording whose runtime said something else fails.
    changed = tmp_path / "changed.yaml"
    changed.write_text(written.replace('sent: ["Which Python version?"]', 'sent: ["Which version?"]'),
                       encoding="utf-8")
    broken = subprocess.run(
        [agentsim, "run", str(changed), "--runtime", RUNTIME],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert broken.returncode == 1, broken.stdout + broken.stderr
