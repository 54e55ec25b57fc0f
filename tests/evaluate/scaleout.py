"""Helpers for the scale-out tests: small candidates, the stand-in GPU side, and what a run directory holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ptxbench.evaluate.evaluator import EvalOptions
from ptxbench.evaluate.fleet.run import PLACEMENT_FILE, Candidate
from ptxbench.records.evaluation import Evaluation
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.model import Task

from ..conftest import EXAMPLES

FAKE = "tests.evaluate.fake_runner"
# One lane per GPU: these tests follow candidates to GPUs and GPUs to faults, host by host (lanes have tests
# of their own, which set them).
OPTIONS = EvalOptions(trials=1, time=False, profile=False, call_timeout_s=60, lanes=1)


def small_softmax() -> Task:
    data = get_task("softmax").model_dump(mode="json")
    data["workloads"] = [{"name": "small-timed", "role": "timed", "sizes": {"R": 4, "C": 64}},
                         {"name": "small-heldout", "role": "heldout", "sizes": {"R": 3, "C": 128}}]
    data["variants"] = []  # the suite's variants partition its own workloads, not these
    return Task.model_validate(data)


def candidates(count: int) -> list[Candidate]:
    """``count`` items of one source: one build serves them all, each item is evaluated on its own."""
    task = small_softmax()
    source = (EXAMPLES / "softmax.cu").read_text()
    return [Candidate(task=task, item=f"c{i:02d}", source=source, origin=f"copy {i}") for i in range(count)]


def stored(out: Path) -> dict[str, tuple[Evaluation, dict[str, Any] | None, int]]:
    """Per item: its evaluation, its placement record and the result file's mtime (ns)."""
    found = {}
    for result in sorted((out / "items").glob("*/*/result.json")):
        placement = result.parent / PLACEMENT_FILE
        found[result.parent.name] = (Evaluation.model_validate_json(result.read_text()),
                                     json.loads(placement.read_text()) if placement.is_file() else None,
                                     result.stat().st_mtime_ns)
    return found
