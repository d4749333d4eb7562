/**
 * A helper for node's built-in test runner (`node:test`): run a scenario against your runtime and
 * fail the test with agentsim's report when the run fails.
 *
 * ```ts
 * import { test } from "node:test";
 * import { agentsimRun } from "agentsim-runtime/testing";
 *
 * test("the skill asks, then completes", async () => {
 *   await agentsimRun("scenarios/skill-asks-then-completes.yaml", ["node", "dist/runtime.js"]);
 * });
 * ```
 */

import { AssertionError } from "node:assert";
import { basename } from "node:path";
import { test } from "node:test";

import { MockLlm, type MockLlmOptions, type MockLlmReport } from "./mock-llm.js";
import { findAgentsim, type RunResult, runScenario, type RunScenarioOptions } from "./runs.js";

/** Options of {@link agentsimRun}. */
export interface AgentsimRunOptions extends RunScenarioOptions {
  /** `false`: return the result, passed or not, for the test to judge (default true). */
  readonly expectPass?: boolean;
}

/** How many of the runtime's last stderr lines and transcript lines a failure message quotes. */
const TAIL = 30;

function tail(text: string, lines: number): string {
  const all = text.trimEnd().split("\n");
  return (all.length > lines ? ["...", ...all.slice(-lines)] : all).join("\n");
}

/** The failure message of a run: why it failed, agentsim's summary, the transcript's end, the runtime's stderr. */
export function describeFailure(scenario: string, result: RunResult): string {
  const parts = [`agentsim run ${scenario}: FAILED`];
  if (result.failure !== null) {
    const step = result.failure.step === undefined ? "" : ` (step ${result.failure.step})`;
    parts.push(`${result.failure.kind}${step}: ${result.failure.message}`);
  }
  if (result.summary !== "") parts.push(`agentsim:\n${tail(result.summary, TAIL)}`);
  if (result.transcript !== "") parts.push(`transcript:\n${tail(result.transcript, TAIL)}`);
  const stderr = result.data["stderr"];
  if (typeof stderr === "string" && stderr.trim() !== "") parts.push(`runtime stderr:\n${tail(stderr, TAIL)}`);
  return parts.join("\n\n");
}

/**
 * Runs `scenario` against `runtime` (`agentsim run FILE --runtime CMD --format json`) and throws an
 * `AssertionError` with the report when the run fails (unless `expectPass: false`). Resolves with
 * the result.
 */
export async function agentsimRun(
  scenario: string,
  runtime: string | readonly string[],
  options: AgentsimRunOptions = {},
): Promise<RunResult> {
  const result = await runScenario(scenario, runtime, options);
  if ((options.expectPass ?? true) && !result.passed) {
    throw new AssertionError({ message: describeFailure(scenario, result), actual: result.failure, expected: null });
  }
  return result;
}

/**
 * Registers one `node:test` test per scenario file, named after the file, each failing with the
 * report. Skipped, saying why, when no agentsim binary is found.
 */
export function scenarioTests(
  scenarios: readonly string[],
  runtime: string | readonly string[],
  options: AgentsimRunOptions = {},
): void {
  const binary = options.binary ?? findAgentsim();
  for (const scenario of scenarios) {
    const name = basename(scenario).replace(/\.(ya?ml|json)$/, "");
    if (binary === null) {
      test(name, { skip: "no agentsim binary: set AGENTSIM_BIN or put agentsim on PATH" }, () => {});
    } else {
      test(name, async () => {
        await agentsimRun(scenario, runtime, { ...options, binary });
      });
    }
  }
}

/**
 * Serves `scenario`'s model side with `agentsim mock-llm` while `body` runs (a test that drives
 * the runtime itself), then stops the server and throws an `AssertionError` with the server's
 * report when a request broke a wire rule (`tool-pairing`, `replayed-history`,
 * `request-format`), had no scripted reply, or a scripted reply was never used. Resolves with
 * the report. The server is stopped whatever `body` does.
 *
 * ```ts
 * test("weather", async () => {
 *   await withMockLlm("weather.yaml", async (server) => {
 *     const agent = new Agent({ baseURL: server.anthropicBaseUrl, apiKey: "test" });
 *     assert.match(await agent.ask("What is the weather in Paris?"), /^It is 18 C/);
 *   });
 * });
 * ```
 */
export async function withMockLlm(
  scenario: string,
  body: (server: MockLlm) => Promise<void> | void,
  options: MockLlmOptions = {},
): Promise<MockLlmReport> {
  const server = await MockLlm.start(scenario, options);
  try {
    await body(server);
  } catch (e) {
    server.kill();
    throw e;
  }
  const report = await server.stop();
  if (!report.passed) {
    throw new AssertionError({ message: `agentsim mock-llm ${scenario}: FAILED\n${report.text.trim()}`, actual: report.data, expected: null });
  }
  return report;
}
