// The protocol loop against fake stdin and stdout: what a runtime writes for what agentsim says.

import assert from "node:assert/strict";
import { PassThrough, Readable, Writable } from "node:stream";
import { describe, test } from "node:test";

import {
  CONVERSATION_HEADER,
  type Hello,
  Interrupted,
  IO,
  MAX_LINE,
  modelHeaders,
  run,
  runFresh,
  type RunOptions,
  type Runtime,
} from "../src/index.js";

type Obj = Record<string, unknown>;

function hello(overrides: Obj = {}): Obj {
  return {
    type: "hello",
    protocol: 1,
    run: "test#0",
    seed: 0,
    state_dir: "/tmp/state",
    restarts: 0,
    awaiting_idle: null,
    time_scale: 0.1,
    agents: [
      {
        name: "main",
        kind: "main",
        frame: "main",
        system: "You are main.",
        model: "main",
        max_iterations: 10,
        tools: ["search"],
        parallel_tools: false,
        stream: false,
        passthrough: false,
        batch: null,
        description: null,
      },
    ],
    tools: [{ name: "search", description: "", input_schema: { type: "object" }, timeout_ms: null }],
    settings: { cancel_words: ["cancel", "stop"], query_user: "interactive", max_depth: 256 },
    ...overrides,
  };
}

const user = (seq: number, text: string, conversation = "default"): Obj => ({ type: "user", seq, conversation, text });
const result = (call: string, content: string, isError = false, more: Obj = {}): Obj => ({
  type: "tool_result",
  call,
  content,
  is_error: isError,
  ...more,
});
const SHUTDOWN: Obj = { type: "shutdown" };

function lines(...messages: (Obj | Buffer)[]): Buffer {
  return Buffer.concat(messages.map((m) => (Buffer.isBuffer(m) ? m : Buffer.from(JSON.stringify(m) + "\n"))));
}

/** Runs the loop over `stdin`, fed in small chunks; its exit status and every line it wrote, parsed. */
async function play(handler: Runtime | Parameters<typeof run>[0], stdin: Buffer, options: RunOptions = {}): Promise<[number, Obj[]]> {
  const chunks: Buffer[] = [];
  for (let i = 0; i < stdin.length; i += 7919) chunks.push(stdin.subarray(i, i + 7919));
  const written: Buffer[] = [];
  const output = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      written.push(chunk);
      callback();
    },
  });
  const status = await run(handler, { ...options, input: Readable.from(chunks), output, exit: false });
  const text = Buffer.concat(written).toString("utf-8");
  assert.ok(text === "" || text.endsWith("\n"), "every line ends with a newline");
  return [status, text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Obj)];
}

const echo = (_conversation: string, text: string, io: IO): void => io.send(`you said: ${text}`);

/** Keeps the test's output readable: the loop's stderr lines (tracebacks of failing runtimes) captured. */
async function quietly<T>(f: () => Promise<T>): Promise<[T, string]> {
  const original = process.stderr.write.bind(process.stderr);
  let captured = "";
  process.stderr.write = ((chunk: string | Uint8Array): boolean => {
    captured += chunk.toString();
    return true;
  }) as typeof process.stderr.write;
  try {
    return [await f(), captured];
  } finally {
    process.stderr.write = original;
  }
}

test("a good exchange answers hello, then sends and goes idle after each message", async () => {
  const [status, out] = await play(echo, lines(hello(), user(1, "hi"), user(2, "again"), SHUTDOWN), {
    capabilities: ["stack"],
    name: "echo 1",
  });
  assert.equal(status, 0);
  assert.deepEqual(out, [
    { type: "ready", protocol: 1, capabilities: ["stack"], name: "echo 1" },
    { type: "send", conversation: "default", text: "you said: hi" },
    { type: "idle", seq: 1 },
    { type: "send", conversation: "default", text: "you said: again" },
    { type: "idle", seq: 2 },
  ]);
});

test("the end of stdin is a shutdown", async () => {
  const [status, out] = await play(echo, lines(hello(), user(1, "hi")));
  assert.equal(status, 0);
  assert.deepEqual(out.at(-1), { type: "idle", seq: 1 });
});

test("crlf line ends and blank lines are accepted", async () => {
  const [status, out] = await play(echo, Buffer.concat([lines(hello()), Buffer.from("  \n"), Buffer.from(JSON.stringify(user(1, "hi")) + "\r\n")]));
  assert.equal(status, 0);
  assert.deepEqual(out.at(-1), { type: "idle", seq: 1 });
});

test("a malformed line is reported with its number and exits 2", async () => {
  const [status, out] = await quietly(() => play(echo, lines(hello(), user(1, "hi"), Buffer.from('{"type": "user", "seq": 2,\n'), SHUTDOWN)));
  const [code, written] = status;
  assert.equal(code, 2);
  assert.equal(written.at(-1)?.["line"], 3);
  assert.match(String(written.at(-1)?.["message"]), /malformed JSON/);
  // Nothing after the error: the loop stopped there.
  assert.deepEqual(written.map((m) => m["type"]), ["ready", "send", "idle", "error"]);
  assert.match(out, /agentsim-runtime: line 3: malformed JSON/);
});

test("an unknown message type is a protocol error", async () => {
  const [[status, out]] = await quietly(() => play(echo, lines(hello(), { type: "resume", seq: 1 }, SHUTDOWN)));
  assert.equal(status, 2);
  assert.deepEqual(out.at(-1), {
    type: "error",
    line: 2,
    message: 'line 2: unknown message type "resume" (agentsim sends hello, user, tool_result, reset, shutdown)',
  });
});

describe("bad lines from agentsim are errors", () => {
  const cases: [string, Buffer, RegExp][] = [
    ["not an object", Buffer.from("[1, 2]\n"), /must be a JSON object/],
    ["no type", Buffer.from('{"seq": 1}\n'), /needs a string field `type`/],
    ["a string seq", lines({ ...user(1, "x"), seq: "1" }), /field `seq` must be an integer, not "1"/],
    ["a boolean seq", lines({ ...user(1, "x"), seq: true }), /field `seq` must be an integer/],
    ["a fractional seq", lines({ ...user(1, "x"), seq: 1.5 }), /field `seq` must be an integer/],
    ["a missing field", lines({ type: "user", seq: 1, text: "x" }), /missing field `conversation`/],
    [
      "invalid UTF-8",
      Buffer.concat([Buffer.from('{"type":"user","seq":1,"conversation":"d","text":"ab'), Buffer.from([0xff, 0xfe]), Buffer.from('"}\n')]),
      /not UTF-8 \(invalid byte at offset 52\)/,
    ],
    ["an oversize line", Buffer.from('{"type":"user","seq":1,"conversation":"d","text":"' + "a".repeat(MAX_LINE) + '"}\n'), /limit/],
    ["a result never asked for", lines(result("c9", "late")), /never made/],
    ["a second hello", lines(hello()), /a second hello/],
    ["a reset without the capability", lines({ type: "reset" }), /did not offer the `reset` capability/],
  ];
  for (const [name, bad, says] of cases) {
    test(name, async () => {
      const [[status, out]] = await quietly(() => play(echo, Buffer.concat([lines(hello()), bad, lines(SHUTDOWN)])));
      assert.equal(status, 2);
      const last = out.at(-1);
      assert.equal(last?.["type"], "error");
      assert.equal(last?.["line"], 2);
      assert.match(String(last?.["message"]), says);
    });
  }
});

test("seqs must increase", async () => {
  const [[status, out]] = await quietly(() => play(echo, lines(hello(), user(2, "a"), user(2, "b"))));
  assert.equal(status, 2);
  assert.match(String(out.at(-1)?.["message"]), /seq 2 after seq 2/);
});

test("a hello of another protocol is refused", async () => {
  const [[status, out]] = await quietly(() => play(echo, lines(hello({ protocol: 2 }))));
  assert.equal(status, 2);
  assert.match(String(out.at(-1)?.["message"]), /protocol 2 is not spoken here/);
  assert.ok(!out.some((m) => m["type"] === "ready"));
});

test("a hello with a bad agent is refused, located at the field", async () => {
  const bad = hello();
  (bad["agents"] as Obj[])[0] = { ...(bad["agents"] as Obj[])[0], kind: "boss" };
  const [[status, out]] = await quietly(() => play(echo, lines(bad)));
  assert.equal(status, 2);
  assert.match(String(out.at(-1)?.["message"]), /hello: agents\[0\]: `kind` must be main, skill or agent, not "boss"/);
});

test("a user message before hello is refused", async () => {
  const [[status, out]] = await quietly(() => play(echo, lines(user(1, "hi"))));
  assert.equal(status, 2);
  assert.match(String(out.at(-1)?.["message"]), /expected hello first/);
});

test("a tool round trip waits for the result", async () => {
  const seen: unknown[] = [];
  const onUser = async (_c: string, text: string, io: IO): Promise<void> => {
    const r = await io.tool("search", { q: text });
    seen.push(r);
    const failed = await io.tool("search", { q: "again" }, { call: "toolu_7" });
    seen.push(failed);
    io.send(`${r.content} / ${failed.content}`);
  };
  const [status, out] = await play(
    onUser,
    lines(hello(), user(1, "cats"), result("c1", "3 cats"), result("toolu_7", "disk full", true, { failed: true }), SHUTDOWN),
  );
  assert.equal(status, 0);
  assert.deepEqual(out.slice(1), [
    { type: "tool_call", call: "c1", conversation: "default", agent: "main", name: "search", input: { q: "cats" } },
    { type: "tool_call", call: "toolu_7", conversation: "default", agent: "main", name: "search", input: { q: "again" } },
    { type: "send", conversation: "default", text: "3 cats / disk full" },
    { type: "idle", seq: 1 },
  ]);
  assert.deepEqual(seen, [
    { call: "c1", content: "3 cats", isError: false, failed: false },
    { call: "toolu_7", content: "disk full", isError: true, failed: true },
  ]);
});

test("a call with no result in its timeout comes back timed out, and its late result is ignored", async () => {
  // `search` has a 2 s timeout at time scale 0.1: the helper waits 200 ms for it; `other` has none.
  const tools = [
    { name: "search", description: "", input_schema: { type: "object" }, timeout_ms: 2000 },
    { name: "other", description: "", input_schema: { type: "object" }, timeout_ms: null },
  ];
  const seen: unknown[] = [];
  const onUser = async (_c: string, _t: string, io: IO): Promise<void> => {
    assert.equal(io.toolTimeoutMs("search"), 200);
    assert.equal(io.toolTimeoutMs("other"), undefined);
    assert.equal(io.toolTimeoutMs("nothing"), undefined);
    const timeoutMs = io.toolTimeoutMs("search");
    seen.push(...(await io.tools([{ name: "search", input: {}, ...(timeoutMs === undefined ? {} : { timeoutMs }) }, { name: "other", input: {} }])));
    io.send("done");
  };
  const input = new PassThrough();
  const written: Buffer[] = [];
  const output = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      written.push(chunk);
      callback();
    },
  });
  input.write(lines(hello({ tools }), user(1, "go")));
  // Past search's timeout: only other's result, then search's, late.
  const later = setTimeout(() => input.end(lines(result("c2", "other done"), result("c1", "too late"), SHUTDOWN)), 600);
  const started = performance.now();
  const status = await run(onUser, { input, output, exit: false });
  clearTimeout(later);
  assert.equal(status, 0);
  assert.ok(performance.now() - started >= 550, "the loop waited for other's result");
  const sent = Buffer.concat(written).toString("utf-8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Obj);
  assert.deepEqual(sent.map((m) => m["type"]), ["ready", "tool_call", "tool_call", "send", "idle"]);
  assert.deepEqual(seen, [
    { call: "c1", content: "", isError: true, failed: false, timedOut: true },
    { call: "c2", content: "other done", isError: false, failed: false },
  ]);
});

test("parallel tools give results in call order, whatever order they come in", async () => {
  const got: string[] = [];
  const onUser = async (_c: string, _t: string, io: IO): Promise<void> => {
    const results = await io.tools([
      { name: "search", input: { q: 1 } },
      { name: "search", input: { q: 2 } },
    ]);
    got.push(...results.map((r) => r.content));
  };
  const [status, out] = await play(onUser, lines(hello(), user(1, "go"), result("c2", "two"), result("c1", "one"), SHUTDOWN));
  assert.equal(status, 0);
  assert.deepEqual(
    out.filter((m) => m["type"] === "tool_call").map((m) => m["call"]),
    ["c1", "c2"],
  );
  assert.deepEqual(got, ["one", "two"]);
});

test("two overlapping waits of one turn share the reads", async () => {
  const onUser = async (_c: string, _t: string, io: IO): Promise<void> => {
    const [a, b] = await Promise.all([io.tool("search", { q: "a" }), io.tool("search", { q: "b" })]);
    io.send(`${a.content}+${b.content}`);
  };
  const [status, out] = await play(onUser, lines(hello(), user(1, "go"), result("c2", "B"), result("c1", "A"), SHUTDOWN));
  assert.equal(status, 0);
  assert.deepEqual(out.at(-2), { type: "send", conversation: "default", text: "A+B" });
});

class Cancellable implements Runtime {
  readonly capabilities = ["cancel-words"] as const;
  hello: Hello | null = null;
  readonly calls: string[] = [];
  constructor(private readonly catchIt: boolean) {}
  onHello(hello: Hello): void {
    this.hello = hello;
  }
  interrupts(_conversation: string, text: string): boolean {
    return this.hello?.isCancelWord(text) ?? false;
  }
  async onUser(_conversation: string, text: string, io: IO): Promise<void> {
    this.calls.push(text);
    if (this.hello?.isCancelWord(text)) {
      io.send("Cancelled.");
      return;
    }
    try {
      await io.tool("search", { q: text });
      io.send("found");
    } catch (e) {
      if (!(e instanceof Interrupted) || !this.catchIt) throw e;
      io.send(`Cancelled by ${JSON.stringify(e.text)}.`);
    }
  }
}

for (const catchIt of [true, false]) {
  test(`a cancel word interrupts a waiting tool and its late result is ignored (${catchIt ? "caught" : "escaping"})`, async () => {
    const runtime = new Cancellable(catchIt);
    const [status, out] = await play(
      runtime,
      lines(hello(), user(1, "slow"), user(2, " STOP "), result("c1", "late"), user(3, "next"), result("c2", "quick"), SHUTDOWN),
    );
    assert.equal(status, 0);
    const sends = out.filter((m) => m["type"] === "send").map((m) => m["text"]);
    if (catchIt) {
      // The runtime handled the interruption inside the turn.
      assert.deepEqual(sends, ['Cancelled by " STOP ".', "found"]);
      assert.deepEqual(runtime.calls, ["slow", "next"]);
    } else {
      // It let it escape: the cancel word comes again as an ordinary message.
      assert.deepEqual(sends, ["Cancelled.", "found"]);
      assert.deepEqual(runtime.calls, ["slow", " STOP ", "next"]);
    }
    assert.deepEqual(
      out.filter((m) => m["type"] === "idle"),
      [
        { type: "idle", seq: 2 },
        { type: "idle", seq: 3 },
      ],
    );
  });
}

test("a message arriving during a turn waits for the turn, and one idle covers both", async () => {
  const handled: string[][] = [];
  const onUser = async (conversation: string, text: string, io: IO): Promise<void> => {
    handled.push([conversation, text]);
    if (text === "first") await io.tool("search", {});
    io.send(text);
  };
  const [status, out] = await play(onUser, lines(hello(), user(1, "first"), user(2, "other", "telegram"), result("c1", "ok"), SHUTDOWN));
  assert.equal(status, 0);
  assert.deepEqual(handled, [
    ["default", "first"],
    ["telegram", "other"],
  ]);
  assert.deepEqual(
    out.filter((m) => m["type"] === "send" || m["type"] === "idle"),
    [
      { type: "send", conversation: "default", text: "first" },
      { type: "send", conversation: "telegram", text: "other" },
      { type: "idle", seq: 2 },
    ],
  );
});

test("shutdown while a tool runs ends the turn and exits 0", async () => {
  const finished: boolean[] = [];
  const onUser = async (_c: string, _t: string, io: IO): Promise<void> => {
    await io.tool("search", {});
    finished.push(true);
  };
  const [status, out] = await play(onUser, lines(hello(), user(1, "go"), SHUTDOWN));
  assert.equal(status, 0);
  assert.deepEqual(finished, []);
  assert.deepEqual(
    out.map((m) => m["type"]),
    ["ready", "tool_call"],
  );
});

test("an error thrown by the runtime is reported and exits 2", async () => {
  const onUser = (): void => {
    throw new RangeError("frames");
  };
  const [[status, out], stderr] = await quietly(() => play(onUser, lines(hello(), user(1, "go"), SHUTDOWN)));
  assert.equal(status, 2);
  assert.deepEqual(out.at(-1), { type: "error", message: "the runtime's onUser threw RangeError: frames" });
  assert.match(stderr, /RangeError: frames\n\s+at /);
});

test("a protocol error met during a turn ends the run even when the runtime swallows it", async () => {
  const onUser = async (_c: string, _t: string, io: IO): Promise<void> => {
    try {
      await io.tool("search", {});
    } catch {
      io.send("carrying on");
    }
  };
  const [[status, out]] = await quietly(() => play(onUser, lines(hello(), user(1, "go"), hello(), SHUTDOWN)));
  assert.equal(status, 2);
  assert.deepEqual(out.at(-1), { type: "error", line: 3, message: "line 3: hello while a turn runs (it waits for tool results)" });
  assert.ok(!out.some((m) => m["type"] === "idle"));
});

class Resettable implements Runtime {
  readonly capabilities = ["reset", "restart"] as const;
  readonly events: string[] = [];
  onHello(hello: Hello): void {
    this.events.push(`hello ${hello.run} awaiting ${hello.awaitingIdle}`);
  }
  onReady(io: IO): void {
    this.events.push("ready");
    if (io.hello.restarts > 0) io.stack([{ name: "main", iterations: 1 }], { conversation: "default" });
  }
  onResume(seq: number, io: IO): void {
    this.events.push(`resume ${seq}`);
    io.send("resumed", { conversation: "default" });
  }
  async onUser(_c: string, text: string, io: IO): Promise<void> {
    this.events.push(`user ${text}`);
    await io.tool("search", {});
  }
  onReset(): void {
    this.events.push("reset");
  }
}

test("reset starts a new run in the same process, and call ids start over", async () => {
  const runtime = new Resettable();
  const [status, out] = await play(
    runtime,
    lines(hello({ run: "a#0" }), user(1, "x"), result("c1", "ok"), { type: "reset" }, hello({ run: "b#0" }), user(1, "y"), result("c1", "ok"), SHUTDOWN),
  );
  assert.equal(status, 0);
  assert.deepEqual(runtime.events, ["hello a#0 awaiting null", "ready", "user x", "reset", "hello b#0 awaiting null", "ready", "user y"]);
  assert.equal(out.filter((m) => m["type"] === "ready").length, 2);
});

class Counting implements Runtime {
  static made = 0;
  readonly capabilities = ["stack"] as const;
  seen = 0;
  constructor() {
    Counting.made += 1;
  }
  onUser(_c: string, text: string, io: IO): void {
    this.seen += 1;
    io.send(`${text} is message ${this.seen} of runtime ${Counting.made}`);
  }
}

test("runFresh makes a new runtime for every run and offers reset", async () => {
  Counting.made = 0;
  const written: Buffer[] = [];
  const output = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      written.push(chunk);
      callback();
    },
  });
  const input = Readable.from([lines(hello(), user(1, "a"), user(2, "b"), { type: "reset" }, hello({ run: "b#0" }), user(1, "c"), SHUTDOWN)]);
  const status = await runFresh(() => new Counting(), { input, output, exit: false });
  assert.equal(status, 0);
  const out = Buffer.concat(written).toString("utf-8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l) as Obj);
  assert.deepEqual(out[0], { type: "ready", protocol: 1, capabilities: ["stack", "reset"] });
  assert.deepEqual(
    out.filter((m) => m["type"] === "send").map((m) => m["text"]),
    ["a is message 1 of runtime 1", "b is message 2 of runtime 1", "c is message 1 of runtime 2"],
  );
});

test("a runtime that offers reset without a way to forget is refused", async () => {
  const forgetful: Runtime = { capabilities: ["reset"], onUser: () => {} };
  await assert.rejects(play(forgetful, lines(hello(), SHUTDOWN)), /offers `reset` but cannot forget/);
  await assert.rejects(play(() => {}, lines(hello(), SHUTDOWN), { capabilities: ["reset"] }), /offers `reset` but cannot forget/);
});

test("a function runtime forgets its state with its onReset", async () => {
  const seen: string[] = [];
  const remember = (_c: string, text: string, io: IO): void => {
    seen.push(text);
    io.send(seen.join(","));
  };
  const [status, out] = await play(remember, lines(hello(), user(1, "a"), { type: "reset" }, hello(), user(1, "b"), SHUTDOWN), {
    capabilities: ["reset"],
    onReset: () => {
      seen.length = 0;
    },
  });
  assert.equal(status, 0);
  assert.deepEqual(
    out.filter((m) => m["type"] === "send").map((m) => m["text"]),
    ["a", "b"],
  );
});

test("after a restart the runtime resumes the turn and says idle for it", async () => {
  const runtime = new Resettable();
  const [status, out] = await play(runtime, lines(hello({ restarts: 1, awaiting_idle: 3 }), user(4, "z"), result("c1", "ok"), SHUTDOWN));
  assert.equal(status, 0);
  assert.deepEqual(runtime.events, ["hello test#0 awaiting 3", "ready", "resume 3", "user z"]);
  assert.deepEqual(out.slice(1, 4), [
    { type: "stack", conversation: "default", frames: [{ name: "main", iterations: 1 }] },
    { type: "send", conversation: "default", text: "resumed" },
    { type: "idle", seq: 3 },
  ]);
  assert.deepEqual(out.at(-1), { type: "idle", seq: 4 });
});

test("stack and event lines carry what the runtime reports, in the protocol's shape", async () => {
  const onUser = (_c: string, _t: string, io: IO): void => {
    io.stack([{ name: "main", iterations: 1 }]);
    io.stack([], { ended: [{ name: "main", iterations: 1, reason: "answered" }], conversation: "other" });
    io.event("tool_result", { frame: "main", tool_use_id: "t1", content: "ok", is_error: false, type: "forged", kind: "forged" });
  };
  const [status, out] = await play(onUser, lines(hello(), user(1, "go")), { capabilities: ["stack", "tool-results"] });
  assert.equal(status, 0);
  assert.deepEqual(out.slice(1, 4), [
    { type: "stack", conversation: "default", frames: [{ name: "main", iterations: 1 }] },
    { type: "stack", conversation: "other", frames: [], ended: [{ name: "main", iterations: 1, reason: "answered" }] },
    { type: "event", conversation: "default", kind: "tool_result", frame: "main", tool_use_id: "t1", content: "ok", is_error: false },
  ]);
});

test("model headers name the turn's conversation, and usage is an event", async () => {
  const seen: Record<string, string>[] = [];
  const onUser = (_c: string, _t: string, io: IO): void => {
    seen.push(io.modelHeaders({ agent: "main" }), io.modelHeaders({ conversation: "other" }));
    io.usage(100, 20);
  };
  const [status, out] = await play(onUser, lines(hello(), user(1, "go", "telegram_1")), {
    capabilities: ["conversation-header", "usage"],
  });
  assert.equal(status, 0);
  assert.deepEqual(seen, [
    { "x-agentsim-conversation": "telegram_1", "x-agentsim-agent": "main" },
    { "x-agentsim-conversation": "other" },
  ]);
  assert.deepEqual(out[0]?.["capabilities"], ["conversation-header", "usage"]);
  assert.deepEqual(out[1], { type: "event", conversation: "telegram_1", kind: "usage", input_tokens: 100, output_tokens: 20 });
  assert.deepEqual(modelHeaders("c"), { [CONVERSATION_HEADER]: "c" });
});

test("unknown capabilities are refused before anything is written", async () => {
  await assert.rejects(() => play(echo, lines(hello()), { capabilities: ["stacks" as "stack"] }), /unknown capabilities/);
});

test("a line too long to write is refused locally", async () => {
  const onUser = (_c: string, _t: string, io: IO): void => io.send("x".repeat(MAX_LINE + 1));
  const [[status, out]] = await quietly(() => play(onUser, lines(hello(), user(1, "go"))));
  assert.equal(status, 2);
  assert.match(String(out.at(-1)?.["message"]), /over the protocol's/);
});

test("hello parses every field", async () => {
  const seen: Hello[] = [];
  await play({ onUser: echo, onHello: (h: Hello) => void seen.push(h) }, lines(hello()));
  const h = seen[0];
  assert.ok(h !== undefined);
  assert.equal(h.main.frame, "main");
  assert.equal(h.main.maxIterations, 10);
  assert.deepEqual(h.main.tools, ["search"]);
  assert.notEqual(h.tool("search"), undefined);
  assert.equal(h.tool("nope"), undefined);
  assert.ok(h.isCancelWord("  Cancel "));
  assert.ok(!h.isCancelWord("cancel it"));
  assert.equal(h.timeScale, 0.1);
  assert.equal(h.awaitingIdle, null);
  assert.equal(h.settings.queryUser, "interactive");
});
