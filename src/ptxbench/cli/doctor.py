"""``ptxbench doctor``: what this machine has for the benchmark (toolchain, GPU, versions), rendered."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from ptxbench.cli.output import console


def doctor(as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False) -> None:
    """Check the toolchain, the GPU and the versions; say what is missing and how to get it."""
    from ptxbench.doctor import run_doctor

    report = run_doctor()
    if as_json:
        print(report.model_dump_json(indent=2))
        return
    table = Table("check", "ok", "detail / fix")
    for check in report.checks:
        table.add_row(check.name, "[green]yes[/green]" if check.ok else "[red]no[/red]",
                      check.detail if check.ok else f"{check.detail} — {check.fix or ''}")
    console.print(f"ptxbench {report.ptxbench} on Python {report.python}")
    console.print(table)
    ready = "[green]ready[/green]" if report.can_check else "[red]not ready[/red]"
    console.print("static checks (ptxbench check): " + ready)
