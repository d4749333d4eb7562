"""The protocol loop: a runtime is one function, ``on_user(conversation, text, io)``.

``run(on_user)`` answers ``hello`` with ``ready``, calls ``on_user`` for each ``user`` line, and
writes ``idle`` when it returns. Inside ``on_user`` the runtime talks to its model as it always
does (its SDK reads ``ANTHROPIC_BASE_URL``), and uses ``io``:

- ``io.send(text)``: text for the user;
- ``io.tool(name, input, agent=...)``: runs one of the scenario's tools and blocks until
  agentsim's ``tool_result``; ``io.tools([...], agent=...)`` runs several at once; with
  ``timeout=io.tool_timeout(name)`` a call that has no result in time comes back ``timed_out``
  (capability ``tool-timeouts``);
- ``io.stack(frames)``, ``io.usage(input_tokens, output_tokens)`` and ``io.event(kind, ...)``:
  the optional reports of the protocol;
- ``io.model_headers(agent=...)``: the headers that name the conversation (and the agent) of a
  model request, for the SDK's ``extra_headers`` or ``default_headers`` (capability
  ``conversation-header``).

The loop is single-threaded: lines are read only while the runtime waits for a tool (or between
messages). A ``user`` line that arrives during a turn is queued and handed to ``on_user`` after
the turn, unless the runtime's ``interrupts(conversation, text)`` says it interrupts the running
turn: then the waiting ``io.tool`` raises :class:`Interrupted`. A runtime that lets
``Interrupted`` escape from ``on_user`` gets the message again, as an ordinary ``on_user`` call,
once the aborted turn has unwound.
"""

from __future__ import annotations

import collections
import io as _io
import os
import select
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Mapping, Sequence

from .protocol import (
    CAPABILITIES,
    MAX_LINE,
    PROTOCOL,
    Hello,
    Message,
    ProtocolError,
    Reset,
    Shutdown,
    ToolResultMessage,
    UserMessage,
    decode,
    encode,
    model_headers,
)

#: Exit status after a protocol error (docs/runtime-protocol.md, section 1).
EXIT_PROTOCOL_ERROR = 2


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave back.

    ``failed`` means the tool did not return but failed (raised), with ``content`` as its message:
    format it as your runtime formats a tool's exception (agentsim's reference runtime writes
    ``Tool execution failed: <message>``).
    """

    call: str
    content: str
    is_error: bool
    failed: bool = False
    #: No result came within the ``timeout`` given to :meth:`IO.tools` (``content`` is empty); a
    #: result that comes later is ignored.
    timed_out: bool = False


@dataclass(frozen=True)
class ToolCall:
    """One call of :meth:`IO.tools`."""

    name: str
    input: Any
    call: str | None = None
    #: Real seconds this call may take (see :meth:`IO.tools`); None: the ``timeout`` of the batch.
    timeout: float | None = None


class Interrupted(BaseException):
    """A user message interrupted the running turn (see :meth:`Runtime.interrupts`).

    A ``BaseException``, as seed 000's ``ChildActivated`` is, so that a tool wrapper's
    ``except Exception`` cannot swallow it.
    """

    def __init__(self, message: UserMessage) -> None:
        super().__init__(message.text)
        self.message = message

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def conversation(self) -> str:
        return self.message.conversation


class ShutdownRequested(BaseException):
    """agentsim said ``shutdown`` (or closed stdin) while the runtime waited for it."""


class Runtime:
    """A runtime with every hook; subclass it, or give :func:`run` a plain ``on_user`` function."""

    #: Capabilities to offer in ``ready`` (docs/runtime-protocol.md, section 6).
    capabilities: Sequence[str] = ()
    #: The runtime's name and version, shown in agentsim's reports.
    name: str | None = None

    def on_hello(self, hello: Hello) -> None:
        """A run starts (also after a restart: load your state from ``hello.state_dir``)."""

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        """Handle one user message; return when the conversation waits for the user again."""
        raise NotImplementedError

    def interrupts(self, conversation: str, text: str) -> bool:
        """Whether ``text``, arriving while a turn of ``conversation`` runs, interrupts it."""
        return False

    def on_ready(self, io: IO) -> None:
        """``ready`` is written: report what you restored (``io.stack(..., conversation=...)``)."""

    def on_resume(self, seq: int, io: IO) -> None:
        """After a restart in the middle of a turn: finish it from your persisted state."""

    def on_reset(self) -> None:
        """Forget every conversation and every in-memory state (capability ``reset``); a ``hello``
        for the next run follows. A runtime that offers ``reset`` overrides it, or is run with
        :func:`run_fresh`, which makes a new instance instead."""

    def on_shutdown(self) -> None:
        """The run is over; the process exits after this."""


OnUser = Callable[[str, str, "IO"], None]


class _FunctionRuntime(Runtime):
    def __init__(self, on_user: OnUser, capabilities: Sequence[str], name: str | None,
                 on_reset: Callable[[], None] | None) -> None:
        self._on_user = on_user
        self._on_reset = on_reset
        self.capabilities = tuple(capabilities)
        self.name = name

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        self._on_user(conversation, text, io)

    def on_reset(self) -> None:
        if self._on_reset is not None:
            self._on_reset()


class _Fresh(Runtime):
    """A runtime made anew by its factory for every run: at the start and at every ``reset``."""

    def __init__(self, factory: Callable[[], Runtime]) -> None:
        self._factory = factory
        self._current = self._make()
        caps = list(self._current.capabilities)
        if "reset" not in caps:
            caps.append("reset")
        self.capabilities = tuple(caps)
        self.name = self._current.name

    def _make(self) -> Runtime:
        made = self._factory()
        if not isinstance(made, Runtime):
            raise TypeError(f"run_fresh(): the factory returned {type(made).__name__}, not a Runtime")
        return made

    def on_hello(self, hello: Hello) -> None:
        self._current.on_hello(hello)

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        self._current.on_user(conversation, text, io)

    def interrupts(self, conversation: str, text: str) -> bool:
        return self._current.interrupts(conversation, text)

    def on_ready(self, io: IO) -> None:
        self._current.on_ready(io)

    def on_resume(self, seq: int, io: IO) -> None:
        self._current.on_resume(seq, io)

    def on_reset(self) -> None:
        self._current.on_reset()
        self._current = self._make()

    def on_shutdown(self) -> None:
        self._current.on_shutdown()


class _Lines:
    """Lines of a stream, read with an optional deadline.

    A stream with a file descriptor is read from the descriptor into a buffer of its own, so that
    ``select`` can wait for a line with a timeout; any other stream (``io.BytesIO`` in tests)
    with its ``readline``, which does not block.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        try:
            self.fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError, _io.UnsupportedOperation):
            self.fd = None
        self.buf = bytearray()
        self.eof = False

    def readline(self, limit: int, deadline: float | None = None) -> bytes | None:
        """Up to ``limit`` bytes through the next newline (b"" at the end of the stream), or None
        if ``deadline`` (``time.monotonic()``) passes first."""
        if self.fd is None:
            return self.stream.readline(limit)
        while True:
            end = self.buf.find(b"\n", 0, limit)
            if end >= 0 or len(self.buf) >= limit or self.eof:
                take = end + 1 if end >= 0 else min(limit, len(self.buf))
                line = bytes(self.buf[:take])
                del self.buf[:take]
                return line
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    return None
            chunk = os.read(self.fd, 1 << 16)
            if chunk:
                self.buf += chunk
            else:
                self.eof = True


class _TimedOut:
    """What :meth:`_Channel.read` gives when its deadline passes."""


_TIMED_OUT = _TimedOut()


class _Channel:
    """The two streams, line numbers, and what the protocol lets arrive when."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin = _Lines(stdin)
        self.stdout = stdout
        self.line = 0  # agentsim's lines read so far
        self.last_seq = 0
        self.queue: collections.deque[UserMessage] = collections.deque()
        self.calls = 0
        self.issued: set[str] = set()
        self.waiting: dict[str, ToolResultMessage | None] = {}
        self.shutdown = False

    def write(self, message: Mapping[str, Any]) -> None:
        self.stdout.write(encode(message))
        self.stdout.flush()

    def read(self, deadline: float | None = None) -> Message | _TimedOut | None:
        """The next message, None at the end of stdin, or ``_TIMED_OUT`` once ``deadline``
        (``time.monotonic()``) passes."""
        while True:
            raw = self.stdin.readline(MAX_LINE + 2, deadline)
            if raw is None:
                return _TIMED_OUT
            if not raw:
                return None
            self.line += 1
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            elif len(raw) > MAX_LINE:
                raise ProtocolError(f"line longer than the {MAX_LINE}-byte limit", self.line)
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            if raw.strip() == b"":
                continue
            message = decode(raw, self.line)
            if isinstance(message, UserMessage):
                if message.seq <= self.last_seq:
                    raise ProtocolError(
                        f"user: seq {message.seq} after seq {self.last_seq} (seqs increase)", self.line
                    )
                self.last_seq = message.seq
            return message

    def next_call_id(self) -> str:
        self.calls += 1
        return f"c{self.calls}"


class IO:
    """What ``on_user`` uses to talk to agentsim during one turn."""

    def __init__(self, runtime: Runtime, channel: _Channel, hello: Hello,
                 conversation: str | None, seq: int) -> None:
        self._runtime = runtime
        self._ch = channel
        self.hello = hello
        #: The conversation of the message being handled (None in ``on_resume``).
        self.conversation = conversation
        #: The seq of the message being handled.
        self.seq = seq

    def _conv(self, conversation: str | None) -> str:
        c = conversation if conversation is not None else self.conversation
        if c is None:
            raise ValueError("no conversation: pass conversation=... (on_resume handles every conversation)")
        return c

    def send(self, text: str, *, conversation: str | None = None) -> None:
        """Text for the user."""
        self._ch.write({"type": "send", "conversation": self._conv(conversation), "text": text})

    def tool(self, name: str, input: Any, *, agent: str, call: str | None = None,
             conversation: str | None = None, timeout: float | None = None) -> ToolResult:
        """Runs one of the scenario's tools for ``agent`` and waits for its result (at most
        ``timeout`` seconds, see :meth:`tools`)."""
        return self.tools([ToolCall(name, input, call)], agent=agent, conversation=conversation,
                          timeout=timeout)[0]

    def tool_timeout(self, name: str) -> float | None:
        """The real seconds a call of tool ``name`` may take: its ``timeout_ms`` in the scenario
        times the run's ``time_scale``, or None when it has no timeout (or no such tool)."""
        for t in self.hello.tools:
            if t.name == name and t.timeout_ms is not None:
                return t.timeout_ms / 1000 * self.hello.time_scale
        return None

    def tools(self, calls: Iterable[ToolCall | tuple[str, Any]], *, agent: str,
              conversation: str | None = None, timeout: float | None = None) -> list[ToolResult]:
        """Runs several tools at once (capability ``parallel-tools``); results in the calls' order.

        With ``timeout`` (real seconds, :meth:`tool_timeout` gives a tool's; a :class:`ToolCall`
        may carry its own), a call that has no result when its time is up comes back with
        ``timed_out`` set, and its late result is ignored (capability ``tool-timeouts``).
        """
        conv = self._conv(conversation)
        started = time.monotonic()
        deadlines: dict[str, float | None] = {}
        ids: list[str] = []
        for c in calls:
            c = c if isinstance(c, ToolCall) else ToolCall(c[0], c[1])
            call = c.call if c.call is not None else self._ch.next_call_id()
            if call in self._ch.issued:
                raise ValueError(f"tool call id {call!r} was already used by this process")
            self._ch.issued.add(call)
            self._ch.waiting[call] = None
            ids.append(call)
            limit = c.timeout if c.timeout is not None else timeout
            deadlines[call] = None if limit is None else started + max(0.0, limit)
            self._ch.write({"type": "tool_call", "call": call, "conversation": conv,
                            "agent": agent, "name": c.name, "input": c.input})
        timed_out: set[str] = set()
        try:
            while True:
                now = time.monotonic()
                for i in ids:
                    d = deadlines[i]
                    if self._ch.waiting[i] is None and d is not None and d <= now:
                        timed_out.add(i)
                pending = [i for i in ids if self._ch.waiting[i] is None and i not in timed_out]
                if not pending:
                    break
                bounds = [d for i in pending if (d := deadlines[i]) is not None]
                self._wait_once(conv, min(bounds) if bounds else None)
            results = []
            for i in ids:
                r = self._ch.waiting[i]
                if r is None or i in timed_out:
                    results.append(ToolResult(i, "", True, timed_out=True))
                else:
                    results.append(ToolResult(r.call, r.content, r.is_error, r.failed))
            return results
        finally:
            # Whatever happened (an interruption, a shutdown), these calls are no longer waited
            # for: a late result is ignored.
            for i in ids:
                self._ch.waiting.pop(i, None)

    def check(self) -> None:
        """Reads nothing; raises :class:`Interrupted` if an interrupting message is queued.

        Messages reach the queue only while the runtime waits in :meth:`tool`; call this between
        long steps if you want to notice them there too.
        """
        conv = self.conversation
        for m in list(self._ch.queue):
            if m.conversation == conv and self._runtime.interrupts(m.conversation, m.text):
                self._ch.queue.remove(m)
                raise Interrupted(m)

    def stack(self, frames: Sequence[Mapping[str, Any]], *, ended: Sequence[Mapping[str, Any]] = (),
              conversation: str | None = None) -> None:
        """The conversation's stack now, bottom first (capability ``stack``).

        Each frame is ``{"name": "skill:research", "iterations": 2}``; ``ended`` lists frames
        popped since the last report, each with a ``reason``.
        """
        message: dict[str, Any] = {"type": "stack", "conversation": self._conv(conversation),
                                   "frames": [dict(f) for f in frames]}
        if ended:
            message["ended"] = [dict(f) for f in ended]
        self._ch.write(message)

    def model_headers(self, *, agent: str | None = None, conversation: str | None = None) -> dict[str, str]:
        """The headers for a model request of this turn's conversation (and of ``agent``).

        ``{"x-agentsim-conversation": ..., "x-agentsim-agent": ...}``: pass them as the SDK's
        ``extra_headers`` on each request, and offer the capability ``conversation-header``, so that
        agentsim reads each conversation's stack from your requests in a scenario of several.
        """
        return model_headers(self._conv(conversation), agent)

    def usage(self, input_tokens: int, output_tokens: int, *, conversation: str | None = None) -> None:
        """The conversation's token usage so far, summed over every model reply (capability ``usage``).

        Send it after each model reply; agentsim judges ``usage`` expectations against the last one.
        """
        self.event("usage", conversation=conversation, input_tokens=input_tokens, output_tokens=output_tokens)

    def event(self, kind: str, *, conversation: str | None = None, **fields: Any) -> None:
        """An ``event`` line: ``io.event("tool_result", frame=..., tool_use_id=..., content=..., is_error=...)``."""
        self._ch.write({"type": "event", "conversation": self._conv(conversation), "kind": kind, **fields})

    def _wait_once(self, conv: str, deadline: float | None = None) -> bool:
        """Reads and handles one line; False if ``deadline`` passed first."""
        message = self._ch.read(deadline)
        if message is _TIMED_OUT:
            return False
        if message is None or isinstance(message, Shutdown):
            self._ch.shutdown = True
            raise ShutdownRequested()
        if isinstance(message, ToolResultMessage):
            _take_result(self._ch, message)
            return True
        if isinstance(message, UserMessage):
            if message.conversation == conv and self._runtime.interrupts(message.conversation, message.text):
                raise Interrupted(message)
            self._ch.queue.append(message)
            return True
        kind = "hello" if isinstance(message, Hello) else "reset"
        raise ProtocolError(f"{kind} while a turn runs (it waits for tool results)", self._ch.line)


def _take_result(ch: _Channel, message: ToolResultMessage) -> None:
    if message.call in ch.waiting:
        if ch.waiting[message.call] is not None:
            raise ProtocolError(f"tool_result: a second result for call {message.call!r}", ch.line)
        ch.waiting[message.call] = message
    elif message.call not in ch.issued:
        raise ProtocolError(f"tool_result for call {message.call!r}, which this runtime never made", ch.line)
    # Otherwise: a late result of a call the runtime gave up (a cancel); ignored.


def _capabilities(runtime: Runtime) -> list[str]:
    caps = list(runtime.capabilities)
    unknown = [c for c in caps if c not in CAPABILITIES]
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; protocol {PROTOCOL} has {', '.join(CAPABILITIES)}")
    if "reset" in caps:
        no_hook = (type(runtime).on_reset is Runtime.on_reset
                   or (isinstance(runtime, _FunctionRuntime) and runtime._on_reset is None))
        if no_hook:
            raise ValueError("the runtime offers `reset` but cannot forget its state: override "
                             "on_reset (or pass on_reset=... with a function), or run it with "
                             "run_fresh(factory), which makes a new runtime for every run")
    return caps


def run(handler: Runtime | OnUser, *, capabilities: Sequence[str] = (), name: str | None = None,
        on_reset: Callable[[], None] | None = None,
        stdin: BinaryIO | None = None, stdout: BinaryIO | None = None, exit: bool = True) -> int:
    """Speaks the protocol on stdin/stdout until ``shutdown``; returns (or exits with) the status.

    ``handler`` is a :class:`Runtime`, or a function ``on_user(conversation, text, io)`` (then
    ``capabilities``, ``name`` and ``on_reset``, which forgets the function's state when it offers
    ``reset``, go with it). Status 0 after ``shutdown`` or the end of stdin; 2 after a protocol
    error (reported first as an ``error`` line) or an exception of the runtime (its traceback on
    stderr). With ``exit=True`` (the default) the process exits with it.
    """
    if isinstance(handler, Runtime):
        runtime = handler
    elif callable(handler):
        runtime = _FunctionRuntime(handler, capabilities, name, on_reset)
    else:
        raise TypeError("run() takes a Runtime or a function on_user(conversation, text, io)")
    caps = _capabilities(runtime)
    channel = _Channel(stdin if stdin is not None else sys.stdin.buffer,
                       stdout if stdout is not None else sys.stdout.buffer)
    status = _serve(runtime, caps, channel)
    if exit:
        sys.exit(status)
    return status


def run_fresh(factory: Callable[[], Runtime], *, stdin: BinaryIO | None = None,
              stdout: BinaryIO | None = None, exit: bool = True) -> int:
    """As :func:`run`, with a new runtime from ``factory()`` for every run: one at the start and
    one at every ``reset``, which it offers (agentsim's ``explore`` then runs many runs in one
    process). Nothing of a run's runtime survives into the next but what its module keeps."""
    return run(_Fresh(factory), stdin=stdin, stdout=stdout, exit=exit)


def _serve(runtime: Runtime, caps: list[str], ch: _Channel) -> int:
    try:
        hello = _handshake(runtime, caps, ch)
        if hello is None:
            return 0
        while True:
            message = ch.queue.popleft() if ch.queue else ch.read()
            if message is None or isinstance(message, Shutdown):
                runtime.on_shutdown()
                return 0
            if isinstance(message, UserMessage):
                _turn(runtime, ch, hello, message)
                if ch.shutdown:
                    runtime.on_shutdown()
                    return 0
                if not ch.queue:
                    ch.write({"type": "idle", "seq": ch.last_seq})
            elif isinstance(message, ToolResultMessage):
                _take_result(ch, message)
            elif isinstance(message, Reset):
                if "reset" not in caps:
                    raise ProtocolError("reset, but this runtime did not offer the `reset` capability", ch.line)
                _call(runtime.on_reset)
                # A new run: its call ids, seqs and waits start afresh.
                ch.issued.clear()
                ch.waiting.clear()
                ch.queue.clear()
                ch.calls = 0
                ch.last_seq = 0
                hello = _handshake(runtime, caps, ch)
                if hello is None:
                    return 0
            else:
                raise ProtocolError("a second hello without a reset", ch.line)
    except ProtocolError as e:
        _report(ch, str(e), e.line)
        return EXIT_PROTOCOL_ERROR
    except _RuntimeFailed as e:
        _report(ch, str(e), None)
        return EXIT_PROTOCOL_ERROR


class _RuntimeFailed(Exception):
    pass


def _report(ch: _Channel, message: str, line: int | None) -> None:
    error: dict[str, Any] = {"type": "error", "message": message}
    if line is not None:
        error["line"] = line
    print(f"agentsim-runtime: {message}", file=sys.stderr)
    try:
        ch.write(error)
    except (OSError, ValueError):
        pass


def _handshake(runtime: Runtime, caps: list[str], ch: _Channel) -> Hello | None:
    message = ch.read()
    if message is None or isinstance(message, Shutdown):
        return None
    if not isinstance(message, Hello):
        raise ProtocolError(f"expected hello first, got {type(message).__name__}", ch.line)
    _call(runtime.on_hello, message)
    ready: dict[str, Any] = {"type": "ready", "protocol": PROTOCOL, "capabilities": caps}
    if runtime.name:
        ready["name"] = runtime.name
    ch.write(ready)
    try:
        _call(runtime.on_ready, IO(runtime, ch, message, None, ch.last_seq))
    except ShutdownRequested:
        return None
    if message.awaiting_idle is not None:
        io = IO(runtime, ch, message, None, message.awaiting_idle)
        ch.last_seq = max(ch.last_seq, message.awaiting_idle)
        try:
            _call(runtime.on_resume, message.awaiting_idle, io)
        except ShutdownRequested:
            return None
        if not ch.queue:
            ch.write({"type": "idle", "seq": ch.last_seq})
    return message


def _turn(runtime: Runtime, ch: _Channel, hello: Hello, message: UserMessage) -> None:
    io = IO(runtime, ch, hello, message.conversation, message.seq)
    try:
        _call(runtime.on_user, message.conversation, message.text, io)
    except Interrupted as i:
        # Not handled by the runtime: the turn is aborted where it waited; the message that
        # interrupted it is handled next, as any other.
        ch.queue.appendleft(i.message)
    except ShutdownRequested:
        ch.shutdown = True


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Calls a hook of the runtime; an exception of the runtime becomes a reported failure."""
    try:
        return fn(*args)
    except (Interrupted, ShutdownRequested, ProtocolError):
        raise
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        where = getattr(fn, "__name__", "the runtime")
        raise _RuntimeFailed(f"the runtime's {where} raised {type(e).__name__}: {e}") from e


__all__ = [
    "IO",
    "Interrupted",
    "Runtime",
    "ShutdownRequested",
    "ToolCall",
    "ToolResult",
    "run",
    "run_fresh",
]
