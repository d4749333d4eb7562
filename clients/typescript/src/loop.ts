/**
 * The protocol loop: a runtime is one function, `onUser(conversation, text, io)`.
 *
 * `run(onUser)` answers `hello` with `ready`, calls `onUser` for each `user` line, and writes
 * `idle` when the promise it returns settles. Inside `onUser` the runtime talks to its model as
 * it always does (its SDK reads `ANTHROPIC_BASE_URL`), and uses `io`:
 *
 * - `io.send(text)`: text for the user;
 * - `await io.tool(name, input)`: runs one of the scenario's tools and resolves with agentsim's
 *   `tool_result`; `await io.tools([...])` runs several at once;
 * - `io.stack(frames)`, `io.usage(inputTokens, outputTokens)` and `io.event(kind, fields)`: the
 *   optional reports of the protocol;
 * - `io.modelHeaders({ agent })`: the headers that name the conversation (and the agent) of a
 *   model request, for the SDK's request headers (capability `conversation-header`).
 *
 * One turn runs at a time, and agentsim's lines are taken in only while the runtime waits for a
 * tool (or between turns). A `user` line that arrives during a turn is queued and handed to
 * `onUser` after the turn, unless the runtime's `interrupts(conversation, text)` says it
 * interrupts the running turn: then the waiting `io.tool` rejects with {@link Interrupted}. A
 * runtime that lets `Interrupted` escape from `onUser` gets the message again, as an ordinary
 * `onUser` call, once the aborted turn has unwound.
 */

import type { Readable, Writable } from "node:stream";

import { LineReader, TIMED_OUT } from "./lines.js";
import {
  CAPABILITIES,
  type Capability,
  decode,
  encode,
  Hello,
  MAX_LINE,
  type Message,
  modelHeaders,
  PROTOCOL,
  ProtocolError,
  type ToolResultMessage,
  type UserMessage,
} from "./protocol.js";

/** Exit status after a protocol error (docs/runtime-protocol.md, section 1). */
export const EXIT_PROTOCOL_ERROR = 2;

/**
 * What a tool call gave back. `failed` means the tool did not return but failed (threw), with
 * `content` as its message: format it as your runtime formats a tool's exception (agentsim's
 * reference runtime writes `Tool execution failed: <message>`).
 */
export interface ToolResult {
  readonly call: string;
  readonly content: string;
  readonly isError: boolean;
  readonly failed: boolean;
  /**
   * No result came within the call's `timeoutMs` (see {@link IO.tools}); `content` is empty and
   * a result that comes later is ignored.
   */
  readonly timedOut?: boolean;
}

/** One call of {@link IO.tools}. */
export interface ToolCall {
  readonly name: string;
  readonly input: unknown;
  /** The call id; default `c1`, `c2`, ... */
  readonly call?: string;
  /** Real milliseconds this call may take (capability `tool-timeouts`); default none. */
  readonly timeoutMs?: number;
}

/**
 * A user message interrupted the running turn (see {@link Runtime.interrupts}). A tool wrapper
 * that catches every error must rethrow this one, or the interruption is lost.
 */
export class Interrupted extends Error {
  override readonly name = "Interrupted";
  constructor(readonly user: UserMessage) {
    super(user.text);
  }
  /** The interrupting message's text. */
  get text(): string {
    return this.user.text;
  }
  /** The interrupting message's conversation. */
  get conversation(): string {
    return this.user.conversation;
  }
}

/** agentsim said `shutdown` (or closed stdin) while the runtime waited for it. */
export class ShutdownRequested extends Error {
  override readonly name = "ShutdownRequested";
  constructor() {
    super("agentsim ended the run");
  }
}

/** A value or its promise: every hook may be synchronous or async. */
export type Awaitable<T> = T | Promise<T>;

/** A runtime with every hook; give {@link run} an object of this shape, or a plain `onUser`. */
export interface Runtime {
  /** Capabilities to offer in `ready` (docs/runtime-protocol.md, section 6). */
  readonly capabilities?: readonly Capability[];
  /** The runtime's name and version, shown in agentsim's reports. */
  readonly name?: string;
  /** A run starts (also after a restart: load your state from `hello.stateDir`). */
  onHello?(hello: Hello): Awaitable<void>;
  /** Handle one user message; settle when the conversation waits for the user again. */
  onUser(conversation: string, text: string, io: IO): Awaitable<void>;
  /** Whether `text`, arriving while a turn of `conversation` runs, interrupts it. */
  interrupts?(conversation: string, text: string): boolean;
  /** `ready` is written: report what you restored (`io.stack(frames, { conversation })`). */
  onReady?(io: IO): Awaitable<void>;
  /** After a restart in the middle of a turn: finish it from your persisted state. */
  onResume?(seq: number, io: IO): Awaitable<void>;
  /**
   * Forget every conversation and every in-memory state (capability `reset`); a `hello` for the
   * next run follows. A runtime that offers `reset` has it, or is run with {@link runFresh},
   * which makes a new runtime instead.
   */
  onReset?(): Awaitable<void>;
  /** The run is over; the process exits after this. */
  onShutdown?(): Awaitable<void>;
}

/** The one function a minimal runtime is. */
export type OnUser = (conversation: string, text: string, io: IO) => Awaitable<void>;

/** A frame of a `stack` report: `{ name: "skill:research", iterations: 2 }`. */
export interface FrameReport {
  readonly name: string;
  readonly iterations?: number;
}

/** A frame popped since the last `stack` report, and why. */
export interface EndedFrame extends FrameReport {
  readonly reason: "completed" | "answered" | "max_iterations" | "error" | "cancelled";
}

/** Options of {@link IO.send}, {@link IO.stack} and {@link IO.event}. */
export interface ConversationOption {
  /** The conversation; default the one whose message is handled. */
  readonly conversation?: string;
}

/** Options of {@link IO.tool} and {@link IO.tools}. */
export interface ToolOptions extends ConversationOption {
  /** The agent whose model asked for the tool (a name of `hello.agents`); default the main agent. */
  readonly agent?: string;
}

class RuntimeFailed extends Error {}

/** The two streams, line numbers, and what the protocol lets arrive when. */
class Channel {
  line = 0; // agentsim's lines read so far
  lastSeq = 0;
  readonly queue: UserMessage[] = [];
  calls = 0;
  readonly issued = new Set<string>();
  readonly waiting = new Map<string, ToolResultMessage | null>();
  /** Conversations whose turn waits for a tool now (several waits may overlap). */
  readonly waiters = new Map<string, number>();
  /** Interrupting messages, per conversation, not yet thrown to its waiter. */
  readonly interruptions = new Map<string, UserMessage>();
  shutdown = false;
  /** A protocol error met during a turn: the turn is aborted, then the loop reports it. */
  fatal: ProtocolError | null = null;
  private reading: Promise<void> | null = null;
  private readonly lines: LineReader;

  constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly runtime: Runtime,
  ) {
    this.lines = new LineReader(input);
  }

  write(message: { readonly type: string; readonly [key: string]: unknown }): void {
    this.output.write(encode(message));
  }

  /** Resolves once everything written has been handed to the operating system. */
  flush(): Promise<void> {
    return new Promise((resolve) => {
      this.output.write("", () => resolve());
    });
  }

  /** The next message, or null at the end of stdin. */
  async read(): Promise<Message | null> {
    const message = await this.readBy(undefined);
    if (message === TIMED_OUT) throw new Error("unreachable: a read with no deadline");
    return message;
  }

  /** The next message, null at the end of stdin, or TIMED_OUT once `deadline` passes. */
  async readBy(deadline: number | undefined): Promise<Message | null | typeof TIMED_OUT> {
    for (;;) {
      const raw = await this.lines.next(deadline);
      if (raw === TIMED_OUT) return TIMED_OUT;
      if (raw === null) return null;
      this.line += 1;
      if ("oversize" in raw) {
        throw new ProtocolError(`line longer than the ${MAX_LINE}-byte limit`, this.line);
      }
      if (raw.bytes.toString("latin1").trim() === "") continue;
      const message = decode(raw.bytes, this.line);
      if (message.type === "user") {
        if (message.seq <= this.lastSeq) {
          throw new ProtocolError(`user: seq ${message.seq} after seq ${this.lastSeq} (seqs increase)`, this.line);
        }
        this.lastSeq = message.seq;
      }
      return message;
    }
  }

  /** Whether the runtime takes `m` as an interruption of its conversation's running turn. */
  runtimeInterrupts(m: UserMessage): boolean {
    return this.runtime.interrupts?.(m.conversation, m.text) ?? false;
  }

  nextCallId(): string {
    this.calls += 1;
    return `c${this.calls}`;
  }

  takeResult(message: ToolResultMessage): void {
    if (this.waiting.has(message.call)) {
      if (this.waiting.get(message.call) !== null) {
        throw new ProtocolError(`tool_result: a second result for call ${JSON.stringify(message.call)}`, this.line);
      }
      this.waiting.set(message.call, message);
    } else if (!this.issued.has(message.call)) {
      throw new ProtocolError(
        `tool_result for call ${JSON.stringify(message.call)}, which this runtime never made`,
        this.line,
      );
    }
    // Otherwise: a late result of a call the runtime gave up (a cancel); ignored.
  }

  /**
   * Reads one line during a turn and files it: a result where it is awaited, a user message in
   * the queue or, when it interrupts a waiting conversation, with that conversation's
   * interruptions. Overlapping waits share one read.
   */
  pump(deadline?: number): Promise<void> {
    this.reading ??= this.pumpOnce(deadline).finally(() => {
      this.reading = null;
    });
    return this.reading;
  }

  /** Reads and files one line; gives up, reading nothing, once `deadline` passes. */
  private async pumpOnce(deadline?: number): Promise<void> {
    if (this.fatal !== null) throw this.fatal;
    if (this.shutdown) throw new ShutdownRequested();
    let message: Message | null | typeof TIMED_OUT;
    try {
      message = await this.readBy(deadline);
    } catch (e) {
      if (e instanceof ProtocolError) this.fatal = e;
      throw e;
    }
    if (message === TIMED_OUT) return;
    if (message === null || message.type === "shutdown") {
      this.shutdown = true;
      throw new ShutdownRequested();
    }
    switch (message.type) {
      case "tool_result":
        try {
          this.takeResult(message);
        } catch (e) {
          if (e instanceof ProtocolError) this.fatal = e;
          throw e;
        }
        return;
      case "user": {
        const conv = message.conversation;
        if (this.waiters.has(conv) && !this.interruptions.has(conv) && this.runtimeInterrupts(message)) {
          this.interruptions.set(conv, message);
        } else {
          this.queue.push(message);
        }
        return;
      }
      default:
        this.fatal = new ProtocolError(`${message.type} while a turn runs (it waits for tool results)`, this.line);
        throw this.fatal;
    }
  }
}

/** What `onUser` uses to talk to agentsim during one turn. */
export class IO {
  /** @internal */
  constructor(
    private readonly ch: Channel,
    /** The run's `hello`: its agents, tools and settings. */
    readonly hello: Hello,
    /** The conversation of the message being handled (null in `onReady` and `onResume`). */
    readonly conversation: string | null,
    /** The seq of the message being handled. */
    readonly seq: number,
  ) {}

  private conv(conversation: string | undefined): string {
    const c = conversation ?? this.conversation;
    if (c === null) {
      throw new TypeError("no conversation: pass { conversation } (onReady and onResume handle every conversation)");
    }
    return c;
  }

  /** Text for the user. */
  send(text: string, options: ConversationOption = {}): void {
    this.ch.write({ type: "send", conversation: this.conv(options.conversation), text });
  }

  /** Runs one of the scenario's tools and resolves with its result. */
  async tool(name: string, input: unknown, options: ToolOptions & { readonly call?: string } = {}): Promise<ToolResult> {
    const call: ToolCall = options.call === undefined ? { name, input } : { name, input, call: options.call };
    const [result] = await this.tools([call], options);
    if (result === undefined) throw new Error("unreachable: one call, one result");
    return result;
  }

  /**
   * The real milliseconds a call of tool `name` may take: its `timeout_ms` in the scenario times
   * the run's `time_scale`, or undefined when it has no timeout (or there is no such tool).
   */
  toolTimeoutMs(name: string): number | undefined {
    const tool = this.hello.tools.find((t) => t.name === name);
    if (tool?.timeoutMs == null) return undefined;
    return tool.timeoutMs * this.hello.timeScale;
  }

  /**
   * Runs several tools at once (capability `parallel-tools`); results in the calls' order. A
   * call with `timeoutMs` ({@link toolTimeoutMs} gives a tool's) that has no result when its time
   * is up comes back with `timedOut` set, and its late result is ignored (capability
   * `tool-timeouts`).
   */
  async tools(calls: readonly ToolCall[], options: ToolOptions = {}): Promise<ToolResult[]> {
    const ch = this.ch;
    const conv = this.conv(options.conversation);
    const agent = options.agent ?? this.hello.main.name;
    const ids: string[] = [];
    const started = performance.now();
    const deadlines = new Map<string, number>();
    const timedOut = new Set<string>();
    for (const c of calls) {
      const call = c.call ?? ch.nextCallId();
      if (ch.issued.has(call)) throw new Error(`tool call id ${JSON.stringify(call)} was already used by this process`);
      ch.issued.add(call);
      ch.waiting.set(call, null);
      ids.push(call);
      if (c.timeoutMs !== undefined) deadlines.set(call, started + Math.max(0, c.timeoutMs));
      ch.write({ type: "tool_call", call, conversation: conv, agent, name: c.name, input: c.input ?? null });
    }
    ch.waiters.set(conv, (ch.waiters.get(conv) ?? 0) + 1);
    try {
      for (;;) {
        const interruption = ch.interruptions.get(conv);
        if (interruption !== undefined) {
          ch.interruptions.delete(conv);
          throw new Interrupted(interruption);
        }
        const now = performance.now();
        for (const id of ids) {
          const d = deadlines.get(id);
          if (ch.waiting.get(id) == null && d !== undefined && d <= now) timedOut.add(id);
        }
        const pending = ids.filter((id) => ch.waiting.get(id) == null && !timedOut.has(id));
        if (pending.length === 0) break;
        const bounds = pending.flatMap((id) => deadlines.get(id) ?? []);
        // A read that ends at the nearest deadline (nothing is read then): the loop looks again.
        await ch.pump(bounds.length > 0 ? Math.min(...bounds) : undefined);
      }
      return ids.map((id) => {
        const r = ch.waiting.get(id);
        if (r == null || timedOut.has(id)) {
          return { call: id, content: "", isError: true, failed: false, timedOut: true };
        }
        return { call: r.call, content: r.content, isError: r.isError, failed: r.failed };
      });
    } finally {
      // Whatever happened (an interruption, a shutdown), these calls are no longer waited for:
      // a late result is ignored.
      for (const id of ids) ch.waiting.delete(id);
      const left = (ch.waiters.get(conv) ?? 1) - 1;
      if (left === 0) ch.waiters.delete(conv);
      else ch.waiters.set(conv, left);
    }
  }

  /**
   * Reads nothing; throws {@link Interrupted} if a queued message of this conversation
   * interrupts it. Messages reach the queue only while the runtime waits in {@link tool}; call
   * this between long steps if you want to notice them there too.
   */
  check(): void {
    const conv = this.conversation;
    const i = this.ch.queue.findIndex((m) => m.conversation === conv && this.ch.runtimeInterrupts(m));
    if (i >= 0) {
      const [m] = this.ch.queue.splice(i, 1);
      if (m !== undefined) throw new Interrupted(m);
    }
  }

  /** The conversation's stack now, bottom first (capability `stack`); `ended`: frames popped since. */
  stack(frames: readonly FrameReport[], options: ConversationOption & { readonly ended?: readonly EndedFrame[] } = {}): void {
    const message: { type: string; [key: string]: unknown } = {
      type: "stack",
      conversation: this.conv(options.conversation),
      frames,
    };
    if (options.ended !== undefined && options.ended.length > 0) message["ended"] = options.ended;
    this.ch.write(message);
  }

  /**
   * The headers for a model request of this turn's conversation (and of `agent`):
   * `{"x-agentsim-conversation": ..., "x-agentsim-agent": ...}`. Pass them as the SDK's request
   * headers and offer the capability `conversation-header`, so that agentsim reads each
   * conversation's stack from your requests in a scenario of several.
   */
  modelHeaders(options: ConversationOption & { readonly agent?: string } = {}): Record<string, string> {
    return modelHeaders(this.conv(options.conversation), options.agent);
  }

  /**
   * The conversation's token usage so far, summed over every model reply (capability `usage`).
   * Send it after each model reply; agentsim judges `usage` expectations against the last one.
   */
  usage(inputTokens: number, outputTokens: number, options: ConversationOption = {}): void {
    this.event("usage", { input_tokens: inputTokens, output_tokens: outputTokens }, options);
  }

  /** An `event` line: `io.event("tool_result", { frame, tool_use_id, content, is_error })`. */
  event(kind: string, fields: Readonly<Record<string, unknown>> = {}, options: ConversationOption = {}): void {
    const message: { type: string; [key: string]: unknown } = { type: "event", conversation: this.conv(options.conversation), kind };
    // The fields follow; they cannot replace the three the protocol fixes.
    for (const [key, value] of Object.entries(fields)) if (!(key in message)) message[key] = value;
    this.ch.write(message);
  }
}

/** Options of {@link run}. */
export interface RunOptions {
  /** With a plain `onUser`: the capabilities to offer in `ready`. */
  readonly capabilities?: readonly Capability[];
  /** With a plain `onUser`: the runtime's name and version. */
  readonly name?: string;
  /** With a plain `onUser` that offers `reset`: forgets the function's state. */
  readonly onReset?: () => Awaitable<void>;
  /** Where agentsim's lines come from; default `process.stdin`. */
  readonly input?: Readable;
  /** Where the runtime's lines go; default `process.stdout`. */
  readonly output?: Writable;
  /** Exit the process with the status when the run is over (default true). */
  readonly exit?: boolean;
}

/**
 * Speaks the protocol on stdin/stdout until `shutdown`; resolves with (or exits with) the status.
 *
 * `handler` is a {@link Runtime}, or a function `onUser(conversation, text, io)` (then
 * `options.capabilities` and `options.name` go into `ready`). Status 0 after `shutdown` or the end
 * of stdin; 2 after a protocol error (reported first as an `error` line) or an error thrown by the
 * runtime (its stack on stderr). With `exit: true` (the default) the process exits with it.
 */
export async function run(handler: Runtime | OnUser, options: RunOptions = {}): Promise<number> {
  let runtime: Runtime;
  if (typeof handler === "function") {
    runtime = { onUser: handler };
    if (options.capabilities !== undefined) runtime = { ...runtime, capabilities: options.capabilities };
    if (options.name !== undefined) runtime = { ...runtime, name: options.name };
    if (options.onReset !== undefined) runtime = { ...runtime, onReset: options.onReset };
  } else if (typeof handler === "object" && handler !== null && typeof handler.onUser === "function") {
    runtime = handler;
  } else {
    throw new TypeError("run() takes a Runtime or a function onUser(conversation, text, io)");
  }
  const caps = capabilities(runtime);
  const input = options.input ?? process.stdin;
  const output = options.output ?? process.stdout;
  const ch = new Channel(input, output, runtime);
  const status = await serve(runtime, caps, ch);
  await ch.flush();
  if (options.exit ?? true) process.exit(status);
  if (input === process.stdin) input.pause();
  return status;
}

function capabilities(runtime: Runtime): Capability[] {
  const caps = [...(runtime.capabilities ?? [])];
  const known: readonly string[] = CAPABILITIES;
  const unknown = caps.filter((c) => !known.includes(c));
  if (unknown.length > 0) {
    throw new TypeError(`unknown capabilities ${JSON.stringify(unknown)}; protocol ${PROTOCOL} has ${CAPABILITIES.join(", ")}`);
  }
  if (caps.includes("reset") && typeof runtime.onReset !== "function") {
    throw new TypeError(
      "the runtime offers `reset` but cannot forget its state: give it onReset (options.onReset with a function), or run it with runFresh(factory), which makes a new runtime for every run",
    );
  }
  return caps;
}

/**
 * As {@link run}, with a new runtime from `factory()` for every run: one at the start and one at
 * every `reset`, which it offers (agentsim's `explore` then runs many runs in one process).
 * Nothing of a run's runtime survives into the next but what its module keeps.
 */
export async function runFresh(factory: () => Runtime, options: Omit<RunOptions, "capabilities" | "name" | "onReset"> = {}): Promise<number> {
  const make = (): Runtime => {
    const made = factory();
    if (typeof made !== "object" || made === null || typeof made.onUser !== "function") {
      throw new TypeError("runFresh(): the factory did not return a Runtime (an object with onUser)");
    }
    return made;
  };
  let current = make();
  const caps = [...(current.capabilities ?? [])];
  if (!caps.includes("reset")) caps.push("reset");
  const fresh: Runtime = {
    capabilities: caps,
    ...(current.name !== undefined ? { name: current.name } : {}),
    onHello: (hello) => current.onHello?.(hello),
    onUser: (conversation, text, io) => current.onUser(conversation, text, io),
    interrupts: (conversation, text) => current.interrupts?.(conversation, text) ?? false,
    onReady: (io) => current.onReady?.(io),
    onResume: (seq, io) => current.onResume?.(seq, io),
    onReset: async () => {
      await current.onReset?.();
      current = make();
    },
    onShutdown: () => current.onShutdown?.(),
  };
  return run(fresh, options);
}

async function serve(runtime: Runtime, caps: Capability[], ch: Channel): Promise<number> {
  try {
    let hello = await handshake(runtime, caps, ch);
    if (hello === null) return 0;
    for (;;) {
      const message = ch.queue.shift() ?? (await ch.read());
      if (message === null || message.type === "shutdown") {
        await hook("onShutdown", () => runtime.onShutdown?.());
        return 0;
      }
      switch (message.type) {
        case "user":
          await turn(runtime, ch, hello, message);
          if (ch.fatal !== null) throw ch.fatal;
          if (ch.shutdown) {
            await hook("onShutdown", () => runtime.onShutdown?.());
            return 0;
          }
          if (ch.queue.length === 0) ch.write({ type: "idle", seq: ch.lastSeq });
          break;
        case "tool_result":
          ch.takeResult(message);
          break;
        case "reset":
          if (!caps.includes("reset")) {
            throw new ProtocolError("reset, but this runtime did not offer the `reset` capability", ch.line);
          }
          await hook("onReset", () => runtime.onReset?.());
          // A new run: its call ids, seqs and waits start afresh.
          ch.issued.clear();
          ch.waiting.clear();
          ch.queue.length = 0;
          ch.interruptions.clear();
          ch.calls = 0;
          ch.lastSeq = 0;
          hello = await handshake(runtime, caps, ch);
          if (hello === null) return 0;
          break;
        case "hello":
          throw new ProtocolError("a second hello without a reset", ch.line);
      }
    }
  } catch (e) {
    if (e instanceof ProtocolError) {
      report(ch, e.message, e.line);
      return EXIT_PROTOCOL_ERROR;
    }
    if (e instanceof RuntimeFailed) {
      report(ch, e.message, null);
      return EXIT_PROTOCOL_ERROR;
    }
    throw e;
  }
}

function report(ch: Channel, message: string, line: number | null): void {
  const error: { type: string; message: string; line?: number } = { type: "error", message };
  if (line !== null) error.line = line;
  process.stderr.write(`agentsim-runtime: ${message}\n`);
  try {
    ch.write(error);
  } catch {
    // The output is gone: the exit status says it all.
  }
}

async function handshake(runtime: Runtime, caps: Capability[], ch: Channel): Promise<Hello | null> {
  const message = await ch.read();
  if (message === null || message.type === "shutdown") return null;
  if (!(message instanceof Hello)) throw new ProtocolError(`expected hello first, got ${message.type}`, ch.line);
  await hook("onHello", () => runtime.onHello?.(message));
  const ready: { type: string; protocol: number; capabilities: Capability[]; name?: string } = {
    type: "ready",
    protocol: PROTOCOL,
    capabilities: caps,
  };
  if (runtime.name !== undefined && runtime.name !== "") ready.name = runtime.name;
  ch.write(ready);
  try {
    await hook("onReady", () => runtime.onReady?.(new IO(ch, message, null, ch.lastSeq)));
    if (ch.fatal !== null) throw ch.fatal;
    if (message.awaitingIdle !== null) {
      const seq = message.awaitingIdle;
      ch.lastSeq = Math.max(ch.lastSeq, seq);
      await hook("onResume", () => runtime.onResume?.(seq, new IO(ch, message, null, seq)));
      if (ch.fatal !== null) throw ch.fatal;
      if (ch.queue.length === 0) ch.write({ type: "idle", seq: ch.lastSeq });
    }
  } catch (e) {
    if (e instanceof ShutdownRequested) return null;
    throw e;
  }
  return message;
}

async function turn(runtime: Runtime, ch: Channel, hello: Hello, message: UserMessage): Promise<void> {
  const io = new IO(ch, hello, message.conversation, message.seq);
  try {
    await hook("onUser", () => runtime.onUser(message.conversation, message.text, io));
  } catch (e) {
    if (e instanceof Interrupted) {
      // Not handled by the runtime: the turn is aborted where it waited; the message that
      // interrupted it is handled next, as any other.
      ch.queue.unshift(e.user);
    } else if (e instanceof ShutdownRequested) {
      ch.shutdown = true;
    } else {
      throw e;
    }
  }
}

/** Calls a hook of the runtime; an error of the runtime becomes a reported failure. */
async function hook(name: string, call: () => Awaitable<void>): Promise<void> {
  try {
    await call();
  } catch (e) {
    if (e instanceof Interrupted || e instanceof ShutdownRequested || e instanceof ProtocolError) throw e;
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    const what = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    throw new RuntimeFailed(`the runtime's ${name} threw ${what}`);
  }
}
