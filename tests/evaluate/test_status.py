"""The verdict model and the pure judging functions (no GPU)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.judgement.guards import library_guards, provenance_guards
from ptxbench.evaluate.judgement.launches import base_name
from ptxbench.evaluate.judgement.verdict import decide
from ptxbench.records.completion import ExtractionStatus
from ptxbench.records.evaluation import (
    EVALUATION_VERSION,
    Comparison,
    Evaluation,
    Guard,
    GuardFinding,
    InfraFailure,
    RequirementExecution,
    Status,
    Timing,
    TrialResult,
)
from ptxbench.tasks.model import Requirement

GOOD = TrialResult(workload="w", role="timed", seed=1, passed=True, comparisons=[
    Comparison(output="C", passed=True, elements=4, mismatched=0, nonfinite=0, max_abs_error=0.0, max_rel_error=0.0)])
BAD = GOOD.model_copy(update={"passed": False})
TIMING = Timing(workload="w", candidate_ms=1.0, candidate_iqr_ms=0.01, baseline="cublas", baseline_ms=1.2,
                baseline_iqr_ms=0.01, samples=10)


def _evaluation(**fields):  # type: ignore[no-untyped-def]
    return Evaluation(candidate="c.cu", task="gemm_bf16", task_hash="h", arch=Arch.SM_90A, **fields)


def test_legal_states() -> None:
    passed = _evaluation(status=Status.PASSED, trials=[GOOD], timings=[TIMING])
    assert passed.correct and passed.timings[0].speedup == pytest.approx(1.2)
    assert not passed.features_verified
    _evaluation(infra_failure=InfraFailure.NO_GPU)
    _evaluation(status=Status.INCORRECT, trials=[GOOD, BAD])
    _evaluation(status=Status.REJECTED, trials=[GOOD], guards=[GuardFinding(guard=Guard.OTHER_STREAM, detail="x")])
    _evaluation(extraction=ExtractionStatus.NO_CODE)


def test_a_version_1_record_still_reads() -> None:
    """Records written before extraction failures and generation labels existed load as today's, without them."""
    old = _evaluation(status=Status.INCORRECT, trials=[GOOD, BAD]).model_dump(mode="json")
    old = {key: value for key, value in old.items() if key not in ("kind", "extraction", "generation")} | {"version": 1}
    read = Evaluation.model_validate(old)
    assert read.version == EVALUATION_VERSION and read.extraction is None and read.generation is None


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "exactly one"),
    ({"status": Status.PASSED, "infra_failure": InfraFailure.NO_GPU}, "exactly one"),
    ({"status": Status.COMPILE_ERROR, "extraction": ExtractionStatus.NO_CODE}, "exactly one"),
    ({"extraction": ExtractionStatus.OK}, "a candidate that was extracted has none"),
    ({"extraction": ExtractionStatus.NO_CODE, "trials": [BAD]}, "never built or run"),
    ({"status": Status.INCORRECT, "trials": [BAD], "timings": [TIMING]}, "timings exist only"),
    ({"status": Status.PASSED, "trials": [BAD]}, "PASSED needs"),
    ({"status": Status.PASSED, "trials": []}, "PASSED needs"),
    ({"status": Status.PASSED, "trials": [GOOD], "guards": [GuardFinding(guard=Guard.INPUT_MUTATION, detail="x")]},
     "guard findings"),
    ({"status": Status.REJECTED, "trials": [GOOD]}, "REJECTED needs"),
    ({"status": Status.INCORRECT, "trials": [GOOD]}, "INCORRECT needs"),
    ({"status": Status.PASSED, "trials": [GOOD], "features": [RequirementExecution(
        requirement=Requirement(any_of=["wgmma.bf16"]), executed={}, satisfied=True, message="?")]},
     "executed instruction counts"),
    ({"status": Status.PASSED, "trials": [GOOD], "features": [RequirementExecution(
        requirement=Requirement(any_of=["wgmma.bf16"]), executed={}, satisfied=False, message="never")]},
     "did not execute"),
])
def test_illegal_states_are_refused(fields, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match=message):
        _evaluation(**fields)


def test_decide_follows_the_evidence() -> None:
    assert decide(_evaluation(status=Status.PASSED, trials=[GOOD])) is Status.PASSED
    assert decide(_evaluation(status=Status.INCORRECT, trials=[GOOD, BAD])) is Status.INCORRECT
    assert decide(_evaluation(status=Status.TIMEOUT, trials=[GOOD])) is Status.TIMEOUT
    guarded = _evaluation(status=Status.REJECTED, trials=[GOOD], guards=[GuardFinding(guard=Guard.LIBRARY_CALL, detail="x")])
    assert decide(guarded) is Status.REJECTED


def test_kernel_names_agree_between_trace_and_cubin() -> None:
    assert base_name("void (anonymous namespace)::gemm_kernel<128, 4>(const __nv_bfloat16 *, int)") == "gemm_kernel"
    assert base_name("<unnamed>::gemm_kernel(const __nv_bfloat16 *, long)") == "gemm_kernel"
    assert base_name("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT") == "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_TNT"


def test_provenance_guards() -> None:
    own = {"rms_kernel"}
    clean = [{"name": "void rms_kernel<256>(float*)", "stream": 7}]
    assert provenance_guards(clean, 7, own) == []
    found = {g.guard for g in provenance_guards(clean + [{"name": "nvjet_sm90_gemm", "stream": 7}], 7, own)}
    assert found == {Guard.FOREIGN_KERNELS}
    assert {g.guard for g in provenance_guards([{"name": "void rms_kernel(float*)", "stream": 9}], 7, own)} == {
        Guard.OTHER_STREAM}
    copies = provenance_guards([{"name": "Memcpy DtoD (Device -> Device)", "stream": 7}], 7, own)
    assert [g.guard for g in copies] == [Guard.NO_OWN_KERNEL] and "Memcpy" in copies[0].detail


def test_library_guard_reads_mapped_paths() -> None:
    assert library_guards({"/usr/lib/libc.so.6", "/x/libcudart.so.13"}) == []
    (finding,) = library_guards({"/site-packages/nvidia/cu13/lib/libcublas.so.13"})
    assert finding.guard is Guard.LIBRARY_CALL


def test_baseline_timings_are_cached_per_gpu_and_library_versions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.baselines.cache import BaselineCache

    cache = BaselineCache(tmp_path)
    device = {"name": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "cudnn": 91900}
    key = cache.key("taskhash", "square-4096", "cublas", device)
    assert cache.get(key) is None
    cache.put(key, 0.25, 0.002)
    assert cache.get(key).median_ms == 0.25
    newer = cache.key("taskhash", "square-4096", "cublas", {**device, "torch": "2.12.0"})
    assert cache.get(newer) is None, "another library version is another measurement"
