"""``ptxbench report``: a run's Markdown report and one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.output import console, errors


def report(run_dir: Annotated[Path, typer.Argument(help="A run directory (eval, run or generate)")],
           out: Annotated[Optional[Path], typer.Option("--out", help="Where to write report.md and report.html")
                          ] = None) -> None:
    """Write a Markdown report and one self-contained HTML page with plots for a run."""
    from ptxbench.results.attempts import DamagedItem
    from ptxbench.results.report import PLOTS_NEED_MATPLOTLIB, plots_available, write_report

    def warn(damaged: DamagedItem) -> None:
        errors.print(f"warning: {damaged.path}: {damaged.reason}; left out of the report (which names it)",
                     markup=False, highlight=False, soft_wrap=True)

    files = write_report(run_dir, out, on_damaged=warn)
    if not plots_available():
        errors.print(f"note: {PLOTS_NEED_MATPLOTLIB}; the report has its tables, without plots", markup=False,
                     highlight=False, soft_wrap=True)
    console.print(f"wrote {files.markdown} and {files.html}", highlight=False)
