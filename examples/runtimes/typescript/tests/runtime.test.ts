// The reference runtime end to end, tested the way a user tests theirs: `agentsim check --runtime`
// and `agentsim run --runtime` start it as a subprocess speaking the runtime protocol, serve its
// model calls with the in-process mock server, play the scenarios' user steps and judge their
// expectations and checks. With no planted bug it passes every spec scenario of seeds 000 and 002
// that an outside runtime can express, and the Python reference runtime's own scenarios (the same
// files: both runtimes have the same semantics); each planted bug fails a scenario, named below,
// by the check that catches it.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { test } from "node:test";

import { type Failure, runScenario, shellJoin } from "agentsim-runtime";

import { AGENTSIM, binary, PACKAGE, REPO, skip } from "./setup.js";

const SPEC = join(REPO, "scenarios", "spec");
// The Python reference runtime's own scenarios, written for outside runtimes: the same semantics,
// so the same files.
const OWN = join(REPO, "examples", "runtimes", "python", "tests", "scenarios");
const RUNTIME = [process.execPath, join(PACKAGE, "dist", "runtime.js")];
/** `agentsim run --runtime ... --format json` of one scenario, with a planted bug or none: its failure. */
async function failure(scenario: string, bug?: string): Promise<Failure | null> {
  const result = await runScenario(scenario, RUNTIME, bug === undefined ? AGENTSIM : { ...AGENTSIM, env: { AGENTSIM_PLANTED_BUG: bug } });
  assert.equal(result.passed, result.failure === null, result.summary);
  return result.failure;
}

interface Case {
  readonly path: string;
  readonly passed: boolean;
  readonly skipped?: string;
}

/** Why a scenario cannot run from outside, as the README's second table groups agentsim's reasons. */
const NOT_EXPRESSIBLE: readonly (readonly [string, RegExp])[] = [
  ["protocol 1 has no messages for the agent's `fork`, `workflow` or `async_questions`", /uses `(fork|workflow|async_questions)`, which protocol 1 has no messages for/],
  [
    "a step or a setting of agentsim's own runtime (`intervene`, `trigger`, `settings.interruptions`)",
    /the `\w+` step is agentsim's own runtime's|`settings\.interruptions` configures agentsim's own runtime/,
  ],
  [
    "an expectation no outside runtime can be judged by (`time`, `tree`, `agent_states`, `questions`, `agents`)",
    /`expect\.\w+` cannot be judged from outside/,
  ],
  ["a capability this runtime does not offer (`stream`, `batch`, `usage`)", /needs the runtime capability/],
  ["an expectation at the very instant a `wait: false` message is delivered", /very instant a `wait: false` message is delivered/],
  ["a scripted model error without a message (its text differs between the simulator and an API)", /scripted `error` without a `message`/],
];

function count<T>(items: readonly T[], key: (item: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
}

test("every scenario the runtime can express passes, and the README's conformance report is true", { skip }, () => {
  const junit = join(mkdtempSync(join(tmpdir(), "agentsim-ts-")), "conformance.xml");
  const args = ["check", "--format", "json", "--junit", junit, SPEC, OWN, "--runtime", shellJoin(RUNTIME)];
  const p = spawnSync(binary ?? "agentsim", args, { encoding: "utf-8", timeout: 600_000, cwd: REPO, maxBuffer: 64 << 20 });
  const cases = (JSON.parse(p.stdout) as { scenarios: Case[] }).scenarios;
  const failed = cases.filter((c) => !c.passed && c.skipped === undefined);
  assert.deepEqual(failed, []);
  assert.equal(p.status, 0, p.stderr);
  const own = cases.filter((c) => c.path.includes(join("python", "tests", "scenarios")));
  assert.equal(own.length, readdirSync(OWN).filter((f) => f.endsWith(".yaml")).length);
  assert.ok(own.every((c) => c.passed));
  const spec = cases.filter((c) => c.path.includes("/spec/"));
  assert.equal(spec.length, readdirSync(SPEC).filter((f) => f.endsWith(".yaml")).length);
  const skipped = spec.filter((c) => c.skipped !== undefined);
  assert.equal(spec.filter((c) => c.passed).length + skipped.length, spec.length);
  const readme = readFileSync(join(PACKAGE, "README.md"), "utf-8");
  const says = (text: string): void => assert.ok(readme.includes(text), `README.md should say ${text}`);

  // Seeds 000 and 002, as the Python runtime's README counts them.
  const seeds = spec.filter((c) => ["core", "stack", "persist"].includes(basename(c.path).split("-")[0] ?? ""));
  says(`**${seeds.filter((c) => c.passed).length} of the ${seeds.length}**`);
  const front = readFileSync(join(REPO, "README.md"), "utf-8");
  const row = `| TypeScript (the same semantics) | ${seeds.filter((c) => c.passed).length} of ${seeds.length} |`;
  assert.ok(front.includes(row), `the repository's README.md should say ${row}`);

  // The whole corpus: the total, a row per file prefix, a row per reason.
  says(`**${spec.filter((c) => c.passed).length} of the ${spec.length}** pass, none fails, and ${skipped.length} are not expressible`);
  const prefix = (c: Case): string => basename(c.path).split("-")[0] ?? "";
  const all = count(spec, prefix);
  const passed = count(spec.filter((c) => c.passed), prefix);
  const rows = [...readme.matchAll(/^\| `(\w+)-\*` \| (\d+) \| (\d+) \| (\d+) \|$/gm)];
  assert.equal(rows.length, all.size, "a row per file prefix");
  for (const [, name, ok, bad, not] of rows) {
    const key = name ?? "";
    assert.deepEqual([Number(ok), Number(bad), Number(not)], [passed.get(key) ?? 0, 0, (all.get(key) ?? 0) - (passed.get(key) ?? 0)], key);
  }
  const reasons = count(skipped, (c) => {
    const found = NOT_EXPRESSIBLE.filter(([, pattern]) => pattern.test(c.skipped ?? ""));
    assert.equal(found.length, 1, `one reason for ${c.path}: ${c.skipped}`);
    return found[0]?.[0] ?? "";
  });
  for (const [label] of NOT_EXPRESSIBLE) says(`| ${label} | ${reasons.get(label) ?? 0} |`);

  // The JUnit file says the same: a test case per file, the skipped ones marked, no failure.
  const xml = readFileSync(junit, "utf-8");
  assert.equal(xml.match(/<testcase /g)?.length, cases.length);
  assert.equal(xml.match(/<skipped /g)?.length ?? 0, cases.filter((c) => c.skipped !== undefined).length);
  assert.match(xml, /<testsuites [^>]*failures="0" errors="0"/);
});

// --- the planted bugs: each fails a scenario, by the check that names it ---------------------------

test("empty-reply-replayed is refused by the wire check", { skip }, async () => {
  const f = await failure(join(SPEC, "stack-child-empty-reply-sends-nothing-and-waits-for-user.yaml"), "empty-reply-replayed");
  // Anthropic's own 400, as the mock server answers it: the stored empty turn is invalid.
  assert.equal(f?.kind, "tool-pairing", JSON.stringify(f));
  assert.match(f?.message ?? "", /all messages must have non-empty content/);
});

test("unanswered-tool-use-after-cancel leaves the cancelled frames without results", { skip }, async () => {
  const f = await failure(join(OWN, "cancel-while-a-tool-runs.yaml"), "unanswered-tool-use-after-cancel");
  assert.equal(f?.kind, "expectation", JSON.stringify(f));
  assert.equal(f?.step, 5);
  assert.match(f?.message ?? "", /tool_results: expected .* got \[\]$/);
});

test("child-error-as-success breaks the error cascade", { skip }, async () => {
  // The check on the model requests breaks on the step where the parent receives the result,
  // before the scenario's own `tool_result` expectation is judged.
  const f = await failure(join(OWN, "child-model-error-cascades.yaml"), "child-error-as-success");
  assert.equal(f?.kind, "error-cascade", JSON.stringify(f));
  assert.equal(f?.step, 3, JSON.stringify(f));
  assert.equal(
    f?.message,
    "error-cascade: skill:research ended because its model call failed, but its parent's " +
      'request #4 carries "LLM error: upstream exploded" as a result that is not an error',
  );
});

test("iteration-reset-on-resume is seen in the runtime's stack", { skip }, async () => {
  const f = await failure(join(SPEC, "stack-iterations-counted-per-frame-across-user-turns-until-limit.yaml"), "iteration-reset-on-resume");
  assert.equal(f?.kind, "expectation", JSON.stringify(f));
  assert.match(f?.message ?? "", /iterations\[skill:interviewer\]: expected 2, got 1/);
});

test("interruption-leak puts the display sentinel into the parent's conversation", { skip }, async () => {
  const f = await failure(join(OWN, "cancel-while-a-tool-runs.yaml"), "interruption-leak");
  assert.equal(f?.kind, "no-display-leak", JSON.stringify(f));
  assert.match(f?.message ?? "", /"Interrupted\. Tell Ally what to do instead\."/);
});

test("each planted bug's scenario passes without the bug", { skip }, async () => {
  for (const scenario of [
    join(SPEC, "stack-child-empty-reply-sends-nothing-and-waits-for-user.yaml"),
    join(SPEC, "stack-iterations-counted-per-frame-across-user-turns-until-limit.yaml"),
  ]) {
    assert.equal(await failure(scenario), null, scenario);
  }
});

test("a bug report about the runtime is a passing file", { skip }, async () => {
  // expect_violation works for outside runs: the interruption leak, reproduced as a file that
  // passes while the bug is there and fails once it is fixed.
  const source = readFileSync(join(OWN, "cancel-while-a-tool-runs.yaml"), "utf-8");
  const steps = source.indexOf("steps:");
  // The steps up to the cancel, with the expectation of a violation.
  const cut = source.indexOf("  - expect:\n      sent: [Cancelled.]");
  assert.ok(steps >= 0 && steps < cut);
  const file = join(mkdtempSync(join(tmpdir(), "agentsim-ts-")), "interruption-leak.yaml");
  writeFileSync(file, "expect_violation: no-display-leak\n" + source.slice(0, cut));
  const buggy = await runScenario(file, RUNTIME, { ...AGENTSIM, env: { AGENTSIM_PLANTED_BUG: "interruption-leak" } });
  assert.ok(buggy.passed, JSON.stringify(buggy.failure));
  assert.equal(buggy.data.reproduced, "no-display-leak");
  const fixed = await runScenario(file, RUNTIME, AGENTSIM);
  assert.equal(fixed.passed, false);
  assert.equal(fixed.failure?.kind, "expected-violation", JSON.stringify(fixed.failure));
});

test("an unknown planted bug stops the runtime at once, naming the five", () => {
  const p = spawnSync(process.execPath, [join(PACKAGE, "dist", "runtime.js")], {
    encoding: "utf-8",
    timeout: 30_000,
    input: "",
    env: { ...process.env, AGENTSIM_PLANTED_BUG: "off-by-one" },
  });
  assert.equal(p.status, 1);
  assert.equal(p.stdout, "");
  assert.match(p.stderr, /AGENTSIM_PLANTED_BUG=off-by-one: not one of interruption-leak, empty-reply-replayed, unanswered-tool-use-after-cancel, child-error-as-success, iteration-reset-on-resume/);
});
