"""The messages of agentsim's runtime protocol, version 1, and their strict parsing.

docs/runtime-protocol.md in the agentsim repository is the reference. Every line agentsim writes
is parsed here into a frozen dataclass; anything the protocol does not allow (not JSON, an unknown
``type``, a missing or mistyped field, an oversize line, invalid UTF-8) raises
:class:`ProtocolError` with the line's number, which the loop reports as an ``error`` line before
it exits with status 2. Unknown *fields* are ignored: a later revision of protocol 1 may add
optional ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Union

#: The protocol version this package speaks.
PROTOCOL = 1

#: The longest line either side may write, in bytes, not counting the newline.
MAX_LINE = 1 << 20

#: The message types agentsim sends.
AGENTSIM_TYPES = ("hello", "user", "tool_result", "reset", "shutdown")

#: The message types a runtime sends.
RUNTIME_TYPES = ("ready", "send", "tool_call", "idle", "stack", "event", "error")

#: The capabilities protocol 1 defines (docs/runtime-protocol.md, section 6).
CAPABILITIES = (
    "stack",
    "tool-results",
    "response",
    "cancel-words",
    "ask-user",
    "parallel-tools",
    "stream",
    "tool-timeouts",
    "passthrough",
    "batch",
    "restart",
    "reset",
    "conversation-header",
    "usage",
)

#: The header that names the agent a model request is for (docs/runtime-protocol.md, section 7).
AGENT_HEADER = "x-agentsim-agent"

#: The header that names the conversation a model request is for (capability
#: ``conversation-header``).
CONVERSATION_HEADER = "x-agentsim-conversation"


def model_headers(conversation: str | None = None, agent: str | None = None) -> dict[str, str]:
    """The headers that tell agentsim which conversation and agent a model request is for.

    Give them to your SDK: ``client.messages.create(..., extra_headers=model_headers(c, a))``, or
    once per conversation, ``client.with_options(default_headers=model_headers(c))``.
    """
    headers: dict[str, str] = {}
    if conversation is not None:
        headers[CONVERSATION_HEADER] = conversation
    if agent is not None:
        headers[AGENT_HEADER] = agent
    return headers


class ProtocolError(Exception):
    """A line that protocol 1 does not allow.

    ``line`` is the 1-based number of agentsim's line it is about, when there is one.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class AgentInfo:
    """One agent of the scenario, as ``hello`` describes it."""

    name: str
    kind: str
    frame: str
    system: str
    model: str
    max_iterations: int
    tools: tuple[str, ...]
    parallel_tools: bool
    stream: bool
    passthrough: bool
    batch: str | None
    description: str | None


@dataclass(frozen=True)
class ToolInfo:
    """One external tool of the scenario."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    timeout_ms: int | None


@dataclass(frozen=True)
class Settings:
    """The scenario's settings a runtime needs."""

    cancel_words: tuple[str, ...]
    query_user: str
    max_depth: int

    def is_cancel_word(self, text: str) -> bool:
        """Whether ``text`` is a cancel word: the whole message, case and surrounding space ignored."""
        t = text.strip().lower()
        return any(t == w.lower() for w in self.cancel_words)


@dataclass(frozen=True)
class Hello:
    """The first line of every process: the run and its scenario."""

    protocol: int
    run: str
    seed: int
    state_dir: str
    restarts: int
    awaiting_idle: int | None
    time_scale: float
    agents: tuple[AgentInfo, ...]
    tools: tuple[ToolInfo, ...]
    settings: Settings

    def agent(self, name: str) -> AgentInfo:
        """The agent named ``name`` (KeyError if the scenario has none)."""
        for a in self.agents:
            if a.name == name:
                return a
        raise KeyError(name)

    def tool(self, name: str) -> ToolInfo | None:
        """The external tool named ``name``, if the scenario has one."""
        for t in self.tools:
            if t.name == name:
                return t
        return None

    @property
    def main(self) -> AgentInfo:
        """The main agent."""
        for a in self.agents:
            if a.kind == "main":
                return a
        return self.agent("main")


@dataclass(frozen=True)
class UserMessage:
    """A message from the user to a conversation."""

    seq: int
    conversation: str
    text: str


@dataclass(frozen=True)
class ToolResultMessage:
    """The outcome of a ``tool_call``."""

    call: str
    content: str
    is_error: bool
    failed: bool


@dataclass(frozen=True)
class Reset:
    """Forget everything; a ``hello`` follows."""


@dataclass(frozen=True)
class Shutdown:
    """The run is over: exit with status 0."""


Message = Union[Hello, UserMessage, ToolResultMessage, Reset, Shutdown]

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", float: "a number",
               list: "an array", dict: "an object"}


class _Fields:
    """Typed access to one object's fields, each failure located at the line and the field."""

    def __init__(self, obj: Mapping[str, Any], line: int, where: str) -> None:
        self.obj = obj
        self.line = line
        self.where = where

    def _fail(self, name: str, expected: str) -> ProtocolError:
        if name not in self.obj:
            return ProtocolError(f"{self.where}: missing field `{name}` ({expected})", self.line)
        value = json.dumps(self.obj[name], ensure_ascii=False)
        if len(value) > 60:
            value = value[:57] + "..."
        return ProtocolError(f"{self.where}: field `{name}` must be {expected}, not {value}", self.line)

    def get(self, name: str, kind: type, *, nullable: bool = False) -> Any:
        if name not in self.obj:
            raise self._fail(name, _TYPE_NAMES[kind])
        value = self.obj[name]
        if value is None and nullable:
            return None
        if not _is(value, kind):
            raise self._fail(name, _TYPE_NAMES[kind] + (" or null" if nullable else ""))
        return value

    def optional(self, name: str, kind: type, default: Any) -> Any:
        if name not in self.obj:
            return default
        return self.get(name, kind)

    def strings(self, name: str) -> tuple[str, ...]:
        values = self.get(name, list)
        if not all(isinstance(v, str) for v in values):
            raise self._fail(name, "an array of strings")
        return tuple(values)

    def objects(self, name: str) -> list[Mapping[str, Any]]:
        values: list[Any] = self.get(name, list)
        if not all(isinstance(v, dict) for v in values):
            raise self._fail(name, "an array of objects")
        return [v for v in values]


def _is(value: Any, kind: type) -> bool:
    # bool is an int in Python, and an integer is a fine number; neither the other way round.
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


def _agent(obj: Mapping[str, Any], line: int, i: int) -> AgentInfo:
    f = _Fields(obj, line, f"hello: agents[{i}]")
    kind = f.get("kind", str)
    if kind not in ("main", "skill", "agent"):
        raise ProtocolError(f"hello: agents[{i}]: `kind` must be main, skill or agent, not {kind!r}", line)
    return AgentInfo(
        name=f.get("name", str),
        kind=kind,
        frame=f.get("frame", str),
        system=f.get("system", str),
        model=f.get("model", str),
        max_iterations=f.get("max_iterations", int),
        tools=f.strings("tools"),
        parallel_tools=f.get("parallel_tools", bool),
        stream=f.get("stream", bool),
        passthrough=f.get("passthrough", bool),
        batch=f.get("batch", str, nullable=True),
        description=f.get("description", str, nullable=True),
    )


def _tool(obj: Mapping[str, Any], line: int, i: int) -> ToolInfo:
    f = _Fields(obj, line, f"hello: tools[{i}]")
    return ToolInfo(
        name=f.get("name", str),
        description=f.get("description", str),
        input_schema=f.get("input_schema", dict),
        timeout_ms=f.get("timeout_ms", int, nullable=True),
    )


def _hello(f: _Fields) -> Hello:
    protocol = f.get("protocol", int)
    if protocol != PROTOCOL:
        raise ProtocolError(
            f"hello: protocol {protocol} is not spoken here (this runtime speaks protocol {PROTOCOL})",
            f.line,
        )
    settings = _Fields(f.get("settings", dict), f.line, "hello: settings")
    query_user = settings.get("query_user", str)
    if query_user not in ("interactive", "none"):
        raise ProtocolError(f"hello: settings: `query_user` must be interactive or none, not {query_user!r}", f.line)
    agents = tuple(_agent(a, f.line, i) for i, a in enumerate(f.objects("agents")))
    if not any(a.kind == "main" for a in agents):
        raise ProtocolError("hello: `agents` has no agent of kind main", f.line)
    return Hello(
        protocol=protocol,
        run=f.get("run", str),
        seed=f.get("seed", int),
        state_dir=f.get("state_dir", str),
        restarts=f.get("restarts", int),
        awaiting_idle=f.get("awaiting_idle", int, nullable=True),
        time_scale=float(f.get("time_scale", float)),
        agents=agents,
        tools=tuple(_tool(t, f.line, i) for i, t in enumerate(f.objects("tools"))),
        settings=Settings(
            cancel_words=settings.strings("cancel_words"),
            query_user=query_user,
            max_depth=settings.get("max_depth", int),
        ),
    )


def decode(raw: bytes, line: int) -> Message:
    """Parses agentsim's line number ``line`` (without its newline)."""
    if len(raw) > MAX_LINE:
        raise ProtocolError(f"line of {len(raw)} bytes, over the {MAX_LINE}-byte limit", line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"not UTF-8 (invalid byte at offset {e.start})", line) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"malformed JSON ({e.msg} at column {e.colno}): {_clip(text)}", line) from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"a message must be a JSON object: {_clip(text)}", line)
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f"a message needs a string field `type`: {_clip(text)}", line)
    f = _Fields(obj, line, kind)
    if kind == "hello":
        return _hello(f)
    if kind == "user":
        seq = f.get("seq", int)
        if seq < 1:
            raise ProtocolError("user: `seq` starts at 1", line)
        return UserMessage(seq=seq, conversation=f.get("conversation", str), text=f.get("text", str))
    if kind == "tool_result":
        return ToolResultMessage(
            call=f.get("call", str),
            content=f.get("content", str),
            is_error=f.get("is_error", bool),
            failed=f.optional("failed", bool, False),
        )
    if kind == "reset":
        return Reset()
    if kind == "shutdown":
        return Shutdown()
    raise ProtocolError(
        f"unknown message type {json.dumps(kind, ensure_ascii=False)} "
        f"(agentsim sends {', '.join(AGENTSIM_TYPES)})",
        line,
    )


def encode(message: Mapping[str, Any]) -> bytes:
    """One line for ``message``: compact JSON, UTF-8, newline-terminated.

    Raises ValueError for a message over :data:`MAX_LINE` bytes, which agentsim would reject.
    """
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_LINE:
        raise ValueError(
            f"a {message.get('type')!r} line of {len(data)} bytes is over the protocol's {MAX_LINE}-byte limit"
        )
    return data + b"\n"


def _clip(text: str, limit: int = 120) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return json.dumps(text, ensure_ascii=False)
