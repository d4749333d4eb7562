// The end-to-end tests' setup: the repository's paths, and the agentsim binary found as the
// helper's own tests find it (AGENTSIM_BIN, else agentsim on PATH), else the repository's
// target/release/agentsim.

import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { findAgentsim } from "agentsim-runtime";

/** This package's folder (the tests run from dist/tests). */
export const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** The agentsim repository. */
export const REPO = resolve(PACKAGE, "..", "..", "..");

const built = join(REPO, "target", "release", "agentsim");
/** The agentsim binary, or null. */
export const binary: string | null = findAgentsim() ?? (existsSync(built) ? built : null);
/** The reason to skip a test that needs agentsim, or false. */
export const skip: string | false =
  binary === null
    ? "no agentsim binary: AGENTSIM_BIN is unset, there is no agentsim on PATH and no target/release/agentsim in the repository (build it with `cargo build --release`)"
    : false;
/** The binary as an option of runScenario and agentsimRun. */
export const AGENTSIM: { readonly binary?: string } = binary === null ? {} : { binary };
