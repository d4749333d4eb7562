"""Finds the agentsim binary for the tests of the mock_llm fixture: ``AGENTSIM_BIN``, else
``agentsim`` on ``PATH``, else the repository's own release build (``target/release/agentsim``,
which CI builds before it runs these tests)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]


def pytest_configure() -> None:
    if os.environ.get("AGENTSIM_BIN") or shutil.which("agentsim"):
        return
    built = REPO / "target" / "release" / "agentsim"
    if built.is_file():
        os.environ["AGENTSIM_BIN"] = str(built)
