"""PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?

The public API, for Python users: the records and the few entry points a script needs (check a source,
evaluate candidates, load a run or one of its results, compute metrics, write a report). Each name is
imported on first use, so ``import ptxbench`` stays as light as the command line's start (no torch, no
pydantic models built)::

    from pathlib import Path
    import ptxbench
    task = ptxbench.get_task("rmsnorm")
    report = ptxbench.check_file("kernel.cu", ptxbench.Arch.SM_90A, task)
    results = ptxbench.evaluate_candidates([ptxbench.candidate_from_file(Path("kernel.cu"), task)],
                                           ptxbench.Arch.SM_90A, "runs/mine")
    print(ptxbench.summary_table(ptxbench.summarize(ptxbench.attempts_from_run("runs/mine"))))
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC = {
    # tasks and targets
    "Arch": "ptxbench.arch.registry",
    "Task": "ptxbench.tasks.model",
    "get_task": "ptxbench.tasks.loader",
    "bundled_suite": "ptxbench.tasks.loader",
    # checking a source (build + static report), no GPU needed
    "CheckReport": "ptxbench.records.check",
    "check_source": "ptxbench.check",
    "check_file": "ptxbench.check",
    # evaluating on GPUs
    "Candidate": "ptxbench.evaluate.fleet.run",
    "candidate_from_file": "ptxbench.evaluate.fleet.run",
    "evaluate_candidates": "ptxbench.evaluate.fleet.run",
    "EvalOptions": "ptxbench.evaluate.evaluator",
    "Evaluation": "ptxbench.records.evaluation",
    "Status": "ptxbench.records.evaluation",
    # runs, metrics and reports
    "RunDir": "ptxbench.records.rundir",
    "ItemResult": "ptxbench.records.trajectory",
    "load_result": "ptxbench.records.rundir",
    "Attempt": "ptxbench.results.attempts",
    "attempts_from_run": "ptxbench.results.attempts",
    "summarize": "ptxbench.results.metrics",
    "summary_table": "ptxbench.results.metrics",
    "write_report": "ptxbench.results.report",
    "reference_folder": "ptxbench.kernels",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ptxbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
