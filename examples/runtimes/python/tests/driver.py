"""A small stand-in for the agentsim side of the runtime protocol, until `agentsim run --runtime`
ships: it plays a scenario file's user steps to a runtime process over stdin/stdout, answers its
tool calls from the scenario's `tools`, serves its model calls with the real `agentsim mock-llm`,
and judges the `expect` steps it can judge from the runtime's `send`, `stack` and `event` lines.

It follows docs/runtime-protocol.md: the environment (nothing of ours but the basics), `hello`
built from the scenario, real time scaled by `time_scale`, protocol errors for lines that break
the protocol. It is test code: what it cannot express it refuses (see `expressible`), and what it
does not judge it lists (`IGNORED_KEYS`).
"""

from __future__ import annotations

import heapq
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from agentsim_runtime import MockLlm

CANCEL_WORDS = ["cancel", "stop", "abort", "nevermind", "never mind", "quit"]
# Judged here: the rest of the keys need agentsim itself (virtual time, the response record, the
# mock server's per-agent counts) and are left to it.
JUDGED_KEYS = {"key", "sent", "depth", "top", "stack", "iterations", "tool_result", "tool_results", "idle"}
IGNORED_KEYS = {"time", "response", "llm_calls", "usage"}
BASIC_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE", "TERM")


class ProtocolFailure(AssertionError):
    """The runtime broke the protocol, timed out, or exited."""


def load(path: Path) -> dict[str, Any]:
    # YAML 1.2, as agentsim reads it (`{ skill:research: 1 }` is a key with a colon, `yes` is text).
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = YAML(typ="safe", pure=True).load(f)
    return data


def expressible(s: dict[str, Any]) -> str | None:
    """Why this driver cannot run the scenario against an outside runtime, or None if it can."""
    if s.get("expect_violation"):
        return "expects a violation of agentsim's own runtime"
    settings = s.get("settings") or {}
    for key in ("planted_bug", "interruptions", "query_user", "callbacks", "session_expiry"):
        if key in settings:
            return f"settings.{key}"
    for name, a in (s.get("agents") or {}).items():
        for key in ("fork", "workflow", "async_questions", "batch", "passthrough", "script"):
            if (a or {}).get(key):
                return f"agent {name}: {key}"
    for name, t in (s.get("tools") or {}).items():
        if isinstance(t, dict) and "timeout" in t:
            return f"tool {name}: timeout (capability tool-timeouts)"
    for agent, replies in (s.get("llm") or {}).items():
        for r in replies or []:
            if not isinstance(r, dict):
                continue
            if r.get("stall"):
                return f"{agent}: a stalled reply"
            if _ms(r.get("after", 0)) > 300:
                return f"{agent}: a model latency over 300ms (served in real time)"
            err = r.get("error")
            if err is not None and not (isinstance(err, dict) and "message" in err):
                return f"{agent}: an error with the provider's default message (differs over HTTP)"
    for step in s.get("steps") or []:
        kind = next(iter(step))
        if kind not in ("user", "expect", "advance", "restart", "key", "wait"):
            return f"step {kind}"
        if "expect" in step:
            unknown = set(step["expect"]) - JUDGED_KEYS - IGNORED_KEYS - {"stream"}
            if unknown:
                return f"expect {sorted(unknown)}"
    return None


def _ms(value: Any) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    for suffix, scale in (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * scale)
    return int(float(text))


def hello_for(s: dict[str, Any], state_dir: str, time_scale: float, restarts: int,
              awaiting_idle: int | None) -> dict[str, Any]:
    declared = s.get("agents") or {}
    tools = sorted((s.get("tools") or {}).keys())
    agents = []
    for name in ["main"] + sorted(n for n in declared if n != "main"):
        a = declared.get(name) or {}
        kind = "main" if name == "main" else a["kind"]
        frame = "main" if kind == "main" else f"{kind}:{name}"
        agents.append({
            "name": name, "kind": kind, "frame": frame,
            "system": a.get("system", f"You are {frame}."),
            "model": a.get("model", name),
            "max_iterations": a.get("max_iterations", 10 if kind == "main" else 25),
            "tools": a.get("tools", tools),
            "parallel_tools": bool(a.get("parallel_tools", False)),
            "stream": bool(a.get("stream", False)),
            "passthrough": False, "batch": None, "description": a.get("description"),
        })
    settings = s.get("settings") or {}
    return {
        "type": "hello", "protocol": 1, "run": f"{s['name'][:60]}#0", "seed": s.get("seed", 0),
        "state_dir": state_dir, "restarts": restarts, "awaiting_idle": awaiting_idle,
        "time_scale": time_scale, "agents": agents,
        "tools": [{"name": t, "description": "", "input_schema": {"type": "object"}, "timeout_ms": None}
                  for t in tools],
        "settings": {"cancel_words": settings.get("cancel_words", CANCEL_WORDS),
                     "query_user": "interactive", "max_depth": settings.get("max_depth", 256)},
    }


@dataclass
class ToolScripts:
    """The scenario's tools: the outcome of each call, in order."""

    tools: dict[str, Any]
    calls: dict[str, int] = field(default_factory=dict)

    def outcome(self, name: str, input: Any) -> tuple[dict[str, Any] | None, int]:
        """The tool_result fields (None for a hang) and the latency in ms."""
        spec = self.tools.get(name)
        n = self.calls.get(name, 0)
        self.calls[name] = n + 1
        if isinstance(spec, str):
            return {"content": spec, "is_error": False}, 0
        if spec is None or spec == {}:
            return {"content": json.dumps(input, separators=(",", ":")), "is_error": False}, 0
        if isinstance(spec, list):
            if n >= len(spec):
                raise ProtocolFailure(f"tool {name}: call {n + 1}, but its script has {len(spec)}")
            return self._one(spec[n])
        if "calls" in spec:
            return self._one(spec["calls"][n])
        return self._one(spec)

    @staticmethod
    def _one(entry: Any) -> tuple[dict[str, Any] | None, int]:
        if isinstance(entry, str):
            return {"content": entry, "is_error": False}, 0
        after = _ms(entry.get("after", 0))
        if entry.get("hang"):
            return None, after
        if "error" in entry:
            return {"content": entry["error"], "is_error": True, "failed": True}, after
        return {"content": entry.get("result", ""), "is_error": bool(entry.get("is_error", False))}, after


class Run:
    """One run of a scenario against a runtime command."""

    def __init__(self, scenario: Path, command: list[str], *, env: dict[str, str] | None = None,
                 time_scale: float | None = None, timeout: float = 20.0) -> None:
        self.path = scenario
        self.s = load(scenario)
        self.command = command
        self.extra_env = env or {}
        # Latencies are scaled down, except where an expectation is judged while a turn runs
        # (after a `wait: false` step): there the runtime's own work needs the margins as written.
        timed = any(step.get("wait") is False for step in self.s.get("steps") or [])
        self.time_scale = time_scale if time_scale is not None else 1.0 if timed else 0.2
        self.timeout = timeout
        self.tools = ToolScripts(self.s.get("tools") or {})
        self.work = tempfile.TemporaryDirectory(prefix="agentsim-run-")
        self.state_dir = os.path.join(self.work.name, "state")
        os.mkdir(self.state_dir)
        self.journal = Path(self.work.name) / "journal.jsonl"
        self.mock = MockLlm(scenario, args=["--journal", str(self.journal)])
        self.failures: list[str] = []
        self.seq = 0
        self.idle_seq = 0
        self.restarts = 0
        self.sent: dict[str, list[str]] = {}
        self.stacks: dict[str, list[dict[str, Any]]] = {}
        self.ended: dict[str, dict[str, int]] = {}
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.lines: list[str] = []           # every line of the runtime, for failure messages
        self.stderr: list[str] = []
        self.open_calls: set[str] = set()
        self.timers: list[tuple[float, int, str, dict[str, Any]]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.inbox: queue.Queue[bytes | None] = queue.Queue()

    # -- the process ---------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in BASIC_ENV if k in os.environ}
        env.update({k: v for k, v in os.environ.items() if k.startswith("LC_")})
        env.update(self.mock.env())
        env.update({"AGENTSIM_PROTOCOL": "1", "AGENTSIM_STATE_DIR": self.state_dir})
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.inbox = queue.Queue()
        self.open_calls.clear()
        self.timers.clear()
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=self.env())
        threading.Thread(target=self._pump, args=(self.proc, self.inbox), daemon=True).start()
        threading.Thread(target=self._pump_err, args=(self.proc,), daemon=True).start()
        awaiting = self.seq if self.idle_seq < self.seq else None
        self.write(hello_for(self.s, self.state_dir, self.time_scale, self.restarts, awaiting))
        message = self.next_line(10.0, "ready")
        if message.get("type") != "ready" or message.get("protocol") != 1:
            raise self.fail(f"expected ready, got {message}")
        self.capabilities = set(message["capabilities"])
        if awaiting is not None:
            self.wait_idle(awaiting)

    @staticmethod
    def _pump(proc: subprocess.Popen[bytes], inbox: queue.Queue[bytes | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            inbox.put(line)
        inbox.put(None)

    def _pump_err(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def write(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def fail(self, what: str) -> ProtocolFailure:
        tail = "".join(self.stderr[-20:])
        last = self.lines[-1] if self.lines else "(none)"
        return ProtocolFailure(f"{self.path.name}: {what}\nlast runtime line: {last}\nstderr:\n{tail}")

    def next_line(self, timeout: float, awaited: str) -> dict[str, Any]:
        try:
            raw = self.inbox.get(timeout=timeout)
        except queue.Empty:
            raise self.fail(f"no line within {timeout} s while awaiting {awaited}") from None
        if raw is None:
            assert self.proc is not None
            raise self.fail(f"the runtime exited (status {self.proc.wait()}) while awaiting {awaited}")
        self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
        try:
            message = json.loads(raw)
        except ValueError:
            raise self.fail(f"malformed-json at runtime line {len(self.lines)}") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise self.fail(f"unknown-type at runtime line {len(self.lines)}")
        return message

    # -- what the runtime says -----------------------------------------------------------------

    def handle(self, m: dict[str, Any]) -> None:
        kind = m["type"]
        if kind == "send":
            self.sent.setdefault(m["conversation"], []).append(m["text"])
        elif kind == "tool_call":
            if m["call"] in self.open_calls:
                raise self.fail(f"duplicate-call {m['call']}")
            if m["name"] not in (self.s.get("tools") or {}):
                raise self.fail(f"unknown-tool {m['name']}")
            result, after = self.tools.outcome(m["name"], m["input"])
            self.open_calls.add(m["call"])
            if result is not None:
                due = time.monotonic() + after / 1000 * self.time_scale
                heapq.heappush(self.timers, (due, len(self.lines), m["call"], result))
        elif kind == "idle":
            if not (self.idle_seq <= m["seq"] <= self.seq):
                raise self.fail(f"unknown-seq {m['seq']} (sent up to {self.seq}, idle at {self.idle_seq})")
            self.idle_seq = m["seq"]
        elif kind == "stack":
            self.stacks[m["conversation"]] = m["frames"]
            for f in m.get("ended", []):
                self.ended.setdefault(m["conversation"], {})[f["name"]] = f["iterations"]
        elif kind == "event":
            if m["kind"] == "tool_result":
                self.results.setdefault(m["conversation"], []).append(m)
        elif kind == "error":
            raise self.fail(f"runtime-error: {m['message']}")
        else:
            raise self.fail(f"unknown-type {kind!r}")

    def pump_until(self, deadline: float, done: Any) -> None:
        """Handles lines and answers tool calls as they come due, until done() or the deadline."""
        while not done():
            now = time.monotonic()
            if self.timers and self.timers[0][0] <= now:
                _, _, call, result = heapq.heappop(self.timers)
                self.open_calls.discard(call)
                self.write({"type": "tool_result", "call": call, **result})
                continue
            wait = deadline - now
            if self.timers:
                wait = min(wait, self.timers[0][0] - now)
            if wait <= 0 and now >= deadline:
                return
            try:
                raw = self.inbox.get(timeout=max(wait, 0.001))
            except queue.Empty:
                continue
            self._consume(raw)

    def _consume(self, raw: bytes | None) -> None:
        if raw is None:
            assert self.proc is not None
            raise self.fail(f"the runtime exited (status {self.proc.wait()})")
        self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
        try:
            message = json.loads(raw)
        except ValueError:
            raise self.fail(f"malformed-json at runtime line {len(self.lines)}") from None
        self.handle(message)

    def wait_idle(self, seq: int) -> None:
        deadline = time.monotonic() + self.timeout
        self.pump_until(deadline, lambda: self.idle_seq >= seq)
        if self.idle_seq < seq:
            raise self.fail(f"no idle for seq {seq} within {self.timeout} s")

    # -- steps ---------------------------------------------------------------------------------

    def play(self) -> list[str]:
        """Runs every step; returns the failed expectations (empty when all hold)."""
        failures: list[str] = []
        marks: dict[str, tuple[int, int]] = {}
        self.mock.start()
        try:
            self.start()
            for i, step in enumerate(self.s.get("steps") or []):
                if "user" in step:
                    conv = step.get("key", "default")
                    self.seq += 1
                    self.write({"type": "user", "seq": self.seq, "conversation": conv, "text": step["user"]})
                    if step.get("wait", True):
                        self.wait_idle(self.seq)
                elif "advance" in step:
                    deadline = time.monotonic() + _ms(step["advance"]) / 1000 * self.time_scale
                    self.pump_until(deadline, lambda: False)
                elif "restart" in step:
                    self.restart()
                elif "expect" in step:
                    e = step["expect"]
                    conv = e.get("key", "default")
                    sent_at, results_at = marks.get(conv, (0, 0))
                    failures += [f"step {i + 1}: {f}" for f in self.judge(e, conv, sent_at, results_at)]
                    marks[conv] = (len(self.sent.get(conv, [])), len(self.results.get(conv, [])))
            self.wait_idle(self.seq)
            self.shutdown()
        finally:
            self.kill()
            self.report = self.mock.stop()
        return failures

    def judge(self, e: dict[str, Any], conv: str, sent_at: int, results_at: int) -> list[str]:
        out = []
        frames = [f["name"] for f in self.stacks.get(conv, [])]

        def check(key: str, expected: Any, actual: Any) -> None:
            if expected != actual:
                out.append(f"{key}: expected {expected!r}, got {actual!r}")

        if "sent" in e:
            check("sent", list(e["sent"]), self.sent.get(conv, [])[sent_at:])
        if "depth" in e:
            check("depth", e["depth"], len(frames))
        if "top" in e:
            check("top", e["top"], frames[-1] if frames else "none")
        if "stack" in e:
            check("stack", list(e["stack"]), frames)
        if "idle" in e:
            check("idle", e["idle"], self.idle_seq == self.seq)
        if "iterations" in e:
            live = {f["name"]: f.get("iterations") for f in self.stacks.get(conv, [])}
            for name, n in e["iterations"].items():
                check(f"iterations[{name}]", n, live.get(name, self.ended.get(conv, {}).get(name)))
        results = self.results.get(conv, [])[results_at:]
        if "tool_results" in e:
            got = [{"agent": r["frame"], "content": r["content"], "is_error": r["is_error"]} for r in results]
            want = e["tool_results"]
            if len(want) != len(got):
                out.append(f"tool_results: expected {want!r}, got {got!r}")
            else:
                for w, g in zip(want, got):
                    if any(k in w and w[k] != g[k] for k in ("agent", "content", "is_error")) or (
                            "contains" in w and w["contains"] not in g["content"]):
                        out.append(f"tool_results: expected {want!r}, got {got!r}")
                        break
        if "tool_result" in e:
            w = e["tool_result"]
            mine = [r for r in results if r["frame"] == w.get("agent", "main")]
            g = mine[-1] if mine else None
            if g is None or any(k in w and w[k] != g[k] for k in ("content", "is_error")) or (
                    "contains" in w and w["contains"] not in g["content"]):
                out.append(f"tool_result: expected {w!r}, got {g!r}")
        return out

    def restart(self) -> None:
        """kill -9 and start again on the same state directory."""
        self.kill()
        self.restarts += 1
        self.start()

    def shutdown(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise self.fail("the runtime exited before shutdown")
        self.write({"type": "shutdown"})
        deadline = time.monotonic() + 5
        while True:
            try:
                raw = self.inbox.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise self.fail("did not exit within 5 s of shutdown") from None
            if raw is None:
                break
            # A line that crossed the shutdown on its way: recorded, judged by nothing.
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
        try:
            status = self.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            raise self.fail("did not exit within 5 s of shutdown") from None
        if status != 0:
            raise self.fail(f"exited with status {status} after shutdown")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


    # -- checks of the model side ---------------------------------------------------------------

    def requests(self) -> list[dict[str, Any]]:
        """The request bodies mock-llm served, from its journal."""
        out = []
        with open(self.journal, encoding="utf-8") as f:
            for line in f:
                exchange = json.loads(line)
                if isinstance(exchange.get("request"), dict):
                    out.append(exchange["request"])
        return out

    def display_leaks(self) -> list[str]:
        """Display-only texts (seed 004's sentinel, the banners meant for the user) that reached a
        model as conversation content: the `no-display-leak` invariant, judged on the wire."""
        leaks = []
        for request in self.requests():
            for message in request.get("messages", []):
                content = message.get("content")
                blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
                for b in blocks:
                    text = b.get("content") if b.get("type") == "tool_result" else None
                    if isinstance(text, str):
                        for leak in DISPLAY_ONLY:
                            if (leak == text or (leak == SENTINEL and leak in text)) and leak not in leaks:
                                leaks.append(leak)
        return leaks

    def last_main_result_id(self) -> str | None:
        mine = [r for rs in self.results.values() for r in rs if r["frame"] == "main"]
        return mine[-1]["tool_use_id"] if mine else None


SENTINEL = "Interrupted. Tell Ally what to do instead."
DISPLAY_ONLY = (SENTINEL, "Agent reached maximum steps.", "Cancelled.", "Stopped: the agent was deleted.")

RUNTIME = Path(__file__).resolve().parents[1] / "runtime.py"


def reference_runtime() -> list[str]:
    return [sys.executable, str(RUNTIME)]
