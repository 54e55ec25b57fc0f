"""Where the command line writes: results to stdout, errors and notes to stderr (so piped results stay
clean), and the one-line failure every command ends with on bad input."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape



class OutputClosed(Exception):
    """The reader of stdout or stderr went away (``ptxbench prompt TASK | head``): not a failure of the command.
    Raised in place of ``BrokenPipeError``, which click turns into exit code 1; ``ptxbench.cli.app.main`` ends
    the command quietly with exit code 0."""


class _Console(Console):
    """rich's console, except for a closed pipe (rich's own answer is exit code 1): a closed stdout is
    ``OutputClosed``, the end of the command; a closed stderr is no reason to stop, nor to change the exit code
    (a bad input still exits 2), so its notes and errors are dropped from then on."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written through this console
        if not self.stderr:
            raise OutputClosed


console: Console = _Console()
errors: Console = _Console(stderr=True)


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
