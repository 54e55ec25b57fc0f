"""On a GPU (issue 40, item 2): sweep agrees with publish. A few bundled examples, the GEMM reference and failing
adversarial cases are evaluated under both profiles on one GPU; each gets the same status, and where both timed it
the timed workload's speedups differ by no more than the two measurements' own spread.

One exception is by design (``evaluate.judgement.funnel``): a correct candidate slower than SWEEP_PROFILE_WITHIN
times the best baseline is not profiled under sweep, so it is PASSED with its features unverified where publish
may REJECT it for a required feature that never ran. Such a candidate fails fast_p for every p above
1 / SWEEP_PROFILE_WITHIN under both; the test asserts exactly that for it.

Run with ``pytest -m gpu tests/gpu/test_evidence_profiles_gpu.py`` on an NVIDIA GPU (ncu on PATH); skipped elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.judgement.funnel import SWEEP_PROFILE_WITHIN
from ptxbench.evaluate.timing.profiles import SPREAD_TARGET_PCT
from ptxbench.kernels import reference_folder
from ptxbench.records.evaluation import Evaluation, Guard, Status, Timing
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES, REPO

pytestmark = pytest.mark.gpu

ADVERSARIAL = REPO / "tests" / "adversarial"
CASES = [("gemm_bf16", reference_folder("sm_90a") / "gemm_bf16.cu"), ("gemm_bf16", EXAMPLES / "gemm_bf16.cu"),
         ("softmax", EXAMPLES / "softmax.cu"), ("rmsnorm", EXAMPLES / "rmsnorm.cu"),
         ("transpose", EXAMPLES / "transpose.cu"), ("softmax", ADVERSARIAL / "wrong_on_heldout.cu"),
         ("rmsnorm", ADVERSARIAL / "other_stream.cu"), ("gemm_bf16", ADVERSARIAL / "library_call.cu")]


@pytest.fixture(scope="module")
def evaluators() -> Iterator[dict[EvidenceProfile, GpuEvaluator]]:
    made = {p: GpuEvaluator(EvalOptions(evidence=p)) for p in EvidenceProfile}
    try:
        yield made
    finally:
        for evaluator in made.values():
            evaluator.close()


def _spread_pct(timing: Timing) -> float:
    """The measurement's own spread of its speedup: both sides' inter-quartile ranges relative to their medians."""
    baseline = timing.baseline_iqr_ms / timing.baseline_ms if timing.baseline_ms and timing.baseline_iqr_ms else 0.0
    return 100 * (timing.candidate_iqr_ms / timing.candidate_ms + baseline)


def _timed(evaluation: Evaluation, workload: str) -> Timing | None:
    return next((t for t in evaluation.timings if t.workload == workload), None)


@pytest.mark.parametrize(("task_id", "path"), CASES, ids=[f"{t}-{p.stem}" for t, p in CASES])
def test_sweep_gives_publishs_status_and_speedup(evaluators, task_id: str, path) -> None:  # type: ignore[no-untyped-def]
    task = get_task(task_id)
    source = path.read_text()
    publish = evaluators[EvidenceProfile.PUBLISH].evaluate(task, Arch.SM_90A, source, path.name)
    sweep = evaluators[EvidenceProfile.SWEEP].evaluate(task, Arch.SM_90A, source, path.name)
    assert (publish.evidence, sweep.evidence) == (EvidenceProfile.PUBLISH, EvidenceProfile.SWEEP)
    assert sweep.correct == publish.correct  # the same trials on every workload, held-out included
    assert [t.workload for t in sweep.timings] in ([], [task.timed().name])
    skipped = "not profiled (sweep: slower than" in sweep.message
    if skipped:
        assert sweep.status is Status.PASSED and sweep.features is None
        assert publish.status is Status.PASSED or {g.guard for g in publish.guards} == {Guard.FEATURE_NOT_EXECUTED}
        for evaluation in (sweep, publish):
            timed = _timed(evaluation, task.timed().name)
            # below 1 / F against the compared baseline, within the 10 % two separate measurements may differ by
            assert timed is not None and timed.speedup is not None and timed.speedup < 1 / SWEEP_PROFILE_WITHIN * 1.1
    else:
        assert sweep.status is publish.status, f"sweep: {sweep.message} / publish: {publish.message}"
    ours, theirs = _timed(sweep, task.timed().name), _timed(publish, task.timed().name)
    if ours is not None and theirs is not None and ours.speedup and theirs.speedup:
        allowed = max(SPREAD_TARGET_PCT, _spread_pct(ours) + _spread_pct(theirs))
        differ = 100 * abs(ours.speedup - theirs.speedup) / theirs.speedup
        assert differ <= allowed, f"speedup {ours.speedup:.3f} (sweep) vs {theirs.speedup:.3f} (publish): {differ:.2f} %"
    print(f"{task_id}/{path.name}: publish {publish.verdict} {theirs.speedup if theirs else None} "
          f"({publish.durations_s.get('total', 0):.1f} s); sweep {sweep.verdict} {ours.speedup if ours else None} "
          f"({sweep.durations_s.get('total', 0):.1f} s)")
