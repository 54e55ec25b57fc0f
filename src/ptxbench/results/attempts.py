"""One flat record per attempt (a sample's turn, or an evaluated file), whatever kind of run made it.

Metrics, reports and Fixit read attempts, never the run directory's internals: an ``eval`` run
contributes one attempt per candidate, a ``generate``/``run`` run one per turn of every sample. Every
failure carries one class of the error taxonomy (``taxonomy.py``).

A sample's outcome (``last_turn``) is its last *answered* turn: a turn the provider never answered (the
refinement's last, since a provider failure ends it) is kept as an attempt of class
``extraction.provider_error`` but is no verdict, so it does not overwrite the one before it. A sample the
provider never answered at all has that provider error as its only attempt (``metrics`` counts it apart).

Reading is local to each item: ``read_attempts`` names a damaged ``result.json`` (cut short, not JSON, not
the record the run's kind writes) with its reason and reads every other item; ``attempts_from_run`` refuses
a run with a damaged item, for readers that must not go on without it.

One status model for every path: a turn graded without a GPU, a file evaluated without one, and run
directories written before this rule (whose static turns hold a check report) are all judged by
``static_only``, and every evaluation, whichever path made it, becomes an attempt through
``_from_evaluation``; an answer without code is an attempt with its extraction failure on every path. An
``eval`` of a generation run carries that run's labels (model, provider, context), so both group alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import Field

from ptxbench.evaluate.judgement.static_only import decided_by_build, static_verdict
from ptxbench.records.check import CheckReport
from ptxbench.records.evaluation import Evaluation, Generation
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.rundir import RESULT_FILE, Result, RunDir, RunDirError, load_result
from ptxbench.records.trajectory import ItemResult, Turn
from ptxbench.records.version import Versioned
from ptxbench.results.taxonomy import classify_evaluation, classify_extraction

ATTEMPT_VERSION = 4
"""2: ``provider``; an answer without code and a verdict the build decided have no correctness (None).
3: ``heldout_variant_correct``; ``heldout_correct`` counts the held-out shapes outside held-out variants.
4: ``requirements``, each required feature's stage (absent | source | ptx | sass | unsupported)."""


def _attempt_from_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had no ``provider``: it reads as None, its default."""
    return record


def _attempt_from_v2(record: dict[str, Any]) -> dict[str, Any]:
    """Version 2 had no ``heldout_variant_correct``: it reads as None (not measured apart). Its
    ``heldout_correct`` covered every held-out workload, those of held-out variants too, and is kept as
    read: true holds for the shapes outside the variants as well; false may have come from a variant."""
    return record


def _attempt_from_v3(record: dict[str, Any]) -> dict[str, Any]:
    """Version 3 had no ``requirements``: they read as empty (not recorded), which no rate reads."""
    return record


class Attempt(Versioned):
    RECORD = "attempt"
    MIGRATIONS = {1: _attempt_from_v1, 2: _attempt_from_v2, 3: _attempt_from_v3}

    version: int = ATTEMPT_VERSION
    run: str = Field(description="The run directory's name")
    model: str | None = Field(default=None, description="'provider:name' of the model that wrote the candidate")
    provider: str | None = None
    condition: str | None = Field(default=None, description="Context condition (none | arch | full)")
    arch: str
    task: str
    family: str | None = None
    sample: str = Field(description="Sample (or candidate) identifier within the task")
    turn: int = 0
    last_turn: bool = Field(default=True, description=(
        "This turn is the sample's outcome: its last answered turn (a turn the provider never answered is not, "
        "unless the sample has no answered turn at all)"))
    compiled: bool = False
    features_in_ptx: bool = Field(default=False, description="every required feature requested in the PTX")
    features_in_sass: bool = False
    requirements: dict[str, str] = Field(default_factory=dict, description=(
        "Each required feature (its label) -> how far it got: absent | source | ptx | sass | unsupported; empty "
        "where nothing was built and read"))
    correct: bool | None = Field(default=None, description="None: not measured (no GPU evaluation)")
    visible_correct: bool | None = None
    heldout_correct: bool | None = Field(default=None,
                                         description="every held-out shape (outside held-out variants) correct")
    heldout_variant_correct: bool | None = Field(default=None, description=(
        "every workload of the task's held-out variants correct; None: the task has none, or not measured"))
    features_executed: bool | None = Field(default=None, description="None: unverified (no profiler)")
    speedup: float | None = None
    roofline_pct: float | None = None
    status: str | None = None
    error_class: str = Field(description="'ok' or a taxonomy class such as 'compile.ptx_syntax'")
    verified_on_gpu: bool = False
    evidence: EvidenceProfile = Field(default=EvidenceProfile.PUBLISH, description=(
        "The evidence profile it was judged under: figures never mix two (``results.metrics.one_profile``). An "
        "attempt is derived from its run on every read, so one without it (made before profiles) is publish"))

    def fast(self, p: float) -> bool:
        """fast_p: correct, required features executed, and at least p times the vendor baseline's speed."""
        return bool(self.correct and self.features_executed and self.speedup is not None and self.speedup >= p)

    @property
    def sol(self) -> float | None:
        """The speed-of-light score of the timed workload (``Timing.sol``): ``roofline_pct`` as a fraction, so
        attempts of every version carry it without a field of its own; None where no roofline was measured."""
        return self.roofline_pct / 100 if self.roofline_pct is not None else None

    def at_sol(self, p: float) -> bool:
        """sol_p: correct, required features executed (as fast_p asks: a fast kernel that skips the required
        instructions is no answer to the task), and at least p of the speed of light."""
        return bool(self.correct and self.features_executed and self.sol is not None and self.sol >= p)


def _in_ptx(static: Any) -> bool:
    return bool(static and static.requirements and all(any(e.in_ptx for e in r.evidence) for r in static.requirements))


def _family(task_id: str) -> str | None:
    from ptxbench.tasks.loader import bundled_suite

    return next((t.family.value for t in bundled_suite() if t.id == task_id), None)


def _held_out_variant_workloads(task_id: str) -> frozenset[str]:
    """Names of the workloads in the bundled task's held-out variants (none for a task outside the suite)."""
    from ptxbench.tasks.loader import bundled_suite

    task = next((t for t in bundled_suite() if t.id == task_id), None)
    if task is None:
        return frozenset()
    return frozenset(w.name for w in task.held_out() if (v := task.variant_of(w)) is not None and v.heldout)


def _from_evaluation(evaluation: Evaluation, base: dict[str, Any]) -> Attempt:
    base = {**base, "evidence": evaluation.evidence}
    if evaluation.extraction is not None:
        return Attempt(**base, error_class=classify_evaluation(evaluation))
    static = evaluation.static
    roles = {}
    in_held_out_variant = _held_out_variant_workloads(evaluation.task)
    for trial in evaluation.trials:
        role = "heldout_variant" if trial.role == "heldout" and trial.workload in in_held_out_variant else trial.role
        roles.setdefault(role, True)
        roles[role] = roles[role] and trial.passed
    # Correctness is measured only where the candidate ran on a GPU: not for a verdict the build decided.
    ran = evaluation.status is not None and not decided_by_build(evaluation)
    # Right answers obtained by gaming the harness (a library, another stream, mutated inputs, stray
    # writes) are not correct; a kernel that is right but skips the requested features still is.
    cheated = any(g.guard.value != "feature_not_executed" for g in evaluation.guards)
    timed = evaluation.timings[0] if evaluation.timings else None
    return Attempt(
        **base,
        compiled=bool(evaluation.build and evaluation.build.ok),
        features_in_ptx=_in_ptx(static),
        features_in_sass=bool(static and static.requirements_in_sass),
        requirements={r.requirement.label: r.stage.value for r in static.requirements} if static else {},
        correct=(evaluation.correct and not cheated) if ran else None,
        visible_correct=roles.get("visible") if ran else None,
        heldout_correct=roles.get("heldout") if ran else None,
        heldout_variant_correct=roles.get("heldout_variant") if ran else None,
        features_executed=None if evaluation.features is None else all(f.satisfied for f in evaluation.features),
        speedup=timed.speedup if timed else None,
        roofline_pct=timed.roofline_pct if timed else None,
        status=evaluation.status.value if evaluation.status else None,
        error_class=classify_evaluation(evaluation),
        verified_on_gpu=ran,
    )


def _from_check(report: CheckReport, base: dict[str, Any]) -> Attempt:
    """A turn graded statically before its record was an evaluation: judged by the same rule as today."""
    return _from_evaluation(static_verdict(report, task_hash=""), base)


def _labels(generation: Generation | None) -> dict[str, Any]:
    """The grouping labels an evaluation carries from the generation run that sampled its candidate."""
    if generation is None:
        return {}
    return {"model": generation.model, "provider": generation.provider, "condition": generation.condition}


def turns_of_run(path: Path | str) -> Iterator[tuple[Attempt, Turn]]:
    """(attempt, turn) for every turn of every sample of a ``generate``/``run`` directory (none for ``eval``)."""
    rundir = RunDir.load(path)
    for result_file in rundir.results():
        result = load_result(result_file, rundir.header)
        if isinstance(result, ItemResult):
            yield from _turns(rundir, result_file, result)


class DamagedItem(NamedTuple):
    """An item whose ``result.json`` is there but cannot be read as its record: left out, and said so."""

    item: str
    """``<task>/<item>``, as the run directory names it under ``items/``."""
    path: Path
    reason: str
    """What is wrong with the file, in one line (cut short, not JSON, a field missing, unreadable)."""


class RunAttempts(NamedTuple):
    """What a run directory holds: the attempts of every readable item, and the items that could not be read."""

    attempts: list[Attempt]
    damaged: list[DamagedItem]


def read_attempts(path: Path | str) -> RunAttempts:
    """Every attempt of a run directory, reading each item on its own: an item whose result is damaged is named
    with its reason in ``damaged`` and the others are read. A result written by a newer ptxbench is no damage
    (it is to be read, by an upgraded ptxbench): ``RecordVersionError`` as ever. Items without a result are
    still running: skipped."""
    rundir = RunDir.load(path)
    attempts: list[Attempt] = []
    damaged: list[DamagedItem] = []
    for result_file in rundir.results():
        item = f"{result_file.parent.parent.name}/{result_file.parent.name}"
        try:
            result = load_result(result_file, rundir.header)
        except RunDirError as exc:
            damaged.append(DamagedItem(item, result_file, str(exc).removeprefix(f"{result_file}: ")))
            continue
        except OSError as exc:
            damaged.append(DamagedItem(item, result_file, f"cannot be read ({exc.strerror or exc})"))
            continue
        attempts += _item_attempts(rundir, result_file, result)
    return RunAttempts(attempts, damaged)


def attempts_from_run(path: Path | str) -> list[Attempt]:
    """Every attempt stored in a run directory (items without a result are still running: skipped); a damaged
    item's result is an error naming it (``read_attempts`` reads around it)."""
    rundir = RunDir.load(path)
    attempts: list[Attempt] = []
    for result_file in rundir.results():
        attempts += _item_attempts(rundir, result_file, load_result(result_file, rundir.header))
    return attempts


def _item_attempts(rundir: RunDir, result_file: Path, result: Result) -> list[Attempt]:
    if isinstance(result, ItemResult):
        return [attempt for attempt, _ in _turns(rundir, result_file, result)]
    task_id, item = result_file.parent.parent.name, result_file.parent.name
    base = {"run": rundir.path.name, "arch": rundir.header.config.get("arch", "sm_90a"), "task": task_id,
            "family": _family(task_id), "sample": item, **_labels(result.generation),
            "evidence": rundir.header.evidence}
    return [_from_evaluation(result, base)]


def outcome_turn(result: ItemResult) -> Turn | None:
    """The turn a sample is judged by: its last answered one (a provider failure asks nothing, so it overwrites
    no verdict); its only turn where none was answered; None for a trajectory without turns."""
    answered = [turn for turn in result.turns if not turn.completion.error]
    return answered[-1] if answered else (result.turns[-1] if result.turns else None)


def _turns(rundir: RunDir, result_file: Path, result: ItemResult) -> Iterator[tuple[Attempt, Turn]]:
    model = rundir.header.config.get("model")
    task_id = result_file.parent.parent.name
    final = outcome_turn(result)
    for turn in result.turns:
        base = {"run": rundir.path.name, "model": model, "provider": model.partition(":")[0] if model else None,
                "condition": result.context.value, "arch": result.arch.value, "task": task_id,
                "family": _family(task_id), "sample": result_file.parent.name, "turn": turn.turn,
                "last_turn": turn is final, "evidence": rundir.header.evidence}
        yield turn_attempt(turn, base), turn


def turn_attempt(turn: Turn, base: dict[str, Any]) -> Attempt:
    """The attempt one refinement turn amounts to, whichever grader judged it (its record says which)."""
    feedback = turn.feedback
    if not turn.extraction.ok or feedback is None or feedback.stage == "extraction":
        return Attempt(**base, error_class=classify_extraction(turn.extraction, feedback))
    if isinstance(feedback.record, Evaluation):
        return _from_evaluation(feedback.record, base)
    if isinstance(feedback.record, CheckReport):
        return _from_check(feedback.record, base)
    return Attempt(**base, error_class=classify_extraction(turn.extraction, None))  # a grader that kept no record


__all__ = ["Attempt", "DamagedItem", "RunAttempts", "attempts_from_run", "outcome_turn", "read_attempts", "turns_of_run",
           "RESULT_FILE"]
