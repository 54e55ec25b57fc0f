"""Load tasks from TOML files: the bundled suite, or any file a user points at."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from ptxbench._compat import tomllib
from ptxbench.errors import TaskError
from ptxbench.tasks.model import Family, Task


def parse_task(text: str, origin: str) -> Task:
    """Validate one task's TOML text; every problem is reported with its location in one message."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{origin}: not valid TOML: {exc}") from None
    try:
        return Task.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(task)'}: {err['msg']}" for err in exc.errors()
        )
        raise TaskError(f"{origin}: invalid task: {problems}") from None


def load_task_file(path: Path | str) -> Task:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TaskError(f"cannot read task file {path}: {exc.strerror}") from None
    return parse_task(text, str(path))


@cache
def bundled_suite() -> tuple[Task, ...]:
    """The tasks shipped with PTXBench, in file-name order."""
    folder = resources.files("ptxbench.tasks").joinpath("suite")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    tasks = tuple(parse_task(f.read_text(), f"suite/{f.name}") for f in files)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise TaskError(f"bundled suite has duplicate task ids: {ids}")
    return tasks


def get_task(task_id_or_path: str) -> Task:
    """A bundled task by id, or a task file by path."""
    if task_id_or_path.endswith(".toml") or Path(task_id_or_path).is_file():
        return load_task_file(task_id_or_path)
    for task in bundled_suite():
        if task.id == task_id_or_path:
            return task
    known = ", ".join(t.id for t in bundled_suite())
    raise TaskError(f"unknown task {task_id_or_path!r}; bundled tasks: {known}")


def by_family(tasks: tuple[Task, ...] | list[Task]) -> dict[Family, list[Task]]:
    """Tasks grouped by family, families in their declared order, tasks in their given order within one."""
    order = list(Family)
    groups: dict[Family, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: order.index(t.family)):
        groups.setdefault(task.family, []).append(task)
    return groups
