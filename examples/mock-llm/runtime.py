"""A tiny agent runtime under test: a main agent with a tool and a subagent, on the official
Anthropic SDK. Run it against `agentsim mock-llm examples/mock-llm/weather.yaml`:

    ANTHROPIC_BASE_URL=http://127.0.0.1:8080 ANTHROPIC_API_KEY=test python runtime.py
"""

import anthropic

client = anthropic.Anthropic()  # reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY
MODEL = "mock-model"  # any name: the scenario routes by system prompt

TOOLS = [
    {"name": "get_weather", "description": "Current weather in a city.",
     "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}}},
    {"name": "ask_forecaster", "description": "Ask the forecasting subagent.",
     "input_schema": {"type": "object", "properties": {"question": {"type": "string"}}}},
]


def forecaster(question):
    """The subagent: its own conversation, its own system prompt."""
    reply = client.messages.create(model=MODEL, max_tokens=512, system="You forecast the weather.",
                                   messages=[{"role": "user", "content": question}])
    return "".join(b.text for b in reply.content if b.type == "text")


def run_tool(name, args):
    if name == "get_weather":
        return "18 C, cloudy"
    if name == "ask_forecaster":
        return forecaster(args["question"])
    return "unknown tool " + name


def main_agent(user_message):
    messages = [{"role": "user", "content": user_message}]
    while True:
        reply = client.messages.create(model=MODEL, max_tokens=1024, tools=TOOLS,
                                       system="You are a weather assistant.", messages=messages)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u.id, "content": run_tool(u.name, u.input)}
            for u in uses]})


if __name__ == "__main__":
    print(main_agent("What is the weather in Paris?"))
