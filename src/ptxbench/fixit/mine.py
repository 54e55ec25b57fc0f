"""Fixit, step one: collect a model's failed kernels with their diagnostics, and the repairs it made
itself in later turns, from run directories.

A failure is worth repairing when it has code and a diagnosis a model can learn from: extraction
failures and infrastructure failures are left out. Caps per task and per error class keep one
frequent mistake from swamping the set; the pick within a cap is seeded, so it is reproducible.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

from pydantic import Field

from ptxbench.records.evaluation import Evaluation
from ptxbench.records.rundir import RESULT_FILE, RunDir, load_result
from ptxbench.records.version import Versioned
from ptxbench.refine.graders import render_evaluation_feedback
from ptxbench.results.attempts import Attempt, attempts_from_run, turns_of_run

FIXIT_RECORD_VERSION = 1
NOT_REPAIRABLE = ("ok", "unevaluated")
NOT_REPAIRABLE_STAGES = ("extraction", "infra")


class FailureCase(Versioned):
    """One failed kernel and what the evaluator said about it."""

    RECORD = "failure case"

    version: int = FIXIT_RECORD_VERSION
    attempt: Attempt
    source: str
    feedback: str

    @property
    def key(self) -> tuple[str, ...]:
        a = self.attempt
        return (a.run, a.task, a.arch, a.sample, str(a.turn))


class RepairPair(Versioned):
    """A failure and a kernel that fixes it; ``verified`` only when the fix passed a GPU evaluation."""

    RECORD = "repair pair"

    version: int = FIXIT_RECORD_VERSION
    failure: FailureCase
    fixed_source: str
    verified: bool
    origin: str = Field(description="'own_later_turn' (the model fixed itself) or 'teacher:<model>'")
    explanation: str | None = None


def repairable(attempt: Attempt) -> bool:
    return attempt.error_class not in NOT_REPAIRABLE and attempt.error_class.split(".")[0] not in NOT_REPAIRABLE_STAGES


def _turns(run_dir: Path):  # type: ignore[no-untyped-def]
    """(attempt, turn) for every turn of every sample of a generate/run directory, as metrics see them."""
    return turns_of_run(run_dir)


def _eval_failures(run_dir: Path) -> list[FailureCase]:
    rundir = RunDir.load(run_dir)
    cases = []
    for attempt in attempts_from_run(run_dir):
        folder = rundir.item(attempt.task, attempt.sample)
        if not repairable(attempt) or not (folder / "candidate.cu").is_file():
            continue
        evaluation = load_result(folder / RESULT_FILE, rundir.header)
        assert isinstance(evaluation, Evaluation)  # an eval run's result (mine_failures checked the kind)
        cases.append(FailureCase(attempt=attempt, source=(folder / "candidate.cu").read_text(),
                                 feedback=render_evaluation_feedback(evaluation)[2]))
    return cases


def mine_failures(run_dirs: list[Path], *, per_task: int | None = None, per_class: int | None = None,
                  seed: int = 0) -> list[FailureCase]:
    """Every repairable failure with code and feedback, capped per task and per error class."""
    cases: list[FailureCase] = []
    for run_dir in run_dirs:
        if RunDir.load(run_dir).header.kind == "eval":
            cases += _eval_failures(run_dir)
            continue
        for attempt, turn in _turns(run_dir):
            if repairable(attempt) and turn.extraction.ok and turn.feedback is not None:
                cases.append(FailureCase(attempt=attempt, source=turn.extraction.source, feedback=turn.feedback.text))
    return _capped(cases, per_task, per_class, seed)


def _capped(cases: list[FailureCase], per_task: int | None, per_class: int | None, seed: int) -> list[FailureCase]:
    rng = random.Random(seed)
    shuffled = sorted(cases, key=lambda c: c.key)
    rng.shuffle(shuffled)
    by_task: dict[str, int] = defaultdict(int)
    by_class: dict[str, int] = defaultdict(int)
    kept = []
    for case in shuffled:
        task, error = case.attempt.task, case.attempt.error_class
        if (per_task is not None and by_task[task] >= per_task) or (per_class is not None and by_class[error] >= per_class):
            continue
        by_task[task] += 1
        by_class[error] += 1
        kept.append(case)
    return sorted(kept, key=lambda c: c.key)


def harvest_own_repairs(run_dirs: list[Path]) -> list[RepairPair]:
    """Pairs from a model's own refinement: a failed turn with code, and the later turn of the same
    sample that passed. Verified only when that pass was a GPU evaluation."""
    pairs = []
    for run_dir in run_dirs:
        by_sample: dict[tuple[str, str], list] = defaultdict(list)
        for attempt, turn in _turns(run_dir):
            by_sample[(attempt.task, attempt.sample)].append((attempt, turn))
        for turns in by_sample.values():
            passed = next(((a, t) for a, t in turns if t.feedback is not None and t.feedback.passed), None)
            if passed is None:
                continue
            fixed_attempt, fixed_turn = passed
            failed = next(((a, t) for a, t in turns if a.turn < fixed_attempt.turn and repairable(a)
                           and t.extraction.ok and t.feedback is not None), None)
            if failed is None:
                continue
            attempt, turn = failed
            pairs.append(RepairPair(failure=FailureCase(attempt=attempt, source=turn.extraction.source,
                                                        feedback=turn.feedback.text),
                                    fixed_source=fixed_turn.extraction.source,
                                    verified=fixed_turn.feedback.verified_on_gpu, origin="own_later_turn"))
    return pairs
