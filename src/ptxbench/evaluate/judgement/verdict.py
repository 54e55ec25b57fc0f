"""The status that follows from an evaluation's evidence. A pure function of the record, so ``--regrade``
recomputes verdicts without a GPU; the evidence itself (guard findings) comes from ``guards``.
"""

from __future__ import annotations

from ptxbench.records.evaluation import Evaluation, GuardFinding, Status


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
