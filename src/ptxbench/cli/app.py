"""The ``ptxbench`` command assembled: one module per command or group, registered here in the order
``--help`` lists them. Rendering lives in the command modules; logic lives in the Python API."""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from ptxbench.cli import cache, fixit, tasks
from ptxbench.cli.check import check
from ptxbench.cli.doctor import doctor
from ptxbench.cli.eval import evaluate
from ptxbench.cli.generate import generate, run
from ptxbench.cli.metrics import compare, leaderboard, metrics
from ptxbench.cli.output import OutputClosed, console, error_line
from ptxbench.cli.prompt import prompt
from ptxbench.cli.report import report
from ptxbench.cli.serve import serve
from ptxbench.errors import PtxbenchError



@contextmanager
def _reader_may_leave() -> Iterator[None]:
    """A write to a closed stdout becomes ``OutputClosed`` before click sees it (click exits 1 on it). Only
    stdout's: a pipe of the command's own that broke (a worker's, a server's connection) is a failure, left
    as it is."""
    try:
        yield
    except BrokenPipeError as exc:
        if _reader_gone(sys.stdout):
            raise OutputClosed from exc
        raise


def _reader_gone(stream: Any) -> bool:
    """Whether ``stream`` is a pipe (or socket) whose reading end is closed: poll says so without writing."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


class _Commands(TyperGroup):
    """The top-level group: a closed stdout while parsing (``--help``) or running any command is ``OutputClosed``."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _reader_may_leave():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _reader_may_leave():
            return super().invoke(ctx)


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True,
                  help="PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?")
app.add_typer(tasks.app, name="tasks")
app.add_typer(fixit.app, name="fixit")
app.add_typer(cache.app, name="cache")


def _version(shown: bool) -> None:
    if shown:
        from ptxbench import __version__

        console.print(f"ptxbench {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    """PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?"""


app.command()(doctor)
app.command()(prompt)
app.command()(check)
app.command("eval")(evaluate)
app.command()(report)
app.command()(metrics)
app.command()(compare)
app.command()(leaderboard)
app.command()(generate)
app.command()(run)
app.command()(serve)


def _bare_flags(command: click.Command) -> None:
    """typer's help labels every on/off flag ``<bool>``, as if it took a value, which it refuses
    (``--dry-run true``): show the flags of ``command`` and its subcommands bare, as what they are."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for subcommand in getattr(command, "commands", {}).values():
        _bare_flags(subcommand)


def main() -> None:
    """The console entry point: a ``PtxbenchError`` from the API is the user's one-line error, exit code 2.

    A reader that stops reading (``ptxbench prompt TASK | head``, ``... | grep -m1``) ends the command quietly
    with exit code 0, for every command, so a pipeline under ``set -o pipefail`` is not failed by a reader
    that took what it wanted: the command wrote all that was read, and nothing it was asked for failed (an
    ``eval`` or ``run`` stopped that way resumes where it stopped). Not 141 (a death by SIGPIPE), which
    pipefail counts as a failure."""
    try:
        code = _run()
    except OutputClosed:
        _discard_output()
        code = 0
    sys.exit(code)


def _run() -> int | str | None:
    """The command's exit code (``SystemExit``'s), once what it printed has left the buffer: a pipe closed
    before the last write is found here, not in the interpreter's final flush (exit code 120 and a warning)."""
    try:
        command = typer.main.get_command(app)
        _bare_flags(command)
        command()
        code: int | str | None = 0
    except SystemExit as exc:
        code = exc.code
    except PtxbenchError as exc:
        error_line(str(exc))
        code = 2
    try:
        sys.stdout.flush()
    except BrokenPipeError as exc:  # stdout's own buffer: its reader left before the last lines
        raise OutputClosed from exc
    try:
        sys.stderr.flush()
    except BrokenPipeError:  # no reader for the notes: the exit code stands
        _discard_output()
    return code


def _discard_output() -> None:
    """stdout and stderr to /dev/null: what is still buffered for the departed reader is dropped without a
    'BrokenPipeError' warning when the interpreter flushes them at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # a stream without a file descriptor (replaced by a test): nothing to flush
            pass
    os.close(devnull)
