// MockLlm and withMockLlm against the real `agentsim mock-llm` binary (skipped, saying so, without one).

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { AgentsimError, findAgentsim, MockLlm } from "../src/index.js";
import { withMockLlm } from "../src/testing.js";

const GREETING = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "tests", "scenarios", "greeting.yaml");
const skip = findAgentsim() === null ? "no agentsim binary: set AGENTSIM_BIN or put agentsim on PATH" : false;

type Body = Record<string, unknown>;

async function ask(url: string, messages: Body[]): Promise<[number, Body]> {
  const response = await fetch(url + "/v1/messages", {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": "test", "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ model: "main", max_tokens: 64, system: "You are main.", messages }),
    signal: AbortSignal.timeout(10_000),
  });
  return [response.status, (await response.json()) as Body];
}

test("the server serves the scenario, and a good run passes", { skip }, async () => {
  const report = await withMockLlm(GREETING, async (server) => {
    assert.match(server.anthropicBaseUrl, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(server.openaiBaseUrl, server.anthropicBaseUrl + "/v1");
    assert.equal(server.env()["ANTHROPIC_BASE_URL"], server.anthropicBaseUrl);
    const [status, reply] = await ask(server.url, [{ role: "user", content: "hi" }]);
    assert.equal(status, 200);
    assert.deepEqual(reply["content"], [{ type: "text", text: "Hello there." }]);
    const live = await server.report();
    assert.ok(live.passed);
    assert.equal(live.status, null);
    assert.equal(live.data["exchanges"], 1);
  });
  assert.ok(report.passed);
  assert.equal(report.status, 0);
});

test("a scripted reply never used fails the report, and withMockLlm fails the test with it", { skip }, async () => {
  await assert.rejects(
    () => withMockLlm(GREETING, () => {}),
    (e: unknown) => e instanceof assert.AssertionError && /FAILED\n[\s\S]*never served/.test(e.message),
  );
  const server = await MockLlm.start(GREETING);
  const report = await server.stop();
  assert.equal(report.passed, false);
  assert.equal(report.status, 1);
  assert.deepEqual(report.data["unused"], [{ agent: "main", entries: [1] }]);
  assert.equal(await server.stop(), report, "a second stop gives the same report");
});

test("a broken request is a violation in the report", { skip }, async () => {
  const server = await MockLlm.start(GREETING);
  const [status, body] = await ask(server.url, [
    { role: "user", content: "hi" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "x", input: {} }] },
    { role: "user", content: "what now?" },
  ]);
  assert.equal(status, 400);
  assert.match(JSON.stringify(body["error"]), /tool_result/);
  const report = await server.stop();
  assert.equal(report.passed, false);
  assert.deepEqual(report.broken, ["tool-pairing"]);
});

test("a scenario that does not load is a clear error", { skip }, async () => {
  const bad = join(mkdtempSync(join(tmpdir(), "agentsim-ts-")), "bad.yaml");
  writeFileSync(bad, "name: x\nllm:\n  main:\n    - nonsense: 1\n");
  await assert.rejects(() => MockLlm.start(bad), (e: unknown) => e instanceof AgentsimError && /did not start \(exit status 2\): .*bad\.yaml/s.test(e.message));
});

test("the body's own failure stops the server and is what the test sees", { skip }, async () => {
  let server: MockLlm | undefined;
  await assert.rejects(
    () =>
      withMockLlm(GREETING, (s) => {
        server = s;
        throw new RangeError("the agent broke");
      }),
    /the agent broke/,
  );
  await assert.rejects(() => fetch(server?.url + "/_agentsim/report", { signal: AbortSignal.timeout(5_000) }));
});
