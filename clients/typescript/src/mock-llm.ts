/**
 * `agentsim mock-llm` as an object: start it on a free port, point a runtime at it, stop it and
 * read its report. For a test that plays the user itself and needs only the model side:
 *
 * ```ts
 * const server = await MockLlm.start("weather.yaml");
 * const agent = new Agent({ baseURL: server.anthropicBaseUrl, apiKey: "test" });
 * assert.match(await agent.ask("What is the weather in Paris?"), /^It is 18 C/);
 * const report = await server.stop();
 * assert.ok(report.passed, report.text);
 * ```
 *
 * The binary is `AGENTSIM_BIN` when that is set, else `agentsim` on `PATH`.
 */

import { type ChildProcessByStdio, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable } from "node:stream";

import { AgentsimError, BIN_ENV, findAgentsim } from "./runs.js";

/** mock-llm's report: what it found wrong with the requests it served. */
export interface MockLlmReport {
  /**
   * Whether the run passed: nothing broken, missed or left unused (or, with the scenario's
   * `expect_violation`, that rule broken).
   */
  readonly passed: boolean;
  /** The report as JSON (`violations`, `misses`, `unused`, `exchanges`, ...). */
  readonly data: Readonly<Record<string, unknown>>;
  /** The report as the server prints it at shutdown ("" for a live report). */
  readonly text: string;
  /** The server's exit status (0 passed, 1 failed); null for a live report. */
  readonly status: number | null;
  /** The names of the rules broken (`tool-pairing`, ...), in the order found. */
  readonly broken: readonly string[];
}

/** Options of {@link MockLlm.start}. */
export interface MockLlmOptions {
  /** The agentsim binary; default {@link findAgentsim}. */
  readonly binary?: string;
  /** More arguments of `agentsim mock-llm`. */
  readonly args?: readonly string[];
  /** How long the server may take to print its address (default 30 s). */
  readonly startupTimeoutMs?: number;
}

function report(data: Record<string, unknown>, text: string, status: number | null): MockLlmReport {
  const violations = Array.isArray(data["violations"]) ? (data["violations"] as Record<string, unknown>[]) : [];
  return { passed: data["passed"] === true, data, text, status, broken: violations.map((v) => String(v["invariant"])) };
}

/** One `agentsim mock-llm SCENARIO --addr 127.0.0.1:0` process. */
export class MockLlm {
  private finalReport: MockLlmReport | null = null;

  private constructor(
    private readonly child: ChildProcessByStdio<null, Readable, Readable>,
    /** The server's address, `http://127.0.0.1:PORT`. */
    readonly url: string,
    private readonly out: string[],
    private readonly err: string[],
    private readonly exited: Promise<number | null>,
    private readonly dir: string,
  ) {}

  /** Starts the server and waits for its `listening on http://ADDR` line. */
  static async start(scenario: string, options: MockLlmOptions = {}): Promise<MockLlm> {
    const binary = options.binary ?? findAgentsim();
    if (binary === null) throw new AgentsimError(`no agentsim binary: set ${BIN_ENV} or put agentsim on PATH`);
    const dir = mkdtempSync(join(tmpdir(), "agentsim-mock-llm-"));
    const args = ["mock-llm", scenario, "--addr", "127.0.0.1:0", "--report", join(dir, "report.json"), ...(options.args ?? [])];
    const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
    const out: string[] = [];
    const err: string[] = [];
    child.stderr.setEncoding("utf-8").on("data", (s: string) => err.push(s));
    const exited = new Promise<number | null>((resolve) => child.on("close", (status) => resolve(status)));
    let timer: NodeJS.Timeout | undefined;
    const first = await new Promise<string | null>((resolve) => {
      let buffered = "";
      timer = setTimeout(() => resolve(null), options.startupTimeoutMs ?? 30_000);
      child.stdout.setEncoding("utf-8").on("data", (s: string) => {
        buffered += s;
        out.push(s);
        const newline = buffered.indexOf("\n");
        if (newline >= 0) resolve(buffered.slice(0, newline));
      });
      child.on("error", () => resolve(null));
      void exited.then(() => resolve(buffered === "" ? null : buffered));
    });
    clearTimeout(timer);
    const prefix = "listening on ";
    if (first === null || !first.startsWith(prefix)) {
      child.kill("SIGKILL");
      const status = await exited;
      rmSync(dir, { recursive: true, force: true });
      const why = err.join("").trim() || first || "no output";
      throw new AgentsimError(`\`${binary} ${args.join(" ")}\` did not start (exit status ${status}): ${why}`);
    }
    return new MockLlm(child, first.slice(prefix.length).trim(), out, err, exited, dir);
  }

  /** For `new Anthropic({ baseURL })` or `ANTHROPIC_BASE_URL` (no `/v1`). */
  get anthropicBaseUrl(): string {
    return this.url;
  }

  /** For `new OpenAI({ baseURL })` or `OPENAI_BASE_URL` (with `/v1`). */
  get openaiBaseUrl(): string {
    return this.url + "/v1";
  }

  /** The variables a runtime's SDKs read, pointed here (with placeholder keys). */
  env(): Record<string, string> {
    return {
      ANTHROPIC_BASE_URL: this.anthropicBaseUrl,
      OPENAI_BASE_URL: this.openaiBaseUrl,
      ANTHROPIC_API_KEY: "agentsim",
      OPENAI_API_KEY: "agentsim",
    };
  }

  /** The report so far (`GET /_agentsim/report`), while the server runs. */
  async report(): Promise<MockLlmReport> {
    const response = await fetch(this.url + "/_agentsim/report", { signal: AbortSignal.timeout(10_000) });
    if (!response.ok) throw new AgentsimError(`GET /_agentsim/report: HTTP ${response.status}: ${await response.text()}`);
    return report((await response.json()) as Record<string, unknown>, "", null);
  }

  /** Stops the server (`POST /_agentsim/shutdown`) and resolves with its final report. */
  async stop(timeoutMs = 10_000): Promise<MockLlmReport> {
    if (this.finalReport !== null) return this.finalReport;
    try {
      // mock-llm's control routes take a POST only as JSON (so that a web page cannot post to them).
      await fetch(this.url + "/_agentsim/shutdown", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch {
      // Already gone: its exit status says what happened.
    }
    let timer: NodeJS.Timeout | undefined;
    const status = await Promise.race([
      this.exited,
      new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (status === "timeout") {
      this.kill();
      throw new AgentsimError(`mock-llm did not stop within ${timeoutMs} ms of /_agentsim/shutdown`);
    }
    const text = this.out.join("").split("\n").slice(1).join("\n");
    let data: Record<string, unknown>;
    try {
      data = JSON.parse(readFileSync(join(this.dir, "report.json"), "utf-8")) as Record<string, unknown>;
    } catch {
      throw new AgentsimError(`mock-llm exited with status ${status} and wrote no report: ${this.err.join("").trim() || text}`);
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
    this.finalReport = report(data, text, status);
    return this.finalReport;
  }

  /** Kills the server at once (no report); for a test's cleanup after a failure. */
  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}
