"""Drives `agentsim mock-llm` with clients nobody here wrote: the official `anthropic` and `openai`
Python SDKs and the pydantic-ai agent framework, streaming and not, through tool loops, a broken
request, a scripted rate limit, scripted errors that outlast the SDKs' default retries, and a
dropped connection; and the worked example written back by `agentsim import` and `agentsim record`.

Usage: python tests/clients/sdk_clients.py path/to/agentsim

Each case starts its own server on a free loopback port with a small scenario, drives it, stops it
with `POST /_agentsim/shutdown` and checks its exit status and report. Every wait is bounded.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

import anthropic
import openai

AGENTSIM = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "target/release/agentsim"
KEY = "test-key"


class Server:
    """One `agentsim mock-llm` process serving `scenario` (YAML text)."""

    def __init__(self, scenario, args=()):
        self.dir = tempfile.mkdtemp(prefix="agentsim-sdk-")
        self.path = os.path.join(self.dir, "scenario.yaml")
        self.report_path = os.path.join(self.dir, "report.json")
        with open(self.path, "w") as f:
            f.write(scenario)
        self.proc = subprocess.Popen(
            [AGENTSIM, "mock-llm", self.path, "--addr", "127.0.0.1:0",
             "--report", self.report_path, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on http://"):
            self.proc.kill()
            raise RuntimeError("the server did not start: %r %s" % (line, self.proc.stderr.read()))
        self.base = line.strip().split(" ")[-1]

    def stop(self):
        """Stops the server; returns (exit status, report)."""
        req = urllib.request.Request(self.base + "/_agentsim/shutdown", method="POST", data=b"{}",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()
        out, err = self.proc.communicate(timeout=30)
        with open(self.report_path) as f:
            report = json.load(f)
        return self.proc.returncode, report, out

    def kill(self):
        """Stops the server if it still runs and removes its directory (every test ends here)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                     "required": ["location"]},
}

OPENAI_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city.",
                 "parameters": WEATHER_TOOL["input_schema"]},
}

RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                  "parameters": WEATHER_TOOL["input_schema"]}


def loop_scenario(model):
    return """
name: weather loop for %s
agents:
  main: { model: %s }
tools:
  get_weather: { result: "18 C, cloudy" }
llm:
  main:
    - text: Let me check.
      tool_use: { name: get_weather, input: { location: Paris } }
    - It is 18 C and cloudy in Paris.
steps:
  - user: What is the weather in Paris?
""" % (model, model)


QUESTION = "What is the weather in Paris?"
ANSWER = "It is 18 C and cloudy in Paris."


def expect_clean(server):
    status, report, out = server.stop()
    assert status == 0, "exit status %d, report: %s" % (status, out)
    assert report["passed"] and not report["violations"] and not report["unused"], report


# ---- Anthropic ----

def anthropic_loop(stream):
    server = Server(loop_scenario("claude-test"))
    try:
        client = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)
        messages = [{"role": "user", "content": QUESTION}]
        args = dict(model="claude-test", max_tokens=256, tools=[WEATHER_TOOL])
        if stream:
            with client.messages.stream(messages=messages, **args) as s:
                first = s.get_final_message()
        else:
            first = client.messages.create(messages=messages, **args)
        assert first.stop_reason == "tool_use", first
        assert first.content[0].type == "text" and first.content[0].text == "Let me check."
        use = first.content[1]
        assert use.type == "tool_use" and use.name == "get_weather", use
        assert use.input == {"location": "Paris"}, use.input
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "content": "18 C, cloudy"}]},
        ]
        if stream:
            with client.messages.stream(messages=messages, **args) as s:
                text = "".join(s.text_stream)
                second = s.get_final_message()
            assert text == ANSWER, text
        else:
            second = client.messages.create(messages=messages, **args)
        assert second.stop_reason == "end_turn"
        assert second.content[0].text == ANSWER
        assert second.usage.output_tokens > 0
        expect_clean(server)
    finally:
        server.kill()


def anthropic_dangling_tool_use():
    # A reproduced bug report: the runtime under test sends a tool use without its result.
    scenario = loop_scenario("claude-test").replace(
        "name: weather", "expect_violation: tool-pairing\nname: weather")
    scenario = scenario.replace("    - It is 18 C and cloudy in Paris.\n", "")
    server = Server(scenario)
    try:
        client = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)
        first = client.messages.create(model="claude-test", max_tokens=64, tools=[WEATHER_TOOL],
                                       messages=[{"role": "user", "content": QUESTION}])
        use = first.content[1]
        try:
            client.messages.create(
                model="claude-test", max_tokens=64, tools=[WEATHER_TOOL],
                messages=[{"role": "user", "content": QUESTION},
                          {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                          {"role": "user", "content": "never mind"}])
        except anthropic.BadRequestError as e:
            assert e.status_code == 400
            expected = ("messages.1: `tool_use` ids were found without `tool_result` blocks "
                        "immediately after: %s. Each `tool_use` block must have a corresponding "
                        "`tool_result` block in the next message." % use.id)
            assert e.body["error"]["message"] == expected, e.body
            assert e.body["error"]["type"] == "invalid_request_error"
        else:
            raise AssertionError("a dangling tool use was accepted")
        status, report, _ = server.stop()
        assert report["violations"][0]["invariant"] == "tool-pairing", report
        assert status == 0 and report["passed"], "expect_violation makes the broken run pass"
    finally:
        server.kill()


def anthropic_rate_limit():
    scenario = loop_scenario("claude-test").replace(
        "  main:\n    - text:", "  main:\n    - error: rate_limit\n    - error: rate_limit\n    - text:")
    server = Server(scenario)
    try:
        strict = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)
        args = dict(model="claude-test", max_tokens=64, tools=[WEATHER_TOOL],
                    messages=[{"role": "user", "content": QUESTION}])
        try:
            strict.messages.create(**args)
        except anthropic.RateLimitError as e:
            assert e.status_code == 429
            assert e.response.headers["retry-after"] == "1"
        else:
            raise AssertionError("the scripted rate limit was not served")
        # The SDK's own retry (honouring retry-after) meets the second error, then the reply.
        patient = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=2)
        first = patient.messages.create(**args)
        assert first.stop_reason == "tool_use"
        status, report, _ = server.stop()
        assert report["unused"] == [{"agent": "main", "entries": [4]}], report
        assert status == 1, "an unused reply fails the run"
    finally:
        server.kill()


def anthropic_error_outlasting_retries():
    """The SDK with its default retries (2) against `times: 2`: two failed attempts, and the third
    gets the reply; `retry_after: 10ms` makes the retries quick (the SDK's own backoff would take
    0.5 s, then 1 s)."""
    scenario = loop_scenario("claude-test").replace(
        "  main:\n    - text:",
        "  main:\n    - error: { kind: overloaded, times: 2, retry_after: 10ms }\n    - text:")
    server = Server(scenario)
    try:
        client = anthropic.Anthropic(base_url=server.base, api_key=KEY)
        assert client.max_retries == 2, client.max_retries
        started = time.monotonic()
        first = client.messages.create(model="claude-test", max_tokens=64, tools=[WEATHER_TOOL],
                                       messages=[{"role": "user", "content": QUESTION}])
        took = time.monotonic() - started
        assert first.stop_reason == "tool_use", first
        assert took < 1.0, "the retries waited %.2f s: retry-after-ms was not honoured" % took
        status, report, _ = server.stop()
        assert report["exchanges"] == 3, report
        assert report["unused"] == [{"agent": "main", "entries": [3]}], report
        assert not report["violations"] and not report["misses"], report
        assert status == 1, "the unused last reply fails the run"
    finally:
        server.kill()


def openai_error_on_every_attempt():
    """`times: always` outlasts the SDK's retries: three attempts, then the SDK raises its own
    RateLimitError with the scripted message."""
    scenario = loop_scenario("gpt-test").replace(
        "  main:\n    - text:",
        "  main:\n    - error: { kind: rate_limit, message: still limited, times: always,"
        " retry_after: 10ms }\n    - text:")
    server = Server(scenario)
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY)
        assert client.max_retries == 2, client.max_retries
        try:
            client.chat.completions.create(
                model="gpt-test", tools=[OPENAI_TOOL],
                messages=[{"role": "user", "content": QUESTION}])
        except openai.RateLimitError as e:
            assert "still limited" in str(e), str(e)
        else:
            raise AssertionError("the error of every attempt let a reply through")
        status, report, _ = server.stop()
        assert report["exchanges"] == 3, report
        assert not report["violations"] and not report["misses"], report
        # The turn never got past the error: the replies after it were never asked for.
        assert report["unused"] == [{"agent": "main", "entries": [2, 3]}], report
        assert status == 1, "the unused replies fail the run"
    finally:
        server.kill()


def anthropic_mid_stream_error():
    scenario = loop_scenario("claude-test").replace(
        "  main:\n    - text:",
        "  main:\n    - error: { kind: overloaded, mid_stream: true }\n    - text:")
    server = Server(scenario)
    try:
        client = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)
        args = dict(model="claude-test", max_tokens=64, tools=[WEATHER_TOOL],
                    messages=[{"role": "user", "content": QUESTION}])
        seen = []
        try:
            with client.messages.stream(**args) as s:
                for event in s:
                    seen.append(event.type)
        except anthropic.APIStatusError as e:
            assert "overloaded" in str(e).lower(), str(e)
        else:
            raise AssertionError("the error event in the stream was not raised: %s" % seen)
        assert "message_start" in seen and "message_stop" not in seen, seen
        # The retry gets the whole reply.
        with client.messages.stream(**args) as s:
            first = s.get_final_message()
        assert first.stop_reason == "tool_use"
        status, report, _ = server.stop()
        assert report["unused"] == [{"agent": "main", "entries": [3]}], report
        assert not report["violations"], report
    finally:
        server.kill()


# ---- OpenAI Chat Completions ----

def openai_chat_loop(stream):
    server = Server(loop_scenario("gpt-test"))
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0)
        messages = [{"role": "user", "content": QUESTION}]
        if stream:
            with client.chat.completions.stream(model="gpt-test", messages=messages,
                                                tools=[OPENAI_TOOL],
                                                stream_options={"include_usage": True}) as s:
                completion = s.get_final_completion()
            assert completion.usage.total_tokens > 0
        else:
            completion = client.chat.completions.create(model="gpt-test", messages=messages,
                                                        tools=[OPENAI_TOOL])
        message = completion.choices[0].message
        assert completion.choices[0].finish_reason == "tool_calls"
        assert message.content == "Let me check.", message
        call = message.tool_calls[0]
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"location": "Paris"}
        messages += [
            {"role": "assistant", "content": message.content,
             "tool_calls": [{"id": call.id, "type": "function",
                             "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "18 C, cloudy"},
        ]
        if stream:
            chunks = client.chat.completions.create(model="gpt-test", messages=messages,
                                                    tools=[OPENAI_TOOL], stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(model="gpt-test", messages=messages,
                                                  tools=[OPENAI_TOOL]).choices[0].message.content
        assert text == ANSWER, text
        expect_clean(server)
    finally:
        server.kill()


def openai_dangling_tool_call():
    server = Server(loop_scenario("gpt-test"))
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0)
        try:
            client.chat.completions.create(model="gpt-test", messages=[
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_lost", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "user", "content": "and?"}])
        except openai.BadRequestError as e:
            assert e.status_code == 400
            assert e.message.endswith(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                "response messages: call_lost"), e.message
            assert e.body["type"] == "invalid_request_error", e.body
        else:
            raise AssertionError("a dangling tool call was accepted")
        status, report, _ = server.stop()
        assert status == 1 and report["violations"][0]["invariant"] == "tool-pairing", report
    finally:
        server.kill()


# ---- OpenAI Responses ----

def openai_responses_loop(stream):
    server = Server(loop_scenario("gpt-test"))
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0)
        if stream:
            with client.responses.stream(model="gpt-test", input=QUESTION,
                                         tools=[RESPONSES_TOOL]) as s:
                first = s.get_final_response()
        else:
            first = client.responses.create(model="gpt-test", input=QUESTION, tools=[RESPONSES_TOOL])
        assert first.output_text == "Let me check.", first.output_text
        calls = [item for item in first.output if item.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather"
        assert json.loads(calls[0].arguments) == {"location": "Paris"}
        items = [{"role": "user", "content": QUESTION}]
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": calls[0].call_id,
                      "output": "18 C, cloudy"})
        if stream:
            with client.responses.stream(model="gpt-test", input=items, tools=[RESPONSES_TOOL]) as s:
                second = s.get_final_response()
        else:
            second = client.responses.create(model="gpt-test", input=items, tools=[RESPONSES_TOOL])
        assert second.output_text == ANSWER, second.output_text
        expect_clean(server)
    finally:
        server.kill()


# ---- reasoning ----

THOUGHT = "The user wants Paris; get_weather takes a location."

REASONING = """
name: a model that thinks before it acts
agents:
  main: { model: thinker }
llm:
  main:
    - thinking: The user wants Paris; get_weather takes a location.
      tool_use: { name: get_weather, input: { location: Paris } }
    - It is 18 C and cloudy in Paris.
"""


def anthropic_thinking(stream):
    """The SDK reads the thinking block (its stream accumulated from thinking_delta and
    signature_delta) and replays it as it came; an altered one is refused with replayed-history."""
    server = Server(REASONING)
    try:
        client = anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0)
        messages = [{"role": "user", "content": QUESTION}]
        args = dict(model="thinker", max_tokens=2048, tools=[WEATHER_TOOL],
                    thinking={"type": "enabled", "budget_tokens": 1024})
        if stream:
            with client.messages.stream(messages=messages, **args) as s:
                first = s.get_final_message()
        else:
            first = client.messages.create(messages=messages, **args)
        thinking, use = first.content[0], first.content[1]
        assert thinking.type == "thinking" and thinking.thinking == THOUGHT, thinking
        assert thinking.signature, thinking
        assert use.type == "tool_use", use
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "18 C, cloudy"}]}
        replayed = [b.model_dump(exclude_none=True) for b in first.content]
        altered = [dict(replayed[0], thinking="Something else."), replayed[1]]
        try:
            client.messages.create(messages=messages + [
                {"role": "assistant", "content": altered}, result], **args)
            raise AssertionError("an altered thinking block was accepted")
        except anthropic.UnprocessableEntityError as e:
            assert "thinking block" in str(e), e
        second = client.messages.create(messages=messages + [
            {"role": "assistant", "content": replayed}, result], **args)
        assert second.content[0].text == ANSWER, second.content
        status, report, out = server.stop()
        assert status == 1 and [v["invariant"] for v in report["violations"]] == \
            ["replayed-history"], out
    finally:
        server.kill()


def openai_responses_reasoning(stream):
    """The SDK reads the reasoning item (streamed with the reasoning summary events) and the
    next request replays it."""
    server = Server(REASONING)
    try:
        client = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0)
        args = dict(model="thinker", tools=[RESPONSES_TOOL])
        if stream:
            with client.responses.stream(input=QUESTION, **args) as s:
                summary = ""
                for event in s:
                    if event.type == "response.reasoning_summary_text.delta":
                        summary += event.delta
                first = s.get_final_response()
            assert summary == THOUGHT, summary
        else:
            first = client.responses.create(input=QUESTION, **args)
        reasoning = first.output[0]
        assert reasoning.type == "reasoning" and reasoning.summary[0].text == THOUGHT, reasoning
        call = first.output[1]
        items = [{"role": "user", "content": QUESTION}]
        items += [item.model_dump(exclude_none=True) for item in first.output]
        items.append({"type": "function_call_output", "call_id": call.call_id,
                      "output": "18 C, cloudy"})
        second = client.responses.create(input=items, **args)
        assert second.output_text == ANSWER, second.output_text
        expect_clean(server)
    finally:
        server.kill()


# ---- pydantic-ai ----

def pydantic_ai_loop(provider):
    from pydantic_ai import Agent

    model_name = "claude-test" if provider == "anthropic" else "gpt-test"
    server = Server(loop_scenario(model_name))
    try:
        if provider == "anthropic":
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider
            model = AnthropicModel(model_name, provider=AnthropicProvider(base_url=server.base, api_key=KEY))
        else:
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider
            model = OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=server.base + "/v1", api_key=KEY))
        agent = Agent(model)
        seen = []

        @agent.tool_plain
        def get_weather(location: str) -> str:
            """The weather in a city."""
            seen.append(location)
            return "18 C, cloudy"

        result = agent.run_sync(QUESTION)
        assert result.output == ANSWER, result.output
        assert seen == ["Paris"], seen
        expect_clean(server)
    finally:
        server.kill()


def readme_worked_example():
    """The README's worked example, as written: examples/mock-llm/runtime.py against weather.yaml."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "examples/mock-llm/weather.yaml")) as f:
        server = Server(f.read())
    try:
        env = dict(os.environ, ANTHROPIC_BASE_URL=server.base, ANTHROPIC_API_KEY=KEY)
        out = subprocess.run([sys.executable, os.path.join(root, "examples/mock-llm/runtime.py")],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == ("It is 18 C and cloudy in Paris; the forecaster expects "
                                      "rain tomorrow."), out.stdout
        status, report, text = server.stop()
        assert status == 0 and report["exchanges"] == 5 and report["conversations"] == 2, text
    finally:
        server.kill()


def shutdown(base):
    req = urllib.request.Request(base + "/_agentsim/shutdown", method="POST", data=b"{}",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def import_and_record_worked_example():
    """docs/import-record.md: the worked example's journal imported with `agentsim import`, and the
    same run recorded through `agentsim record` (a second mock-llm as its upstream); served by
    mock-llm, each written file gives the same runtime the same answer, and the report passes."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runtime = os.path.join(root, "examples/mock-llm/runtime.py")
    with open(os.path.join(root, "examples/mock-llm/weather.yaml")) as f:
        weather = f.read()
    answer = "It is 18 C and cloudy in Paris; the forecaster expects rain tomorrow."
    work = tempfile.mkdtemp(prefix="agentsim-import-")
    servers, proxy = [], None

    def run_against(base):
        env = dict(os.environ, ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY=KEY)
        out = subprocess.run([sys.executable, runtime], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == answer, out.stdout

    try:
        journal = os.path.join(work, "exchanges.jsonl")
        server = Server(weather, ["--journal", journal])
        servers.append(server)
        run_against(server.base)
        status, _, text = server.stop()
        assert status == 0, text
        imported = os.path.join(work, "imported.yaml")
        done = subprocess.run([AGENTSIM, "import", journal, "--out", imported],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        upstream = Server(weather)
        servers.append(upstream)
        recorded = os.path.join(work, "recorded.yaml")
        proxy = subprocess.Popen([AGENTSIM, "record", "--upstream", upstream.base, "--out",
                                  recorded, "--addr", "127.0.0.1:0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = proxy.stdout.readline()
        assert line.startswith("listening on http://"), (line, proxy.stderr.read())
        run_against(line.strip().split(" ")[-1])
        shutdown(line.strip().split(" ")[-1])
        _, err = proxy.communicate(timeout=30)
        assert proxy.returncode == 0, err
        status, _, text = upstream.stop()
        assert status == 0, text
        for written in (imported, recorded):
            with open(written) as f:
                text = f.read()
            assert KEY not in text, text
            server = Server(text)
            servers.append(server)
            run_against(server.base)
            status, report, out = server.stop()
            assert status == 0 and report["exchanges"] == 5, (written, out, text)
    finally:
        if proxy is not None and proxy.poll() is None:
            proxy.kill()
            proxy.communicate(timeout=10)
        for server in servers:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)


CASES = [
    ("README worked example: examples/mock-llm/runtime.py", readme_worked_example),
    ("agentsim import and agentsim record: the worked example written back and served",
     import_and_record_worked_example),
    ("anthropic: tool loop", lambda: anthropic_loop(False)),
    ("anthropic: tool loop, streamed", lambda: anthropic_loop(True)),
    ("anthropic: dangling tool use is a BadRequestError", anthropic_dangling_tool_use),
    ("anthropic: scripted rate limit, retried", anthropic_rate_limit),
    ("anthropic: scripted error with times: 2, default retries succeed on the third attempt",
     anthropic_error_outlasting_retries),
    ("anthropic: error event in the middle of a stream", anthropic_mid_stream_error),
    ("openai chat: tool loop", lambda: openai_chat_loop(False)),
    ("openai chat: tool loop, streamed", lambda: openai_chat_loop(True)),
    ("openai chat: dangling tool call is a BadRequestError", openai_dangling_tool_call),
    ("openai chat: scripted error with times: always outlasts the retries",
     openai_error_on_every_attempt),
    ("openai responses: tool loop", lambda: openai_responses_loop(False)),
    ("openai responses: tool loop, streamed", lambda: openai_responses_loop(True)),
    ("anthropic: thinking block, replayed and altered", lambda: anthropic_thinking(False)),
    ("anthropic: thinking block, streamed", lambda: anthropic_thinking(True)),
    ("openai responses: reasoning item, replayed", lambda: openai_responses_reasoning(False)),
    ("openai responses: reasoning item, streamed", lambda: openai_responses_reasoning(True)),
    ("pydantic-ai over anthropic", lambda: pydantic_ai_loop("anthropic")),
    ("pydantic-ai over openai chat", lambda: pydantic_ai_loop("openai")),
]


def main():
    failed = 0
    for name, case in CASES:
        try:
            case()
            print("ok   " + name)
        except Exception:
            failed += 1
            print("FAIL " + name)
            traceback.print_exc()
    print("%d of %d client cases passed" % (len(CASES) - failed, len(CASES)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
