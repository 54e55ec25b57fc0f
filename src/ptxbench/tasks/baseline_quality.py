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

from pydantic import BaseModel, Field

from ptxbench.tasks.model import Task

WEAK_BASELINE_PCT = 70.0
"""Below this share of its roofline a baseline makes speedups say little (issue #37 asks for 50 %; every timed
workload measured weak today is under both)."""
QUALITY_PATH = Path(__file__).resolve().parent / "baseline_quality.json"


class BaselineQuality(BaseModel):
    """Per task and workload, the best baseline's share of its roofline (percent) measured on ``gpu``."""

    version: Literal[1] = 1
    gpu: str | None = None
    date: str | None = None
    tasks: dict[str, dict[str, float]] = Field(default_factory=dict)


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
    return WeakBaseline(workload, pct, quality.gpu, quality.date) if pct < WEAK_BASELINE_PCT else None


def weak_baseline_warning(task: Task, quality: BaselineQuality) -> str | None:
    """``weak_baseline`` in the words ``tasks show``, ``eval`` and the report print."""
    weak = weak_baseline(task, quality)
    if weak is None:
        return None
    return (f"best baseline reaches {weak.pct:.0f} % of its roofline on {weak.workload} ({weak.gpu}, {weak.date}): "
            "the speedup there says little; % of roofline says more")


def quality_from_results(results: Mapping[str, Any]) -> BaselineQuality:
    """The package-data summary of a ``benchmarks/baselines.py`` result document."""
    tasks = {task: {w: row["best_pct_of_roofline"] for w, row in workloads.items()
                    if row.get("best_pct_of_roofline") is not None}
             for task, workloads in results["tasks"].items()}
    return BaselineQuality(gpu=results.get("gpu"), date=results.get("date") or date.today().isoformat(),
                           tasks={t: w for t, w in tasks.items() if w})


def write_quality(quality: BaselineQuality, path: Path = QUALITY_PATH) -> None:
    path.write_text(json.dumps(quality.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")


__all__ = ["QUALITY_PATH", "WEAK_BASELINE_PCT", "BaselineQuality", "WeakBaseline", "load_baseline_quality",
           "quality_from_results", "weak_baseline", "weak_baseline_warning", "write_quality"]
