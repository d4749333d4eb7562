import anthropic
from agentsim_runtime import run

client = anthropic.Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL points at agentsim's mock model
history = {}

def on_user(conversation, text, io):
    messages = history.setdefault(conversation, [])
    messages.append({"role": "user", "content": text})
    reply = client.messages.create(model="main", max_tokens=1024, system="You are main.", messages=messages)
    messages.append({"role": "assistant", "content": reply.content})
    io.send("".join(block.text for block in reply.content if block.type == "text"))

run(on_user)
