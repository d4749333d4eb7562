"""The end-to-end tests' setup: the agentsim binary found as the helper's own tests find it
(AGENTSIM_BIN, else agentsim on PATH, else the repository's target/release)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def pytest_configure() -> None:
    if os.environ.get("AGENTSIM_BIN") or shutil.which("agentsim"):
        return
    built = REPO / "target" / "release" / "agentsim"
    if built.is_file():
        os.environ["AGENTSIM_BIN"] = str(built)
