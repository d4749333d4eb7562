"""The end-to-end tests' setup: `driver` importable, and the agentsim binary found as the helper's
own tests find it (AGENTSIM_BIN, else agentsim on PATH, else the repository's target/release)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(HERE))


def pytest_configure() -> None:
    if os.environ.get("AGENTSIM_BIN") or shutil.which("agentsim"):
        return
    built = REPO / "target" / "release" / "agentsim"
    if built.is_file():
        os.environ["AGENTSIM_BIN"] = str(built)
