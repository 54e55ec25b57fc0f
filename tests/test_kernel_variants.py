"""benchmarks/kernel_variants.py: variants override exactly the named constants and replace exactly the
named definitions, or fail loudly; every variant source of benchmarks/variants still builds."""

import pytest

from ptxbench.kernels import reference_folder

from .conftest import REPO, repo_script

kernel_variants = repo_script("benchmarks/kernel_variants.py")

SOURCE = """
constexpr int kThreads = 256;
constexpr uint32_t kBytes = 64 * 1024;  // comment
namespace decode { constexpr int CTAS = 4; }
"""


def test_a_variant_names_its_overrides():
    assert kernel_variants.parse_variant("deep:kBytes=128 * 1024; kThreads=512") == (
        "deep", {"kBytes": "128 * 1024", "kThreads": "512"}, ())


def test_a_variant_names_its_sources_by_path_or_in_the_variants_folder(tmp_path):
    mine = tmp_path / "mine.cu"
    mine.write_text("__device__ int f() {\n}\n")
    variant = kernel_variants.parse_variant(f"v:@{mine};@gemm_fp8.eager_promotion.cu;K=2")
    assert variant.sources == (mine, kernel_variants.VARIANTS / "gemm_fp8.eager_promotion.cu")
    assert variant.overrides == {"K": "2"}


@pytest.mark.parametrize("text", ["no-colon", "bad name:kThreads=1", "as-is:kThreads=1", "x:", "x:kThreads",
                                  "x:1x=2", "x:kThreads=", "x:@no_such_variant.cu"])
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


REFERENCE_SOURCE = """constexpr int kStages = 4;

template <int N>
__device__ __forceinline__ void step(float (&d)[N]) {
  d[0] += 1.f;
}

__device__ __forceinline__ void other() {
  if (true) {
  }
}
"""


def test_a_variant_source_replaces_the_definition_that_starts_with_its_line():
    variant = """// notes for the reader
__device__ __forceinline__ void step(float (&d)[N]) {
  constexpr int kTimes = 2;
  d[0] += kTimes;
}
"""
    out = kernel_variants.apply_replacements(REFERENCE_SOURCE, variant)
    assert "d[0] += kTimes;" in out and "d[0] += 1.f;" not in out
    assert out.count("template <int N>") == 1 and "void other()" in out and "if (true) {" in out
    assert kernel_variants.apply_overrides(out, {"kTimes": "3"}).count("kTimes = 3;") == 1


def test_a_variant_source_replaces_a_templated_class_through_its_closing_brace_and_semicolon():
    """A class closes with ``};``: a tile configuration whose constants the file spells twice (so no
    override by name can reach them) is replaced whole."""
    source = ("template <int D>\nstruct Config {\n  static constexpr int BKV = 128;\n};\n"
              "constexpr int BKV = Config<64>::BKV;\n")
    variant = "// wider\nstruct Config {\n  static constexpr int WIDE = 192;\n  static constexpr int BKV = WIDE;\n};\n"
    out = kernel_variants.apply_replacements(source, variant)
    assert out.count("struct Config {") == 1 and "BKV = 128" not in out
    assert "constexpr int BKV = Config<64>::BKV;" in out
    assert "static constexpr int WIDE = 160;" in kernel_variants.apply_overrides(out, {"WIDE": "160"})


def test_a_variant_source_may_name_the_line_it_replaces():
    """A definition whose first line changes (a kernel's launch bounds) names the reference's first line."""
    variant = ("// replaces: __device__ __forceinline__ void other() {\n"
               "__device__ __noinline__ void other() {\n  return;\n}\n")
    out = kernel_variants.apply_replacements(REFERENCE_SOURCE, variant)
    assert "__noinline__ void other() {\n  return;\n}" in out and "__forceinline__ void other()" not in out
    assert "if (true) {" not in out and "d[0] += 1.f;" in out


def test_a_variant_source_may_add_a_definition_above_a_named_one():
    """An added definition keeps its own comments and template head and goes above the named definition's
    template head and comments, so the file's notes stay with what they describe."""
    variant = ("// adds before: __device__ __forceinline__ void step(float (&d)[N]) {\n"
               "// what the new step does\n"
               "template <int M>\n__device__ __forceinline__ void new_step(float (&d)[M]) {\n  d[0] = 2.f;\n}\n")
    source = REFERENCE_SOURCE.replace("template <int N>\n", "// the step\ntemplate <int N>\n")
    out = kernel_variants.apply_replacements(source, variant)
    assert ("// what the new step does\ntemplate <int M>\n__device__ __forceinline__ void new_step(float (&d)[M]) {\n"
            "  d[0] = 2.f;\n}\n\n// the step\ntemplate <int N>\n__device__ __forceinline__ void step(") in out
    assert "d[0] += 1.f;" in out and "void other()" in out


@pytest.mark.parametrize("marker", ["// replaces: ", "// adds before: "])
@pytest.mark.parametrize("variant, message", [
    ("{marker}__device__ void missing() {{\n__device__ void missing() {{\n}}\n", "found 0"),
    ("{marker}__device__ __forceinline__ void other() {{\n\n__device__ void other() {{\n}}\n", "right above"),
    ("__device__ __forceinline__ void other() {{\n}}\n{marker}__device__ __forceinline__ void other() {{\n",
     "no definition follows"),
])
def test_a_misplaced_replaces_or_adds_line_is_an_error(marker, variant, message):
    with pytest.raises(ValueError, match=message):
        kernel_variants.apply_replacements(REFERENCE_SOURCE, variant.format(marker=marker))


@pytest.mark.parametrize("variant, message", [
    ("__device__ void missing() {\n}\n", "found 0"),
    ("template <int N>\n__device__ void step() {\n}\n", "declarator line"),
    ("__device__ __forceinline__ void step(float (&d)[N]) {\n  d[0] = 0;\n", "no closing line"),
    ("// only notes\n", "no definition"),
])
def test_a_variant_source_that_does_not_fit_is_an_error(variant, message):
    with pytest.raises(ValueError, match=message):
        kernel_variants.apply_replacements(REFERENCE_SOURCE, variant)


def test_two_definitions_starting_alike_are_an_error():
    twice = REFERENCE_SOURCE + "__device__ __forceinline__ void other() {\n}\n"
    with pytest.raises(ValueError, match="found 2"):
        kernel_variants.apply_replacements(twice, "__device__ __forceinline__ void other() {\n}\n")


VARIANT_FILES = sorted(kernel_variants.VARIANTS.glob("*.cu"))


def test_the_rejected_variants_are_kept_as_sources():
    assert {p.name for p in VARIANT_FILES} >= {"gemm_bf16.decode_l2_prefetch.cu", "gemm_fp8.eager_promotion.cu",
                                               "gemm_fp8.promote_every_stage.cu"}


@pytest.mark.parametrize("path", VARIANT_FILES, ids=[p.name for p in VARIANT_FILES])
def test_each_variant_source_applies_to_its_reference_and_builds(path):
    """A variant file is named <task>.<what>.cu; it must still fit its reference kernel and build as the
    evaluator builds it, without spills."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    task = path.name.split(".")[0]
    variant = kernel_variants.parse_variant(f"v:@{path}")
    source = kernel_variants.variant_sources(reference_folder("sm_90a") / f"{task}.cu", [variant])[0]
    assert path.read_text().splitlines()[-1] in source
    report = check_source(source, Arch.SM_90A, get_task(task), f"{task}.cu")
    assert report.build.ok, report.build.diagnosis
    assert report.static is not None
    assert all(k.resources.spill_store_bytes == 0 for k in report.static.kernels)


def test_the_prefetch_variant_keeps_its_knob():
    variant = kernel_variants.parse_variant("pf32:@gemm_bf16.decode_l2_prefetch.cu;PREFETCH_BLOCKS=32")
    source = kernel_variants.variant_sources(reference_folder("sm_90a") / "gemm_bf16.cu", [variant])[0]
    assert "constexpr int PREFETCH_BLOCKS = 32;" in source and "tma_prefetch_2d(map_b" in source


@pytest.mark.parametrize("kernel, knob", [("gemm_bf16", "CTAS_PER_SM"), ("gemm_bf16", "MIN_CTAS_PER_SM"),
                                          ("rmsnorm", "kBytesInFlightPerCta"), ("rmsnorm", "kThreads"),
                                          ("softmax", "kBytesInFlightPerCta"), ("softmax", "kMaxCtasPerSm"),
                                          ("softmax", "kAllClusterSizes"), ("transpose", "kStages"),
                                          ("gemm_fp8", "PROMOTE_EVERY"), ("gemm_fp8", "SMEM_AREA"),
                                          ("gemm_fp8", "DECODE_BN"), ("gemm_fp8", "GROUP_M"),
                                          ("gemm_fp8", "TMA_STORE"), ("gemm_fp8", "TMA_STORE_MAX_K"),
                                          ("add_rmsnorm", "kThreads"), ("add_rmsnorm", "kBytesInFlightPerCta"),
                                          ("silu_mul", "kChunk"), ("silu_mul", "kBytesInFlightPerCta"),
                                          ("rope", "kThreads"), ("rope", "kMaxStageBytes"),
                                          ("decode_gqa_paged", "kStages"), ("decode_gqa_paged", "kCtasPerSm"),
                                          ("decode_gqa_paged", "kMinChunkTiles")])
def test_the_reference_kernels_knobs_are_overridable(kernel, knob):
    source = (reference_folder("sm_90a") / f"{kernel}.cu").read_text()
    assert kernel_variants.apply_overrides(source, {knob: "7"}) != source


def test_a_variant_builds_as_the_evaluator_builds_it():
    """The source handed to the evaluator has the wrapper header inlined (a bare #include would not build)."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    kernel = reference_folder("sm_90a") / "rmsnorm.cu"
    variants = [kernel_variants.AS_IS, kernel_variants.Variant("shallow", {"kBytesInFlightPerCta": "32 * 1024"})]
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


def test_the_variants_gpu_checks_times_are_spelled_right() -> None:
    """Every variant the `variants_*` sections of scripts/gpu_checks.sh ask for parses and splices into its kernel
    (a misspelt knob or file would otherwise be found only on a lent GPU)."""
    import re
    import shlex

    script = (REPO / "scripts" / "gpu_checks.sh").read_text()
    section = script[script.index("        variants_attention|"):script.index("        servebench)")]
    calls = [call for call in section.replace("\\\n", " ").split("run_variants ")[1:] if not call.startswith("()")]
    runs = [(re.match(r"\w+ \d+ \$R/(\w+\.cu)", call).group(1), call) for call in calls]  # type: ignore[union-attr]
    assert {kernel for kernel, _ in runs} == {"attention_bwd.cu", "rmsnorm.cu", "transpose.cu", "gemm_fp8.cu"}
    for kernel, arguments in runs:
        words = shlex.split(arguments.split(";;")[0].split("\n")[0])
        specs = [words[i + 1] for i, word in enumerate(words) if word == "--variant"]
        assert specs, kernel
        sources = kernel_variants.variant_sources(reference_folder("sm_90a") / kernel,
                                                  [kernel_variants.parse_variant(spec) for spec in specs])
        assert len(set(sources)) == len(sources), f"{kernel}: two variants give the same source"


def attention_bwd_static_kernels(spec: str):  # type: ignore[no-untyped-def]
    """The static reports of attention_bwd's kernels with the variant ``spec`` (``@file`` and/or constants;
    as-is when empty) applied, built as the evaluator builds it: builds, no spills, no ptxas warnings (a
    serialised wgmma pipeline, C7512/C7515, would undo what the variants are for)."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    variant = kernel_variants.parse_variant(f"v:{spec}") if spec else kernel_variants.AS_IS
    source = kernel_variants.variant_sources(reference_folder("sm_90a") / "attention_bwd.cu", [variant])[0]
    report = check_source(source, Arch.SM_90A, get_task("attention_bwd"), "attention_bwd.cu")
    assert report.build.ok, report.build.diagnosis
    assert report.static is not None and not report.static.warnings, report.static and report.static.warnings
    assert all(k.resources.spill_store_bytes == 0 and k.resources.spill_load_bytes == 0
               for k in report.static.kernels)
    return report.static.kernels


def _attention_bwd_kernels(spec: str):  # type: ignore[no-untyped-def]
    """Each kernel of attention_bwd (name without its template argument -> its static report, per head dim)
    with the variant ``spec`` applied (``attention_bwd_static_kernels``)."""
    kernels = {}
    for kernel in attention_bwd_static_kernels(spec):
        name = next(n for n in ("delta", "dq", "dkdv") if f"attention_bwd_{n}" in kernel.demangled)
        d = next(d for d in (64, 128, 256) if f"<{d}>" in kernel.demangled)
        kernels[name, d] = kernel
    assert len(kernels) == 9
    return kernels


def test_the_attention_bwd_scores_ahead_variants_change_only_their_own_loops():
    """dq_scores_ahead rewrites the dQ kernel at every head dim (its score GEMMs are issued twice in the
    source: the peeled first step and the loop); dkdv_scores_ahead only the D = 64 dK/dV kernel. Every other
    kernel keeps the reference's SASS instruction counts."""
    reference = _attention_bwd_kernels("")
    dq = _attention_bwd_kernels("@attention_bwd.dq_scores_ahead.cu")
    dkdv = _attention_bwd_kernels("@attention_bwd.dkdv_scores_ahead.cu")
    for key, kernel in reference.items():
        assert (dq[key].sass != kernel.sass) == (key[0] == "dq"), key
        assert (dkdv[key].sass != kernel.sass) == (key == ("dkdv", 64)), key
    hgmma = "HGMMA.64x64x16.F32.BF16"
    assert dq["dq", 128].sass[hgmma] == 2 * reference["dq", 128].sass[hgmma]
    assert dkdv["dkdv", 64].sass[hgmma] == 2 * reference["dkdv", 64].sass[hgmma]


def _fp8_kernels(spec: str):  # type: ignore[no-untyped-def]
    """Each instantiation of gemm_fp8 with the variant ``spec`` applied (as-is when empty), by its template
    arguments, built as the evaluator builds it: requirements met, no spills."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    variant = kernel_variants.parse_variant(f"v:{spec}") if spec else kernel_variants.AS_IS
    source = kernel_variants.variant_sources(reference_folder("sm_90a") / "gemm_fp8.cu", [variant])[0]
    report = check_source(source, Arch.SM_90A, get_task("gemm_fp8"), "gemm_fp8.cu")
    assert report.ok, report.build.diagnosis if not report.build.ok else report.static
    assert report.static is not None
    assert all(k.resources.spill_store_bytes == 0 and k.resources.spill_load_bytes == 0 for k in report.static.kernels)
    return {k.demangled.split("gemm_fp8_sm90a")[1].split(">")[0] + ">": k for k in report.static.kernels}


def test_the_fp8_wave_width_variant_adds_a_144_wide_kernel_and_leaves_the_others():
    """The variant changes only the host's choice of width: the reference's three kernels compile to the same
    SASS, a fourth runs 144-wide wgmmas, and WIDE_BN=128 (its control) builds exactly the reference's kernels."""
    reference = _fp8_kernels("")
    wave = _fp8_kernels("@gemm_fp8.wave_width.cu")
    assert set(wave) == set(reference) | {"<144, false>"}
    assert wave["<144, false>"].sass.get("QGMMA.64x144x32.F32.E4M3.E4M3", 0) > 0
    assert {n: k.sass for n, k in wave.items() if n in reference} == {n: k.sass for n, k in reference.items()}
    control = _fp8_kernels("@gemm_fp8.wave_width.cu;WIDE_BN=128")
    assert {n: k.sass for n, k in control.items()} == {n: k.sass for n, k in reference.items()}


def test_the_fp8_lazy_release_variant_drops_the_keep_steps_wgmma_waits():
    """Each kernel loses the wgmma wait of the mainloop's two keep() sites (6 -> 4 WARPGROUP.DEPBAR), keeps its
    wgmma issues, and promotion every 4 stages (two keeps in a row) refuses to build."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    reference = _fp8_kernels("")
    lazy = _fp8_kernels("@gemm_fp8.lazy_release.cu")
    assert set(lazy) == set(reference)
    for name, kernel in lazy.items():
        assert kernel.sass.get("WARPGROUP.DEPBAR.LE", 0) == reference[name].sass.get("WARPGROUP.DEPBAR.LE", 0) - 2
        assert kernel.sass.get("WARPGROUP.ARRIVE") == reference[name].sass.get("WARPGROUP.ARRIVE")
    variant = kernel_variants.parse_variant("v:@gemm_fp8.lazy_release.cu;PROMOTE_EVERY=4")
    source = kernel_variants.variant_sources(reference_folder("sm_90a") / "gemm_fp8.cu", [variant])[0]
    report = check_source(source, Arch.SM_90A, get_task("gemm_fp8"), "gemm_fp8.cu")
    assert not report.build.ok and "two keeps in a row" in report.build.log
