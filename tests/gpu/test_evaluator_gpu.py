"""The GPU evaluator on the H200: the examples pass (and are rejected once ncu shows they never run the
required features), and every adversarial candidate gets its expected status. Run with `-m gpu`."""

from __future__ import annotations

import shutil

import pytest

from ptxbench._compat import tomllib
from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.status import Guard, Status
from ptxbench.tasks.loader import bundled_suite, get_task

from ..conftest import EXAMPLES, REPO

pytestmark = pytest.mark.gpu
ADVERSARIAL = REPO / "tests" / "adversarial"


@pytest.fixture(scope="module")
def evaluator():  # type: ignore[no-untyped-def]
    gpu = GpuEvaluator(EvalOptions(trials=2, timing_budget_ms=40, profile=False, call_timeout_s=30))
    yield gpu
    gpu.close()


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_examples_pass_with_timings(evaluator, task) -> None:  # type: ignore[no-untyped-def]
    evaluation = evaluator.evaluate(task, Arch.SM_90A, (EXAMPLES / f"{task.id}.cu").read_text(), f"{task.id}.cu")
    print(f"EVAL {task.id}: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    roles = {t.role for t in evaluation.trials}
    assert {"timed", "heldout"} <= roles
    assert evaluation.timings and all(t.baseline_ms and t.candidate_ms > 0 for t in evaluation.timings)
    assert evaluation.features is None  # no profiler in this fixture: unverified, never "used"


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute")
def test_plain_example_is_rejected_once_ncu_shows_no_wgmma() -> None:
    gpu = GpuEvaluator(EvalOptions(trials=1, time=False, profile=True))
    try:
        evaluation = gpu.evaluate(get_task("gemm_bf16"), Arch.SM_90A, (EXAMPLES / "gemm_bf16.cu").read_text())
    finally:
        gpu.close()
    print(f"EVAL gemm_bf16 with ncu: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.REJECTED
    assert evaluation.features is not None and not any(f.satisfied for f in evaluation.features)
    assert {g.guard for g in evaluation.guards} == {Guard.FEATURE_NOT_EXECUTED}


def _manifest() -> list[dict]:
    path = ADVERSARIAL / "manifest.toml"
    return tomllib.loads(path.read_text())["case"] if path.is_file() else []


@pytest.mark.parametrize("case", _manifest(), ids=lambda c: c["file"])
def test_adversarial_candidate_gets_its_status(evaluator, case) -> None:  # type: ignore[no-untyped-def]
    task = get_task(case["task"])
    source = (ADVERSARIAL / case["file"]).read_text()
    if case.get("guard") in ("dead_code_feature", "feature_not_executed"):
        gpu = GpuEvaluator(EvalOptions(trials=1, time=False, profile=True, call_timeout_s=30))
        try:
            evaluation = gpu.evaluate(task, Arch.SM_90A, source, case["file"])
        finally:
            gpu.close()
    else:
        evaluation = evaluator.evaluate(task, Arch.SM_90A, source, case["file"])
    print(f"ADVERSARIAL {case['file']}: expected {case['expect']}, got {evaluation.status} — {evaluation.message[:200]}")
    assert evaluation.status is Status(case["expect"]), evaluation.message
    if "guard" in case:
        assert {g.guard for g in evaluation.guards} & GUARDS_FOR[case["guard"]], evaluation.guards


# The manifest names each cheat; these are the evaluator's guards that may catch it.
GUARDS_FOR = {
    "library_call": {Guard.LIBRARY_CALL, Guard.FOREIGN_KERNELS, Guard.NO_OWN_KERNEL},
    "torch_fallback": {Guard.NO_OWN_KERNEL, Guard.FOREIGN_KERNELS},
    "other_stream": {Guard.OTHER_STREAM},
    "input_mutation": {Guard.INPUT_MUTATION},
    "dead_code_feature": {Guard.FEATURE_NOT_EXECUTED},
    "feature_not_executed": {Guard.FEATURE_NOT_EXECUTED},
    "out_of_bounds_write": {Guard.OUT_OF_BOUNDS_WRITE},
    "below_physical_floor": {Guard.BELOW_PHYSICAL_FLOOR},
}
