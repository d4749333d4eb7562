"""A tiny runtime for agentsim's own tests of `--runtime`: it speaks the runtime protocol with
the standard library only, and misbehaves on purpose as MODE says.

    python3 tests/runtimes/fake.py MODE

Modes: `ok` (a main agent that asks the mock model and sends its text; with `stack` and
`tool-results` offered only when told by `--caps`), and one mode per fault agentsim must report:
`garbage`, `silent`, `exit-on-user`, `no-idle`, `bad-idle`, `send-after-idle`,
`request-after-idle`, `oversize`, `flood`, `unknown-tool`, `env`, `leak`, `no-exit`; and
`instant`, which answers every message with `idle` at once (no model call), for measuring what a
run costs agentsim itself.

With `restart` in CAPS it keeps its conversations in AGENTSIM_STATE_DIR and continues them after a
restart; the modes `resend-after-restart` (sends its last text again after a restart) and
`lose-last-turn` (restores its conversations without their last exchange) break the `restart`
check. `crash-on-tool-failure` exits when a tool fails.

With `conversation-header` in CAPS it names each model request's conversation with the header
`x-agentsim-conversation`; the mode `wrong-conversation` names one agentsim never wrote to, and
`no-header` names none.

With `usage` in CAPS it reports its conversation's token usage, summed over the model's replies,
after each reply; the mode `usage-last` reports the last reply's usage instead of the sum.

With `reset` in CAPS it starts a new run on `reset` (it forgets its conversations and answers the
next `hello`); `reset-dies` exits on `reset` and `reset-hangs` never answers the `hello` after it.

The mode `clock` puts the wall time into its system text: a runtime that is not deterministic
under scripted inputs, for the `determinism` check of `explore --runtime --determinism`.

With `tool-timeouts` in CAPS a call of a tool with a `timeout` waits at most `timeout_ms ×
time_scale`, then gets the result `Tool '<name>' timed out`; the mode `ignore-tool-timeouts`
offers the capability and waits for ever. `crash-on-model-error` exits when a model call fails
(an error, a dropped connection); `retry` makes a failed model call up to three times.
"""

import http.client
import json
import os
import queue
import sys
import threading
import time
import urllib.error
import urllib.request

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
CAPS = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else []


def out(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


# agentsim's lines, read by a thread so that a wait for a tool's result can time out.
LINES = queue.Queue()


def read_lines():
    for line in sys.stdin:
        LINES.put(line)
    LINES.put("")


# Lines that came while a tool's result was awaited, for the main loop.
DEFERRED = []


def next_line(timeout=None):
    """agentsim's next line ("" at the end of stdin), or None if `timeout` seconds pass first."""
    try:
        return LINES.get(timeout=timeout)
    except queue.Empty:
        return None


def ask(messages, conv):
    """One Anthropic Messages call to the mock server; the reply's text."""
    system = "You are main."
    if MODE == "clock":
        system += f" The time is {time.time():.6f}."  # nondeterministic under scripted inputs
    body = json.dumps({"model": "main", "max_tokens": 100, "system": system,
                       "messages": messages}).encode()
    headers = {"content-type": "application/json", "x-api-key": os.environ["ANTHROPIC_API_KEY"],
               "anthropic-version": "2023-06-01"}
    if "conversation-header" in CAPS and MODE != "no-header":
        headers["x-agentsim-conversation"] = "elsewhere" if MODE == "wrong-conversation" else conv
    request = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=body,
                                     headers=headers)
    for _ in range(3 if MODE == "retry" else 1):
        try:
            with urllib.request.urlopen(request) as r:
                reply = json.load(r)
            break
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException, ValueError) as e:
            if MODE == "crash-on-model-error":
                print(f"Traceback (most recent call last):\nConnectionError: {e}", file=sys.stderr)
                sys.exit(3)
            failed = e
    else:
        return None, f"LLM error: {failed}"  # a failed call ends the turn with a notice
    return reply, "".join(b.get("text", "") for b in reply["content"] if b["type"] == "text")


def main():
    if MODE == "garbage":
        print("Starting my agent...")
    threading.Thread(target=read_lines, daemon=True).start()
    hello = json.loads(next_line())
    print(f"hello for run {hello['run']}", file=sys.stderr)
    if MODE == "silent":
        time.sleep(60)
        return
    out({"type": "ready", "protocol": 1, "capabilities": CAPS})
    state = os.path.join(hello["state_dir"], "fake.json")
    history, last_sent, usage = {}, {}, {}
    if "restart" in CAPS and os.path.exists(state):
        with open(state) as f:
            history, last_sent = json.load(f)
        if MODE == "lose-last-turn":
            for messages in history.values():
                del messages[-2:]
        if MODE == "resend-after-restart":
            for conv, text in sorted(last_sent.items()):
                out({"type": "send", "conversation": conv, "text": text})
    if hello.get("awaiting_idle") is not None:
        out({"type": "idle", "seq": hello["awaiting_idle"]})
    while line := (DEFERRED.pop(0) if DEFERRED else next_line()):
        m = json.loads(line)
        if m["type"] == "shutdown":
            if MODE == "no-exit":
                time.sleep(60)
            return
        if m["type"] == "reset":
            if MODE == "reset-dies":
                print("Traceback (most recent call last):\nRuntimeError: reset broke", file=sys.stderr)
                sys.exit(3)
            if MODE == "reset-hangs":
                time.sleep(60)
                return
            hello = json.loads(next_line())
            print(f"hello for run {hello['run']} after a reset", file=sys.stderr)
            state = os.path.join(hello["state_dir"], "fake.json")
            history, last_sent = {}, {}
            out({"type": "ready", "protocol": 1, "capabilities": CAPS})
            continue
        if m["type"] != "user":
            continue
        conv, seq = m["conversation"], m["seq"]
        if MODE == "instant":
            out({"type": "idle", "seq": seq})  # answers at once: agentsim's own cost per run
            continue
        if MODE == "exit-on-user":
            print("Traceback (most recent call last):\nValueError: the agent broke", file=sys.stderr)
            sys.exit(3)
        if MODE == "no-idle":
            continue
        if MODE == "bad-idle":
            out({"type": "idle", "seq": seq + 4})
            continue
        if MODE == "oversize":
            sys.stdout.write('{"type":"send","conversation":"' + conv + '","text":"' + "x" * (2 << 20) + '"}\n')
            sys.stdout.flush()
            continue
        if MODE == "flood":
            sys.stdout.write("\n" * 100_001)
            sys.stdout.flush()
            continue
        if MODE == "unknown-tool":
            out({"type": "tool_call", "call": "c1", "conversation": conv, "agent": "main",
                 "name": "rm_rf", "input": {}})
            continue
        if MODE == "env":
            seen = {k: os.environ.get(k) for k in ("SECRET", "PASSED", "SET", "AGENTSIM_PROTOCOL")}
            out({"type": "send", "conversation": conv, "text": json.dumps(seen, sort_keys=True)})
            out({"type": "idle", "seq": seq})
            continue
        messages = history.setdefault(conv, [])
        messages.append({"role": "user", "content": m["text"]})
        calls = iterations = 0
        while True:
            iterations += 1
            reply, text = ask(messages, conv)
            if reply is None:
                break
            messages.append({"role": "assistant", "content": reply["content"]})
            if "usage" in CAPS:
                got = (reply["usage"]["input_tokens"], reply["usage"]["output_tokens"])
                total = usage.get(conv, (0, 0))
                total = got if MODE == "usage-last" else (total[0] + got[0], total[1] + got[1])
                usage[conv] = total
                out({"type": "event", "conversation": conv, "kind": "usage",
                     "input_tokens": total[0], "output_tokens": total[1]})
            uses = [b for b in reply["content"] if b["type"] == "tool_use"]
            if not uses:
                break
            results = []
            for use in uses:
                if MODE == "leak":
                    # Seed 004's bug: the display-only sentinel as the tool's result.
                    content = "Interrupted. Tell Ally what to do instead."
                else:
                    calls += 1
                    call = f"c{seq}-{calls}"
                    out({"type": "tool_call", "call": call, "conversation": conv,
                         "agent": "main", "name": use["name"], "input": use["input"]})
                    spec = next((t for t in hello["tools"] if t["name"] == use["name"]), {})
                    deadline = None
                    if ("tool-timeouts" in CAPS and MODE != "ignore-tool-timeouts"
                            and spec.get("timeout_ms") is not None):
                        deadline = time.monotonic() + spec["timeout_ms"] / 1000 * hello["time_scale"]
                    result = None
                    while result is None:
                        left = None if deadline is None else max(0.0, deadline - time.monotonic())
                        line = next_line(left)
                        if line is None:
                            break  # timed out; a late result is skipped below
                        if not line:
                            return  # the end of stdin: agentsim stopped the run
                        got = json.loads(line)
                        if got.get("type") == "tool_result" and got.get("call") == call:
                            result = got
                        elif got.get("type") != "tool_result":
                            DEFERRED.append(line)  # a user message: handled after this turn
                    if result is None:
                        results.append({"type": "tool_result", "tool_use_id": use["id"],
                                        "content": f"Tool '{use['name']}' timed out", "is_error": True})
                        continue
                    if MODE == "crash-on-tool-failure" and result.get("failed"):
                        print("Traceback (most recent call last):\nRuntimeError: the tool failed", file=sys.stderr)
                        sys.exit(3)
                    content = result["content"]
                results.append({"type": "tool_result", "tool_use_id": use["id"], "content": content})
            messages.append({"role": "user", "content": results})
        if "stack" in CAPS:
            out({"type": "stack", "conversation": conv, "frames": [{"name": "main", "iterations": 1}]})
        out({"type": "send", "conversation": conv, "text": text})
        if "restart" in CAPS:
            last_sent[conv] = text
            with open(state + ".tmp", "w") as f:
                json.dump([history, last_sent], f)
            os.replace(state + ".tmp", state)
        if "response" in CAPS:
            out({"type": "event", "conversation": conv, "kind": "response", "frame": "main",
                 "text": text, "iterations": iterations,
                 "tool_calls": [b["name"] for m in messages if m["role"] == "assistant"
                                for b in m["content"] if b["type"] == "tool_use"]})
        if "stack" in CAPS:
            out({"type": "stack", "conversation": conv, "frames": [],
                 "ended": [{"name": "main", "iterations": 1, "reason": "answered"}]})
        out({"type": "idle", "seq": seq})
        if MODE == "send-after-idle":
            time.sleep(0.3)
            out({"type": "send", "conversation": conv, "text": "one more thing"})
        if MODE == "request-after-idle":
            time.sleep(0.3)  # a background task that fires later, as real ones do
            ask(messages + [{"role": "user", "content": "again"}], conv)


main()
