"""Where the command line writes: results to stdout, errors and notes to stderr (so piped results stay
clean), and the one-line failure every command ends with on bad input."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
errors = Console(stderr=True)


def error_line(message: str) -> None:
    """``error: MESSAGE`` on stderr, never wrapped by rich into something that reads as two messages."""
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    """Bad input: one line on stderr and exit code 2, never a traceback."""
    error_line(message)
    raise typer.Exit(2)


def run_directory(path: Path) -> None:
    """The run's folder on a line of its own, never wrapped (a pipe is 80 columns): a path cut in two cannot
    be copied back into the next command."""
    console.print(f"run directory: {path}", highlight=False, markup=False, soft_wrap=True)


def entries(count: int) -> str:
    return "1 entry" if count == 1 else f"{count} entries"
