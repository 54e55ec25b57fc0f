"""Candidate files named on the command line: folders expanded, and each file's task found (``--task auto``
takes it from the file name)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ptxbench.cli.output import errors, fail
from ptxbench.errors import PtxbenchError

if TYPE_CHECKING:
    from ptxbench.evaluate.fleet.run import Candidate
    from ptxbench.tasks.model import Task

TaskLookup = Callable[[str], "Task"]


def expand(files: list[Path]) -> list[Path]:
    """Each folder's ``*.cu`` files in name order, each file as given; a missing path fails the command."""
    paths: list[Path] = []
    for item in files:
        if item.is_dir():
            paths += sorted(item.glob("*.cu"))
        elif item.exists():
            paths.append(item)
        else:
            fail(f"{item}: no such file or directory")
    if not paths:
        fail("no candidate files (*.cu) found in " + ", ".join(str(f) for f in files))
    return paths


def candidates_in(path: Path, task: str, get_task: TaskLookup) -> list[Candidate]:
    """The candidate files of ``path``; with ``--task auto`` a file whose name is no task is skipped with a
    warning saying so, and the folder's other files are still evaluated."""
    from ptxbench.evaluate.fleet.run import candidate_from_file

    found = []
    for file in expand([path]):
        try:
            chosen = get_task(file.stem if task == "auto" else task)
        except PtxbenchError as exc:
            if task != "auto":
                raise
            errors.print(f"[yellow]warning:[/yellow] {file}: skipped: its task is taken from the file name "
                         f"({file.stem!r}), which names no task ({exc}); pass --task TASK", highlight=False,
                         soft_wrap=True)
            continue
        found.append(candidate_from_file(file, chosen))
    return found


def task_for(path: Path, task: Optional[str], get_task: TaskLookup) -> Optional[Task]:
    """The task ``path`` is judged against: none (report every feature found), a named one, or its name's."""
    if task is None:
        return None
    return get_task(path.stem if task == "auto" else task)
