"""A reference agent runtime, written the way a user writes one: seeds 000 (an interactive stack of
subagents: use_skill, use_agent, complete, cascades) and 002 (the model → tools → model loop with
an iteration limit) on the official `anthropic` SDK, tested by agentsim through its runtime
protocol (the `agentsim_runtime` helper package does the protocol).

    AGENTSIM_PLANTED_BUG=<name> python runtime.py     # agentsim starts it; see README.md
    AGENTSIM_REFERENCE_SILENT=1 python runtime.py     # no stack, tool_result or response lines

Its conversations live in `state.json` in AGENTSIM_STATE_DIR, so a restart continues them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

import anthropic

from agentsim_runtime import IO, Hello, Interrupted, Runtime, ToolCall, model_headers, run

# The texts agentsim's reference runtime uses (its src/model/messages.rs), so that the same
# scenarios pass against both.
CHILD_MAX_ITERATIONS = "Agent reached maximum iterations."
SKIPPED_AFTER_COMPLETE = "Skipped: agent completed."
SKIPPED_AFTER_LIMIT = "Skipped: agent reached maximum iterations."
CANCELLED_BY_USER = "Cancelled by user."
USER_MAX_STEPS = "Agent reached maximum steps."
USER_CANCELLED = "Cancelled."
SKILL_CANNOT_USE_SKILL = "Skills cannot call use_skill"
NO_ANSWER = "No answer from the user."
# Seed 004's display-only sentinel: shown to a user, never meant for a model.
INTERRUPTED = "Interrupted. Tell Ally what to do instead."


def timed_out(name: str, timeout_ms: int | None) -> str:
    """The result of a call abandoned at its tool's timeout (scripted milliseconds)."""
    ms = timeout_ms or 0
    seconds = ms // 1000 if ms % 1000 == 0 else ms / 1000
    return f"Tool '{name}' timed out after {seconds}s"


PLANTED_BUGS = (
    "interruption-leak",
    "empty-reply-replayed",
    "unanswered-tool-use-after-cancel",
    "child-error-as-success",
    "iteration-reset-on-resume",
)
BUG = os.environ.get("AGENTSIM_PLANTED_BUG", "")
if BUG and BUG not in PLANTED_BUGS:
    sys.exit(f"AGENTSIM_PLANTED_BUG={BUG}: not one of {', '.join(PLANTED_BUGS)}")

# Most runtimes report nothing but what they send the user: with AGENTSIM_REFERENCE_SILENT=1 this
# one does the same (no `stack`, `tool_result` or `response` lines), and agentsim reads the stack
# and the tool results from its model requests instead. Either way it names each model request's
# conversation (capability `conversation-header`), which lets agentsim tell the conversations apart.
SILENT = os.environ.get("AGENTSIM_REFERENCE_SILENT") == "1"
REPORTED = ("stack", "tool-results", "response", "usage")

BUILTIN_TOOLS = {
    "use_skill": {"description": "Hand the conversation to a skill until it completes.",
                  "input_schema": {"type": "object", "properties": {
                      "skill": {"type": "string"}, "message": {"type": "string"}},
                      "required": ["skill", "message"]}},
    "use_agent": {"description": "Hand the conversation to an agent until it completes.",
                  "input_schema": {"type": "object", "properties": {
                      "agent": {"type": "string"}, "message": {"type": "string"}},
                      "required": ["agent", "message"]}},
    "complete": {"description": "Signal that your task is complete and return a result.",
                 "input_schema": {"type": "object", "properties": {"result": {"type": "string"}}}},
    "ask_user": {"description": "Ask the user a question and wait for the answer.",
                 "input_schema": {"type": "object", "properties": {
                     "question": {"type": "string"}, "options": {"type": "array"}},
                     "required": ["question"]}},
}


@dataclass
class Frame:
    """One agent on a conversation's stack (seed 000's StackFrame)."""

    agent: str                    # the agent's name: "main", "research"
    name: str                     # its frame name: "main", "skill:research"
    kind: str                     # "main", "skill", "agent"
    messages: list[dict[str, Any]]
    max_iterations: int
    iteration: int = 0
    parent_tool_use_id: str | None = None
    asking: str | None = None     # the ask_user tool use it waits on
    waiting: bool = False         # waits for the user (between turns)
    turn_start: int = 0           # main: where its turn begins in the conversation's messages


@dataclass
class Conversation:
    key: str
    main_messages: list[dict[str, Any]] = field(default_factory=list)  # kept across turns
    stack: list[Frame] = field(default_factory=list)
    ended: list[dict[str, Any]] = field(default_factory=list)          # popped since the last report
    usage: list[int] = field(default_factory=lambda: [0, 0])           # input, output tokens so far


@dataclass
class Turn:
    """How a frame's turn ended (seed 000's TurnResult)."""

    action: str                   # send, ask, child, complete, max_iterations, error
    text: str = ""
    child: Frame | None = None


# --- sessions: Anthropic messages, kept valid (every tool_use answered before the next request) --

def add_user_text(messages: list[dict[str, Any]], text: str) -> None:
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"].append({"type": "text", "text": text})
    else:
        messages.append({"role": "user", "content": [{"type": "text", "text": text}]})


def tool_uses(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b["type"] == "tool_use"]


def unresolved(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last assistant message's tool uses that have no result yet (seed 000)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            answered = {b["tool_use_id"] for m in messages[i + 1:] for b in m["content"]
                        if b["type"] == "tool_result"}
            return [u for u in tool_uses(messages[i]) if u["id"] not in answered]
    return []


def question_text(data: dict[str, Any]) -> str:
    text = data.get("question", "")
    for option in data.get("options") or []:
        text += "\n- " + (option if isinstance(option, str) else json.dumps(option))
    return text


class StackRuntime(Runtime):
    capabilities = tuple(c for c in ("stack", "tool-results", "response", "cancel-words", "ask-user",
                                     "parallel-tools", "restart", "conversation-header", "usage",
                                     "reset", "tool-timeouts")
                         if not (SILENT and c in REPORTED))
    name = "agentsim reference runtime (python) 1" + (f", planted bug {BUG}" if BUG else "")

    def on_hello(self, hello: Hello) -> None:
        self.hello = hello
        # No retries: each scripted model error is one failed call that the stack cascades. One
        # client for the process: after a `reset` the mock server is at the same address.
        if getattr(self, "client", None) is None:
            self.client = anthropic.Anthropic(max_retries=0, timeout=30.0)
        self.path = os.path.join(hello.state_dir, "state.json")
        self.conversations: dict[str, Conversation] = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                for key, c in json.load(f).items():
                    stack = [Frame(**frame) for frame in c["stack"]]
                    self.conversations[key] = Conversation(key, c["main_messages"], stack,
                                                           usage=c.get("usage", [0, 0]))

    def on_reset(self) -> None:
        """A new run in this process (capability `reset`): forget every conversation; the next
        `hello` names the run's own state directory."""
        self.conversations = {}

    def save(self) -> None:
        """Writes every conversation atomically: a crash leaves the old file or the new one."""
        data = {k: {"main_messages": c.main_messages, "stack": [asdict(f) for f in c.stack], "usage": c.usage}
                for k, c in self.conversations.items()}
        fd, tmp = tempfile.mkstemp(dir=self.hello.state_dir, prefix=".state-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def interrupts(self, conversation: str, text: str) -> bool:
        c = self.conversations.get(conversation)
        return bool(c and c.stack) and self.hello.settings.is_cancel_word(text)

    # --- the provider's side of seed 000: routing and the orchestration loop ---------------------

    def on_user(self, conversation: str, text: str, io: IO) -> None:
        c = self.conversations.setdefault(conversation, Conversation(conversation))
        if c.stack and self.hello.settings.is_cancel_word(text):
            self.unwind(c, io)
        else:
            if not c.stack:
                main = self.hello.main
                c.stack.append(Frame(main.name, main.frame, "main", c.main_messages, main.max_iterations,
                                     turn_start=len(c.main_messages)))
                self.report(c, io)
            self.orchestrate(c, io, ("user", text))
        self.report(c, io)
        self.save()

    def on_ready(self, io: IO) -> None:
        for c in self.conversations.values():
            if c.stack:
                self.report(c, io)  # after a restart: the stacks restored

    def on_resume(self, seq: int, io: IO) -> None:
        """After a restart in the middle of a turn: every conversation whose top frame was
        running goes on from what was persisted (a model call whose reply was not stored is made
        again; tool uses without results are run again)."""
        for c in self.conversations.values():
            if c.stack and not c.stack[-1].waiting:
                self.orchestrate(c, io, None)
                self.report(c, io)
        self.save()

    def orchestrate(self, c: Conversation, io: IO, given: tuple[Any, ...] | None) -> None:
        while True:
            top = c.stack[-1]
            top.waiting = False
            try:
                turn = self.execute_turn(c, top, given, io)
            except Interrupted:
                if BUG != "interruption-leak" or top.kind == "main":
                    raise  # on_user gets the cancel word next and unwinds the whole stack
                # Planted: seed 004. The interrupted child's display text is its "answer", and the
                # parent takes it as the child's result and carries on.
                io.send(INTERRUPTED, conversation=c.key)
                self.pop(c, "cancelled")
                self.report(c, io)
                given = ("result", top.parent_tool_use_id, INTERRUPTED, False)
                continue
            self.save()
            if turn.action in ("send", "ask"):
                if turn.text or turn.action == "ask":
                    io.send(turn.text, conversation=c.key)
                if top.kind == "main" and turn.action == "send":
                    self.finish_main(c, "answered", turn.text, io)
                else:
                    top.waiting = True
                return
            if turn.action == "child":
                assert turn.child is not None
                c.stack.append(turn.child)
                self.report(c, io)
                self.save()
                given = None
            elif turn.action == "complete":
                self.pop(c, "completed")
                self.report(c, io)
                given = ("result", top.parent_tool_use_id, turn.text, False)
            elif top.kind == "main":
                # A limit or a model error at the bottom: the user is told, the turn ends.
                notice = USER_MAX_STEPS if turn.action == "max_iterations" else f"LLM error: {turn.text}"
                io.send(notice, conversation=c.key)
                self.finish_main(c, turn.action, notice, io)
                return
            elif turn.action == "max_iterations":
                self.pop(c, "max_iterations")
                self.report(c, io)
                given = ("result", top.parent_tool_use_id, CHILD_MAX_ITERATIONS, True)
            else:
                self.pop(c, "error")
                self.report(c, io)
                content, is_error = f"LLM error: {turn.text}", True
                if BUG == "child-error-as-success":
                    is_error = False  # planted: the parent hears a failure as a success
                given = ("result", top.parent_tool_use_id, content, is_error)

    def pop(self, c: Conversation, reason: str) -> None:
        frame = c.stack.pop()
        c.ended.append({"name": frame.name, "iterations": frame.iteration, "reason": reason})

    def finish_main(self, c: Conversation, reason: str, text: str, io: IO) -> None:
        """The main frame's turn ends: its response (capability `response`), then the stack clears."""
        main = c.stack[0]
        c.main_messages = main.messages
        calls = [use["name"] for m in main.messages[main.turn_start:] if m["role"] == "assistant"
                 for use in tool_uses(m)]
        if not SILENT:
            io.event("response", conversation=c.key, frame="main", text=text, iterations=main.iteration,
                     tool_calls=calls)
        while c.stack:
            self.pop(c, reason)

    def unwind(self, c: Conversation, io: IO) -> None:
        """A cancel word: every pending tool use on the way down gets "Cancelled by user.", the
        stack is cleared, and the user gets "Cancelled."."""
        while c.stack:
            top = c.stack[-1]
            if BUG != "unanswered-tool-use-after-cancel":  # planted: the tool uses stay open
                for use in unresolved(top.messages):
                    self.add_result(c, top, use["id"], CANCELLED_BY_USER, True, io)
            if top.kind == "main":
                c.main_messages = top.messages
            self.pop(c, "cancelled")
        io.send(USER_CANCELLED, conversation=c.key)

    def report(self, c: Conversation, io: IO) -> None:
        frames = [{"name": f.name, "iterations": f.iteration} for f in c.stack]
        if not SILENT:
            io.stack(frames, ended=c.ended, conversation=c.key)
        c.ended = []

    # --- one frame's turn: seed 000's execute_turn, which is seed 002's agent loop -----------------

    def execute_turn(self, c: Conversation, frame: Frame, given: tuple[Any, ...] | None, io: IO) -> Turn:
        run_tools_first = False
        # A user's message is answered by the model; tool uses left open are the business of a
        # frame that resumes (after a child, an answer, a restart), and a cancel answers them all.
        model_first = False
        if given is None:
            # Resumed after a restart: a stored reply that has no tool uses was the answer; tool
            # uses without results are the rest of the pass the kill cut, so they run without a
            # new iteration.
            last = frame.messages[-1] if frame.messages else None
            if last is not None and last["role"] == "assistant" and not tool_uses(last):
                return Turn("send", self.text_of(last))
            run_tools_first = bool(unresolved(frame.messages))
        elif given[0] == "user":
            if frame.asking is not None:
                # The answer to ask_user is that tool's result; the rest of the reply runs next.
                self.add_result(c, frame, frame.asking, given[1], False, io)
                frame.asking = None
                run_tools_first = True
            else:
                add_user_text(frame.messages, given[1])
                model_first = True
            if BUG == "iteration-reset-on-resume" and frame.kind != "main":
                frame.iteration = 0  # planted: a resumed frame starts counting again
        else:
            _, tool_use_id, content, is_error = given
            self.add_result(c, frame, tool_use_id, content, is_error, io)
            if BUG == "iteration-reset-on-resume":
                frame.iteration = 0
        while True:
            if not run_tools_first:
                if frame.iteration >= frame.max_iterations:
                    for use in unresolved(frame.messages):
                        self.add_result(c, frame, use["id"], SKIPPED_AFTER_LIMIT, True, io)
                    return Turn("max_iterations")
                frame.iteration += 1
                self.report(c, io)
                if model_first or not unresolved(frame.messages):
                    model_first = False
                    turn = self.call_model(c, frame, io)
                    if turn is not None:
                        return turn
            run_tools_first = False
            while pending := unresolved(frame.messages):
                turn = self.dispatch(c, frame, pending[0], io)
                if turn is not None:
                    return turn

    def text_of(self, message: dict[str, Any]) -> str:
        return "".join(b["text"] for b in message["content"] if b["type"] == "text")

    def call_model(self, c: Conversation, frame: Frame, io: IO) -> Turn | None:
        """One model call. A Turn when the turn ends here; None when the reply's tool uses run next."""
        agent = self.hello.agent(frame.agent)
        try:
            reply = self.client.messages.create(
                model=agent.model, max_tokens=1024, system=agent.system, messages=frame.messages,
                tools=self.tools_for(frame),
                extra_headers=model_headers(c.key, agent.name),
            )
        except anthropic.APIStatusError as e:
            return Turn("error", getattr(e, "api_message", None) or str(e))
        except anthropic.APIConnectionError as e:
            return Turn("error", f"network error: {e}")
        # The conversation's usage, summed over every reply (seed 002's cost tracking), reported
        # when it changes.
        used = (reply.usage.input_tokens, reply.usage.output_tokens)
        if used != (0, 0):
            c.usage = [c.usage[0] + used[0], c.usage[1] + used[1]]
            if not SILENT:
                io.usage(c.usage[0], c.usage[1], conversation=c.key)
        content: list[dict[str, Any]] = []
        for block in reply.content:
            if block.type == "text" and block.text:
                content.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
        if not content:
            # An empty reply sends nothing, and is not stored: no API takes an empty assistant turn.
            if BUG == "empty-reply-replayed":
                frame.messages.append({"role": "assistant", "content": []})  # planted: stored anyway
            return Turn("send", "")
        seen = {b["id"] for m in frame.messages if m["role"] == "assistant" for b in tool_uses(m)}
        for use in content:
            if use["type"] == "tool_use":
                if use["id"] in seen:
                    return Turn("error", f"invalid reply: duplicate tool_use id '{use['id']}'")
                seen.add(use["id"])
        message = {"role": "assistant", "content": content}
        frame.messages.append(message)
        # Stored before its tools run: a restart from here runs them, and does not ask the model again.
        self.save()
        if not tool_uses(message):
            return Turn("send", self.text_of(message))
        return None  # text beside tool uses is kept in the session, not sent

    def tools_for(self, frame: Frame) -> list[dict[str, Any]]:
        agent = self.hello.agent(frame.agent)
        tools = [{"name": t.name, "description": t.description or t.name, "input_schema": dict(t.input_schema)}
                 for t in self.hello.tools if t.name in agent.tools]
        builtins = ["ask_user"]
        if any(a.kind == "skill" for a in self.hello.agents) and frame.kind != "skill":
            builtins.append("use_skill")
        if any(a.kind == "agent" for a in self.hello.agents):
            builtins.append("use_agent")
        if frame.kind != "main":
            builtins.append("complete")
        return tools + [{"name": n, **BUILTIN_TOOLS[n]} for n in builtins]

    def add_result(self, c: Conversation, frame: Frame, tool_use_id: str, content: str,
                   is_error: bool, io: IO) -> None:
        """Appends a tool_result; results of one reply share one user message, before its text."""
        block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}
        messages = frame.messages
        if messages and messages[-1]["role"] == "user":
            blocks = messages[-1]["content"]
            at = next((i for i, b in enumerate(blocks) if b["type"] == "text"), len(blocks))
            blocks.insert(at, block)
        else:
            messages.append({"role": "user", "content": [block]})
        if not SILENT:
            io.event("tool_result", conversation=c.key, frame=frame.name, tool_use_id=tool_use_id,
                     content=content, is_error=is_error)

    # --- the tools of one reply ------------------------------------------------------------------

    def dispatch(self, c: Conversation, frame: Frame, use: dict[str, Any], io: IO) -> Turn | None:
        """Runs one tool use; a Turn when it ends the frame's turn."""
        name, data = use["name"], use["input"] if isinstance(use["input"], dict) else {}
        refusal = None
        if name == "complete":
            if frame.kind == "main":
                refusal = f"Tool '{name}' is not available to this agent"
            else:
                result = data.get("result")
                text = "" if result is None else result if isinstance(result, str) else \
                    json.dumps(result, separators=(",", ":"), sort_keys=True)
                self.add_result(c, frame, use["id"], text, False, io)
                for rest in unresolved(frame.messages):
                    self.add_result(c, frame, rest["id"], SKIPPED_AFTER_COMPLETE, True, io)
                return Turn("complete", text)
        elif name in ("use_skill", "use_agent"):
            spawned = self.spawn(frame, use, data)
            if isinstance(spawned, Frame):
                return Turn("child", child=spawned)
            refusal = spawned
        elif name == "ask_user":
            if not isinstance(data.get("question"), str):
                refusal = "Missing required field: question"
            elif self.hello.settings.query_user == "none":
                self.add_result(c, frame, use["id"], NO_ANSWER, False, io)
                return None
            else:
                frame.asking = use["id"]
                return Turn("ask", question_text(data))
        elif self.hello.tool(name) is None:
            refusal = f"Tool '{name}' not found"
        elif name not in self.hello.agent(frame.agent).tools:
            refusal = f"Tool '{name}' is not available to this agent"
        else:
            self.run_external(c, frame, use, io)
            return None
        self.add_result(c, frame, use["id"], refusal, True, io)
        return None

    def run_external(self, c: Conversation, frame: Frame, use: dict[str, Any], io: IO) -> None:
        """Runs the scenario's tool through agentsim; with parallel_tools, every consecutive
        external tool use of the reply at once, their results in the reply's order."""
        batch = [use]
        if self.hello.agent(frame.agent).parallel_tools:
            allowed = self.hello.agent(frame.agent).tools
            for rest in unresolved(frame.messages)[1:]:
                if self.hello.tool(rest["name"]) is None or rest["name"] not in allowed:
                    break
                batch.append(rest)
        calls = [ToolCall(u["name"], u["input"], timeout=io.tool_timeout(u["name"])) for u in batch]
        results = io.tools(calls, agent=frame.agent, conversation=c.key)
        for u, r in zip(batch, results):
            if r.timed_out:
                self.add_result(c, frame, u["id"], timed_out(u["name"], self.hello.tool(u["name"]).timeout_ms),
                                True, io)
            elif r.failed:
                self.add_result(c, frame, u["id"], f"Tool execution failed: {r.content}", True, io)
            else:
                self.add_result(c, frame, u["id"], r.content, r.is_error, io)
        self.save()  # a restart from here does not run them again

    def spawn(self, frame: Frame, use: dict[str, Any], data: dict[str, Any]) -> Frame | str:
        """A child frame for use_skill/use_agent, or the refusal text (no stack change)."""
        kind = "skill" if use["name"] == "use_skill" else "agent"
        if kind == "skill" and frame.kind == "skill":
            return SKILL_CANNOT_USE_SKILL
        for required in (kind, "message"):
            if not isinstance(data.get(required), str):
                return f"Missing required field: {required}"
        names = sorted(a.name for a in self.hello.agents if a.kind == kind)
        target = data[kind]
        if target not in names:
            return f"{kind.capitalize()} '{target}' not found. Available: {', '.join(names)}"
        if kind == frame.kind and target == frame.agent:
            return f"Agent '{target}' cannot invoke itself"
        child = self.hello.agent(target)
        messages = [{"role": "user", "content": [{"type": "text", "text": data["message"]}]}]
        return Frame(child.name, child.frame, kind, messages, child.max_iterations,
                     parent_tool_use_id=use["id"])


if __name__ == "__main__":
    run(StackRuntime())
