// Drives `agentsim mock-llm` with the Vercel AI SDK (`ai`, `@ai-sdk/anthropic`, `@ai-sdk/openai`)
// as its users run it: tool loops with two tool calls in one reply over Anthropic Messages, OpenAI
// Chat Completions and OpenAI Responses (the SDK's default, `store: true`: earlier output replayed
// as `item_reference`s), streamed and not; a subagent called as a tool (the SDK's agent pattern,
// routed by the `x-agentsim-agent` header); a scripted error that outlasts the SDK's retries; and
// a broken `prepareStep` whose orphan tool result is refused with the provider's 400.
//
// Usage: node tests/clients/ai-sdk/ai_sdk.mjs path/to/agentsim
// (after `npm ci` in tests/clients/ai-sdk, which pins the versions). Run by .ci/run. Each case
// starts its own server on a free loopback port, stops it and checks its report and journal.
// Every wait is bounded.

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";

import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import {
  APICallError,
  RetryError,
  ToolLoopAgent,
  generateText,
  jsonSchema,
  stepCountIs,
  streamText,
  tool,
} from "ai";

// The Anthropic provider warns on every call that it does not know the model name's output limit.
globalThis.AI_SDK_LOG_WARNINGS = false;

const AGENTSIM = resolve(process.argv[2] ?? "target/release/agentsim");
const KEY = "test-key";
const QUESTION = "What is the weather in Paris and in Rome?";
const ANSWER = "Paris: 18 C, cloudy. Rome: 24 C, sunny.";
const PATHS = { anthropic: "/v1/messages", chat: "/v1/chat/completions", responses: "/v1/responses" };

function assert(ok, message) {
  if (!ok) throw new Error("assertion failed: " + message);
}

function within(ms, promise, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/** One `agentsim mock-llm` process serving `scenario` (YAML text) on 127.0.0.1. */
class Server {
  static async start(scenario, { journal = false } = {}) {
    const dir = mkdtempSync(join(tmpdir(), "agentsim-ai-sdk-"));
    const server = new Server(dir);
    writeFileSync(join(dir, "scenario.yaml"), scenario);
    const args = ["mock-llm", join(dir, "scenario.yaml"), "--addr", "127.0.0.1:0",
      "--report", join(dir, "report.json")];
    if (journal) args.push("--journal", join(dir, "journal.jsonl"));
    server.proc = spawn(AGENTSIM, args, { stdio: ["ignore", "pipe", "pipe"] });
    server.stderr = "";
    server.proc.stderr.on("data", (d) => { server.stderr += d; });
    server.exited = new Promise((res) => server.proc.on("exit", (code) => res(code)));
    const lines = createInterface({ input: server.proc.stdout });
    const first = await within(15000, new Promise((res) => {
      lines.once("line", res);
      server.proc.once("exit", () => res(""));
    }), "the server's first line");
    if (!first.startsWith("listening on http://")) {
      server.kill();
      throw new Error(`the server did not start: ${JSON.stringify(first)} ${server.stderr}`);
    }
    server.base = first.trim().split(" ").pop();
    return server;
  }

  constructor(dir) {
    this.dir = dir;
  }

  /** Stops the server: its exit status and report. */
  async stop() {
    const response = await within(10000, fetch(this.base + "/_agentsim/shutdown", {
      method: "POST", headers: { "content-type": "application/json" }, body: "{}",
    }), "shutdown");
    await response.text();
    const status = await within(30000, this.exited, "the server's exit");
    const report = JSON.parse(readFileSync(join(this.dir, "report.json"), "utf8"));
    return { status, report };
  }

  journal() {
    return readFileSync(join(this.dir, "journal.jsonl"), "utf8").split("\n")
      .filter((l) => l.trim()).map((l) => JSON.parse(l));
  }

  /** Kills the server if it still runs and removes its directory (every case ends here). */
  kill() {
    if (this.proc && this.proc.exitCode === null) this.proc.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The model an AI SDK user builds for `api`, pointed at the server. */
function model(api, server, name = "ai-model") {
  if (api === "anthropic") {
    // The AI SDK's Anthropic provider wants the `/v1` (the Anthropic SDKs do not).
    return createAnthropic({ baseURL: server.base + "/v1", apiKey: KEY })(name);
  }
  const openai = createOpenAI({ baseURL: server.base + "/v1", apiKey: KEY });
  return api === "chat" ? openai.chat(name) : openai(name);
}

async function finishClean(server, exchanges) {
  const { status, report } = await server.stop();
  assert(status === 0, `exit status ${status}: ${JSON.stringify(report)}`);
  assert(report.passed && !report.violations.length && !report.misses.length,
    JSON.stringify(report));
  assert(!report.unused.length, JSON.stringify(report.unused));
  assert(report.exchanges === exchanges, `${report.exchanges} exchanges, not ${exchanges}`);
  return report;
}

const TWO_CALLS = (api) => `
name: AI SDK, two tool calls in one reply (${api})
agents:
  main: { model: ai-model }
llm:
  main:
    - text: Let me check both.
      tool_use:
        - { name: get_weather, input: { location: Paris } }
        - { name: get_weather, input: { location: Rome } }
    - "${ANSWER}"
`;

function weatherTool(seen) {
  return tool({
    description: "The weather in a city.",
    inputSchema: jsonSchema({
      type: "object", properties: { location: { type: "string" } }, required: ["location"],
    }),
    execute: async ({ location }) => {
      seen.push(location);
      return { Paris: "18 C, cloudy", Rome: "24 C, sunny" }[location];
    },
  });
}

async function toolLoop(api, stream) {
  const server = await Server.start(TWO_CALLS(api), { journal: true });
  try {
    const seen = [];
    const args = {
      model: model(api, server), tools: { get_weather: weatherTool(seen) },
      stopWhen: stepCountIs(4), prompt: QUESTION, maxRetries: 0,
    };
    let text;
    if (stream) {
      let streamError;
      const result = streamText({ ...args, onError: ({ error }) => { streamError = error; } });
      let pieces = "";
      for await (const piece of result.textStream) pieces += piece;
      text = await result.text;
      assert(!streamError, `the stream failed: ${streamError}`);
      assert(pieces.endsWith(ANSWER), `streamed ${JSON.stringify(pieces)}`);
    } else {
      text = (await generateText(args)).text;
    }
    assert(text.endsWith(ANSWER), `the answer: ${JSON.stringify(text)}`);
    assert(JSON.stringify([...seen].sort()) === '["Paris","Rome"]', `tools ran for ${seen}`);
    await finishClean(server, 2);
    const lines = server.journal();
    assert(lines.every((l) => l.path === PATHS[api]), lines.map((l) => l.path).join(", "));
    assert(lines.every((l) => Boolean(l.request.stream) === stream), "streamed or not as asked");
    if (api === "responses") {
      // store: true (the default): the text before the calls comes back as an item_reference.
      const input = lines[1].request.input;
      assert(input.some((i) => i.type === "item_reference"),
        `no item_reference in ${JSON.stringify(input)}`);
    }
  } finally {
    server.kill();
  }
}

const SUBAGENT = `
name: AI SDK, a subagent called as a tool
# Each agent says who it is with the x-agentsim-agent header (the SDK's \`headers\`): no match
# rule. The subagent starts a history of its own: the default \`history: exact\` holds.
agents:
  main: {}
  forecaster: {}
llm:
  main:
    - tool_use: { name: ask_forecaster, input: { question: Rain tomorrow in Paris? } }
    - The forecaster expects rain tomorrow in Paris.
  forecaster:
    - tool_use:
        - { name: get_forecast, input: { city: Paris, day: 1 } }
        - { name: get_forecast, input: { city: Paris, day: 2 } }
    - Rain is likely tomorrow.
`;

async function subagent(api) {
  const server = await Server.start(SUBAGENT, { journal: true });
  try {
    const forecaster = new ToolLoopAgent({
      model: model(api, server), instructions: "You forecast the weather.", maxRetries: 0,
      headers: { "x-agentsim-agent": "forecaster" },
      tools: {
        get_forecast: tool({
          description: "The forecast for a city, `day` days ahead.",
          inputSchema: jsonSchema({
            type: "object", properties: { city: { type: "string" }, day: { type: "integer" } },
          }),
          execute: async ({ day }) => (day === 1 ? "rain" : "sun"),
        }),
      },
    });
    const answers = [];
    const main = new ToolLoopAgent({
      model: model(api, server), instructions: "You are a weather assistant.", maxRetries: 0,
      headers: { "x-agentsim-agent": "main" },
      tools: {
        ask_forecaster: tool({
          description: "Ask the forecaster agent.",
          inputSchema: jsonSchema({ type: "object", properties: { question: { type: "string" } } }),
          execute: async ({ question }) => {
            const out = await forecaster.generate({ prompt: question });
            answers.push(out.text);
            return out.text;
          },
        }),
      },
    });
    const result = await main.generate({ prompt: "Will it rain tomorrow in Paris?" });
    assert(result.text === "The forecaster expects rain tomorrow in Paris.", result.text);
    assert(JSON.stringify(answers) === '["Rain is likely tomorrow."]', JSON.stringify(answers));
    const report = await finishClean(server, 4);
    assert(report.conversations === 2, `${report.conversations} conversations`);
    const routed = server.journal().map((l) => `${l.agent_header}->${l.address?.agent}`);
    assert(JSON.stringify(routed) === JSON.stringify(
      ["main->main", "forecaster->forecaster", "forecaster->forecaster", "main->main"]),
    routed.join(", "));
  } finally {
    server.kill();
  }
}

const ERROR_ALWAYS = `
name: AI SDK, a model error that outlasts the SDK's retries
agents:
  main: { model: ai-model }
llm:
  main:
    - error: { kind: rate_limit, message: the model is down, times: always, retry_after: 10ms }
`;

async function errorOutlastsRetries(api) {
  const server = await Server.start(ERROR_ALWAYS);
  try {
    const started = Date.now();
    let caught;
    try {
      // maxRetries left at its default, 2.
      await generateText({ model: model(api, server), prompt: QUESTION });
    } catch (e) {
      caught = e;
    }
    const took = Date.now() - started;
    assert(RetryError.isInstance(caught), `not a RetryError: ${caught}`);
    assert(caught.reason === "maxRetriesExceeded", caught.reason);
    assert(caught.errors.length === 3, `${caught.errors.length} attempts`);
    assert(APICallError.isInstance(caught.lastError), `last error: ${caught.lastError}`);
    assert(caught.lastError.statusCode === 429, caught.lastError.statusCode);
    assert(caught.lastError.message.includes("the model is down"), caught.lastError.message);
    assert(took < 5000, `the retries waited ${took} ms: retry-after-ms was not honoured`);
    const { status, report } = await server.stop();
    assert(report.exchanges === 3, `1 attempt + the SDK's 2 retries: ${report.exchanges}`);
    assert(!report.violations.length && !report.misses.length, JSON.stringify(report));
    assert(status === 0 && report.passed, JSON.stringify(report));
  } finally {
    server.kill();
  }
}

const ORPHAN = {
  anthropic: "messages.0.content.1: `tool_result` blocks must come before any other content in a user message",
  chat: "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
  responses: "No tool call found for function call output with call_id call_",
};

async function orphanToolResult(api) {
  const scenario = TWO_CALLS(api).replace("agents:", "expect_violation: tool-pairing\nagents:");
  const server = await Server.start(scenario);
  try {
    let caught;
    try {
      await generateText({
        model: model(api, server), tools: { get_weather: weatherTool([]) },
        stopWhen: stepCountIs(4), prompt: QUESTION, maxRetries: 0,
        // The bug: trimming the history to the first message and the last one cuts the
        // assistant's tool calls but keeps a result.
        prepareStep: ({ messages }) => (messages.length > 2
          ? { messages: [messages[0], messages[messages.length - 1]] } : {}),
      });
    } catch (e) {
      caught = e;
    }
    assert(APICallError.isInstance(caught), `not an APICallError: ${caught}`);
    assert(caught.statusCode === 400, caught.statusCode);
    assert(caught.message.includes(ORPHAN[api]), caught.message);
    const { status, report } = await server.stop();
    assert(report.violations[0]?.invariant === "tool-pairing", JSON.stringify(report));
    assert(status === 0 && report.passed, "expect_violation makes the broken run pass");
  } finally {
    server.kill();
  }
}

const CASES = [];
for (const api of ["anthropic", "chat", "responses"]) {
  for (const stream of [false, true]) {
    CASES.push([`${api}: two tool calls in one reply${stream ? ", streamed" : ""}`,
      () => toolLoop(api, stream)]);
  }
  CASES.push(
    [`${api}: a subagent called as a tool, routed by x-agentsim-agent`, () => subagent(api)],
    [`${api}: error with times: always outlasts the retries`, () => errorOutlastsRetries(api)],
    [`${api}: a trimming prepareStep's orphan tool result is the provider's 400`,
      () => orphanToolResult(api)],
  );
}

let failed = 0;
for (const [name, run] of CASES) {
  try {
    await within(60000, run(), name);
    console.log(`ok   ai-sdk ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ai-sdk ${name}`);
    console.log(e?.stack ?? e);
  }
}
console.log(`${CASES.length - failed} of ${CASES.length} AI SDK cases passed`);
process.exit(failed ? 1 : 0);
