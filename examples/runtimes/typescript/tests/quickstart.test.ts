// The TypeScript quick start of docs/runtime-protocol.md (section 11) is `quickstart.ts`, word for
// word, and it passes the quick start's scenario, `examples/quickstart/hello.yaml`, through the
// helper's node:test function, as a user's test would.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { agentsimRun } from "agentsim-runtime/testing";

import { AGENTSIM, PACKAGE, REPO, skip } from "./setup.js";

const HELLO = join(REPO, "examples", "quickstart", "hello.yaml");
const QUICKSTART = [process.execPath, join(PACKAGE, "dist", "quickstart.js")];

test("the docs show quickstart.ts as it is", () => {
  const source = readFileSync(join(PACKAGE, "quickstart.ts"), "utf-8");
  const docs = readFileSync(join(REPO, "docs", "runtime-protocol.md"), "utf-8");
  assert.ok(docs.includes("```ts\n" + source + "```\n"), "docs/runtime-protocol.md must quote quickstart.ts in a ts block");
});

test("the quick start passes", { skip }, async () => {
  const result = await agentsimRun(HELLO, QUICKSTART, AGENTSIM);
  assert.match(result.transcript, /runtime → user default: "You said hello\."/);
});

test("a wrong expectation in the quick start fails at its step", { skip }, async () => {
  const wrong = join(mkdtempSync(join(tmpdir(), "agentsim-ts-")), "hello.yaml");
  writeFileSync(wrong, readFileSync(HELLO, "utf-8").replace("[You said hello.]", "[You said bye.]"));
  const result = await agentsimRun(wrong, QUICKSTART, { ...AGENTSIM, expectPass: false });
  assert.equal(result.passed, false);
  assert.equal(result.failure?.step, 4);
});
