import Anthropic from "@anthropic-ai/sdk";
import { type IO, run } from "agentsim-runtime";

const client = new Anthropic({ maxRetries: 0 }); // ANTHROPIC_BASE_URL points at agentsim's mock model
const history = new Map<string, Anthropic.MessageParam[]>();

await run(async (conversation: string, text: string, io: IO) => {
  const messages = history.get(conversation) ?? [];
  history.set(conversation, messages);
  messages.push({ role: "user", content: text });
  const reply = await client.messages.create({ model: "main", max_tokens: 1024, system: "You are main.", messages });
  messages.push({ role: "assistant", content: reply.content });
  io.send(reply.content.map((block) => (block.type === "text" ? block.text : "")).join(""));
});
