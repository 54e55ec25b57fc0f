"""How good each task's vendor baseline is: the best baseline's share of its roofline per workload, published by
``benchmarks/baselines.py`` as package data (``baseline_quality.json``), and the one rule that calls it weak.

It lives with the tasks, below the prompts, because the prompt says so too: where the best baseline is weak a
speedup over it flatters, so the task's speed verdict is its SOL score, and ``tasks list``, the prompt, ``eval``
and the report all say it from this one rule (``weak_baseline``). The baselines themselves (``evaluate``) only
measure the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field, model_validator

from ptxbench.tasks.model import Task

WEAK_BASELINE_PCT = 70.0
"""Below this share of its roofline a baseline makes speedups say little (issue #37 asks for 50 %; every timed
workload measured weak today is under both)."""
QUALITY_PATH = Path(__file__).resolve().parent / "baseline_quality.json"


class Measured(NamedTuple):
    """Where and when one task's baselines were measured."""

    gpu: str | None
    date: str | None


class TaskProvenance(BaseModel):
    gpu: str | None = None
    date: str | None = None


class BaselineQuality(BaseModel):
    """Per task and workload, the best baseline's share of its roofline (percent). ``gpu`` and ``date`` are the
    latest run's; a task measured by an earlier run (a run over some tasks keeps the others) says its own in
    ``measured``, so a warning never names a GPU its figure did not come from. Version 1 (one GPU for every task)
    is read as version 2 with no per-task entries."""

    version: Literal[2] = 2
    gpu: str | None = None
    date: str | None = None
    tasks: dict[str, dict[str, float]] = Field(default_factory=dict)
    measured: dict[str, TaskProvenance] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("version") == 1:
            return {**data, "version": 2}
        return data

    def provenance(self, task_id: str) -> Measured:
        own = self.measured.get(task_id)
        return Measured(own.gpu, own.date) if own is not None else Measured(self.gpu, self.date)


class WeakBaseline(NamedTuple):
    """A task's best baseline measured under ``WEAK_BASELINE_PCT`` of its roofline: where, how far, on what GPU."""

    workload: str
    pct: float
    gpu: str | None
    date: str | None


def load_baseline_quality(path: Path | None = None) -> BaselineQuality:
    """The packaged summary (``QUALITY_PATH``, read when called so tests can point it elsewhere); empty
    (nothing warned) until a GPU run has written it."""
    path = QUALITY_PATH if path is None else path
    if not path.is_file():
        return BaselineQuality()
    return BaselineQuality.model_validate_json(path.read_text())


def weak_baseline(task: Task, quality: BaselineQuality) -> WeakBaseline | None:
    """The task's timed workload (else its weakest measured one) where its best baseline is under
    WEAK_BASELINE_PCT of its roofline; None when it is not, or was never measured."""
    measured = quality.tasks.get(task.id) or {}
    if not measured:
        return None
    timed = task.timed().name
    workload, pct = (timed, measured[timed]) if timed in measured else min(measured.items(), key=lambda i: i[1])
    return WeakBaseline(workload, pct, *quality.provenance(task.id)) if pct < WEAK_BASELINE_PCT else None


def weak_baseline_warning(task: Task, quality: BaselineQuality) -> str | None:
    """``weak_baseline`` in the words ``tasks show``, ``eval`` and the report print."""
    weak = weak_baseline(task, quality)
    if weak is None:
        return None
    return (f"best baseline reaches {weak.pct:.0f} % of its roofline on {weak.workload} ({weak.gpu}, {weak.date}): "
            "the speedup there says little; % of roofline says more")


def quality_from_results(results: Mapping[str, Any], previous: BaselineQuality | None = None) -> BaselineQuality:
    """The package-data summary of a ``benchmarks/baselines.py`` result document, written over ``previous`` (the
    summary so far): the tasks the document measured replaced, each with its own date (``measured`` of the
    document), the others kept with the GPU and date they were measured on."""
    gpu, when = results.get("gpu"), results.get("date") or date.today().isoformat()
    tasks = {task: {w: row["best_pct_of_roofline"] for w, row in workloads.items()
                    if row.get("best_pct_of_roofline") is not None}
             for task, workloads in results["tasks"].items()}
    tasks = {t: w for t, w in tasks.items() if w}
    documented = results.get("measured") or {}
    provenance = {t: TaskProvenance(gpu=gpu, date=(documented.get(t) or {}).get("date") or when) for t in tasks}
    if previous is not None:
        kept = {t: w for t, w in previous.tasks.items() if t not in tasks}
        provenance |= {t: TaskProvenance(**previous.provenance(t)._asdict()) for t in kept}
        tasks = {**kept, **tasks}
    tasks = dict(sorted(tasks.items()))
    measured = {t: provenance[t] for t in tasks if provenance[t] != TaskProvenance(gpu=gpu, date=when)}
    return BaselineQuality(gpu=gpu, date=when, tasks=tasks, measured=measured)


def write_quality(quality: BaselineQuality, path: Path = QUALITY_PATH) -> None:
    path.write_text(json.dumps(quality.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")


__all__ = ["QUALITY_PATH", "WEAK_BASELINE_PCT", "BaselineQuality", "Measured", "TaskProvenance", "WeakBaseline",
           "load_baseline_quality", "quality_from_results", "weak_baseline", "weak_baseline_warning", "write_quality"]
