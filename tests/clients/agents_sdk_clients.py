"""Drives `agentsim mock-llm` with the OpenAI Agents SDK (`openai-agents`) as its users run it:
agents on the Responses API (the SDK's default) and on Chat Completions, streamed and not, a
handoff with and without `nest_handoff_history`, an agent called as a tool (`as_tool`), a scripted
error that outlasts the client's retries, and a broken input filter whose orphan tool output is
refused with the provider's 400.

Usage: python tests/clients/agents_sdk_clients.py path/to/agentsim

Run by .ci/run in target/frameworks-venv (versions pinned there). Each case starts its own server
on a free loopback port (tests/clients/sdk_clients.py's Server), stops it and checks its report
and journal. Every wait is bounded.
"""

import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

import openai  # noqa: E402
from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.run_config import ModelInputData  # noqa: E402

from sdk_clients import KEY, Server  # noqa: E402

set_tracing_disabled(True)
# The SDK logs "Error getting response" for each error it then raises; the cases check the raise.
logging.getLogger("openai.agents").setLevel(logging.CRITICAL)

QUESTION = "What is the weather in Paris and in Rome?"
ANSWER = "Paris: 18 C, cloudy. Rome: 24 C, sunny."
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
WAIT = 60  # seconds any one run may take
CLIENTS = []  # the clients of the case that runs, closed in its event loop when its run ends

TWO_CALLS = """
name: OpenAI Agents SDK, two tool calls in one reply (%(api)s)
agents:
  main: { model: agents-model }
llm:
  main:
    - text: Let me check both.
      tool_use:
        - { name: get_weather, input: { location: Paris } }
        - { name: get_weather, input: { location: Rome } }
    - "%(answer)s"
"""


def model(api, server, retries=0):
    """The model an Agents SDK user builds for `api`, on a client pointed at the server."""
    client = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=retries,
                                timeout=30)
    CLIENTS.append(client)
    if api == "chat":
        return OpenAIChatCompletionsModel(model="agents-model", openai_client=client)
    return OpenAIResponsesModel(model="agents-model", openai_client=client)


def run(agent, text, stream=False, config=None):
    """Runs `agent` on `text` to its final output, within WAIT seconds."""
    async def go():
        if not stream:
            return await Runner.run(agent, text, run_config=config, max_turns=8)
        result = Runner.run_streamed(agent, text, run_config=config, max_turns=8)
        deltas = []
        async for event in result.stream_events():
            if event.type == "raw_response_event":
                data = event.data
                if getattr(data, "type", "") == "response.output_text.delta":
                    deltas.append(data.delta)
        result.streamed_text = "".join(deltas)
        return result

    async def bounded():
        try:
            return await asyncio.wait_for(go(), WAIT)
        finally:
            while CLIENTS:
                await CLIENTS.pop().close()
    return asyncio.run(bounded())


def finish_clean(server, exchanges):
    status, report, out = server.stop()
    assert status == 0, "exit status %d: %s" % (status, out)
    assert report["passed"] and not report["violations"] and not report["misses"], report
    assert not report["unused"], report
    assert report["exchanges"] == exchanges, report
    return report


def weather_tool(seen):
    @function_tool
    def get_weather(location: str) -> str:
        """The weather in a city."""
        seen.append(location)
        return {"Paris": "18 C, cloudy", "Rome": "24 C, sunny"}[location]
    return get_weather


def tool_loop(api, stream):
    work = tempfile.mkdtemp(prefix="agentsim-agents-")
    journal = os.path.join(work, "journal.jsonl")
    server = Server(TWO_CALLS % {"api": api, "answer": ANSWER}, ["--journal", journal])
    try:
        seen = []
        agent = Agent(name="main", instructions="You are a weather assistant.",
                      model=model(api, server), tools=[weather_tool(seen)])
        result = run(agent, QUESTION, stream)
        assert result.final_output == ANSWER, result.final_output
        if stream:
            assert ANSWER in result.streamed_text, result.streamed_text
        assert sorted(seen) == ["Paris", "Rome"], seen
        finish_clean(server, 2)
        with open(journal) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        assert [line["path"] for line in lines] == [PATHS[api]] * 2, lines
        assert [bool(line["request"].get("stream")) for line in lines] == [stream, stream], \
            "streamed or not as asked"
    finally:
        server.kill()
        shutil.rmtree(work, ignore_errors=True)


HANDOFF = """
name: OpenAI Agents SDK handoff (%(how)s)
# The second agent's first request carries the first agent's history (whole, or nested into one
# assistant summary): agents share it, so `continuation`. Routed by the instructions.
history: continuation
agents:
  triage: { match: { system_contains: "You are the triage agent" } }
  forecaster: { match: { system_contains: "You are the forecaster" } }
llm:
  triage:
    - tool_use: { name: transfer_to_forecaster, input: {} }
  forecaster:
    - tool_use:
        - { name: get_forecast, input: { city: Rome, day: 1 } }
        - { name: get_forecast, input: { city: Rome, day: 2 } }
    - Sunny in Rome, 24 C, then rain.
"""


def handoff(api, nested, history="continuation"):
    scenario = HANDOFF % {"how": "nested history" if nested else "whole history"}
    if history != "continuation":
        scenario = scenario.replace("history: continuation\n", "")
    server = Server(scenario)
    try:
        @function_tool
        def get_forecast(city: str, day: int) -> str:
            """The forecast for a city, `day` days ahead."""
            return "sunny, 24 C" if day == 1 else "rain"

        forecaster = Agent(name="forecaster", instructions="You are the forecaster.",
                           model=model(api, server), tools=[get_forecast])
        triage = Agent(name="triage", instructions="You are the triage agent.",
                       model=model(api, server), handoffs=[forecaster])
        config = RunConfig(nest_handoff_history=nested)
        if history != "continuation":
            try:
                run(triage, "What's the weather in Rome?", config=config)
            except openai.UnprocessableEntityError as e:
                assert "history: continuation" in str(e), str(e)
            else:
                raise AssertionError("a handed-off history was taken under history: exact")
            status, report, _ = server.stop()
            assert status == 1, report
            assert [v["invariant"] for v in report["violations"]] == ["replayed-history"], report
            return
        result = run(triage, "What's the weather in Rome?", config=config)
        assert result.final_output == "Sunny in Rome, 24 C, then rain.", result.final_output
        assert result.last_agent.name == "forecaster", result.last_agent
        report = finish_clean(server, 3)
        # Nested, the forecaster's history (a summary of the client's) continues nothing the
        # server sent: a conversation of its own.
        assert report["conversations"] == (2 if nested else 1), report
    finally:
        server.kill()


AS_TOOL = """
name: OpenAI Agents SDK, an agent called as a tool
# The tool agent starts a history of its own: the default `history: exact` holds.
agents:
  main: { match: { system_contains: "You are a weather assistant" } }
  forecaster: { match: { system_contains: "You forecast" } }
llm:
  main:
    - tool_use: { name: ask_forecaster, input: { input: Rain tomorrow in Paris? } }
    - The forecaster expects rain tomorrow in Paris.
  forecaster:
    - tool_use:
        - { name: get_forecast, input: { city: Paris, day: 1 } }
        - { name: get_forecast, input: { city: Paris, day: 2 } }
    - Rain is likely tomorrow.
"""


def as_tool(api):
    server = Server(AS_TOOL)
    try:
        @function_tool
        def get_forecast(city: str, day: int) -> str:
            """The forecast for a city, `day` days ahead."""
            return "rain" if day == 1 else "sun"

        forecaster = Agent(name="forecaster", instructions="You forecast the weather.",
                           model=model(api, server), tools=[get_forecast])
        main = Agent(name="main", instructions="You are a weather assistant.",
                     model=model(api, server),
                     tools=[forecaster.as_tool("ask_forecaster", "Ask the forecaster.")])
        result = run(main, "Will it rain tomorrow in Paris?")
        assert result.final_output == "The forecaster expects rain tomorrow in Paris.", \
            result.final_output
        report = finish_clean(server, 4)
        assert report["conversations"] == 2, report
    finally:
        server.kill()


ERROR_ALWAYS = """
name: OpenAI Agents SDK, a model error that outlasts the client's retries
agents:
  main: { model: agents-model }
llm:
  main:
    - error: { kind: rate_limit, message: the model is down, times: always, retry_after: 10ms }
"""


def error_outlasts_retries(api):
    """`times: always` against the client's default `max_retries=2`: three attempts, quick
    (retry-after-ms: 10), then the SDK's RateLimitError out of Runner.run."""
    server = Server(ERROR_ALWAYS)
    try:
        agent = Agent(name="main", instructions="You are a weather assistant.",
                      model=model(api, server, retries=2))
        started = time.monotonic()
        try:
            run(agent, QUESTION)
        except openai.RateLimitError as e:
            assert "the model is down" in str(e), str(e)
            assert e.status_code == 429, e.status_code
        else:
            raise AssertionError("the scripted error let a reply through")
        took = time.monotonic() - started
        assert took < 5, "the retries waited %.1f s: retry-after-ms was not honoured" % took
        status, report, _ = server.stop()
        assert report["exchanges"] == 3, "1 attempt + the client's 2 retries: %s" % report
        assert not report["violations"] and not report["misses"], report
        assert status == 0 and report["passed"], report
    finally:
        server.kill()


def orphan_tool_output(api):
    """A runtime bug: a `call_model_input_filter` that keeps the first item and the last one
    (to save tokens) cuts the assistant's tool call but keeps its output. The server refuses the
    orphan output with the provider's 400, which the SDK raises out of Runner.run."""
    scenario = (TWO_CALLS % {"api": api, "answer": ANSWER}).replace(
        "agents:", "expect_violation: tool-pairing\nagents:")
    server = Server(scenario)
    try:
        def trim(data):
            items = data.model_data.input
            return ModelInputData(input=[items[0], items[-1]],
                                  instructions=data.model_data.instructions)

        agent = Agent(name="main", instructions="You are a weather assistant.",
                      model=model(api, server), tools=[weather_tool([])],
                      model_settings=ModelSettings(parallel_tool_calls=True))
        try:
            run(agent, QUESTION, config=RunConfig(call_model_input_filter=trim))
        except openai.BadRequestError as e:
            assert e.status_code == 400
            if api == "chat":
                expected = ("Invalid parameter: messages with role 'tool' must be a response to "
                            "a preceeding message with 'tool_calls'.")
            else:
                expected = "No tool call found for function call output with call_id call_"
            assert expected in e.message, e.message
        else:
            raise AssertionError("the orphan tool output was accepted")
        status, report, _ = server.stop()
        assert report["violations"][0]["invariant"] == "tool-pairing", report
        assert status == 0 and report["passed"], "expect_violation makes the broken run pass"
    finally:
        server.kill()


CASES = []
for _api in ("responses", "chat"):
    for _stream in (False, True):
        CASES.append(("%s: two tool calls in one reply%s" % (_api, ", streamed" if _stream else ""),
                      lambda a=_api, s=_stream: tool_loop(a, s)))
    CASES += [
        ("%s: handoff, history: continuation" % _api, lambda a=_api: handoff(a, False)),
        ("%s: handoff with nest_handoff_history, history: continuation" % _api,
         lambda a=_api: handoff(a, True)),
        ("%s: as_tool" % _api, lambda a=_api: as_tool(a)),
        ("%s: error with times: always outlasts the retries" % _api,
         lambda a=_api: error_outlasts_retries(a)),
        ("%s: an input filter's orphan tool output is the provider's 400" % _api,
         lambda a=_api: orphan_tool_output(a)),
    ]
CASES.append(("responses: handoff under history: exact is refused, naming the policy",
              lambda: handoff("responses", False, history="exact")))


def main():
    failed = 0
    for name, case in CASES:
        try:
            case()
            print("ok   agents-sdk " + name)
        except Exception:
            failed += 1
            print("FAIL agents-sdk " + name)
            traceback.print_exc()
    print("%d of %d OpenAI Agents SDK cases passed" % (len(CASES) - failed, len(CASES)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
