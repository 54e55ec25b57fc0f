"""The ``ptxbench`` command: a thin layer over the Python API. Rendering lives here, logic does not."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ptxbench.arch.registry import Arch
from ptxbench.errors import PtxbenchError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?")
tasks_app = typer.Typer(no_args_is_help=True, help="The bundled task suite.")
app.add_typer(tasks_app, name="tasks")
console = Console()


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="Print the report as JSON.")) -> None:
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
    console.print("static checks (ptxbench check): " + ("[green]ready[/green]" if report.can_check else "[red]not ready[/red]"))


@tasks_app.command("list")
def tasks_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the bundled tasks."""
    from ptxbench.tasks.loader import bundled_suite

    suite = bundled_suite()
    if as_json:
        print(json.dumps([{"id": t.id, "family": t.family.value, "title": t.title, "hash": t.content_hash}
                          for t in suite], indent=2))
        return
    table = Table("id", "family", "title", "workloads (timed/visible/held-out)")
    for task in suite:
        visible = len(task.shown()) - 1
        table.add_row(task.id, task.family.value, task.title, f"1 / {visible} / {len(task.held_out())}")
    console.print(table)


@tasks_app.command("show")
def tasks_show(task: str = typer.Argument(..., help="Task id or path to a task .toml"),
               as_json: bool = typer.Option(False, "--json")) -> None:
    """Show one task in full (held-out workloads included: this is the maintainer's view)."""
    from ptxbench.tasks.loader import get_task

    loaded = get_task(task)
    if as_json:
        print(loaded.model_dump_json(indent=2))
        return
    console.print(f"[bold]{loaded.id}[/bold] — {loaded.title}  [dim]{loaded.content_hash[:16]}[/dim]")
    console.print(loaded.statement, highlight=False)
    table = Table("workload", "role", "sizes", "GFLOP", "MB moved")
    for w in loaded.workloads:
        table.add_row(w.name, w.role.value, ", ".join(f"{k}={v}" for k, v in w.sizes.items()),
                      f"{loaded.flops_for(w.sizes) / 1e9:,.1f}", f"{loaded.bytes_for(w.sizes) / 1e6:,.1f}")
    console.print(table)
    for arch, requirements in loaded.requirements.items():
        console.print(f"[bold]{arch.value}[/bold] requires: " + "; ".join(
            r.label + (f" (≥{r.min_flop_share:.0%} of FLOPs)" if r.min_flop_share else "") for r in requirements))


@app.command()
def prompt(task: str = typer.Argument(..., help="Task id or path to a task .toml"),
           arch: Arch = typer.Option(Arch.SM_90A, "--arch")) -> None:
    """Print exactly what a model is given for TASK."""
    from ptxbench.prompt import render_task_prompt
    from ptxbench.tasks.loader import get_task

    print(render_task_prompt(get_task(task), arch))


@app.command()
def check(
    files: list[Path] = typer.Argument(..., help="Candidate .cu files (or directories of them)"),
    task: Optional[str] = typer.Option(None, "--task", help="Judge against this task's requirements; "
                                       "'auto' takes the task whose id is the file's name"),
    arch: Arch = typer.Option(Arch.SM_90A, "--arch", help="Target (sm_90 / sm_100 only to diagnose)"),
    as_json: bool = typer.Option(False, "--json", help="Print the reports as JSON"),
    jobs: Optional[int] = typer.Option(None, "--jobs", help="Parallel builds (default: CPU count)"),
    no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild even if an identical build is cached"),
) -> None:
    """Compile candidates for one target and report their PTX/SASS evidence (no GPU needed)."""
    from ptxbench.check import check_files
    from ptxbench.render import render_check
    from ptxbench.tasks.loader import get_task

    paths = _expand(files)
    items = [(path, _task_for(path, task, get_task)) for path in paths]
    reports = check_files(items, arch, jobs=jobs, use_cache=not no_cache)
    if as_json:
        payload = [json.loads(r.model_dump_json()) for r in reports]
        print(json.dumps(payload if len(payload) > 1 else payload[0], indent=2))
    else:
        for report in reports:
            render_check(console, report)
    if not all(r.build.ok for r in reports):
        raise typer.Exit(1)


def _expand(files: list[Path]) -> list[Path]:
    paths: list[Path] = []
    for item in files:
        if item.is_dir():
            paths += sorted(item.glob("*.cu"))
        elif item.exists():
            paths.append(item)
        else:
            _fail(f"{item}: no such file or directory")
    if not paths:
        _fail("no candidate files found")
    return paths


def _task_for(path: Path, task: str | None, get_task):  # type: ignore[no-untyped-def]
    if task is None:
        return None
    return get_task(path.stem if task == "auto" else task)


def main() -> None:
    try:
        app()
    except PtxbenchError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
