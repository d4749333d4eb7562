"""Drives `agentsim mock-llm` with LangGraph as its users run it: `create_react_agent` over
`ChatAnthropic` and `ChatOpenAI` (Chat Completions and the Responses API), streamed and not, a
langgraph-supervisor team, a subgraph called as a tool, a scripted error that outlasts LangChain's
retries, and a broken pre-model hook whose orphan tool result is refused with the provider's 400.

Usage: python tests/clients/langgraph_clients.py path/to/agentsim

Run by .ci/run in target/frameworks-venv (versions pinned there). Each case starts its own server
on a free loopback port (tests/clients/sdk_clients.py's Server), stops it and checks its report
and journal. Every wait is bounded.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anthropic  # noqa: E402
import openai  # noqa: E402
from langchain_anthropic import ChatAnthropic  # noqa: E402
from langchain_anthropic.chat_models import AnthropicInvalidRequestError  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402
from langgraph_supervisor import create_supervisor  # noqa: E402

from sdk_clients import KEY, Server  # noqa: E402

# create_react_agent is what langgraph-supervisor builds on; its move to `langchain.agents`
# (not installed here) is announced on every call.
warnings.filterwarnings("ignore", message="create_react_agent has been moved")

QUESTION = "What is the weather in Paris and in Rome?"
ANSWER = "Paris: 18 C, cloudy. Rome: 24 C, sunny."
LIMIT = {"recursion_limit": 12}

TWO_CALLS = """
name: LangGraph, two tool calls in one reply (%(api)s)
agents:
  main: { model: %(model)s }
llm:
  main:
    - text: Let me check both.
      tool_use:
        - { name: get_weather, input: { location: Paris } }
        - { name: get_weather, input: { location: Rome } }
    - "%(answer)s"
"""


def chat_model(api, server, model, stream=False, retries=0):
    """The chat model a LangGraph user builds for `api`, pointed at the server."""
    if api == "anthropic":
        return ChatAnthropic(model=model, base_url=server.base, api_key=KEY, max_tokens=256,
                             streaming=stream, max_retries=retries, timeout=30)
    return ChatOpenAI(model=model, base_url=server.base + "/v1", api_key=KEY, streaming=stream,
                      max_retries=retries, timeout=30, use_responses_api=(api == "responses"))


PATHS = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}


def journal_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def finish_clean(server, exchanges):
    status, report, out = server.stop()
    assert status == 0, "exit status %d: %s" % (status, out)
    assert report["passed"] and not report["violations"] and not report["misses"], report
    assert not report["unused"], report
    assert report["exchanges"] == exchanges, report
    return report


def tool_loop(api, stream):
    """create_react_agent: one reply with two get_weather calls, both run, the answer."""
    journal = os.path.join(tempfile.mkdtemp(prefix="agentsim-lg-"), "journal.jsonl")
    server = Server(TWO_CALLS % {"api": api, "model": "lg-model", "answer": ANSWER},
                    ["--journal", journal])
    try:
        seen = []

        @tool
        def get_weather(location: str) -> str:
            """The weather in a city."""
            seen.append(location)
            return {"Paris": "18 C, cloudy", "Rome": "24 C, sunny"}[location]

        agent = create_react_agent(chat_model(api, server, "lg-model", stream), [get_weather])
        if stream:
            pieces = []
            for chunk, _meta in agent.stream({"messages": [HumanMessage(QUESTION)]},
                                             LIMIT, stream_mode="messages"):
                if isinstance(chunk, AIMessage) and isinstance(chunk.content, str):
                    pieces.append(chunk.content)
                elif isinstance(chunk, AIMessage):
                    pieces += [b.get("text", "") for b in chunk.content if isinstance(b, dict)]
            assert ANSWER in "".join(pieces), pieces
        else:
            final = agent.invoke({"messages": [HumanMessage(QUESTION)]}, LIMIT)
            assert final["messages"][-1].text == ANSWER, final["messages"][-1]
            tool_messages = [m for m in final["messages"] if isinstance(m, ToolMessage)]
            assert [m.content for m in tool_messages] == ["18 C, cloudy", "24 C, sunny"], \
                tool_messages
        # ToolNode runs the two calls at once, in either order.
        assert sorted(seen) == ["Paris", "Rome"], seen
        finish_clean(server, 2)
        lines = journal_lines(journal)
        assert [line["path"] for line in lines] == [PATHS[api]] * 2, lines
        assert [bool(line["request"].get("stream")) for line in lines] == [stream, stream], \
            "streamed or not as asked"
    finally:
        server.kill()
        shutil.rmtree(os.path.dirname(journal), ignore_errors=True)


SUPERVISOR = """
name: langgraph-supervisor, a supervisor and a worker sharing one message list
# The supervisor and its worker send one model name; each is routed by a tool only it offers.
# langgraph-supervisor hands the worker the supervisor's whole list and adds messages it wrote
# itself ("Transferring back to supervisor"): the history is shared, so `continuation`.
history: continuation
agents:
  supervisor: { match: { tool: transfer_to_weather_expert } }
  weather_expert: { match: { tool: get_weather } }
llm:
  supervisor:
    - tool_use: { name: transfer_to_weather_expert, input: {} }
    - "%(answer)s"
  weather_expert:
    - tool_use:
        - { name: get_weather, input: { location: Paris } }
        - { name: get_weather, input: { location: Rome } }
    - "%(answer)s"
"""


def supervisor(api):
    server = Server(SUPERVISOR % {"answer": ANSWER})
    try:
        @tool
        def get_weather(location: str) -> str:
            """The weather in a city."""
            return {"Paris": "18 C, cloudy", "Rome": "24 C, sunny"}[location]

        worker = create_react_agent(chat_model(api, server, "lg-model"), [get_weather],
                                    name="weather_expert",
                                    prompt="You are the weather expert. Use get_weather.")
        team = create_supervisor([worker], model=chat_model(api, server, "lg-model"),
                                 prompt="You are the supervisor of a weather team.").compile()
        final = team.invoke({"messages": [HumanMessage(QUESTION)]}, LIMIT)
        texts = [m.text for m in final["messages"] if isinstance(m, AIMessage)]
        assert texts[-1] == ANSWER, texts
        # The library's own message, which no model sent, was in the list the supervisor got.
        assert "Transferring back to supervisor" in texts, texts
        report = finish_clean(server, 4)
        assert report["conversations"] == 1, report
    finally:
        server.kill()


SUPERVISOR_EXACT = SUPERVISOR.replace("history: continuation\n", "")


def supervisor_needs_continuation():
    """The same team under the default `history: exact`: the worker's first request replays the
    supervisor's turn, which the server refuses (422) with the policy that takes it."""
    server = Server(SUPERVISOR_EXACT % {"answer": ANSWER})
    try:
        @tool
        def get_weather(location: str) -> str:
            """The weather in a city."""
            return "18 C"

        worker = create_react_agent(chat_model("anthropic", server, "lg-model"), [get_weather],
                                    name="weather_expert", prompt="You are the weather expert.")
        team = create_supervisor([worker], model=chat_model("anthropic", server, "lg-model"),
                                 prompt="You are the supervisor.").compile()
        try:
            team.invoke({"messages": [HumanMessage(QUESTION)]}, LIMIT)
        except anthropic.UnprocessableEntityError as e:
            assert "history: continuation" in str(e), str(e)
        else:
            raise AssertionError("a shared history was taken under history: exact")
        status, report, _ = server.stop()
        assert status == 1, report
        assert [v["invariant"] for v in report["violations"]] == ["replayed-history"], report
    finally:
        server.kill()


AGENT_AS_TOOL = """
name: LangGraph, a compiled subgraph called inside a tool
# The subgraph starts a history of its own: each agent keeps its own conversation, so the
# default `history: exact` holds. Routed by the tools each offers.
agents:
  main: { match: { tool: ask_forecaster } }
  forecaster: { match: { tool: get_forecast } }
llm:
  main:
    - tool_use: { name: ask_forecaster, input: { question: Rain tomorrow in Paris? } }
    - The forecaster expects rain tomorrow in Paris.
  forecaster:
    - tool_use:
        - { name: get_forecast, input: { city: Paris, day: 1 } }
        - { name: get_forecast, input: { city: Paris, day: 2 } }
    - Rain is likely tomorrow.
"""


def agent_as_tool(api):
    server = Server(AGENT_AS_TOOL)
    try:
        @tool
        def get_forecast(city: str, day: int) -> str:
            """The forecast for a city, `day` days ahead."""
            return "rain" if day == 1 else "sun"

        forecaster = create_react_agent(chat_model(api, server, "lg-model"), [get_forecast],
                                        prompt="You forecast the weather.")
        answers = []

        @tool
        def ask_forecaster(question: str) -> str:
            """Ask the forecaster agent."""
            out = forecaster.invoke({"messages": [HumanMessage(question)]}, LIMIT)
            answers.append(out["messages"][-1].text)
            return answers[-1]

        main = create_react_agent(chat_model(api, server, "lg-model"), [ask_forecaster],
                                  prompt="You are a weather assistant.")
        final = main.invoke({"messages": [HumanMessage("Will it rain tomorrow in Paris?")]}, LIMIT)
        assert answers == ["Rain is likely tomorrow."], answers
        assert final["messages"][-1].text == "The forecaster expects rain tomorrow in Paris."
        report = finish_clean(server, 4)
        assert report["conversations"] == 2, report
    finally:
        server.kill()


ERROR_ALWAYS = """
name: LangGraph, a model error that outlasts LangChain's retries
agents:
  main: { model: lg-model }
llm:
  main:
    - error: { kind: %(kind)s, message: the model is down, times: always, retry_after: 10ms }
"""


def error_outlasts_retries(api):
    """`times: always` against the chat model's default `max_retries=2`: three attempts, quick
    (retry-after-ms: 10), then the SDK's own error out of the graph."""
    kind = "overloaded" if api == "anthropic" else "rate_limit"
    server = Server(ERROR_ALWAYS % {"kind": kind})
    try:
        model = chat_model(api, server, "lg-model", retries=2)
        agent = create_react_agent(model, [])
        expected = anthropic.APIStatusError if api == "anthropic" else openai.RateLimitError
        started = time.monotonic()
        try:
            agent.invoke({"messages": [HumanMessage(QUESTION)]}, LIMIT)
        except expected as e:
            assert "the model is down" in str(e), str(e)
            assert e.status_code == (529 if api == "anthropic" else 429), e.status_code
        else:
            raise AssertionError("the scripted error let a reply through")
        took = time.monotonic() - started
        assert took < 5, "the retries waited %.1f s: retry-after-ms was not honoured" % took
        status, report, _ = server.stop()
        assert report["exchanges"] == 3, "1 attempt + LangChain's 2 retries: %s" % report
        assert not report["violations"] and not report["misses"], report
        assert status == 0 and report["passed"], report
    finally:
        server.kill()


def orphan_tool_result(api):
    """A runtime bug: a pre-model hook that trims the history to the first user message and the
    last message cuts the assistant's tool call but keeps its result. The server refuses the
    orphan result with the provider's 400, which the SDK raises through the graph."""
    scenario = (TWO_CALLS % {"api": api, "model": "lg-model", "answer": ANSWER}).replace(
        "agents:", "expect_violation: tool-pairing\nagents:")
    server = Server(scenario)
    try:
        @tool
        def get_weather(location: str) -> str:
            """The weather in a city."""
            return "18 C"

        def trim(state):
            messages = state["messages"]
            return {"llm_input_messages": [messages[0], messages[-1]]}

        agent = create_react_agent(chat_model(api, server, "lg-model"), [get_weather],
                                   pre_model_hook=trim)
        try:
            agent.invoke({"messages": [HumanMessage(QUESTION)]}, LIMIT)
        except (anthropic.BadRequestError, openai.BadRequestError) as e:
            assert e.status_code == 400
            message = str(e)
            if api == "anthropic":
                # langchain-anthropic merges the user message and the tool result into one user
                # message, so the provider's first complaint is the result's place in it; the
                # exception is LangChain's own subclass of the SDK's BadRequestError.
                assert isinstance(e, AnthropicInvalidRequestError), type(e)
                assert ("messages.0.content.1: `tool_result` blocks must come before any other "
                        "content in a user message") in message, message
            elif api == "chat":
                assert ("Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.") in message, message
            else:
                assert "No tool call found for function call output with call_id" in message, \
                    message
        else:
            raise AssertionError("the orphan tool result was accepted")
        status, report, _ = server.stop()
        assert report["violations"][0]["invariant"] == "tool-pairing", report
        assert status == 0 and report["passed"], "expect_violation makes the broken run pass"
    finally:
        server.kill()


CASES = []
for _api in ("anthropic", "chat", "responses"):
    for _stream in (False, True):
        CASES.append(("%s: two tool calls in one reply%s" % (_api, ", streamed" if _stream else ""),
                      lambda a=_api, s=_stream: tool_loop(a, s)))
    CASES += [
        ("%s: langgraph-supervisor, history: continuation" % _api, lambda a=_api: supervisor(a)),
        ("%s: a subgraph called as a tool" % _api, lambda a=_api: agent_as_tool(a)),
        ("%s: error with times: always outlasts the retries" % _api,
         lambda a=_api: error_outlasts_retries(a)),
        ("%s: a trimming hook's orphan tool result is the provider's 400" % _api,
         lambda a=_api: orphan_tool_result(a)),
    ]
CASES.append(("anthropic: langgraph-supervisor under history: exact is refused, naming the policy",
              supervisor_needs_continuation))


def main():
    failed = 0
    for name, case in CASES:
        try:
            case()
            print("ok   langgraph " + name)
        except Exception:
            failed += 1
            print("FAIL langgraph " + name)
            traceback.print_exc()
    print("%d of %d LangGraph cases passed" % (len(CASES) - failed, len(CASES)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
