"""``agentsim mock-llm`` as a Python object: start it on a free port, point a runtime at it, stop
it and read its report.

    with MockLlm("weather.yaml") as server:
        subprocess.run(["python", "my_agent.py"], env={**os.environ, **server.env()}, check=True)
    report = server.report_at_stop
    assert report.passed, report.text

The binary is ``AGENTSIM_BIN`` when that is set, else ``agentsim`` on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

#: The environment variable naming the agentsim binary.
BIN_ENV = "AGENTSIM_BIN"


class MockLlmError(Exception):
    """The server could not be started, or did not stop as it should."""


def find_agentsim() -> str | None:
    """The agentsim binary: ``$AGENTSIM_BIN`` (which must exist), else the one the ``agentsim``
    wheel installed beside this interpreter (its environment's scripts, also when the environment
    is not activated), else ``agentsim`` on ``PATH``."""
    explicit = os.environ.get(BIN_ENV)
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise MockLlmError(f"{BIN_ENV}={explicit}: not an executable file")
        return explicit
    scripts = sysconfig.get_path("scripts")
    if scripts:
        beside = os.path.join(scripts, "agentsim" + (".exe" if os.name == "nt" else ""))
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    return shutil.which("agentsim")


@dataclass
class Report:
    """mock-llm's report: what it found wrong with the requests it served."""

    #: Whether the run passed: nothing broken, missed or left unused (or, with the scenario's
    #: ``expect_violation``, that rule broken).
    passed: bool
    #: The report as JSON (``violations``, ``misses``, ``unused``, ``exchanges``, ...).
    data: Mapping[str, Any]
    #: The report as the server prints it at shutdown.
    text: str = ""
    #: The server's exit status (0 passed, 1 failed, 2 could not run); None for a live report.
    status: int | None = None

    @property
    def violations(self) -> list[Mapping[str, Any]]:
        """Broken rules: each has ``invariant`` (``tool-pairing``, ...), ``exchange``, ``message``."""
        return list(self.data.get("violations", []))

    @property
    def misses(self) -> list[Mapping[str, Any]]:
        """Requests the scenario had no reply for."""
        return list(self.data.get("misses", []))

    @property
    def unused(self) -> list[Mapping[str, Any]]:
        """Script entries never served, per agent."""
        return list(self.data.get("unused", []))

    def broken(self) -> list[str]:
        """The names of the rules broken, in the order found."""
        return [str(v.get("invariant")) for v in self.violations]


@dataclass
class _Output:
    lines: list[str] = field(default_factory=list)
    first: threading.Event = field(default_factory=threading.Event)


class MockLlm:
    """One ``agentsim mock-llm SCENARIO --addr 127.0.0.1:0`` process."""

    def __init__(self, scenario: str | os.PathLike[str], *, binary: str | None = None,
                 args: Sequence[str] = (), startup_timeout: float = 30.0) -> None:
        self.scenario = Path(scenario)
        self.binary = binary or find_agentsim()
        if self.binary is None:
            raise MockLlmError(f"no agentsim binary: set {BIN_ENV} or put agentsim on PATH")
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.url = ""
        self.report_at_stop: Report | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._out = _Output()
        self._err: list[str] = []
        self._threads: list[threading.Thread] = []
        self._dir = tempfile.TemporaryDirectory(prefix="agentsim-mock-llm-")
        self._report_file = Path(self._dir.name) / "report.json"

    # -- addresses ---------------------------------------------------------------------------

    @property
    def anthropic_base_url(self) -> str:
        """For ``Anthropic(base_url=...)`` or ``ANTHROPIC_BASE_URL`` (no ``/v1``)."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """For ``OpenAI(base_url=...)`` or ``OPENAI_BASE_URL`` (with ``/v1``)."""
        return self.url + "/v1"

    def env(self) -> dict[str, str]:
        """The variables a runtime's SDKs read, pointed here (with placeholder keys)."""
        return {
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "OPENAI_BASE_URL": self.openai_base_url,
            "ANTHROPIC_API_KEY": "agentsim",
            "OPENAI_API_KEY": "agentsim",
        }

    # -- life --------------------------------------------------------------------------------

    def start(self) -> MockLlm:
        """Starts the server and waits for its ``listening on http://ADDR`` line."""
        if self._proc is not None:
            raise MockLlmError("already started")
        cmd = [str(self.binary), "mock-llm", str(self.scenario), "--addr", "127.0.0.1:0",
               "--report", str(self._report_file), *self.args]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                      errors="replace")
        self._threads = [
            threading.Thread(target=self._pump_out, daemon=True),
            threading.Thread(target=self._pump_err, daemon=True),
        ]
        for t in self._threads:
            t.start()
        if not self._out.first.wait(self.startup_timeout):
            self._kill()
            raise MockLlmError(f"`{' '.join(cmd)}` printed no address within {self.startup_timeout} s")
        first = self._out.lines[0] if self._out.lines else ""
        prefix = "listening on "
        if not first.startswith(prefix):
            status = self._proc.wait(timeout=10)
            self._join()
            raise MockLlmError(
                f"`{' '.join(cmd)}` did not start (exit status {status}): {''.join(self._err).strip() or first}"
            )
        self.url = first[len(prefix):].strip()
        return self

    def report(self) -> Report:
        """The report so far (``GET /_agentsim/report``), while the server runs."""
        data = json.loads(self._http("GET", "/_agentsim/report"))
        return Report(passed=bool(data.get("passed")), data=data)

    def stop(self, timeout: float = 10.0) -> Report:
        """Stops the server (``POST /_agentsim/shutdown``) and returns its final report."""
        if self.report_at_stop is not None:
            return self.report_at_stop
        proc = self._proc
        if proc is None:
            raise MockLlmError("not started")
        try:
            self._http("POST", "/_agentsim/shutdown")
        except OSError:
            pass  # Already gone: its exit status says what happened.
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            raise MockLlmError(f"mock-llm did not stop within {timeout} s of /_agentsim/shutdown") from None
        self._join()
        text = "".join(self._out.lines[1:])
        if not self._report_file.exists():
            raise MockLlmError(f"mock-llm exited with status {status} and wrote no report: "
                               f"{''.join(self._err).strip() or text}")
        data = json.loads(self._report_file.read_text(encoding="utf-8"))
        self.report_at_stop = Report(passed=bool(data.get("passed")), data=data, text=text, status=status)
        self._dir.cleanup()
        return self.report_at_stop

    def __enter__(self) -> MockLlm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self.report_at_stop is None:
            try:
                self.stop()
            except MockLlmError:
                self._kill()

    # -- plumbing ----------------------------------------------------------------------------

    def _http(self, method: str, path: str) -> str:
        # mock-llm's control routes take a POST only as JSON (so that a web page cannot post to them).
        request = urllib.request.Request(self.url + path, method=method,
                                         data=b"{}" if method == "POST" else None,
                                         headers={"Content-Type": "application/json"} if method == "POST" else {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body: bytes = response.read()
                return body.decode("utf-8")
        except urllib.error.HTTPError as e:
            raise MockLlmError(f"{method} {path}: HTTP {e.code}: {e.read().decode('utf-8', 'replace')}") from None

    def _pump_out(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._out.lines.append(line)
            self._out.first.set()
        self._out.first.set()

    def _pump_err(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self._err.append(line)

    def _join(self) -> None:
        for t in self._threads:
            t.join(timeout=10)

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._join()
