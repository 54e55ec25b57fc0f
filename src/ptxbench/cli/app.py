"""The ``ptxbench`` command assembled: one module per command or group, registered here in the order
``--help`` lists them. Rendering lives in the command modules; logic lives in the Python API."""

from __future__ import annotations

import sys
from typing import Annotated

import click
import typer

from ptxbench.cli import cache, fixit, tasks
from ptxbench.cli.check import check
from ptxbench.cli.doctor import doctor
from ptxbench.cli.eval import evaluate
from ptxbench.cli.generate import generate, run
from ptxbench.cli.metrics import compare, leaderboard, metrics
from ptxbench.cli.output import console, error_line
from ptxbench.cli.prompt import prompt
from ptxbench.cli.report import report
from ptxbench.cli.serve import serve
from ptxbench.errors import PtxbenchError

app = typer.Typer(add_completion=False, no_args_is_help=True,
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
    """The console entry point: a ``PtxbenchError`` from the API is the user's one-line error, exit code 2."""
    try:
        command = typer.main.get_command(app)
        _bare_flags(command)
        command()
    except PtxbenchError as exc:
        error_line(str(exc))
        sys.exit(2)
