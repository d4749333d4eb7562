// aimock serving the reply of `agentsim bench mock-llm`, for the comparison in
// benches/mock-llm/compare.sh. Usage: node aimock.mjs PORT (aimock installed next to it, or
// NODE_PATH pointing at its node_modules).
import { LLMock } from "@copilotkit/aimock";

const port = Number(process.argv[2] ?? 0);
// The journal kept small, as a long benchmark would otherwise grow it without bound.
const mock = new LLMock({ port, host: "127.0.0.1", logLevel: "silent", journalMaxEntries: 1000 });
mock.onMessage("weather", { content: "It is 18 C and cloudy in Paris." });
await mock.start();
console.log(`listening on ${mock.url}`);
