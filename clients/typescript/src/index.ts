/**
 * Test your agent runtime with agentsim.
 *
 * - {@link run} speaks agentsim's runtime protocol (docs/runtime-protocol.md) on stdin/stdout, so
 *   that a runtime is one function `onUser(conversation, text, io)`.
 * - {@link runScenario} runs a scenario against a runtime with `agentsim run --runtime` and parses
 *   the report.
 * - {@link MockLlm} starts `agentsim mock-llm` on a free port, for a test that drives the runtime
 *   itself and needs only the model side.
 * - `agentsim-runtime/testing` (a module of its own, so that a runtime never loads `node:test`):
 *   `agentsimRun` fails a `node:test` test with the report when the run fails.
 */

export {
  type Awaitable,
  type ConversationOption,
  type EndedFrame,
  EXIT_PROTOCOL_ERROR,
  type FrameReport,
  Interrupted,
  IO,
  type OnUser,
  run,
  runFresh,
  type RunOptions,
  type Runtime,
  ShutdownRequested,
  type ToolCall,
  type ToolOptions,
  type ToolResult,
} from "./loop.js";
export {
  AGENT_HEADER,
  type AgentInfo,
  CAPABILITIES,
  CONVERSATION_HEADER,
  type Capability,
  decode,
  encode,
  Hello,
  type Json,
  type JsonObject,
  MAX_LINE,
  type Message,
  modelHeaders,
  PROTOCOL,
  ProtocolError,
  type Settings,
  type ToolInfo,
  type ToolResultMessage,
  type UserMessage,
} from "./protocol.js";
export { MockLlm, type MockLlmOptions, type MockLlmReport } from "./mock-llm.js";
export {
  AgentsimError,
  BIN_ENV,
  type Failure,
  findAgentsim,
  NotRunnable,
  type Report,
  runScenario,
  type RunResult,
  type RunScenarioOptions,
  shellJoin,
} from "./runs.js";
