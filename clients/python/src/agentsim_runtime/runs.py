"""Running a scenario against a runtime through agentsim: ``agentsim run FILE --runtime CMD``,
its JSON report parsed (docs/runtime-protocol.md; docs/cli.md, "Against your own runtime")."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .mock_llm import BIN_ENV, MockLlmError, find_agentsim


class NotRunnable(Exception):
    """agentsim refused the scenario before running it: it does not load, or it asks what the
    runtime cannot express (a key no outside runtime can be judged by, a capability the runtime
    did not offer). The message is agentsim's, located in the file."""


@dataclass
class RunResult:
    """One run of a scenario against a runtime."""

    #: Whether every step, expectation and check held.
    passed: bool
    #: The report, as ``agentsim run --format json --runtime`` prints it: ``failure`` (``kind``,
    #: ``message``, ``step``, ``line``), ``transcript``, ``model`` (the mock server's report),
    #: ``stderr`` (the runtime's last lines), ``capabilities``, ...
    data: Mapping[str, Any]
    #: agentsim's own stderr: on a failure, the failure and the command that reruns it.
    summary: str

    @property
    def failure(self) -> Mapping[str, Any] | None:
        """Why it failed (``kind``, ``message``, ...), or None."""
        failure: Mapping[str, Any] | None = self.data.get("failure")
        return failure

    @property
    def transcript(self) -> str:
        """agentsim's and the runtime's lines, one per line."""
        return "\n".join(entry["text"] for entry in self.data.get("transcript", []))


def run_scenario(scenario: str | Path, runtime: str | Sequence[str], *,
                 env: Mapping[str, str] | None = None, args: Sequence[str] = (),
                 timeout: float = 600.0) -> RunResult:
    """Runs ``scenario`` against the runtime started by ``runtime`` (a command line, or its words),
    with ``env`` set in the runtime's environment (``--runtime-env NAME=VALUE``) and ``args`` added
    to agentsim's command line (``["--time-scale", "1"]``). Raises :class:`NotRunnable` when
    agentsim refuses the scenario."""
    binary = find_agentsim()
    if binary is None:
        raise MockLlmError(f"no agentsim binary: set {BIN_ENV} or put agentsim on PATH")
    command = runtime if isinstance(runtime, str) else shlex.join(runtime)
    cmd = [binary, "run", str(scenario), "--format", "json", "--runtime", command, *args]
    for name, value in (env or {}).items():
        cmd += ["--runtime-env", f"{name}={value}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode == 2:
        raise NotRunnable(p.stderr.strip().removeprefix("error: "))
    try:
        data = json.loads(p.stdout)
    except ValueError:
        raise MockLlmError(f"agentsim run exited {p.returncode} without a report: {p.stderr.strip()}") from None
    return RunResult(passed=bool(data["passed"]), data=data, summary=p.stderr.strip())
