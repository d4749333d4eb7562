/**
 * The messages of agentsim's runtime protocol, version 1, and their strict parsing.
 *
 * docs/runtime-protocol.md in the agentsim repository is the reference. Every line agentsim writes
 * is parsed here into a typed message; anything the protocol does not allow (not JSON, an unknown
 * `type`, a missing or mistyped field, an oversize line, invalid UTF-8) throws a
 * {@link ProtocolError} with the line's number, which the loop reports as an `error` line before
 * it exits with status 2. Unknown *fields* are ignored: a later revision of protocol 1 may add
 * optional ones.
 */

/** The protocol version this module speaks. */
export const PROTOCOL = 1;

/** The longest line either side may write, in bytes, not counting the newline. */
export const MAX_LINE = 1 << 20;

/** The message types agentsim sends. */
export const AGENTSIM_TYPES = ["hello", "user", "tool_result", "reset", "shutdown"] as const;

/** The message types a runtime sends. */
export const RUNTIME_TYPES = ["ready", "send", "tool_call", "idle", "stack", "event", "error"] as const;

/** The capabilities protocol 1 defines (docs/runtime-protocol.md, section 6). */
export const CAPABILITIES = [
  "stack",
  "tool-results",
  "response",
  "cancel-words",
  "ask-user",
  "parallel-tools",
  "stream",
  "tool-timeouts",
  "passthrough",
  "batch",
  "restart",
  "reset",
  "conversation-header",
  "usage",
] as const;

/** The header that names the agent a model request is for (docs/runtime-protocol.md, section 7). */
export const AGENT_HEADER = "x-agentsim-agent";

/** The header that names the conversation a model request is for (capability `conversation-header`). */
export const CONVERSATION_HEADER = "x-agentsim-conversation";

/**
 * The headers that tell agentsim which conversation (and agent) a model request is for: give them
 * to your SDK, `client.messages.create(params, { headers: modelHeaders(conversation, agent) })`, or
 * once per conversation, `client.withOptions({ defaultHeaders: modelHeaders(conversation) })`.
 */
export function modelHeaders(conversation?: string, agent?: string): Record<string, string> {
  const headers: Record<string, string> = {};
  if (conversation !== undefined) headers[CONVERSATION_HEADER] = conversation;
  if (agent !== undefined) headers[AGENT_HEADER] = agent;
  return headers;
}

/** One capability a runtime may offer in `ready`. */
export type Capability = (typeof CAPABILITIES)[number];

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A JSON object. */
export type JsonObject = { [key: string]: Json };

/** A line that protocol 1 does not allow; `line` is the 1-based number of agentsim's line. */
export class ProtocolError extends Error {
  override readonly name = "ProtocolError";
  constructor(
    readonly detail: string,
    readonly line: number | null = null,
  ) {
    super(line === null ? detail : `line ${line}: ${detail}`);
  }
}

/** One agent of the scenario, as `hello` describes it. */
export interface AgentInfo {
  readonly name: string;
  readonly kind: "main" | "skill" | "agent";
  readonly frame: string;
  readonly system: string;
  readonly model: string;
  readonly maxIterations: number;
  readonly tools: readonly string[];
  readonly parallelTools: boolean;
  readonly stream: boolean;
  readonly passthrough: boolean;
  readonly batch: string | null;
  readonly description: string | null;
}

/** One external tool of the scenario. */
export interface ToolInfo {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: JsonObject;
  readonly timeoutMs: number | null;
}

/** The scenario's settings a runtime needs. */
export interface Settings {
  readonly cancelWords: readonly string[];
  readonly queryUser: "interactive" | "none";
  readonly maxDepth: number;
}

/** The first line of every process: the run and its scenario. */
export class Hello {
  readonly type = "hello";
  constructor(
    readonly protocol: number,
    readonly run: string,
    readonly seed: number,
    readonly stateDir: string,
    readonly restarts: number,
    readonly awaitingIdle: number | null,
    readonly timeScale: number,
    readonly agents: readonly AgentInfo[],
    readonly tools: readonly ToolInfo[],
    readonly settings: Settings,
  ) {}

  /** The agent named `name`; throws when the scenario has none. */
  agent(name: string): AgentInfo {
    const found = this.agents.find((a) => a.name === name);
    if (found === undefined) throw new Error(`no agent named ${JSON.stringify(name)} in hello`);
    return found;
  }

  /** The external tool named `name`, if the scenario has one. */
  tool(name: string): ToolInfo | undefined {
    return this.tools.find((t) => t.name === name);
  }

  /** The main agent. */
  get main(): AgentInfo {
    return this.agents.find((a) => a.kind === "main") ?? this.agent("main");
  }

  /** Whether `text` is a cancel word: the whole message, case and surrounding space ignored. */
  isCancelWord(text: string): boolean {
    const t = text.trim().toLowerCase();
    return this.settings.cancelWords.some((w) => w.toLowerCase() === t);
  }
}

/** A message from the user to a conversation. */
export interface UserMessage {
  readonly type: "user";
  readonly seq: number;
  readonly conversation: string;
  readonly text: string;
}

/** The outcome of a `tool_call`. */
export interface ToolResultMessage {
  readonly type: "tool_result";
  readonly call: string;
  readonly content: string;
  readonly isError: boolean;
  readonly failed: boolean;
}

/** Forget everything; a `hello` follows. */
export interface Reset {
  readonly type: "reset";
}

/** The run is over: exit with status 0. */
export interface Shutdown {
  readonly type: "shutdown";
}

/** Every message agentsim sends. */
export type Message = Hello | UserMessage | ToolResultMessage | Reset | Shutdown;

type Kind = "string" | "integer" | "boolean" | "number" | "array" | "object";

const KIND_NAMES: Record<Kind, string> = {
  string: "a string",
  integer: "an integer",
  boolean: "a boolean",
  number: "a number",
  array: "an array",
  object: "an object",
};

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function is(value: unknown, kind: Kind): boolean {
  switch (kind) {
    case "integer":
      return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "array":
      return Array.isArray(value);
    case "object":
      return isObject(value);
    default:
      return typeof value === kind;
  }
}

/** Typed access to one object's fields, each failure located at the line and the field. */
class Fields {
  constructor(
    readonly obj: JsonObject,
    readonly line: number,
    readonly where: string,
  ) {}

  private fail(name: string, expected: string): ProtocolError {
    if (!(name in this.obj)) {
      return new ProtocolError(`${this.where}: missing field \`${name}\` (${expected})`, this.line);
    }
    let value = JSON.stringify(this.obj[name]);
    if (value.length > 60) value = value.slice(0, 57) + "...";
    return new ProtocolError(`${this.where}: field \`${name}\` must be ${expected}, not ${value}`, this.line);
  }

  private get(name: string, kind: Kind, nullable: boolean): unknown {
    if (!Object.hasOwn(this.obj, name)) throw this.fail(name, KIND_NAMES[kind]);
    const value = this.obj[name];
    if (value === null && nullable) return null;
    if (!is(value, kind)) throw this.fail(name, KIND_NAMES[kind] + (nullable ? " or null" : ""));
    return value;
  }

  string(name: string): string {
    return this.get(name, "string", false) as string;
  }
  nullableString(name: string): string | null {
    return this.get(name, "string", true) as string | null;
  }
  integer(name: string): number {
    return this.get(name, "integer", false) as number;
  }
  nullableInteger(name: string): number | null {
    return this.get(name, "integer", true) as number | null;
  }
  number(name: string): number {
    return this.get(name, "number", false) as number;
  }
  boolean(name: string): boolean {
    return this.get(name, "boolean", false) as boolean;
  }
  optionalBoolean(name: string, fallback: boolean): boolean {
    return Object.hasOwn(this.obj, name) ? this.boolean(name) : fallback;
  }
  object(name: string): JsonObject {
    return this.get(name, "object", false) as JsonObject;
  }
  strings(name: string): string[] {
    const values = this.get(name, "array", false) as Json[];
    if (!values.every((v) => typeof v === "string")) throw this.fail(name, "an array of strings");
    return values as string[];
  }
  objects(name: string): JsonObject[] {
    const values = this.get(name, "array", false) as Json[];
    if (!values.every(isObject)) throw this.fail(name, "an array of objects");
    return values as JsonObject[];
  }
}

function agentInfo(obj: JsonObject, line: number, i: number): AgentInfo {
  const f = new Fields(obj, line, `hello: agents[${i}]`);
  const kind = f.string("kind");
  if (kind !== "main" && kind !== "skill" && kind !== "agent") {
    throw new ProtocolError(
      `hello: agents[${i}]: \`kind\` must be main, skill or agent, not ${JSON.stringify(kind)}`,
      line,
    );
  }
  return {
    name: f.string("name"),
    kind,
    frame: f.string("frame"),
    system: f.string("system"),
    model: f.string("model"),
    maxIterations: f.integer("max_iterations"),
    tools: f.strings("tools"),
    parallelTools: f.boolean("parallel_tools"),
    stream: f.boolean("stream"),
    passthrough: f.boolean("passthrough"),
    batch: f.nullableString("batch"),
    description: f.nullableString("description"),
  };
}

function toolInfo(obj: JsonObject, line: number, i: number): ToolInfo {
  const f = new Fields(obj, line, `hello: tools[${i}]`);
  return {
    name: f.string("name"),
    description: f.string("description"),
    inputSchema: f.object("input_schema"),
    timeoutMs: f.nullableInteger("timeout_ms"),
  };
}

function hello(f: Fields): Hello {
  const protocol = f.integer("protocol");
  if (protocol !== PROTOCOL) {
    throw new ProtocolError(
      `hello: protocol ${protocol} is not spoken here (this runtime speaks protocol ${PROTOCOL})`,
      f.line,
    );
  }
  const settings = new Fields(f.object("settings"), f.line, "hello: settings");
  const queryUser = settings.string("query_user");
  if (queryUser !== "interactive" && queryUser !== "none") {
    throw new ProtocolError(
      `hello: settings: \`query_user\` must be interactive or none, not ${JSON.stringify(queryUser)}`,
      f.line,
    );
  }
  const agents = f.objects("agents").map((a, i) => agentInfo(a, f.line, i));
  if (!agents.some((a) => a.kind === "main")) {
    throw new ProtocolError("hello: `agents` has no agent of kind main", f.line);
  }
  return new Hello(
    protocol,
    f.string("run"),
    f.integer("seed"),
    f.string("state_dir"),
    f.integer("restarts"),
    f.nullableInteger("awaiting_idle"),
    f.number("time_scale"),
    agents,
    f.objects("tools").map((t, i) => toolInfo(t, f.line, i)),
    {
      cancelWords: settings.strings("cancel_words"),
      queryUser,
      maxDepth: settings.integer("max_depth"),
    },
  );
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** Where the first invalid UTF-8 sequence of `raw` starts (the decoder judges each sequence). */
function invalidUtf8Offset(raw: Uint8Array): number {
  let i = 0;
  while (i < raw.length) {
    const lead = raw[i] ?? 0;
    const length = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    try {
      UTF8.decode(raw.subarray(i, i + length));
    } catch {
      return i;
    }
    i += length;
  }
  return raw.length;
}

function clip(text: string, limit = 120): string {
  return JSON.stringify(text.length <= limit ? text : text.slice(0, limit - 3) + "...");
}

/** Parses agentsim's line number `line` (without its newline). */
export function decode(raw: Uint8Array, line: number): Message {
  if (raw.length > MAX_LINE) {
    throw new ProtocolError(`line of ${raw.length} bytes, over the ${MAX_LINE}-byte limit`, line);
  }
  let text: string;
  try {
    text = UTF8.decode(raw);
  } catch {
    throw new ProtocolError(`not UTF-8 (invalid byte at offset ${invalidUtf8Offset(raw)})`, line);
  }
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new ProtocolError(`malformed JSON (${why}): ${clip(text)}`, line);
  }
  if (!isObject(obj)) throw new ProtocolError(`a message must be a JSON object: ${clip(text)}`, line);
  const kind = obj["type"];
  if (typeof kind !== "string") {
    throw new ProtocolError(`a message needs a string field \`type\`: ${clip(text)}`, line);
  }
  const f = new Fields(obj, line, kind);
  switch (kind) {
    case "hello":
      return hello(f);
    case "user": {
      const seq = f.integer("seq");
      if (seq < 1) throw new ProtocolError("user: `seq` starts at 1", line);
      return { type: "user", seq, conversation: f.string("conversation"), text: f.string("text") };
    }
    case "tool_result":
      return {
        type: "tool_result",
        call: f.string("call"),
        content: f.string("content"),
        isError: f.boolean("is_error"),
        failed: f.optionalBoolean("failed", false),
      };
    case "reset":
      return { type: "reset" };
    case "shutdown":
      return { type: "shutdown" };
    default:
      throw new ProtocolError(
        `unknown message type ${JSON.stringify(kind)} (agentsim sends ${AGENTSIM_TYPES.join(", ")})`,
        line,
      );
  }
}

/**
 * One line for `message`: compact JSON, UTF-8, newline-terminated. Throws for a message over
 * {@link MAX_LINE} bytes, which agentsim would reject.
 */
export function encode(message: { readonly type: string; readonly [key: string]: unknown }): Buffer {
  const data = Buffer.from(JSON.stringify(message), "utf-8");
  if (data.length > MAX_LINE) {
    throw new RangeError(
      `a ${JSON.stringify(message.type)} line of ${data.length} bytes is over the protocol's ${MAX_LINE}-byte limit`,
    );
  }
  return Buffer.concat([data, Buffer.from("\n")]);
}
