"""Vendor-baseline variants: setup stays out of the timed call, the prompt names exactly what is timed,
skips carry reasons, and the published baseline quality warns only from measured numbers."""

from __future__ import annotations

import sys
import types
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ptxbench.evaluate.baselines import variants as baselines
from ptxbench.evaluate.baselines.variants import BaselineQuality, baseline_text, variant_specs, weak_baseline_warning
from ptxbench.prompts.task import render_task_prompt
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.model import Role
from ptxbench.tasks.reference import make_inputs

from . import fake_cudnn, fake_fa3, fake_flashinfer

# views and metadata: no work on the data
_VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "alias", "as_strided", "detach", "slice",
          "select", "unsqueeze", "squeeze", "reshape", "_reshape_alias", "lift_fresh",
          "empty", "empty_like", "empty_strided", "new_empty"}  # allocation is no work either

# RoPE's timed call: the angles from the positions (inv_freq comes from setup), then Q and K rotated.
_ROTATE = ["_to_copy", "_to_copy", "mul", "mul", "sub", "mul", "mul", "add", "cat", "_to_copy"]
_ROPE = ["_to_copy", "mul", "cos", "sin", *_ROTATE, *_ROTATE]


def _rms_norm_ops(x, w) -> list[str]:  # type: ignore[no-untyped-def]
    """The eager F.rms_norm's own decomposition on this machine."""
    log: list[str] = []
    with OpLog(log):
        torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6)
    return log


# Per task and variant, the only working ops its timed call may make (a function: computed from the
# inputs, where the count depends on them or on this machine's decomposition).
EXPECTED_CALL = {
    ("gemm_bf16", "cublas"): ["mm"], ("gemm_bf16", "compile"): ["mm"],
    ("gemm_fp8", "cublaslt"): ["_scaled_mm"], ("gemm_fp8", "compile"): ["_scaled_mm"],
    ("attention_fwd", "cudnn"): ["_scaled_dot_product_cudnn_attention"],
    ("attention_fwd", "flash"): ["_scaled_dot_product_flash_attention"],
    ("attention_bwd", "cudnn"): ["_scaled_dot_product_cudnn_attention_backward"],
    ("attention_bwd", "flash"): ["_scaled_dot_product_flash_attention_backward"],
    ("rmsnorm", "torch"): None, ("rmsnorm", "compile"): None,  # None: the ops of F.rms_norm itself
    ("rmsnorm", "liger"): ["liger_rms_norm"],
    ("softmax", "torch"): ["_softmax"], ("softmax", "compile"): ["_softmax"], ("softmax", "liger"): ["liger_softmax"],
    ("transpose", "torch"): ["clone"], ("transpose", "compile"): ["clone"],
    # the paged keys and values are gathered inside the timed call: that copy is the task's work
    ("decode_gqa_paged", "flash_varlen"): ["index_select", "index_select", "_flash_attention_forward"],
    ("prefill_gqa_ragged", "flash_varlen"): ["_flash_attention_forward"],
    # widening e4m3 to bf16 and applying descale_v are the task's work too
    ("attention_fp8_fwd", "cudnn"): ["_to_copy"] * 3 + ["_scaled_dot_product_cudnn_attention", "mul"],
    ("attention_fp8_fwd", "flash"): ["_to_copy"] * 3 + ["_scaled_dot_product_flash_attention", "mul"],
    ("gemm_fp8_blockscale", "cublaslt"): ["scaled_mm"],
    ("gemm_fp8_blockscale", "dequant"): ["_to_copy", "mul", "_to_copy"] * 2 + ["mm"],
    ("gemm_fp8_blockscale", "compile"): ["_to_copy", "mul", "_to_copy"] * 2 + ["mm"],
    ("moe_grouped_gemm", "grouped"): ["_grouped_mm"], ("moe_grouped_gemm", "compile"): ["_grouped_mm"],
    ("moe_grouped_gemm", "loop"): lambda inputs, sizes: ["mm"] * len(set(inputs["expert_offsets"].tolist()) - {0}),
    ("add_rmsnorm", "torch"): lambda inputs, sizes: ["add", *_rms_norm_ops(inputs["X"] + inputs["R"], inputs["W"])],
    ("add_rmsnorm", "compile"): lambda inputs, sizes: ["add", *_rms_norm_ops(inputs["X"] + inputs["R"], inputs["W"])],
    ("add_rmsnorm", "liger"): ["liger_fused_add_rms_norm"],
    ("silu_mul", "torch"): ["silu", "mul"], ("silu_mul", "compile"): ["silu", "mul"],
    ("silu_mul", "liger"): ["liger_swiglu"],
    ("rope", "torch"): _ROPE, ("rope", "compile"): _ROPE,
    # MLA: the gather, the keys' and queries' concatenation to 576 columns, the kernel; on the CPU the two score
    # products multiply fp32 copies (four _to_copy) where the GPU asks cuBLAS for an fp32 result
    ("mla_decode_paged", "efficient_varlen"): ["index_select", "index_select", "cat", "cat",
                                               "_efficient_attention_forward"],
    ("mla_decode_paged", "cublas_padded"): ["index_select", "index_select"] + ["_to_copy"] * 4 + ["bmm", "bmm", "add",
                                            "add", "logsumexp", "sub", "exp", "_to_copy", "bmm"],
    # FlashInfer (the stand-in of fake_flashinfer.py logs its launches): run() on the pages in place; decode's
    # base-2 LSE scaled to natural log
    ("decode_gqa_paged", "flashinfer"): ["flashinfer.decode.run", "mul"],
    ("decode_gqa_paged", "flashinfer_tc"): ["flashinfer.decode.run", "mul"],
    ("prefill_gqa_ragged", "flashinfer"): ["flashinfer.prefill.run"],
    # fp8: Q, K, V re-laid out token-major for FlashInfer, O and LSE back to [B, H, S, ...]
    ("attention_fp8_fwd", "flashinfer"): ["clone"] * 3 + ["flashinfer.prefill.run", "clone", "clone"],
    ("mla_decode_paged", "flashinfer"): ["flashinfer.mla.run"],
    ("rope", "flashinfer"): ["flashinfer.apply_rope_with_cos_sin_cache"],
    # FA3 (fake_fa3.py logs its launches): the kernel alone, the layouts mapped by views
    ("attention_fp8_fwd", "fa3"): ["fa3.flash_attn_func"],
    ("prefill_gqa_ragged", "fa3"): ["fa3.flash_attn_varlen_func"],
    # the cuDNN frontend (fake_cudnn.py logs its launches): the built plan's execute alone, O and the stats allocated
    ("attention_fp8_fwd", "cudnn_fp8"): ["cudnn.execute"],
}


class OpLog(TorchDispatchMode):
    """Records every working aten op that runs on real tensors, beside the fakes' own entries."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func._schema.name.split("::")[-1]
        if name not in _VIEWS:
            self.log.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def ops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counting stand-ins for the GPU-only ops and libraries the variants use, and for torch.compile."""
    import torch.distributed.tensor  # noqa: F401 - registers its strategies on the real ops before they are patched

    log: list[str] = []

    def fake(name: str, result):  # type: ignore[no-untyped-def]
        def op(*args, **kwargs):  # type: ignore[no-untyped-def]
            log.append(name)
            return result(*args)
        return op

    def attention(q, k, v, *rest):  # type: ignore[no-untyped-def]
        bookkeeping = [torch.empty(1)] * 7
        return (torch.empty_like(q), torch.empty(q.shape[:3] + (1,)), *bookkeeping)

    def backward(d_out, q, k, v, *rest):  # type: ignore[no-untyped-def]
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def varlen(q, k, v, *rest):  # type: ignore[no-untyped-def]
        return torch.empty_like(q), torch.empty(q.shape[1], q.shape[0]), *[torch.empty(1)] * 3

    def efficient(q, k, v, bias, cum_q, cum_k, max_q, *rest):  # type: ignore[no-untyped-def]
        lse = torch.empty(len(cum_q) - 1, q.shape[2], -(-max_q // 32) * 32)
        return torch.empty(*q.shape[:3], v.shape[-1]), lse, *[torch.empty(1)] * 4

    for name, result in (("_flash_attention_forward", varlen), ("_efficient_attention_forward", efficient),
                         ("_scaled_dot_product_cudnn_attention", attention),
                         ("_scaled_dot_product_flash_attention", attention),
                         ("_scaled_dot_product_cudnn_attention_backward", backward),
                         ("_scaled_dot_product_flash_attention_backward", backward)):
        monkeypatch.setattr(torch.ops.aten, name, fake(name, result))
    monkeypatch.setattr(torch, "_scaled_mm", fake("_scaled_mm", lambda a, b, *r: torch.empty(a.shape[0], b.shape[1])))
    monkeypatch.setattr(torch.nn.functional, "scaled_mm",
                        fake("scaled_mm", lambda a, b, *r: torch.empty(a.shape[0], b.shape[1])))
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)  # the cuDNN a CUDA build of torch ships

    def compile_(fn, **options):  # type: ignore[no-untyped-def]
        log.append("torch.compile")
        return fn
    monkeypatch.setattr(torch, "compile", compile_)
    for module, cls, name in (("liger_kernel.ops.rms_norm", "LigerRMSNormFunction", "liger_rms_norm"),
                              ("liger_kernel.ops.softmax", "LigerSoftmaxFunction", "liger_softmax"),
                              ("liger_kernel.ops.swiglu", "LigerFusedGateUpSiLUMulFunction", "liger_swiglu")):
        stand_in = types.ModuleType(module)
        setattr(stand_in, cls, types.SimpleNamespace(apply=fake(name, lambda x, *r: torch.empty_like(x))))
        monkeypatch.setitem(sys.modules, module, stand_in)
    for module, cls, name in (("liger_kernel.ops.fused_add_rms_norm", "LigerFusedAddRMSNormFunction",
                               "liger_fused_add_rms_norm"),):  # returns the output and the new residual
        stand_in = types.ModuleType(module)
        setattr(stand_in, cls, types.SimpleNamespace(
            apply=fake(name, lambda x, *r: (torch.empty_like(x), torch.empty_like(x)))))
        monkeypatch.setitem(sys.modules, module, stand_in)
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.ops", types.ModuleType("liger_kernel.ops"))
    monkeypatch.setattr(baselines, "_COMPILED", {})
    fake_flashinfer.install(monkeypatch, log)
    fake_fa3.install(monkeypatch, log)
    fake_cudnn.install(monkeypatch, log)
    return log


def _small(task):  # type: ignore[no-untyped-def]
    """The task's smallest shown workload: enough to run its ops on the CPU."""
    return min(task.shown(), key=lambda w: task.bytes_for(w.sizes))


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_setup_work_never_runs_in_the_timed_call(task, ops) -> None:  # type: ignore[no-untyped-def]
    sizes = _small(task).sizes
    inputs = make_inputs(task, sizes, seed=1, device="cpu")
    variants = variant_specs(task, audit=True)  # the audited ones must not time setup work either
    assert {(task.id, name) for name in variants} <= set(EXPECTED_CALL), "a variant without an expectation"
    for name, variant in variants.items():
        ops.clear()
        with OpLog(ops):
            call = variant.setup(inputs, sizes)
        setup_ops = list(ops)
        ops.clear()
        with OpLog(ops):
            outputs = call()
        expected = EXPECTED_CALL[(task.id, name)]
        if callable(expected):
            expected = expected(inputs, sizes)
        if expected is None:  # the eager op's own decomposition on this machine
            ops_of_work = []
            with OpLog(ops_of_work):
                torch.nn.functional.rms_norm(inputs["X"], (sizes["Hd"],), inputs["W"], eps=1e-6)
            expected = ops_of_work
        assert Counter(ops) == Counter(expected), (name, ops)
        assert set(outputs) == {o.name for o in task.outputs}
        if name == "compile":
            assert setup_ops.count("torch.compile") == 1
        if task.id == "attention_bwd":  # the forward's bookkeeping comes from setup, untimed
            assert any(op.endswith("_attention") for op in setup_ops)


def test_compiled_graph_is_built_once_per_shape(ops) -> None:  # type: ignore[no-untyped-def]
    task = next(t for t in bundled_suite() if t.id == "softmax")
    sizes = _small(task).sizes
    compile_variant = variant_specs(task)["compile"]
    for seed in (1, 2, 3):
        compile_variant.setup(make_inputs(task, sizes, seed=seed, device="cpu"), sizes)
    assert ops.count("torch.compile") == 1


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_prompt_and_task_name_exactly_the_variants_defined(task) -> None:  # type: ignore[no-untyped-def]
    text = baseline_text(task.id)
    assert task.baseline.call == text
    assert text in render_task_prompt(task, next(iter(task.requirements)))
    for variant in variant_specs(task).values():
        assert variant.description in text


def test_a_task_whose_text_differs_from_its_variants_is_refused() -> None:
    task = next(t for t in bundled_suite() if t.id == "rmsnorm")
    changed = task.model_copy(update={"baseline": task.baseline.model_copy(update={"call": "eager F.rms_norm"})})
    with pytest.raises(ValueError, match="baseline.call"):
        variant_specs(changed)


def test_missing_library_is_a_reason_not_a_crash() -> None:
    variant = baselines.BaselineVariant("x", "x", lambda i, s: lambda: {}, requires=("no_such_module_ptxbench",))
    assert "no_such_module_ptxbench could not be imported" in (variant.load() or "")
    assert baselines.BaselineVariant("y", "y", lambda i, s: lambda: {}).load() is None


def test_plain_calls_leave_out_variants_that_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "liger_kernel.ops.rms_norm", None)  # import fails
    task = next(t for t in bundled_suite() if t.id == "rmsnorm")
    assert "liger" not in baselines.baseline_variants(task) and "torch" in baselines.baseline_variants(task)


def test_weak_baseline_warning_only_from_measured_numbers() -> None:
    task = next(t for t in bundled_suite() if t.id == "transpose")
    timed = task.timed().name
    assert weak_baseline_warning(task, BaselineQuality()) is None
    assert weak_baseline_warning(task, baselines.load_baseline_quality()) is None  # shipped: no GPU run yet
    weak = BaselineQuality(gpu="NVIDIA H200", date="2026-12-03", tasks={"transpose": {timed: 15.0}})
    warning = weak_baseline_warning(task, weak)
    assert warning is not None and "15 %" in warning and "% of roofline says more" in warning
    strong = BaselineQuality(gpu="NVIDIA H200", date="2026-12-03", tasks={"transpose": {timed: 97.5}})
    assert weak_baseline_warning(task, strong) is None
    assert all(w.role is not Role.HELDOUT for w in task.shown())


@pytest.mark.parametrize("task_id", ["gemm_bf16", "gemm_fp8", "gemm_fp8_blockscale", "moe_grouped_gemm"])
def test_gemm_compile_is_audited_by_the_benchmark_not_timed_by_the_evaluator(task_id: str) -> None:
    task = next(t for t in bundled_suite() if t.id == task_id)
    assert "compile" not in variant_specs(task) and "torch.compile" not in task.baseline.call
    assert "compile" in variant_specs(task, audit=True)


@pytest.mark.parametrize(("version", "sizes", "refused"), [
    (91002, {"S": 1537, "D": 256}, None),
    (90100, {"S": 4096, "D": 128}, None),
    (90100, {"S": 2048, "D": 256}, "cuDNN 9.1.0 does not run attention with head dim 256 (cuDNN 9.10.0 does)"),
    (8905, {"S": 577, "D": 64}, "cuDNN 8.9.5 does not run attention with a key length of 577, not a multiple of 64 (cuDNN 8.9.6 does)"),
    (8906, {"S": 577, "D": 64}, None),
    (8906, {"S": 17, "D": 64}, "cuDNN 8.9.6 does not run attention with 17 queries, fewer than 64 (cuDNN 9.0.0 does)"),
    (None, {"S": 64, "D": 64}, "cuDNN is not available to this PyTorch"),
])
def test_cudnn_refuses_in_words_what_its_version_cannot_run(version, sizes, refused) -> None:  # type: ignore[no-untyped-def]
    assert baselines.cudnn_attention_refusal(version, sizes) == refused


class _CpuRunner:
    """The GPU worker's handler without a GPU: its own check_baselines, on CPU tensors."""

    def __new__(cls, task):  # type: ignore[no-untyped-def]
        from ptxbench.evaluate.child.gpu_side import CandidateRunner

        runner = object.__new__(CandidateRunner)
        runner.task = task
        runner.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None))
        return runner


@pytest.mark.parametrize("task_id", ["attention_fwd", "attention_bwd"])
def test_a_variant_that_cannot_run_a_workload_is_skipped_there_with_its_reason(
        task_id: str, ops, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The evaluator's check before timing (CandidateRunner.check_baselines): cuDNN too old for head dim 256
    is skipped on that workload with the reason its setup gives, FlashAttention runs; on head dim 128 both run.
    A library error in the call itself (cuDNN refusing a shape its version check let through) is a skip too."""
    from ptxbench.tasks import reference

    real_make_inputs = reference.make_inputs
    monkeypatch.setattr(reference, "make_inputs",
                        lambda task, sizes, seed, device="cpu": real_make_inputs(task, sizes, seed, device="cpu"))
    runner = _CpuRunner(next(t for t in bundled_suite() if t.id == task_id))
    small = {"B": 1, "H": 2, "S": 70, "D": 256, "causal": 1}
    assert runner.check_baselines(small, ["cudnn", "flash"]) == {"cudnn": None, "flash": None}
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    reasons = runner.check_baselines(small, ["cudnn", "flash"])
    assert reasons == {"cudnn": "setup failed: RuntimeError: cuDNN 9.1.0 does not run attention with head dim 256 "
                                "(cuDNN 9.10.0 does)", "flash": None}
    assert runner.check_baselines({**small, "D": 128}, ["cudnn", "flash"]) == {"cudnn": None, "flash": None}

    def refuses(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("cuDNN Frontend error: No valid execution plans built.\nmore lines")
    op = "_scaled_dot_product_cudnn_attention" + ("_backward" if task_id == "attention_bwd" else "")
    monkeypatch.setattr(torch.ops.aten, op, refuses)
    assert runner.check_baselines({**small, "D": 128}, ["cudnn", "flash"]) == {
        "cudnn": "setup failed: RuntimeError: cuDNN Frontend error: No valid execution plans built.", "flash": None}


def test_a_baseline_whose_outputs_miss_the_tolerance_is_skipped_where_it_is_verified(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that does less exact work than the task asks (FlashInfer's tensor-core decode missed
    decode_gqa_paged's LSE tolerance on an H100) is never the bar a candidate is timed against: the baseline
    process, which never holds candidate code, compares every variant's outputs with the task's reference."""
    from ptxbench.tasks import reference

    real_make_inputs = reference.make_inputs
    monkeypatch.setattr(reference, "make_inputs",
                        lambda task, sizes, seed, device="cpu": real_make_inputs(task, sizes, seed, device="cpu"))
    task = next(t for t in bundled_suite() if t.id == "rmsnorm")

    def variant(scale: float) -> types.SimpleNamespace:
        def setup(inputs, sizes):  # type: ignore[no-untyped-def]
            x, w = inputs["X"].float(), inputs["W"].float()
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w * scale
            return lambda: {"Y": y.to(inputs["X"].dtype)}
        return types.SimpleNamespace(load=lambda: None, setup=setup)

    monkeypatch.setattr(baselines, "variant_specs", lambda task, audit=False: {"exact": variant(1.0),
                                                                               "sloppy": variant(1.05)})
    runner = _CpuRunner(task)
    sizes = {"T": 4, "Hd": 256}
    assert runner.check_baselines(sizes, ["exact", "sloppy"]) == {"exact": None, "sloppy": None}
    reasons = runner.check_baselines(sizes, ["exact", "sloppy"], 0, True)
    assert reasons["exact"] is None
    assert reasons["sloppy"] is not None and reasons["sloppy"].startswith("outputs outside the task's tolerance: Y ")
