/**
 * Running a scenario against a runtime through agentsim: `agentsim run FILE --runtime CMD
 * --format json`, its report parsed (docs/runtime-protocol.md; docs/cli.md, "Against your own
 * runtime").
 */

import { spawn } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";

/** The environment variable naming the agentsim binary. */
export const BIN_ENV = "AGENTSIM_BIN";

/** No agentsim binary, or agentsim did not run as it should (no report). */
export class AgentsimError extends Error {
  override readonly name = "AgentsimError";
}

/**
 * agentsim refused the scenario before running it: it does not load, or it asks what the runtime
 * cannot express (a key no outside runtime can be judged by, a capability the runtime did not
 * offer). The message is agentsim's, located in the file.
 */
export class NotRunnable extends Error {
  override readonly name = "NotRunnable";
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The agentsim binary: `$AGENTSIM_BIN` (which must exist), else `agentsim` on `PATH`, else null. */
export function findAgentsim(env: NodeJS.ProcessEnv = process.env): string | null {
  const explicit = env[BIN_ENV];
  if (explicit !== undefined && explicit !== "") {
    if (!executable(explicit)) throw new AgentsimError(`${BIN_ENV}=${explicit}: not an executable file`);
    return explicit;
  }
  for (const dir of (env["PATH"] ?? "").split(delimiter)) {
    if (dir !== "" && executable(join(dir, "agentsim"))) return join(dir, "agentsim");
  }
  return null;
}

/** Words joined into one command line that agentsim splits back into the same words. */
export function shellJoin(words: readonly string[]): string {
  return words.map((w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${w.replaceAll("'", `'"'"'`)}'`)).join(" ");
}

/** Why a run failed, as agentsim's JSON report gives it. */
export interface Failure {
  /** The check or error: `expectation`, `tool-pairing`, `no-display-leak`, `timeout`, ... */
  readonly kind: string;
  readonly message: string;
  /** The step (from 1), when the failure belongs to one. */
  readonly step?: number;
  /** The scenario file's line, when known. */
  readonly line?: number;
  readonly [key: string]: unknown;
}

/** agentsim's report of one run, as `agentsim run --format json --runtime` prints it. */
export interface Report {
  readonly passed: boolean;
  readonly failure?: Failure | null;
  readonly transcript?: readonly { readonly text: string; readonly [key: string]: unknown }[];
  readonly reproduced?: string | null;
  readonly [key: string]: unknown;
}

/** One run of a scenario against a runtime. */
export interface RunResult {
  /** Whether every step, expectation and check held. */
  readonly passed: boolean;
  /** The report: `failure`, `transcript`, `model` (the mock server's report), `stderr`, ... */
  readonly data: Report;
  /** agentsim's own stderr: on a failure, the failure and the command that reruns it. */
  readonly summary: string;
  /** Why it failed, or null. */
  readonly failure: Failure | null;
  /** agentsim's and the runtime's lines, one per line. */
  readonly transcript: string;
}

/** Options of {@link runScenario}. */
export interface RunScenarioOptions {
  /** Set in the runtime's environment (`--runtime-env NAME=VALUE`). */
  readonly env?: Readonly<Record<string, string>>;
  /** More arguments of `agentsim run` (`["--time-scale", "1"]`). */
  readonly args?: readonly string[];
  /** The agentsim binary; default {@link findAgentsim}. */
  readonly binary?: string;
  /** Kill agentsim after this many milliseconds (default 10 minutes). */
  readonly timeoutMs?: number;
  /** agentsim's working directory (default this process's). */
  readonly cwd?: string;
}

interface Finished {
  readonly status: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

function execute(binary: string, args: readonly string[], timeoutMs: number, cwd: string | undefined): Promise<Finished> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"], ...(cwd === undefined ? {} : { cwd }) });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new AgentsimError(`could not start ${binary}: ${e.message}`));
    });
    child.on("close", (status, signal) => {
      clearTimeout(timer);
      resolve({
        status,
        signal,
        stdout: Buffer.concat(out).toString("utf-8"),
        stderr: Buffer.concat(err).toString("utf-8"),
      });
    });
  });
}

/**
 * Runs `scenario` against the runtime started by `runtime` (a command line, or its words). Resolves
 * with the result, passed or not; rejects with {@link NotRunnable} when agentsim refuses the
 * scenario, and with {@link AgentsimError} when agentsim gives no report.
 */
export async function runScenario(
  scenario: string,
  runtime: string | readonly string[],
  options: RunScenarioOptions = {},
): Promise<RunResult> {
  const binary = options.binary ?? findAgentsim();
  if (binary === null) throw new AgentsimError(`no agentsim binary: set ${BIN_ENV} or put agentsim on PATH`);
  const command = typeof runtime === "string" ? runtime : shellJoin(runtime);
  const args = ["run", scenario, "--format", "json", "--runtime", command, ...(options.args ?? [])];
  for (const [name, value] of Object.entries(options.env ?? {})) args.push("--runtime-env", `${name}=${value}`);
  const p = await execute(binary, args, options.timeoutMs ?? 600_000, options.cwd);
  const summary = p.stderr.trim();
  if (p.status === 2) throw new NotRunnable(summary.replace(/^error: /, ""));
  let data: Report;
  try {
    data = JSON.parse(p.stdout) as Report;
  } catch {
    const how = p.signal !== null ? `was killed by ${p.signal}` : `exited ${p.status}`;
    throw new AgentsimError(`agentsim run ${how} without a report: ${summary}`);
  }
  if (typeof data !== "object" || data === null || typeof data.passed !== "boolean") {
    throw new AgentsimError(`agentsim run printed JSON that is not a report: ${p.stdout.slice(0, 200)}`);
  }
  return {
    passed: data.passed,
    data,
    summary,
    failure: data.failure ?? null,
    transcript: (data.transcript ?? []).map((entry) => entry.text).join("\n"),
  };
}
