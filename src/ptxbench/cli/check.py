"""``ptxbench check``: build candidates for one target and report their PTX/SASS evidence (no GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.arch.registry import Arch
from ptxbench.cli.files import expand, task_for
from ptxbench.cli.output import console


def check(
    files: Annotated[list[Path], typer.Argument(help="Candidate .cu files (or directories of them)")],
    task: Annotated[Optional[str], typer.Option("--task", help="Judge against this task's requirements; "
                                                "'auto' takes the task whose id is the file's name")] = None,
    arch: Annotated[Arch, typer.Option("--arch", help="Target (sm_90 / sm_100 only to diagnose)")] = Arch.SM_90A,
    as_json: Annotated[bool, typer.Option("--json", help="Print the reports as JSON")] = False,
    jobs: Annotated[Optional[int], typer.Option("--jobs", help="Parallel builds (default: CPU count)")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild even if an identical build is cached")] = False,
) -> None:
    """Compile candidates for one target and report their PTX/SASS evidence (no GPU needed)."""
    from ptxbench.check import check_files
    from ptxbench.results.terminal import render_check
    from ptxbench.tasks.loader import get_task

    paths = expand(files)
    items = [(path, task_for(path, task, get_task)) for path in paths]
    reports = check_files(items, arch, jobs=jobs, use_cache=not no_cache)
    if as_json:
        payload = [json.loads(r.model_dump_json()) for r in reports]
        print(json.dumps(payload if len(payload) > 1 else payload[0], indent=2))
    else:
        for report in reports:
            render_check(console, report)
    if not all(r.build.ok for r in reports):
        raise typer.Exit(1)
