"""A FlashInfer-Trace dataset folder as laid out on Hugging Face, read from a local path (nothing is fetched):

    definitions/<op_type>/<definition>.json
    workloads/<op_type>/<definition>.jsonl          workload traces; safetensors inputs name files under blob/
    blob/workloads/<op_type>/<definition>/*.safetensors
    solutions/<author>/<op_type>/<definition>/<solution>.json   (where present; counted only)

Files are found at any depth below the three folders, so the older flat layout (``definitions/*.json``) reads
the same. Blob paths are relative to the dataset root.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from ptxbench.tasks.flashinfer.schema import (Definition, ImportProblem, WorkloadSpec, read_definition,
                                              read_solution, read_workloads)


class DefinitionFile(NamedTuple):
    path: Path
    definition: Definition | None
    problem: str | None  # why the file is not a definition


class Dataset(NamedTuple):
    root: Path
    definitions: list[DefinitionFile]
    workloads: dict[str, list[WorkloadSpec]]  # by definition name, in file order
    solutions: dict[str, int]  # how many solutions each definition has
    problems: list[str]  # workload or solution files that could not be read


def is_dataset(path: Path) -> bool:
    return (path / "definitions").is_dir()


def read_dataset(root: Path) -> Dataset:
    if not root.is_dir():
        raise ImportProblem(f"{root} is not a folder")
    if not is_dataset(root):
        raise ImportProblem(f"{root} has no definitions/ folder: a FlashInfer-Trace dataset has definitions/, "
                            "workloads/ and blob/ (and solutions/) at its top")
    definitions = []
    for path in sorted((root / "definitions").rglob("*.json")):
        try:
            definitions.append(DefinitionFile(path, read_definition(path), None))
        except ImportProblem as exc:
            definitions.append(DefinitionFile(path, None, str(exc)))
    workloads: dict[str, list[WorkloadSpec]] = defaultdict(list)
    problems = []
    for path in sorted((root / "workloads").rglob("*.jsonl")) if (root / "workloads").is_dir() else []:
        try:
            for trace in read_workloads(path):
                workloads[trace.definition].append(trace.workload)
        except ImportProblem as exc:
            problems.append(str(exc))
    solutions: dict[str, int] = defaultdict(int)
    for path in sorted((root / "solutions").rglob("*.json")) if (root / "solutions").is_dir() else []:
        try:
            solutions[read_solution(path).definition] += 1
        except ImportProblem as exc:
            problems.append(str(exc))
    return Dataset(root, definitions, dict(workloads), dict(solutions), problems)


def root_of(workload_file: Path) -> Path:
    """The dataset root a lone workload file's blob paths are relative to: the nearest folder above it that holds
    ``blob/`` or ``definitions/``, else the file's own folder."""
    for folder in workload_file.resolve().parents:
        if (folder / "blob").is_dir() or (folder / "definitions").is_dir():
            return folder
    return workload_file.resolve().parent
