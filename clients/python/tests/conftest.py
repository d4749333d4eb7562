"""Finds the agentsim binary for the tests of the mock_llm fixture: ``AGENTSIM_BIN``, else
the ``agentsim`` wheel's or ``agentsim`` on ``PATH`` (``find_agentsim``), else the repository's own release build (``target/release/agentsim``,
which CI builds before it runs these tests)."""

from __future__ import annotations

import os
from pathlib import Path

from agentsim_runtime import find_agentsim

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]


def pytest_configure() -> None:
    if find_agentsim() is not None:
        return
    built = REPO / "target" / "release" / "agentsim"
    if built.is_file():
        os.environ["AGENTSIM_BIN"] = str(built)
