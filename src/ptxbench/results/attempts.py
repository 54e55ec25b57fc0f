"""One flat record per attempt (a sample's turn, or an evaluated file), whatever kind of run made it.

Metrics, reports and Fixit read attempts, never the run directory's internals: an ``eval`` run
contributes one attempt per candidate, a ``generate``/``run`` run one per turn of every sample. Every
failure carries one class of the error taxonomy (``taxonomy.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from ptxbench.records import Record
from ptxbench.results.rundir import RESULT_FILE, RunDir
from ptxbench.results.taxonomy import classify_check, classify_evaluation, classify_extraction

ATTEMPT_VERSION = 1


class Attempt(Record):
    version: int = ATTEMPT_VERSION
    run: str = Field(description="The run directory's name")
    model: str | None = None
    condition: str | None = Field(default=None, description="Context condition (none | arch | full)")
    arch: str
    task: str
    family: str | None = None
    sample: str = Field(description="Sample (or candidate) identifier within the task")
    turn: int = 0
    last_turn: bool = True
    compiled: bool = False
    features_in_ptx: bool = Field(default=False, description="every required feature requested in the PTX")
    features_in_sass: bool = False
    correct: bool | None = Field(default=None, description="None: not measured (no GPU evaluation)")
    visible_correct: bool | None = None
    heldout_correct: bool | None = None
    features_executed: bool | None = Field(default=None, description="None: unverified (no profiler)")
    speedup: float | None = None
    roofline_pct: float | None = None
    status: str | None = None
    error_class: str = Field(description="'ok' or a taxonomy class such as 'compile.ptx_syntax'")
    verified_on_gpu: bool = False

    def fast(self, p: float) -> bool:
        """fast_p: correct, required features executed, and at least p times the vendor baseline's speed."""
        return bool(self.correct and self.features_executed and self.speedup is not None and self.speedup >= p)


def _in_ptx(static: Any) -> bool:
    return bool(static and static.requirements and all(any(e.in_ptx for e in r.evidence) for r in static.requirements))


def _family(task_id: str) -> str | None:
    from ptxbench.tasks.loader import bundled_suite

    return next((t.family.value for t in bundled_suite() if t.id == task_id), None)


def _from_evaluation(record: dict[str, Any], base: dict[str, Any]) -> Attempt:
    from ptxbench.evaluate.status import Evaluation

    evaluation = Evaluation.model_validate(record)
    static = evaluation.static
    roles = {}
    for trial in evaluation.trials:
        roles.setdefault(trial.role, True)
        roles[trial.role] = roles[trial.role] and trial.passed
    measured = evaluation.status is not None and evaluation.status.value not in ("COMPILE_ERROR",)
    # Right answers obtained by gaming the harness (a library, another stream, mutated inputs, stray
    # writes) are not correct; a kernel that is right but skips the requested features still is.
    cheated = any(g.guard.value != "feature_not_executed" for g in evaluation.guards)
    timed = evaluation.timings[0] if evaluation.timings else None
    return Attempt(
        **base,
        compiled=bool(evaluation.build and evaluation.build.ok),
        features_in_ptx=_in_ptx(static),
        features_in_sass=bool(static and static.requirements_in_sass),
        correct=(evaluation.correct and not cheated) if measured else None,
        visible_correct=roles.get("visible") if measured else None,
        heldout_correct=roles.get("heldout") if measured else None,
        features_executed=None if evaluation.features is None else all(f.satisfied for f in evaluation.features),
        speedup=timed.speedup if timed else None,
        roofline_pct=timed.roofline_pct if timed else None,
        status=evaluation.status.value if evaluation.status else None,
        error_class=classify_evaluation(evaluation),
        verified_on_gpu=evaluation.status is not None,
    )


def _from_check(record: dict[str, Any], base: dict[str, Any]) -> Attempt:
    from ptxbench.check import CheckReport

    report = CheckReport.model_validate(record)
    return Attempt(**base, compiled=report.build.ok, features_in_ptx=_in_ptx(report.static),
                   features_in_sass=bool(report.static and report.static.requirements_in_sass),
                   error_class=classify_check(report))


def attempts_from_run(path: Path | str) -> list[Attempt]:
    """Every attempt stored in a run directory (items without a result are still running: skipped)."""
    rundir = RunDir.load(path)
    config = rundir.header.config
    attempts: list[Attempt] = []
    for result_file in rundir.results():
        task_id, item = result_file.parent.parent.name, result_file.parent.name
        if rundir.header.kind == "eval":
            from ptxbench.evaluate.status import Evaluation

            record = Evaluation.model_validate_json(result_file.read_text()).model_dump(mode="json")
            base = {"run": rundir.path.name, "arch": config.get("arch", "sm_90a"), "task": task_id,
                    "family": _family(task_id), "sample": item}
            attempts.append(_from_evaluation(record, base))
            continue
        from ptxbench.llm.run import ItemResult

        result = ItemResult.model_validate_json(result_file.read_text())
        for turn in result.turns:
            base = {"run": rundir.path.name, "model": config.get("model"), "condition": result.context.value,
                    "arch": result.arch.value, "task": task_id, "family": _family(task_id), "sample": item,
                    "turn": turn.turn, "last_turn": turn is result.turns[-1]}
            attempts.append(turn_attempt(turn, base))
    return attempts


def turn_attempt(turn: Any, base: dict[str, Any]) -> Attempt:
    """The attempt one refinement turn (``llm.run.Turn``) amounts to, whichever evaluator judged it."""
    feedback = turn.feedback
    if not turn.extraction.ok or feedback is None or feedback.stage == "extraction":
        return Attempt(**base, error_class=classify_extraction(turn.extraction, feedback))
    if feedback.verified_on_gpu or "trials" in feedback.record:
        return _from_evaluation(feedback.record, base)
    return _from_check(feedback.record, base)


__all__ = ["Attempt", "attempts_from_run", "RESULT_FILE"]
