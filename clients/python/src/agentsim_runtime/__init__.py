"""Test your agent runtime with agentsim.

- :func:`run` speaks agentsim's runtime protocol (docs/runtime-protocol.md) on stdin/stdout, so
  that a runtime is one function ``on_user(conversation, text, io)``.
- :func:`run_scenario` runs a scenario against a runtime with ``agentsim run --runtime`` and
  parses the report; the pytest plugin's ``agentsim_run`` fixture fails the test when it fails.
- :class:`MockLlm` starts ``agentsim mock-llm`` on a free port; the pytest plugin
  (``agentsim_runtime.pytest_plugin``, loaded by pytest itself) wraps it as the ``mock_llm``
  fixture, which fails the test when the server's report fails.
"""

from .loop import IO, Interrupted, Runtime, ShutdownRequested, ToolCall, ToolResult, run, run_fresh
from .mock_llm import MockLlm, MockLlmError, Report, find_agentsim
from .runs import NotRunnable, RunResult, run_scenario
from .protocol import (
    AGENT_HEADER,
    CAPABILITIES,
    CONVERSATION_HEADER,
    MAX_LINE,
    PROTOCOL,
    AgentInfo,
    Hello,
    ProtocolError,
    Settings,
    ToolInfo,
    UserMessage,
    model_headers,
)

__all__ = [
    "AGENT_HEADER",
    "CAPABILITIES",
    "CONVERSATION_HEADER",
    "IO",
    "MAX_LINE",
    "PROTOCOL",
    "AgentInfo",
    "Hello",
    "Interrupted",
    "MockLlm",
    "MockLlmError",
    "NotRunnable",
    "ProtocolError",
    "Report",
    "RunResult",
    "Runtime",
    "Settings",
    "ShutdownRequested",
    "ToolCall",
    "ToolInfo",
    "ToolResult",
    "UserMessage",
    "find_agentsim",
    "model_headers",
    "run",
    "run_fresh",
    "run_scenario",
]

__version__ = "0.1.0"
