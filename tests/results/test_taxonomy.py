"""Every failure gets one taxonomy class (messages as the evaluator wrote them on the H200)."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.records.evaluation import (
    Comparison,
    Evaluation,
    Guard,
    GuardFinding,
    InfraFailure,
    RequirementExecution,
    Status,
    TrialResult,
)
from ptxbench.results.taxonomy import CLASSES, classify_evaluation
from ptxbench.tasks.model import Requirement


def _evaluation(**fields):  # type: ignore[no-untyped-def]
    return Evaluation(candidate="c.cu", task="transpose", task_hash="h", arch=Arch.SM_90A, **fields)


def _trial(passed: bool, nonfinite: int = 0) -> TrialResult:
    comparison = Comparison(output="Y", passed=passed, elements=10, mismatched=0 if passed else 3, nonfinite=nonfinite,
                            max_abs_error=0.0, max_rel_error=0.0)
    return TrialResult(workload="w", role="timed", seed=1, comparisons=[comparison], passed=passed)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"status": Status.RUNTIME_ERROR, "message": "workload r16384-c8192: AcceleratorError: CUDA error: an illegal "
      "memory access was encountered"}, "runtime.illegal_address"),
    ({"status": Status.RUNTIME_ERROR, "message": "workload x: the candidate's process died by SIGABRT (abort)"},
     "runtime.crash"),
    ({"status": Status.RUNTIME_ERROR, "message": "workload x: AcceleratorError: CUDA error: out of memory"},
     "runtime.out_of_memory"),
    ({"status": Status.RUNTIME_ERROR, "message": "workload x: the entry point returned cudaError 98"}, "runtime.other"),
    ({"status": Status.TIMEOUT, "message": "no answer within 30 s"}, "runtime.timeout"),
    ({"status": Status.INCORRECT, "trials": [_trial(True), _trial(False, nonfinite=1)]}, "numerical.nan"),
    ({"status": Status.INCORRECT, "trials": [_trial(False)]}, "numerical.wrong_values"),
    ({"status": Status.REJECTED, "trials": [_trial(True)],
      "guards": [GuardFinding(guard=Guard.OTHER_STREAM, detail="x")]}, "guard.other_stream"),
    ({"status": Status.REJECTED, "trials": [_trial(True)],
      "guards": [GuardFinding(guard=Guard.FEATURE_NOT_EXECUTED, detail="x")],
      "features": [RequirementExecution(requirement=Requirement(any_of=["wgmma.bf16"], min_flop_share=0.95),
                                        executed={"HGMMA.64x64x16.F32.BF16": 4}, flop_share=1e-5, satisfied=False,
                                        message="minor")]}, "instruction.minor_share"),
    ({"status": Status.REJECTED, "trials": [_trial(True)],
      "guards": [GuardFinding(guard=Guard.FEATURE_NOT_EXECUTED, detail="x")],
      "features": [RequirementExecution(requirement=Requirement(any_of=["wgmma.bf16"]), executed={}, satisfied=False,
                                        message="never")]}, "instruction.not_executed"),
    ({"status": Status.PASSED, "trials": [_trial(True)]}, "ok"),
    ({"infra_failure": InfraFailure.NO_GPU}, "infra.no_gpu"),
])
def test_classes(fields, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert expected in CLASSES
    assert classify_evaluation(_evaluation(**fields)) == expected


@pytest.mark.parametrize("guard", [g for g in Guard if g is not Guard.FEATURE_NOT_EXECUTED], ids=lambda g: g.value)
def test_every_guard_has_its_class(guard: Guard) -> None:
    """A guard added to the evaluator is a class of the taxonomy at once (three were missing before)."""
    evaluation = _evaluation(status=Status.REJECTED, trials=[_trial(True)], guards=[GuardFinding(guard=guard, detail="x")])
    assert classify_evaluation(evaluation) == f"guard.{guard.value}" and f"guard.{guard.value}" in CLASSES
