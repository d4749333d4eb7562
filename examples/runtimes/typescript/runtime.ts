// A reference agent runtime, written the way a user writes one: seeds 000 (an interactive stack of
// subagents: use_skill, use_agent, complete, cascades) and 002 (the model → tools → model loop with
// an iteration limit) on the official `@anthropic-ai/sdk`, tested by agentsim through its runtime
// protocol (the `agentsim-runtime` helper module does the protocol).
//
//     AGENTSIM_PLANTED_BUG=<name> node dist/runtime.js     # agentsim starts it; see README.md
//
// Its conversations live in `state.json` in AGENTSIM_STATE_DIR, so a restart continues them.

import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { join } from "node:path";

import Anthropic from "@anthropic-ai/sdk";
import { type EndedFrame, type Hello, Interrupted, type IO, modelHeaders, run, type Runtime } from "agentsim-runtime";

// The texts agentsim's reference runtime uses (its src/model/messages.rs), so that the same
// scenarios pass against both.
const CHILD_MAX_ITERATIONS = "Agent reached maximum iterations.";
const SKIPPED_AFTER_COMPLETE = "Skipped: agent completed.";
const SKIPPED_AFTER_LIMIT = "Skipped: agent reached maximum iterations.";
const CANCELLED_BY_USER = "Cancelled by user.";
const USER_MAX_STEPS = "Agent reached maximum steps.";
const USER_CANCELLED = "Cancelled.";
const SKILL_CANNOT_USE_SKILL = "Skills cannot call use_skill";
const NO_ANSWER = "No answer from the user.";
// Seed 004's display-only sentinel: shown to a user, never meant for a model.
const INTERRUPTED = "Interrupted. Tell Ally what to do instead.";

/** The result of a call abandoned at its tool's timeout (scripted milliseconds). */
function timedOut(name: string, timeoutMs: number | null | undefined): string {
  return `Tool '${name}' timed out after ${(timeoutMs ?? 0) / 1000}s`;
}

const PLANTED_BUGS = [
  "interruption-leak",
  "empty-reply-replayed",
  "unanswered-tool-use-after-cancel",
  "child-error-as-success",
  "iteration-reset-on-resume",
];
const BUG = process.env["AGENTSIM_PLANTED_BUG"] ?? "";
if (BUG !== "" && !PLANTED_BUGS.includes(BUG)) {
  process.stderr.write(`AGENTSIM_PLANTED_BUG=${BUG}: not one of ${PLANTED_BUGS.join(", ")}\n`);
  process.exit(1);
}

type Builtin = "use_skill" | "use_agent" | "complete" | "ask_user";

const BUILTIN_TOOLS: Record<Builtin, Omit<Anthropic.Tool, "name">> = {
  use_skill: {
    description: "Hand the conversation to a skill until it completes.",
    input_schema: {
      type: "object",
      properties: { skill: { type: "string" }, message: { type: "string" } },
      required: ["skill", "message"],
    },
  },
  use_agent: {
    description: "Hand the conversation to an agent until it completes.",
    input_schema: {
      type: "object",
      properties: { agent: { type: "string" }, message: { type: "string" } },
      required: ["agent", "message"],
    },
  },
  complete: {
    description: "Signal that your task is complete and return a result.",
    input_schema: { type: "object", properties: { result: { type: "string" } } },
  },
  ask_user: {
    description: "Ask the user a question and wait for the answer.",
    input_schema: {
      type: "object",
      properties: { question: { type: "string" }, options: { type: "array" } },
      required: ["question"],
    },
  },
};

// Sessions are Anthropic messages with these blocks, kept valid: every tool_use answered before
// the next request.
type Block = Anthropic.TextBlockParam | Anthropic.ToolUseBlockParam | Anthropic.ToolResultBlockParam;
interface Message {
  role: "user" | "assistant";
  content: Block[];
}

/** One agent on a conversation's stack (seed 000's StackFrame). */
interface Frame {
  agent: string; // the agent's name: "main", "research"
  name: string; // its frame name: "main", "skill:research"
  kind: "main" | "skill" | "agent";
  messages: Message[];
  maxIterations: number;
  iteration: number;
  parentToolUseId: string | null;
  asking: string | null; // the ask_user tool use it waits on
  waiting: boolean; // waits for the user (between turns)
  turnStart: number; // main: where its turn begins in the conversation's messages
}

interface Conversation {
  key: string;
  mainMessages: Message[]; // kept across turns
  stack: Frame[];
  ended: EndedFrame[]; // popped since the last report
}

/** How a frame's turn ended (seed 000's TurnResult). */
type Turn =
  | { action: "send" | "ask" | "complete" | "max_iterations" | "error"; text: string }
  | { action: "child"; child: Frame };

/** What a frame's turn starts from: the user's message, or a result for one of its tool uses. */
type Given = { kind: "user"; text: string } | { kind: "result"; toolUseId: string; content: string; isError: boolean } | null;

// --- sessions ------------------------------------------------------------------------------------

function addUserText(messages: Message[], text: string): void {
  const last = messages.at(-1);
  if (last?.role === "user") last.content.push({ type: "text", text });
  else messages.push({ role: "user", content: [{ type: "text", text }] });
}

function toolUses(message: Message): Anthropic.ToolUseBlockParam[] {
  return message.content.filter((b): b is Anthropic.ToolUseBlockParam => b.type === "tool_use");
}

/** The last assistant message's tool uses that have no result yet (seed 000). */
function unresolved(messages: Message[]): Anthropic.ToolUseBlockParam[] {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role !== "assistant") continue;
    const answered = new Set(
      messages.slice(i + 1).flatMap((m) => m.content.flatMap((b) => (b.type === "tool_result" ? [b.tool_use_id] : []))),
    );
    return toolUses(message).filter((u) => !answered.has(u.id));
  }
  return [];
}

function textOf(message: Message): string {
  return message.content.map((b) => (b.type === "text" ? b.text : "")).join("");
}

function asRecord(value: unknown): Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** JSON with sorted keys and no spaces, non-ASCII escaped (as the Python reference writes it). */
function canonicalJson(value: unknown): string {
  const sort = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(sort)
      : typeof v === "object" && v !== null
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort((v as Record<string, unknown>)[k])]))
        : v;
  return JSON.stringify(sort(value)).replace(/[\u0080-\uffff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function questionText(data: Record<string, unknown>): string {
  let text = typeof data["question"] === "string" ? data["question"] : "";
  const options = Array.isArray(data["options"]) ? data["options"] : [];
  for (const option of options) text += "\n- " + (typeof option === "string" ? option : JSON.stringify(option));
  return text;
}

class StackRuntime implements Runtime {
  readonly capabilities = [
    "stack",
    "tool-results",
    "response",
    "cancel-words",
    "ask-user",
    "parallel-tools",
    "restart",
    "conversation-header",
    "reset",
    "tool-timeouts",
  ] as const;
  readonly name = "agentsim reference runtime (typescript) 1" + (BUG === "" ? "" : `, planted bug ${BUG}`);
  private hello!: Hello;
  private client: Anthropic | undefined;
  private path = "";
  private conversations = new Map<string, Conversation>();

  onHello(hello: Hello): void {
    this.hello = hello;
    // No retries: each scripted model error is one failed call that the stack cascades. One
    // client for the process: after a `reset` the mock server is at the same address.
    this.client ??= new Anthropic({ maxRetries: 0, timeout: 30_000 });
    this.path = join(hello.stateDir, "state.json");
    this.conversations = new Map();
    if (existsSync(this.path)) {
      const saved = JSON.parse(readFileSync(this.path, "utf-8")) as Record<string, { mainMessages: Message[]; stack: Frame[] }>;
      for (const [key, c] of Object.entries(saved)) {
        this.conversations.set(key, { key, mainMessages: c.mainMessages, stack: c.stack, ended: [] });
      }
    }
  }

  /** A new run in this process (capability `reset`): forget every conversation. */
  onReset(): void {
    this.conversations = new Map();
  }

  /** Writes every conversation atomically: a crash leaves the old file or the new one. */
  private save(): void {
    const data: Record<string, { mainMessages: Message[]; stack: Frame[] }> = {};
    for (const [key, c] of this.conversations) data[key] = { mainMessages: c.mainMessages, stack: c.stack };
    const tmp = join(this.hello.stateDir, `.state-${process.pid}.tmp`);
    const fd = openSync(tmp, "w");
    try {
      writeSync(fd, JSON.stringify(data));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.path);
  }

  interrupts(conversation: string, text: string): boolean {
    const c = this.conversations.get(conversation);
    return c !== undefined && c.stack.length > 0 && this.hello.isCancelWord(text);
  }

  // --- the provider's side of seed 000: routing and the orchestration loop ----------------------

  async onUser(conversation: string, text: string, io: IO): Promise<void> {
    let c = this.conversations.get(conversation);
    if (c === undefined) {
      c = { key: conversation, mainMessages: [], stack: [], ended: [] };
      this.conversations.set(conversation, c);
    }
    if (c.stack.length > 0 && this.hello.isCancelWord(text)) {
      this.unwind(c, io);
    } else {
      if (c.stack.length === 0) {
        const main = this.hello.main;
        c.stack.push(this.frame(main.name, "main", c.mainMessages, null, c.mainMessages.length));
        this.report(c, io);
      }
      await this.orchestrate(c, io, { kind: "user", text });
    }
    this.report(c, io);
    this.save();
  }

  onReady(io: IO): void {
    for (const c of this.conversations.values()) {
      if (c.stack.length > 0) this.report(c, io); // after a restart: the stacks restored
    }
  }

  /**
   * After a restart in the middle of a turn: every conversation whose top frame was running goes
   * on from what was persisted (a model call whose reply was not stored is made again; tool uses
   * without results are run again).
   */
  async onResume(_seq: number, io: IO): Promise<void> {
    for (const c of this.conversations.values()) {
      if (c.stack.length > 0 && !c.stack.at(-1)?.waiting) {
        await this.orchestrate(c, io, null);
        this.report(c, io);
      }
    }
    this.save();
  }

  private frame(agentName: string, kind: Frame["kind"], messages: Message[], parentToolUseId: string | null, turnStart = 0): Frame {
    const agent = this.hello.agent(agentName);
    return {
      agent: agent.name,
      name: agent.frame,
      kind,
      messages,
      maxIterations: agent.maxIterations,
      iteration: 0,
      parentToolUseId,
      asking: null,
      waiting: false,
      turnStart,
    };
  }

  private async orchestrate(c: Conversation, io: IO, given: Given): Promise<void> {
    for (;;) {
      const top = c.stack.at(-1);
      if (top === undefined) return;
      top.waiting = false;
      let turn: Turn;
      try {
        turn = await this.executeTurn(c, top, given, io);
      } catch (e) {
        // Without the planted bug, onUser gets the cancel word next and unwinds the whole stack.
        if (!(e instanceof Interrupted) || BUG !== "interruption-leak" || top.kind === "main") throw e;
        // Planted: seed 004. The interrupted child's display text is its "answer", and the parent
        // takes it as the child's result and carries on.
        io.send(INTERRUPTED, { conversation: c.key });
        this.pop(c, "cancelled");
        this.report(c, io);
        given = { kind: "result", toolUseId: top.parentToolUseId ?? "", content: INTERRUPTED, isError: false };
        continue;
      }
      this.save();
      if (turn.action === "child") {
        c.stack.push(turn.child);
        this.report(c, io);
        this.save();
        given = null;
      } else if (turn.action === "send" || turn.action === "ask") {
        if (turn.text !== "" || turn.action === "ask") io.send(turn.text, { conversation: c.key });
        if (top.kind === "main" && turn.action === "send") this.finishMain(c, "answered", turn.text, io);
        else top.waiting = true;
        return;
      } else if (turn.action === "complete") {
        this.pop(c, "completed");
        this.report(c, io);
        given = { kind: "result", toolUseId: top.parentToolUseId ?? "", content: turn.text, isError: false };
      } else if (top.kind === "main") {
        // A limit or a model error at the bottom: the user is told, the turn ends.
        const notice = turn.action === "max_iterations" ? USER_MAX_STEPS : `LLM error: ${turn.text}`;
        io.send(notice, { conversation: c.key });
        this.finishMain(c, turn.action, notice, io);
        return;
      } else if (turn.action === "max_iterations") {
        this.pop(c, "max_iterations");
        this.report(c, io);
        given = { kind: "result", toolUseId: top.parentToolUseId ?? "", content: CHILD_MAX_ITERATIONS, isError: true };
      } else {
        this.pop(c, "error");
        this.report(c, io);
        // Planted: the parent hears a failure as a success.
        const isError = BUG !== "child-error-as-success";
        given = { kind: "result", toolUseId: top.parentToolUseId ?? "", content: `LLM error: ${turn.text}`, isError };
      }
    }
  }

  private pop(c: Conversation, reason: EndedFrame["reason"]): void {
    const frame = c.stack.pop();
    if (frame !== undefined) c.ended.push({ name: frame.name, iterations: frame.iteration, reason });
  }

  /** The main frame's turn ends: its response (capability `response`), then the stack clears. */
  private finishMain(c: Conversation, reason: EndedFrame["reason"], text: string, io: IO): void {
    const main = c.stack[0];
    if (main === undefined) return;
    c.mainMessages = main.messages;
    const calls = main.messages
      .slice(main.turnStart)
      .filter((m) => m.role === "assistant")
      .flatMap((m) => toolUses(m).map((u) => u.name));
    io.event("response", { frame: "main", text, iterations: main.iteration, tool_calls: calls }, { conversation: c.key });
    while (c.stack.length > 0) this.pop(c, reason);
  }

  /**
   * A cancel word: every pending tool use on the way down gets "Cancelled by user.", the stack is
   * cleared, and the user gets "Cancelled.".
   */
  private unwind(c: Conversation, io: IO): void {
    for (let top = c.stack.at(-1); top !== undefined; top = c.stack.at(-1)) {
      if (BUG !== "unanswered-tool-use-after-cancel") {
        // (Planted: the tool uses stay open.)
        for (const use of unresolved(top.messages)) this.addResult(c, top, use.id, CANCELLED_BY_USER, true, io);
      }
      if (top.kind === "main") c.mainMessages = top.messages;
      this.pop(c, "cancelled");
    }
    io.send(USER_CANCELLED, { conversation: c.key });
  }

  private report(c: Conversation, io: IO): void {
    const frames = c.stack.map((f) => ({ name: f.name, iterations: f.iteration }));
    io.stack(frames, { ended: c.ended, conversation: c.key });
    c.ended = [];
  }

  // --- one frame's turn: seed 000's execute_turn, which is seed 002's agent loop ----------------

  private async executeTurn(c: Conversation, frame: Frame, given: Given, io: IO): Promise<Turn> {
    let runToolsFirst = false;
    // A user's message is answered by the model; tool uses left open are the business of a frame
    // that resumes (after a child, an answer, a restart), and a cancel answers them all.
    let modelFirst = false;
    if (given === null) {
      // Resumed after a restart: a stored reply that has no tool uses was the answer; tool uses
      // without results are the rest of the pass the kill cut, so they run without a new iteration.
      const last = frame.messages.at(-1);
      if (last?.role === "assistant" && toolUses(last).length === 0) return { action: "send", text: textOf(last) };
      runToolsFirst = unresolved(frame.messages).length > 0;
    } else if (given.kind === "user") {
      if (frame.asking !== null) {
        // The answer to ask_user is that tool's result; the rest of the reply runs next.
        this.addResult(c, frame, frame.asking, given.text, false, io);
        frame.asking = null;
        runToolsFirst = true;
      } else {
        addUserText(frame.messages, given.text);
        modelFirst = true;
      }
      if (BUG === "iteration-reset-on-resume" && frame.kind !== "main") frame.iteration = 0; // planted
    } else {
      this.addResult(c, frame, given.toolUseId, given.content, given.isError, io);
      if (BUG === "iteration-reset-on-resume") frame.iteration = 0; // planted: a resumed frame counts again
    }
    for (;;) {
      if (!runToolsFirst) {
        if (frame.iteration >= frame.maxIterations) {
          for (const use of unresolved(frame.messages)) this.addResult(c, frame, use.id, SKIPPED_AFTER_LIMIT, true, io);
          return { action: "max_iterations", text: "" };
        }
        frame.iteration += 1;
        this.report(c, io);
        if (modelFirst || unresolved(frame.messages).length === 0) {
          modelFirst = false;
          const turn = await this.callModel(c, frame);
          if (turn !== null) return turn;
        }
      }
      runToolsFirst = false;
      for (let pending = unresolved(frame.messages)[0]; pending !== undefined; pending = unresolved(frame.messages)[0]) {
        const turn = await this.dispatch(c, frame, pending, io);
        if (turn !== null) return turn;
      }
    }
  }

  /** One model call. A Turn when the turn ends here; null when the reply's tool uses run next. */
  private async callModel(c: Conversation, frame: Frame): Promise<Turn | null> {
    const agent = this.hello.agent(frame.agent);
    let reply: Anthropic.Message;
    try {
      reply = await this.client!.messages.create(
        { model: agent.model, max_tokens: 1024, system: agent.system, messages: frame.messages, tools: this.toolsFor(frame) },
        { headers: modelHeaders(c.key, agent.name) },
      );
    } catch (e) {
      if (e instanceof Anthropic.APIConnectionError) return { action: "error", text: `network error: ${e.message}` };
      if (e instanceof Anthropic.APIError) return { action: "error", text: e.apiMessage ?? e.message };
      throw e;
    }
    const content: Block[] = [];
    for (const block of reply.content) {
      if (block.type === "text" && block.text !== "") content.push({ type: "text", text: block.text });
      else if (block.type === "tool_use") content.push({ type: "tool_use", id: block.id, name: block.name, input: block.input });
    }
    if (content.length === 0) {
      // An empty reply sends nothing, and is not stored: no API takes an empty assistant turn.
      if (BUG === "empty-reply-replayed") frame.messages.push({ role: "assistant", content: [] }); // planted
      return { action: "send", text: "" };
    }
    const seen = new Set(frame.messages.filter((m) => m.role === "assistant").flatMap((m) => toolUses(m).map((u) => u.id)));
    for (const block of content) {
      if (block.type !== "tool_use") continue;
      if (seen.has(block.id)) return { action: "error", text: `invalid reply: duplicate tool_use id '${block.id}'` };
      seen.add(block.id);
    }
    const message: Message = { role: "assistant", content };
    frame.messages.push(message);
    // Stored before its tools run: a restart from here runs them, and does not ask the model again.
    this.save();
    // Text beside tool uses is kept in the session, not sent.
    return toolUses(message).length === 0 ? { action: "send", text: textOf(message) } : null;
  }

  private toolsFor(frame: Frame): Anthropic.Tool[] {
    const agent = this.hello.agent(frame.agent);
    const tools: Anthropic.Tool[] = this.hello.tools
      .filter((t) => agent.tools.includes(t.name))
      .map((t) => ({ name: t.name, description: t.description || t.name, input_schema: t.inputSchema as Anthropic.Tool.InputSchema }));
    const builtins: Builtin[] = ["ask_user"];
    if (this.hello.agents.some((a) => a.kind === "skill") && frame.kind !== "skill") builtins.push("use_skill");
    if (this.hello.agents.some((a) => a.kind === "agent")) builtins.push("use_agent");
    if (frame.kind !== "main") builtins.push("complete");
    return [...tools, ...builtins.map((name) => ({ name, ...BUILTIN_TOOLS[name] }))];
  }

  /** Appends a tool_result; results of one reply share one user message, before its text. */
  private addResult(c: Conversation, frame: Frame, toolUseId: string, content: string, isError: boolean, io: IO): void {
    const block: Anthropic.ToolResultBlockParam = { type: "tool_result", tool_use_id: toolUseId, content, is_error: isError };
    const last = frame.messages.at(-1);
    if (last?.role === "user") {
      const at = last.content.findIndex((b) => b.type === "text");
      last.content.splice(at === -1 ? last.content.length : at, 0, block);
    } else {
      frame.messages.push({ role: "user", content: [block] });
    }
    io.event("tool_result", { frame: frame.name, tool_use_id: toolUseId, content, is_error: isError }, { conversation: c.key });
  }

  // --- the tools of one reply --------------------------------------------------------------------

  /** Runs one tool use; a Turn when it ends the frame's turn. */
  private async dispatch(c: Conversation, frame: Frame, use: Anthropic.ToolUseBlockParam, io: IO): Promise<Turn | null> {
    const data = asRecord(use.input);
    let refusal: string;
    if (use.name === "complete") {
      if (frame.kind === "main") {
        refusal = `Tool '${use.name}' is not available to this agent`;
      } else {
        const result = data["result"];
        const text = result === undefined || result === null ? "" : typeof result === "string" ? result : canonicalJson(result);
        this.addResult(c, frame, use.id, text, false, io);
        for (const rest of unresolved(frame.messages)) this.addResult(c, frame, rest.id, SKIPPED_AFTER_COMPLETE, true, io);
        return { action: "complete", text };
      }
    } else if (use.name === "use_skill" || use.name === "use_agent") {
      const spawned = this.spawn(frame, use, data);
      if (typeof spawned !== "string") return { action: "child", child: spawned };
      refusal = spawned;
    } else if (use.name === "ask_user") {
      if (typeof data["question"] !== "string") {
        refusal = "Missing required field: question";
      } else if (this.hello.settings.queryUser === "none") {
        this.addResult(c, frame, use.id, NO_ANSWER, false, io);
        return null;
      } else {
        frame.asking = use.id;
        return { action: "ask", text: questionText(data) };
      }
    } else if (this.hello.tool(use.name) === undefined) {
      refusal = `Tool '${use.name}' not found`;
    } else if (!this.hello.agent(frame.agent).tools.includes(use.name)) {
      refusal = `Tool '${use.name}' is not available to this agent`;
    } else {
      await this.runExternal(c, frame, use, io);
      return null;
    }
    this.addResult(c, frame, use.id, refusal, true, io);
    return null;
  }

  /**
   * Runs the scenario's tool through agentsim; with parallel_tools, every consecutive external tool
   * use of the reply at once, their results in the reply's order.
   */
  private async runExternal(c: Conversation, frame: Frame, use: Anthropic.ToolUseBlockParam, io: IO): Promise<void> {
    const agent = this.hello.agent(frame.agent);
    const batch = [use];
    if (agent.parallelTools) {
      for (const rest of unresolved(frame.messages).slice(1)) {
        if (this.hello.tool(rest.name) === undefined || !agent.tools.includes(rest.name)) break;
        batch.push(rest);
      }
    }
    const results = await io.tools(
      batch.map((u) => {
        const timeoutMs = io.toolTimeoutMs(u.name);
        return timeoutMs === undefined ? { name: u.name, input: u.input } : { name: u.name, input: u.input, timeoutMs };
      }),
      { agent: frame.agent, conversation: c.key },
    );
    batch.forEach((u, i) => {
      const r = results[i];
      if (r === undefined) return;
      if (r.timedOut === true) this.addResult(c, frame, u.id, timedOut(u.name, this.hello.tool(u.name)?.timeoutMs), true, io);
      else if (r.failed) this.addResult(c, frame, u.id, `Tool execution failed: ${r.content}`, true, io);
      else this.addResult(c, frame, u.id, r.content, r.isError, io);
    });
    this.save(); // a restart from here does not run them again
  }

  /** A child frame for use_skill/use_agent, or the refusal text (no stack change). */
  private spawn(frame: Frame, use: Anthropic.ToolUseBlockParam, data: Record<string, unknown>): Frame | string {
    const kind = use.name === "use_skill" ? "skill" : "agent";
    if (kind === "skill" && frame.kind === "skill") return SKILL_CANNOT_USE_SKILL;
    for (const required of [kind, "message"]) {
      if (typeof data[required] !== "string") return `Missing required field: ${required}`;
    }
    const names = this.hello.agents
      .filter((a) => a.kind === kind)
      .map((a) => a.name)
      .sort();
    const target = data[kind] as string;
    if (!names.includes(target)) {
      return `${kind === "skill" ? "Skill" : "Agent"} '${target}' not found. Available: ${names.join(", ")}`;
    }
    if (kind === frame.kind && target === frame.agent) return `Agent '${target}' cannot invoke itself`;
    const messages: Message[] = [{ role: "user", content: [{ type: "text", text: data["message"] as string }] }];
    return this.frame(target, kind, messages, use.id);
  }
}

await run(new StackRuntime());
