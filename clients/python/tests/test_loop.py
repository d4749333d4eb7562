"""The protocol loop against fake stdin and stdout: what a runtime writes for what agentsim says."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from typing import Any

import pytest

from agentsim_runtime import CONVERSATION_HEADER, IO, Hello, Interrupted, Runtime, ToolCall, model_headers, run
from agentsim_runtime.protocol import MAX_LINE


def hello(**overrides: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "hello", "protocol": 1, "run": "test#0", "seed": 0, "state_dir": "/tmp/state",
        "restarts": 0, "awaiting_idle": None, "time_scale": 0.1,
        "agents": [{"name": "main", "kind": "main", "frame": "main", "system": "You are main.",
                    "model": "main", "max_iterations": 10, "tools": ["search"],
                    "parallel_tools": False, "stream": False, "passthrough": False,
                    "batch": None, "description": None}],
        "tools": [{"name": "search", "description": "", "input_schema": {"type": "object"},
                   "timeout_ms": None}],
        "settings": {"cancel_words": ["cancel", "stop"], "query_user": "interactive", "max_depth": 256},
    }
    message.update(overrides)
    return message


def user(seq: int, text: str, conversation: str = "default") -> dict[str, Any]:
    return {"type": "user", "seq": seq, "conversation": conversation, "text": text}


def result(call: str, content: str, is_error: bool = False, **more: Any) -> dict[str, Any]:
    return {"type": "tool_result", "call": call, "content": content, "is_error": is_error, **more}


SHUTDOWN = {"type": "shutdown"}


def lines(*messages: dict[str, Any] | bytes) -> bytes:
    out = b""
    for m in messages:
        out += m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n"
    return out


def play(handler: Any, stdin: bytes, **kwargs: Any) -> tuple[int, list[dict[str, Any]]]:
    """Runs the loop over ``stdin``; its exit status and every line it wrote, parsed."""
    out = io.BytesIO()
    status = run(handler, stdin=io.BytesIO(stdin), stdout=out, exit=False, **kwargs)
    written = out.getvalue()
    assert written.endswith(b"\n") or not written, "every line ends with a newline"
    return status, [json.loads(line) for line in written.splitlines()]


def echo(conversation: str, text: str, io: IO) -> None:
    io.send(f"you said: {text}")


def test_a_good_exchange_answers_hello_then_sends_and_goes_idle_after_each_message() -> None:
    status, out = play(echo, lines(hello(), user(1, "hi"), user(2, "again"), SHUTDOWN),
                       capabilities=["stack"], name="echo 1")
    assert status == 0
    assert out == [
        {"type": "ready", "protocol": 1, "capabilities": ["stack"], "name": "echo 1"},
        {"type": "send", "conversation": "default", "text": "you said: hi"},
        {"type": "idle", "seq": 1},
        {"type": "send", "conversation": "default", "text": "you said: again"},
        {"type": "idle", "seq": 2},
    ]


def test_the_end_of_stdin_is_a_shutdown() -> None:
    status, out = play(echo, lines(hello(), user(1, "hi")))
    assert status == 0
    assert out[-1] == {"type": "idle", "seq": 1}


def test_a_malformed_line_is_reported_with_its_number_and_exits_2() -> None:
    status, out = play(echo, lines(hello(), user(1, "hi"), b'{"type": "user", "seq": 2,\n', SHUTDOWN))
    assert status == 2
    assert out[-1]["type"] == "error"
    assert out[-1]["line"] == 3
    assert "malformed JSON" in out[-1]["message"]
    # Nothing after the error: the loop stopped there.
    assert [m["type"] for m in out] == ["ready", "send", "idle", "error"]


def test_an_unknown_message_type_is_a_protocol_error() -> None:
    status, out = play(echo, lines(hello(), {"type": "resume", "seq": 1}, SHUTDOWN))
    assert status == 2
    assert out[-1] == {"type": "error", "line": 2,
                       "message": 'line 2: unknown message type "resume" '
                                  "(agentsim sends hello, user, tool_result, reset, shutdown)"}


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (b"[1, 2]\n", "must be a JSON object"),
        (b'{"seq": 1}\n', "needs a string field `type`"),
        (json.dumps(user(1, "x") | {"seq": "1"}).encode() + b"\n", "field `seq` must be an integer"),
        (json.dumps(user(1, "x") | {"seq": True}).encode() + b"\n", "field `seq` must be an integer"),
        (json.dumps({"type": "user", "seq": 1, "text": "x"}).encode() + b"\n", "missing field `conversation`"),
        (b'{"type":"user","seq":1,"conversation":"d","text":"\xff\xfe"}\n', "not UTF-8"),
        (b'{"type":"user","seq":1,"conversation":"d","text":"' + b"a" * MAX_LINE + b'"}\n', "limit"),
        (json.dumps(result("c9", "late")).encode() + b"\n", "never made"),
        (json.dumps(hello()).encode() + b"\n", "a second hello"),
        (json.dumps({"type": "reset"}).encode() + b"\n", "did not offer the `reset` capability"),
    ],
)
def test_bad_lines_from_agentsim_are_errors(bad: bytes, says: str) -> None:
    status, out = play(echo, lines(hello(), bad, SHUTDOWN))
    assert status == 2
    assert out[-1]["type"] == "error" and out[-1]["line"] == 2, out[-1]
    assert says in out[-1]["message"]


def test_seqs_must_increase() -> None:
    status, out = play(echo, lines(hello(), user(2, "a"), user(2, "b")))
    assert status == 2
    assert "seq 2 after seq 2" in out[-1]["message"]


def test_a_hello_of_another_protocol_is_refused() -> None:
    status, out = play(echo, lines(hello(protocol=2)))
    assert status == 2
    assert "protocol 2 is not spoken here" in out[-1]["message"]
    assert not any(m["type"] == "ready" for m in out)


def test_a_user_message_before_hello_is_refused() -> None:
    status, out = play(echo, lines(user(1, "hi")))
    assert status == 2
    assert "expected hello first" in out[-1]["message"]


def test_a_tool_round_trip_blocks_until_the_result() -> None:
    seen = []

    def on_user(conversation: str, text: str, io: IO) -> None:
        r = io.tool("search", {"q": text}, agent="main")
        seen.append(r)
        failed = io.tool("search", {"q": "again"}, agent="main", call="toolu_7")
        seen.append(failed)
        io.send(f"{r.content} / {failed.content}")

    status, out = play(on_user, lines(
        hello(), user(1, "cats"), result("c1", "3 cats"),
        result("toolu_7", "disk full", True, failed=True), SHUTDOWN))
    assert status == 0
    assert out[1:] == [
        {"type": "tool_call", "call": "c1", "conversation": "default", "agent": "main",
         "name": "search", "input": {"q": "cats"}},
        {"type": "tool_call", "call": "toolu_7", "conversation": "default", "agent": "main",
         "name": "search", "input": {"q": "again"}},
        {"type": "send", "conversation": "default", "text": "3 cats / disk full"},
        {"type": "idle", "seq": 1},
    ]
    assert (seen[0].content, seen[0].is_error, seen[0].failed) == ("3 cats", False, False)
    assert (seen[1].content, seen[1].is_error, seen[1].failed) == ("disk full", True, True)


def test_a_call_with_no_result_in_its_timeout_comes_back_timed_out_and_its_late_result_is_ignored() -> None:
    """Over a real pipe (a timeout needs a stream to wait on): `search` has a 2 s timeout at time
    scale 0.1, so the helper waits 0.2 s for it; `other` has none and waits for its result."""
    tools = [{"name": "search", "description": "", "input_schema": {"type": "object"}, "timeout_ms": 2000},
             {"name": "other", "description": "", "input_schema": {"type": "object"}, "timeout_ms": None}]
    seen = []

    def on_user(conversation: str, text: str, io: IO) -> None:
        assert io.tool_timeout("search") == pytest.approx(0.2)
        assert io.tool_timeout("other") is None and io.tool_timeout("nothing") is None
        seen.extend(io.tools([ToolCall("search", {}, timeout=io.tool_timeout("search")), ("other", {})],
                             agent="main"))
        io.send("done")

    read_end, write_end = os.pipe()

    def agentsim_side() -> None:
        with os.fdopen(write_end, "wb") as w:
            w.write(lines(hello(tools=tools), user(1, "go")))
            w.flush()
            time.sleep(0.6)  # past search's timeout: only other's result, then search's, late
            w.write(lines(result("c2", "other done"), result("c1", "too late"), SHUTDOWN))

    writer = threading.Thread(target=agentsim_side)
    writer.start()
    out = io.BytesIO()
    with os.fdopen(read_end, "rb") as stdin:
        status = run(on_user, stdin=stdin, stdout=out, exit=False)
    writer.join()
    assert status == 0
    sent = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [m["type"] for m in sent] == ["ready", "tool_call", "tool_call", "send", "idle"]
    search, other = seen
    assert (search.call, search.timed_out, search.is_error, search.content) == ("c1", True, True, "")
    assert (other.call, other.timed_out, other.content) == ("c2", False, "other done")


def test_parallel_tools_give_results_in_call_order_whatever_order_they_come_in() -> None:
    got = []

    def on_user(conversation: str, text: str, io: IO) -> None:
        got.extend(io.tools([("search", {"q": 1}), ToolCall("search", {"q": 2})], agent="main"))

    status, out = play(on_user, lines(hello(), user(1, "go"), result("c2", "two"), result("c1", "one"), SHUTDOWN))
    assert status == 0
    assert [m["call"] for m in out if m["type"] == "tool_call"] == ["c1", "c2"]
    assert [r.content for r in got] == ["one", "two"]


class Cancellable(Runtime):
    capabilities = ("cancel-words",)

    def __init__(self, catch: bool) -> None:
        self.catch = catch
        self.hello: Hello | None = None
        self.calls: list[str] = []

    def on_hello(self, hello: Hello) -> None:
        self.hello = hello

    def interrupts(self, conversation: str, text: str) -> bool:
        assert self.hello is not None
        return self.hello.settings.is_cancel_word(text)

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        self.calls.append(text)
        if self.hello and self.hello.settings.is_cancel_word(text):
            io.send("Cancelled.")
            return
        try:
            io.tool("search", {"q": text}, agent="main")
            io.send("found")
        except Interrupted as i:
            if not self.catch:
                raise
            io.send(f"Cancelled by {i.text!r}.")


@pytest.mark.parametrize("catch", [True, False])
def test_a_cancel_word_interrupts_a_waiting_tool_and_its_late_result_is_ignored(catch: bool) -> None:
    runtime = Cancellable(catch)
    status, out = play(runtime, lines(
        hello(), user(1, "slow"), user(2, " STOP "), result("c1", "late"), user(3, "next"),
        result("c2", "quick"), SHUTDOWN))
    assert status == 0
    sends = [m["text"] for m in out if m["type"] == "send"]
    if catch:
        # The runtime handled the interruption inside the turn.
        assert sends == ["Cancelled by ' STOP '.", "found"]
        assert runtime.calls == ["slow", "next"]
    else:
        # It let it escape: the cancel word comes again as an ordinary message.
        assert sends == ["Cancelled.", "found"]
        assert runtime.calls == ["slow", " STOP ", "next"]
    assert [m for m in out if m["type"] == "idle"] == [{"type": "idle", "seq": 2}, {"type": "idle", "seq": 3}]


def test_a_message_arriving_during_a_turn_waits_for_the_turn_and_one_idle_covers_both() -> None:
    handled = []

    def on_user(conversation: str, text: str, io: IO) -> None:
        handled.append((conversation, text))
        if text == "first":
            io.tool("search", {}, agent="main")
        io.send(text)

    status, out = play(on_user, lines(hello(), user(1, "first"), user(2, "other", "telegram"),
                                      result("c1", "ok"), SHUTDOWN))
    assert status == 0
    assert handled == [("default", "first"), ("telegram", "other")]
    assert [m for m in out if m["type"] in ("send", "idle")] == [
        {"type": "send", "conversation": "default", "text": "first"},
        {"type": "send", "conversation": "telegram", "text": "other"},
        {"type": "idle", "seq": 2},
    ]


def test_shutdown_while_a_tool_runs_ends_the_turn_and_exits_0() -> None:
    finished = []

    def on_user(conversation: str, text: str, io: IO) -> None:
        io.tool("search", {}, agent="main")
        finished.append(True)

    status, out = play(on_user, lines(hello(), user(1, "go"), SHUTDOWN))
    assert status == 0
    assert finished == []
    assert [m["type"] for m in out] == ["ready", "tool_call"]


def test_an_exception_of_the_runtime_is_reported_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    def on_user(conversation: str, text: str, io: IO) -> None:
        raise KeyError("frames")

    status, out = play(on_user, lines(hello(), user(1, "go"), SHUTDOWN))
    assert status == 2
    assert out[-1] == {"type": "error", "message": "the runtime's on_user raised KeyError: 'frames'"}
    assert "Traceback" in capsys.readouterr().err


class Resettable(Runtime):
    capabilities = ("reset", "restart")

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_hello(self, hello: Hello) -> None:
        self.events.append(f"hello {hello.run} awaiting {hello.awaiting_idle}")

    def on_ready(self, io: IO) -> None:
        self.events.append("ready")
        if io.hello.restarts:
            io.stack([{"name": "main", "iterations": 1}], conversation="default")

    def on_resume(self, seq: int, io: IO) -> None:
        self.events.append(f"resume {seq}")
        io.send("resumed", conversation="default")

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        self.events.append(f"user {text}")
        io.tool("search", {}, agent="main")

    def on_reset(self) -> None:
        self.events.append("reset")


def test_reset_starts_a_new_run_in_the_same_process_and_call_ids_start_over() -> None:
    runtime = Resettable()
    status, out = play(runtime, lines(
        hello(run="a#0"), user(1, "x"), result("c1", "ok"), {"type": "reset"},
        hello(run="b#0"), user(1, "y"), result("c1", "ok"), SHUTDOWN))
    assert status == 0
    assert runtime.events == ["hello a#0 awaiting None", "ready", "user x", "reset",
                              "hello b#0 awaiting None", "ready", "user y"]
    assert [m["type"] for m in out].count("ready") == 2


def test_after_a_restart_the_runtime_resumes_the_turn_and_says_idle_for_it() -> None:
    runtime = Resettable()
    status, out = play(runtime, lines(hello(restarts=1, awaiting_idle=3), user(4, "z"), result("c1", "ok"), SHUTDOWN))
    assert status == 0
    assert runtime.events == ["hello test#0 awaiting 3", "ready", "resume 3", "user z"]
    assert out[1:4] == [
        {"type": "stack", "conversation": "default", "frames": [{"name": "main", "iterations": 1}]},
        {"type": "send", "conversation": "default", "text": "resumed"},
        {"type": "idle", "seq": 3},
    ]
    assert out[-1] == {"type": "idle", "seq": 4}


def test_unknown_capabilities_are_refused_before_anything_is_written() -> None:
    with pytest.raises(ValueError, match="unknown capabilities"):
        play(echo, lines(hello()), capabilities=["stacks"])


def test_a_line_too_long_to_write_is_refused_locally() -> None:
    def on_user(conversation: str, text: str, io: IO) -> None:
        io.send("x" * (MAX_LINE + 1))

    status, out = play(on_user, lines(hello(), user(1, "go")))
    assert status == 2
    assert "over the protocol's" in out[-1]["message"]


def test_hello_parses_every_field() -> None:
    seen: list[Hello] = []

    class Keep(Runtime):
        def on_hello(self, hello: Hello) -> None:
            seen.append(hello)

    play(Keep(), lines(hello()))
    h = seen[0]
    assert h.main.frame == "main" and h.main.max_iterations == 10 and h.main.tools == ("search",)
    assert h.tool("search") is not None and h.tool("nope") is None
    assert h.settings.is_cancel_word("  Cancel ") and not h.settings.is_cancel_word("cancel it")
    assert h.time_scale == 0.1 and h.awaiting_idle is None


def test_model_headers_name_the_turns_conversation_and_usage_is_an_event() -> None:
    seen: list[dict[str, str]] = []

    def handler(conversation: str, text: str, io: IO) -> None:
        seen.append(io.model_headers(agent="main"))
        seen.append(io.model_headers(conversation="other"))
        io.usage(100, 20)
        io.send("ok")

    status, out = play(handler, lines(hello(), user(1, "hi", "telegram_1"), SHUTDOWN),
                       capabilities=["conversation-header", "usage"])
    assert status == 0
    assert seen == [
        {"x-agentsim-conversation": "telegram_1", "x-agentsim-agent": "main"},
        {"x-agentsim-conversation": "other"},
    ]
    assert out[0]["capabilities"] == ["conversation-header", "usage"]
    assert out[1] == {"type": "event", "conversation": "telegram_1", "kind": "usage",
                      "input_tokens": 100, "output_tokens": 20}
    assert model_headers("c") == {CONVERSATION_HEADER: "c"}


class Counting(Runtime):
    """Keeps a count in the instance: a fresh instance per run starts it again."""

    capabilities = ("stack",)
    made = 0

    def __init__(self) -> None:
        Counting.made += 1
        self.seen = 0

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        self.seen += 1
        io.send(f"{text} is message {self.seen} of runtime {Counting.made}")


def test_run_fresh_makes_a_new_runtime_for_every_run_and_offers_reset() -> None:
    Counting.made = 0
    status, out = play_fresh(lambda: Counting(), lines(
        hello(), user(1, "a"), user(2, "b"), {"type": "reset"}, hello(run="b#0"), user(1, "c"), SHUTDOWN))
    assert status == 0
    assert out[0] == {"type": "ready", "protocol": 1, "capabilities": ["stack", "reset"]}
    sent = [m["text"] for m in out if m["type"] == "send"]
    assert sent == ["a is message 1 of runtime 1", "b is message 2 of runtime 1", "c is message 1 of runtime 2"]
    assert [m["type"] for m in out].count("ready") == 2


def play_fresh(factory: Any, stdin: bytes) -> tuple[int, list[dict[str, Any]]]:
    from agentsim_runtime import run_fresh
    out = io.BytesIO()
    status = run_fresh(factory, stdin=io.BytesIO(stdin), stdout=out, exit=False)
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_runtime_that_offers_reset_without_a_way_to_forget_is_refused() -> None:
    class Forgetful(Runtime):
        capabilities = ("reset",)

        def on_user(self, conversation: str, text: str, io: IO) -> None:
            pass

    with pytest.raises(ValueError, match="offers `reset` but cannot forget"):
        play(Forgetful(), lines(hello(), SHUTDOWN))
    with pytest.raises(ValueError, match="offers `reset` but cannot forget"):
        play(echo, lines(hello(), SHUTDOWN), capabilities=["reset"])


def test_a_function_runtime_forgets_its_state_with_its_on_reset() -> None:
    seen: list[str] = []

    def remember(conversation: str, text: str, io: IO) -> None:
        seen.append(text)
        io.send(",".join(seen))

    status, out = play(remember, lines(
        hello(), user(1, "a"), {"type": "reset"}, hello(), user(1, "b"), SHUTDOWN),
        capabilities=["reset"], on_reset=seen.clear)
    assert status == 0
    assert [m["text"] for m in out if m["type"] == "send"] == ["a", "b"]


def test_an_exception_in_on_reset_is_reported_and_exits_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(Resettable):
        def on_reset(self) -> None:
            raise RuntimeError("cannot forget")

    status, out = play(Broken(), lines(hello(), user(1, "x"), result("c1", "ok"), {"type": "reset"}, hello(), SHUTDOWN))
    assert status == 2
    assert out[-1] == {"type": "error", "message": "the runtime's on_reset raised RuntimeError: cannot forget"}
    assert "Traceback" in capsys.readouterr().err
