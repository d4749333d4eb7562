"""The end-to-end tests' setup: the agentsim binary found as the helper's own tests find it
(AGENTSIM_BIN, else the agentsim wheel's or agentsim on PATH, else the repository's
target/release)."""

from __future__ import annotations

import os
from pathlib import Path

from agentsim_runtime import find_agentsim

REPO = Path(__file__).resolve().parents[4]


def pytest_configure() -> None:
    if find_agentsim() is not None:
        return
    built = REPO / "target" / "release" / "agentsim"
    if built.is_file():
        os.environ["AGENTSIM_BIN"] = str(built)
