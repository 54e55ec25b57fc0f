"""benchmarks/kernel_variants.py: variants override exactly the named constants, or fail loudly."""

import importlib.util
from pathlib import Path

import pytest

from ptxbench.kernels import reference_folder

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("kernel_variants", REPO / "benchmarks" / "kernel_variants.py")
assert _spec and _spec.loader
kernel_variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_variants)

SOURCE = """
constexpr int kThreads = 256;
constexpr uint32_t kBytes = 64 * 1024;  // comment
namespace decode { constexpr int CTAS = 4; }
"""


def test_a_variant_names_its_overrides():
    assert kernel_variants.parse_variant("deep:kBytes=128 * 1024; kThreads=512") == (
        "deep", {"kBytes": "128 * 1024", "kThreads": "512"})


@pytest.mark.parametrize("text", ["no-colon", "bad name:kThreads=1", "as-is:kThreads=1", "x:", "x:kThreads",
                                  "x:1x=2", "x:kThreads="])
def test_malformed_variants_are_refused(text):
    with pytest.raises(ValueError):
        kernel_variants.parse_variant(text)


def test_overrides_replace_only_the_initializer():
    out = kernel_variants.apply_overrides(SOURCE, {"kBytes": "128 * 1024", "CTAS": "3"})
    assert "constexpr uint32_t kBytes = 128 * 1024;  // comment" in out
    assert "constexpr int CTAS = 3;" in out
    assert "constexpr int kThreads = 256;" in out


def test_a_missing_or_repeated_constant_is_an_error():
    with pytest.raises(ValueError, match="found 0"):
        kernel_variants.apply_overrides(SOURCE, {"kThread": "1"})
    with pytest.raises(ValueError, match="found 2"):
        kernel_variants.apply_overrides(SOURCE + "constexpr int kThreads = 8;\n", {"kThreads": "1"})


@pytest.mark.parametrize("kernel, knob", [("gemm_bf16", "CTAS_PER_SM"), ("gemm_bf16", "MIN_CTAS_PER_SM"),
                                          ("gemm_bf16", "PREFETCH_BLOCKS"),
                                          ("rmsnorm", "kBytesInFlightPerCta"), ("rmsnorm", "kThreads"),
                                          ("softmax", "kBytesInFlightPerCta"), ("softmax", "kMaxCtasPerSm"),
                                          ("softmax", "kAllClusterSizes"), ("transpose", "kStages"),
                                          ("gemm_fp8", "PROMOTE_EVERY"), ("gemm_fp8", "SMEM_AREA"),
                                          ("gemm_fp8", "DECODE_BN"), ("gemm_fp8", "GROUP_M"),
                                          ("gemm_fp8", "TMA_STORE"), ("gemm_fp8", "TMA_STORE_MAX_K")])
def test_the_reference_kernels_knobs_are_overridable(kernel, knob):
    source = (reference_folder("sm_90a") / f"{kernel}.cu").read_text()
    assert kernel_variants.apply_overrides(source, {knob: "7"}) != source


def test_a_variant_builds_as_the_evaluator_builds_it():
    """The source handed to the evaluator has the wrapper header inlined (a bare #include would not build)."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    kernel = reference_folder("sm_90a") / "rmsnorm.cu"
    variants = [("as-is", {}), ("shallow", {"kBytesInFlightPerCta": "32 * 1024"})]
    sources = kernel_variants.variant_sources(kernel, variants)
    assert "#include \"ptx_wrappers.cuh\"" not in sources[1] and "32 * 1024;" in sources[1]
    report = check_source(sources[1], Arch.SM_90A, get_task("rmsnorm"), "rmsnorm.cu")
    assert report.build.ok, report.build.diagnosis


def test_the_worst_error_ratio_is_kept_per_workload_over_trials_and_outputs():
    from ptxbench.records.evaluation import Comparison, TrialResult

    def comparison(output: str, ratio: float) -> Comparison:
        return Comparison(output=output, passed=ratio < 1, elements=4, mismatched=0, nonfinite=0, max_abs_error=0.1,
                          max_rel_error=0.1, max_error_ratio=ratio)

    trials = [TrialResult(workload="big", role="timed", seed=1, passed=True, comparisons=[comparison("C", 0.25)]),
              TrialResult(workload="big", role="timed", seed=2, passed=True,
                          comparisons=[comparison("C", 0.5), comparison("D", 0.125)]),
              TrialResult(workload="odd", role="heldout", seed=3, passed=False, comparisons=[comparison("C", 1.5)])]
    ratios = kernel_variants.worst_error_ratios(trials)
    assert ratios == {"big": 0.5, "odd": 1.5}
    result = {"kernel": "k.cu", "task": "t", "environment": {}, "date": "d", "git_revision": "abc", "command": "c",
              "workloads": ["big"], "copy_ms": {}, "trials": 2,
              "variants": [{"name": "as-is", "overrides": {}, "status": "FAILED", "timings": {}, "error_ratio": ratios}]}
    text = kernel_variants._markdown(result)
    assert "| as-is | 0.500 | 1.500 |" in text and "2 input set(s)" in text
