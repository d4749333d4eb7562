// `agentsim explore --runtime` against this runtime: every planted bug is found from seed 0 within
// the budget of runs the README's table states, and shrunk against the runtime into a file of at
// most 10 steps that fails with the same finding while the bug is there and not once it is
// fixed; without a bug, the same explorations find nothing. The same scenarios and faults as the
// Python runtime's suite (the same semantics, the same planted bugs).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { runScenario, shellJoin } from "agentsim-runtime";

import { AGENTSIM, binary, PACKAGE, REPO, skip } from "./setup.js";

const SPEC = join(REPO, "scenarios", "spec");
const OWN = join(REPO, "examples", "runtimes", "python", "tests", "scenarios");
const RUNTIME = [process.execPath, join(PACKAGE, "dist", "runtime.js")];

const ONLY_CANCELS = ["--no-fault", "llm-error", "--no-fault", "llm-stall", "--no-fault", "llm-latency", "--no-fault", "tool-error", "--no-fault", "tool-latency", "--no-fault", "restart", "--no-fault", "user-message"];

interface Explored {
  readonly scenario: string;
  readonly flags: readonly string[];
  /** The runs from seed 0 within which the bug is found. */
  readonly runs: number;
  readonly finding: string;
}

/** What reveals each planted bug (the README's table). */
const EXPLORED: Readonly<Record<string, Explored>> = {
  // No error is scripted: a model fault fails the skill's call (seed 7).
  "child-error-as-success": {
    scenario: join(OWN, "explore-a-skill-that-may-fail.yaml"),
    flags: ["--no-fault", "restart", "--no-fault", "user-message", "--no-fault", "cancel", "--no-fault", "llm-stall", "--no-fault", "llm-latency"],
    runs: 8,
    finding: "error-cascade",
  },
  // No step cancels: a cancel word interjected while the skill's tool runs (seed 0).
  "interruption-leak": { scenario: join(OWN, "explore-a-skill-with-a-slow-tool.yaml"), flags: ONLY_CANCELS, runs: 1, finding: "no-display-leak" },
  "unanswered-tool-use-after-cancel": { scenario: join(OWN, "explore-a-skill-with-a-slow-tool.yaml"), flags: ONLY_CANCELS, runs: 1, finding: "tool-pairing" },
  // The scenario scripts what reveals these two; the checks of every run find them.
  "empty-reply-replayed": { scenario: join(SPEC, "stack-child-empty-reply-sends-nothing-and-waits-for-user.yaml"), flags: ["--no-faults"], runs: 1, finding: "tool-pairing" },
  "iteration-reset-on-resume": {
    scenario: join(SPEC, "stack-iterations-counted-per-frame-across-user-turns-until-limit.yaml"),
    flags: ["--no-faults"],
    runs: 1,
    finding: "iteration-limit",
  },
};

/** `agentsim explore` of one scenario against this runtime, with a planted bug or none. */
function explore(e: Explored, out: string, bug?: string) {
  const args = ["explore", e.scenario, "--runtime", shellJoin(RUNTIME), ...e.flags, "--runs", String(e.runs), "--jobs", "2", "--shrink-runs", "4", "--out", out];
  if (bug !== undefined) args.push("--runtime-env", `AGENTSIM_PLANTED_BUG=${bug}`);
  return spawnSync(binary ?? "agentsim", args, { encoding: "utf-8", timeout: 300_000, cwd: REPO });
}

for (const [bug, e] of Object.entries(EXPLORED)) {
  test(`explore finds ${bug} from seed 0 within ${e.runs} runs and shrinks it to at most 10 steps`, { skip }, async () => {
    const out = mkdtempSync(join(tmpdir(), "agentsim-ts-explore-"));
    const p = explore(e, out, bug);
    assert.equal(p.status, 1, p.stdout + p.stderr);
    assert.ok(p.stdout.includes(`    ${e.finding}: `), p.stdout);
    const files = readdirSync(out).filter((f) => f.startsWith(`${e.finding}-`) && f.endsWith(".yaml"));
    assert.equal(files.length, 1, p.stdout);
    const file = join(out, files[0]!);
    const text = readFileSync(file, "utf-8");
    const steps = text.split("\nsteps:\n")[1] ?? "";
    const n = steps.split("\n").filter((l) => l.startsWith("  - ")).length;
    assert.ok(n >= 1 && n <= 10, text);
    const buggy = await runScenario(file, RUNTIME, { ...AGENTSIM, env: { AGENTSIM_PLANTED_BUG: bug } });
    assert.equal(buggy.failure?.kind, e.finding, JSON.stringify(buggy.failure));
    // Fixed, the finding is gone: the file passes, or (a small shrinking budget leaves replies the
    // bug's path used) stops at a clean limit.
    const fixed = await runScenario(file, RUNTIME, AGENTSIM);
    assert.ok(fixed.passed || ["model-miss", "unused-replies"].includes(fixed.failure?.kind ?? ""), JSON.stringify(fixed.failure));
  });
}

test("without a planted bug, the same explorations find nothing", { skip }, () => {
  const seen = new Set<string>();
  for (const e of Object.values(EXPLORED)) {
    const key = e.scenario + e.flags.join(" ");
    if (seen.has(key)) continue;
    seen.add(key);
    const out = mkdtempSync(join(tmpdir(), "agentsim-ts-explore-"));
    const p = explore(e, out);
    assert.equal(p.status, 0, p.stdout + p.stderr);
    assert.ok(p.stdout.includes("findings: none"), p.stdout);
    assert.deepEqual(readdirSync(out), []);
  }
});

test("generated scenarios with stalls, latencies and tool hangs find nothing: the runtime times out a hung call", { skip }, () => {
  // This runtime offers `tool-timeouts`: a call of a tool with a `timeout` that never answers is
  // abandoned at its timeout with an error result, and the stalls and latencies of the model only
  // take time.
  const out = mkdtempSync(join(tmpdir(), "agentsim-ts-explore-"));
  const off = ["restart", "restart-mid-turn", "llm-error", "tool-error", "user-message", "cancel"].flatMap((k) => ["--no-fault", k]);
  const command = ["explore", "--generated", "--runtime", shellJoin(RUNTIME), ...off];
  const p = spawnSync(binary ?? "agentsim", [...command, "--runs", "8", "--seed", "0", "--jobs", "2", "--out", out], { encoding: "utf-8", timeout: 300_000, cwd: REPO });
  assert.equal(p.status, 0, p.stdout + p.stderr);
  assert.ok(p.stdout.includes("faults model stalls, model latency, tool latency, tool hangs"), p.stdout);
  assert.ok(p.stdout.includes("findings: none"), p.stdout);
  assert.deepEqual(readdirSync(out), []);
  // Seed 7 hangs a call of a tool with a 1 s timeout: the runtime abandons it with an error result.
  const seed7 = spawnSync(binary ?? "agentsim", [...command, "--runs", "1", "--seed", "7", "--no-write"], { encoding: "utf-8", timeout: 300_000, cwd: REPO });
  assert.ok(seed7.stdout.includes("fault injected: call 4 of tool t1 never answers"), seed7.stdout);
  assert.ok(seed7.stdout.includes(`tool_result to main: "Tool 't1' timed out after 1s" (error)`), seed7.stdout);
});
