"""The status that follows from an evaluation's evidence, and the one line that says why (``summary``). Pure
functions of the record, so ``--regrade`` recomputes verdicts without a GPU; the evidence itself (guard findings)
comes from ``guards``.
"""

from __future__ import annotations

from ptxbench.records.evaluation import Evaluation, GuardFinding, Status, Timing


def unique(findings: list[GuardFinding]) -> list[GuardFinding]:
    seen, kept = set(), []
    for finding in findings:
        if (finding.guard, finding.detail) not in seen:
            seen.add((finding.guard, finding.detail))
            kept.append(finding)
    return kept


def decide(evaluation: Evaluation) -> Status:
    """The status the evidence supports (used when evaluating and when regrading)."""
    if evaluation.build is not None and not evaluation.build.ok:
        return Status.COMPILE_ERROR
    if evaluation.status in (Status.RUNTIME_ERROR, Status.TIMEOUT):
        return evaluation.status
    if evaluation.guards:
        return Status.REJECTED
    if not evaluation.correct:
        return Status.INCORRECT
    return Status.PASSED


def compared_with(timing: Timing) -> str:
    """What a speedup was measured against, in words: an imported task's baseline is its definition's own
    reference (plain PyTorch, written for clarity), which "the vendor baseline" would overstate."""
    return "the task's reference" if timing.baseline == "reference" else "the vendor baseline"


def summary(evaluation: Evaluation, status: Status) -> str:
    """The evaluation's message for ``status``, in one line: the guards' findings, the first wrong output, or
    the first timed workload's speed."""
    if status is Status.REJECTED:
        return "; ".join(g.detail for g in evaluation.guards)
    if status is Status.INCORRECT:
        failed = next(t for t in evaluation.trials if not t.passed)
        worst = next(c for c in failed.comparisons if not c.passed)
        return (f"wrong on workload {failed.workload} ({failed.role}): output {worst.output} has {worst.mismatched} of "
                f"{worst.elements} elements out of tolerance, {worst.nonfinite} NaN/Inf; worst at {worst.worst_index}: "
                f"{worst.worst_value} vs {worst.worst_expected}")
    if status is Status.PASSED and evaluation.timings:
        timed = evaluation.timings[0]
        speed = f"{timed.speedup:.2f}x {compared_with(timed)}" if timed.speedup else "no baseline"
        verified = "executed features verified" if evaluation.features is not None else "features unverified"
        return f"correct on every workload; {timed.workload}: {timed.candidate_ms:.3f} ms, {speed}; {verified}"
    if status is Status.PASSED and evaluation.features is not None:  # untimed, proven: say so, as a timed one does
        return "correct on every workload; executed features verified"
    return "correct on every workload"
