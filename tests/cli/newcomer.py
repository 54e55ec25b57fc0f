"""The command line as a newcomer meets it: a real process, no TTY, 80 columns (pipes, CI logs).

Each test of this package drives `python -m ptxbench` through ``cli`` and checks the exact verdict, exit
code and one-line message a user sees; one module per area of the newcomer issue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

COLUMNS = 80


def cli(*args: str, cwd: str | Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``ptxbench ARGS`` as a user runs it: stdin closed, stdout and stderr captured (so no TTY)."""
    environment = {**os.environ, "COLUMNS": str(COLUMNS), **(env or {})}
    environment.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "ptxbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=environment, cwd=cwd, stdin=subprocess.DEVNULL)


def one_line(text: str) -> str:
    """Text as one line: rich wraps long messages at 80 columns, which a reader sees as one message."""
    return " ".join(text.split())


def widest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)
