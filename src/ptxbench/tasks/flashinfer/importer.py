"""Import FlashInfer-Trace definitions as PTXBench tasks: one definition with its workload files, or a whole
dataset folder, which writes one task file per definition and a summary of what imported and why the rest
did not (``ImportSummary``, versioned and checked on read), and why an imported task whose definition names a
FlashInfer API (``fi_api``) has no FlashInfer baseline beside its reference."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field, ValidationError

from ptxbench._io import write_atomic
from ptxbench.errors import TaskError
from ptxbench.tasks.flashinfer.blobs import BlobReader
from ptxbench.tasks.flashinfer.dataset import read_dataset, root_of
from ptxbench.tasks.flashinfer.fi_api import ApiBaseline
from ptxbench.tasks.flashinfer.mapping import task_data
from ptxbench.tasks.flashinfer.schema import Definition, ImportProblem, WorkloadSpec, read_definition, read_workloads
from ptxbench.tasks.flashinfer.toml_text import to_toml
from ptxbench.tasks.loader import parse_task
from ptxbench.tasks.model import Task

SUMMARY_NAME = "import-summary.json"


class ImportedTask(NamedTuple):
    task: Task
    text: str  # the task file
    flashinfer: ApiBaseline  # the FlashInfer call timed beside the reference, or why there is none


def import_one(definition: Definition, workloads: list[WorkloadSpec], blobs: BlobReader,
               flops: str | None = None, origin: str = "") -> ImportedTask:
    """The task and its TOML text, checked by loading the text as any task file is loaded."""
    data, api = task_data(definition, workloads, blobs, flops)
    text = to_toml(data)
    try:
        task = parse_task(text, f"the task imported from {origin or definition.name}")
    except TaskError as exc:
        raise ImportProblem(str(exc)) from None
    return ImportedTask(task, text, api)


def import_definition(definition_path: Path, workload_paths: list[Path], flops: str | None = None,
                      root: Path | None = None) -> ImportedTask:
    """One definition file and its workload-trace files (blob paths relative to ``root``, by default the
    dataset folder the first workload file lies in)."""
    definition = read_definition(definition_path)
    workloads = [t.workload for path in workload_paths for t in read_workloads(path, definition.name)]
    base = root if root is not None else root_of(workload_paths[0]) if workload_paths else definition_path.parent
    return import_one(definition, workloads, BlobReader(base), flops, definition_path.name)


class ImportOutcome(BaseModel):
    """What became of one definition file."""

    definition: str = Field(description="The definition's name (its file name where it could not be read).")
    op_type: str | None = None
    path: str = Field(description="The definition file, relative to the dataset root.")
    task_file: str | None = Field(default=None, description="The task file written, relative to the output folder.")
    task_id: str | None = None
    workloads: int = Field(default=0, description="Distinct workloads the task has.")
    layouts_from_blobs: int = Field(default=0, description="Workloads whose index inputs came from the trace's blobs.")
    solutions: int = Field(default=0, description="Solutions the dataset has for the definition (not imported).")
    refused: str | None = Field(default=None, description="Why it did not import; None when it did.")
    fi_api: str | None = Field(default=None, description="The FlashInfer API the definition names (its fi_api tag).")
    fi_api_refused: str | None = Field(default=None, description=(
        "Why the task has no FlashInfer baseline beside its reference though the definition names an API; None "
        "when it has one, names none or did not import."))


class ImportSummary(BaseModel):
    """The record ``tasks import DIR --out OUT`` leaves in OUT."""

    version: Literal[1] = 1
    source: str = Field(description="The dataset folder read.")
    outcomes: list[ImportOutcome]
    unreadable: list[str] = Field(default_factory=list, description="Workload or solution files that could not be "
                                  "read, each with why (their definitions are then without those workloads).")

    @property
    def imported(self) -> list[ImportOutcome]:
        return [o for o in self.outcomes if o.refused is None]

    def by_op_type(self) -> dict[str, tuple[int, int]]:
        """(imported, total) per op type."""
        totals = Counter(o.op_type or "?" for o in self.outcomes)
        done = Counter(o.op_type or "?" for o in self.imported)
        return {op: (done[op], totals[op]) for op in sorted(totals)}

    def flashinfer_refusals(self) -> list[tuple[str, int]]:
        """Why imported tasks whose definitions name a FlashInfer API have no FlashInfer baseline, most frequent first."""
        return Counter(o.fi_api_refused for o in self.imported if o.fi_api_refused).most_common()

    def reasons(self) -> list[tuple[str, int]]:
        """Refusal reasons with the definition's own names taken out, most frequent first."""
        counted: Counter[str] = Counter()
        for outcome in self.outcomes:
            if outcome.refused is not None:
                counted[outcome.refused.replace(outcome.definition, "<definition>")] += 1
        return counted.most_common()


def import_dataset(root: Path, out: Path, flops: str | None = None) -> ImportSummary:
    """Every definition of the dataset at ``root`` that can become a task, as ``out/<op_type>/<id>.toml``; the
    summary is written to ``out/import-summary.json`` and returned."""
    dataset = read_dataset(root)
    blobs = BlobReader(root)
    outcomes = []
    for entry in dataset.definitions:
        relative = str(entry.path.relative_to(root))
        if entry.definition is None:
            outcomes.append(ImportOutcome(definition=entry.path.stem, path=relative, refused=entry.problem))
            continue
        definition = entry.definition
        outcome = ImportOutcome(definition=definition.name, op_type=definition.op_type, path=relative,
                                solutions=dataset.solutions.get(definition.name, 0))
        try:
            imported = import_one(definition, dataset.workloads.get(definition.name, []), blobs, flops, relative)
        except ImportProblem as exc:
            outcomes.append(outcome.model_copy(update={"refused": str(exc)}))
            continue
        task_file = Path(definition.op_type) / f"{imported.task.id}.toml"
        write_atomic(out / task_file, imported.text)
        from_blobs = sum("from the trace's blobs" in w.note for w in imported.task.workloads)
        outcomes.append(outcome.model_copy(update={"task_file": str(task_file), "task_id": imported.task.id,
                                                   "workloads": len(imported.task.workloads),
                                                   "layouts_from_blobs": from_blobs, "fi_api": imported.flashinfer.tag,
                                                   "fi_api_refused": imported.flashinfer.refused}))
    summary = ImportSummary(source=str(root), outcomes=outcomes, unreadable=dataset.problems)
    write_atomic(out / SUMMARY_NAME, summary.model_dump_json(indent=2) + "\n")
    return summary


def load_summary(path: Path) -> ImportSummary:
    try:
        return ImportSummary.model_validate_json(path.read_text())
    except OSError as exc:
        raise ImportProblem(f"cannot read {path}: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ImportProblem(f"{path}: not an import summary: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def summary_json(summary: ImportSummary) -> str:
    return json.dumps(summary.model_dump(mode="json"), indent=2)
