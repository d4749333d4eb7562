// runScenario and the node:test helper: a scenario against a runtime through `agentsim run --runtime`,
// with its report. Needs the agentsim binary (AGENTSIM_BIN, or agentsim on PATH): skipped, saying
// so, without one.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { findAgentsim, NotRunnable, runScenario, shellJoin } from "../src/index.js";
import { agentsimRun } from "../src/testing.js";

const HERE = dirname(fileURLToPath(import.meta.url)); // dist/tests
const SOURCE = join(HERE, "..", "..", "tests");
const SCENARIO = join(SOURCE, "scenarios", "echo.yaml");
const ECHO = [process.execPath, join(HERE, "fixtures", "echo-runtime.js")];
const binary = findAgentsim();
const skip = binary === null ? "no agentsim binary: set AGENTSIM_BIN or put agentsim on PATH" : false;

function scratch(name: string, text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), "agentsim-ts-")), name);
  writeFileSync(path, text);
  return path;
}

const wrongScenario = (): string => scratch("wrong.yaml", readFileSync(SCENARIO, "utf-8").replace('["you said: bye"]', '["you said: ciao"]'));

test("shellJoin quotes what a shell would split", () => {
  assert.equal(shellJoin(["node", "/a b/it's.js", "--x=1"]), `node '/a b/it'"'"'s.js' --x=1`);
});

test("a runtime that does what the scenario says passes", { skip }, async () => {
  const result = await agentsimRun(SCENARIO, ECHO);
  assert.ok(result.passed);
  assert.equal(result.failure, null);
  assert.match(result.transcript, /runtime → user default: "you said: bye"/);
});

test("a failing run is reported with its step", { skip }, async () => {
  const result = await runScenario(wrongScenario(), ECHO);
  assert.equal(result.passed, false);
  assert.equal(result.failure?.kind, "expectation");
  assert.equal(result.failure?.step, 4);
  assert.match(result.summary, /rerun: agentsim run/);
});

test("agentsimRun fails with the report", { skip }, async () => {
  await assert.rejects(
    () => agentsimRun(wrongScenario(), ECHO),
    (e: unknown) => {
      assert.ok(e instanceof assert.AssertionError);
      assert.match(e.message, /FAILED\n\nexpectation \(step 4\): .*sent: expected.*you said: ciao/s);
      assert.match(e.message, /transcript:\n/);
      return true;
    },
  );
  const result = await agentsimRun(wrongScenario(), ECHO, { expectPass: false });
  assert.equal(result.passed, false);
});

test("a key the runtime cannot be judged by is refused", { skip }, async () => {
  const needs = scratch("needs.yaml", readFileSync(SCENARIO, "utf-8").replace("idle: true", "tool_results: []"));
  await assert.rejects(() => runScenario(needs, ECHO), (e: unknown) => e instanceof NotRunnable && /needs the runtime capability `tool-results`/.test(e.message));
});

test("scenarioTests makes one node:test test per file, failing with the report", { skip }, () => {
  const testing = pathToFileURL(join(HERE, "..", "src", "testing.js")).href;
  const file = scratch(
    "echo.test.mjs",
    `import { scenarioTests } from ${JSON.stringify(testing)};\n` +
      `scenarioTests(${JSON.stringify([SCENARIO, wrongScenario()])}, ${JSON.stringify(ECHO)});\n`,
  );
  // A test run of its own: without this runner's NODE_TEST_CONTEXT, which would make it a subtest.
  const env: NodeJS.ProcessEnv = { ...process.env, AGENTSIM_BIN: binary ?? "" };
  delete env["NODE_TEST_CONTEXT"];
  const p = spawnSync(process.execPath, ["--test", "--test-reporter=tap", file], { encoding: "utf-8", timeout: 120_000, env });
  assert.equal(p.status, 1, p.stdout + p.stderr);
  assert.match(p.stdout, /^ok 1 - echo$/m);
  assert.match(p.stdout, /^not ok 2 - wrong$/m);
  assert.match(p.stdout, /sent: expected/);
  assert.match(p.stdout, /# pass 1\n# fail 1/);
});
