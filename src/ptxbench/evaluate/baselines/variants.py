"""The vendor baselines: every implementation of exactly a task's work that can be had, fastest wins.

A variant has a SETUP and a CALL. The setup runs once per input set, untimed: it derives auxiliary
tensors (attention backward's philox seed/offset and sequence bookkeeping from an untimed forward),
builds views, compiles (``torch.compile`` graphs, Triton kernels) and warms the call up. The call is
what is timed, and it launches only the task's work on the task's inputs: attention backward times
the library's backward kernel alone on the given O and LSE, as the candidate does. A variant whose
library cannot be loaded, or whose setup fails, is skipped with its reason, never silently.

The prompt's promise (``baseline_text``) is generated from the variants defined here, so a prompt can
never name a baseline that the evaluator does not run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ptxbench.evaluate.baselines import attention as paged
from ptxbench.evaluate.baselines import cudnn_frontend
from ptxbench.evaluate.baselines import fa3
from ptxbench.evaluate.baselines import flashinfer as fi
from ptxbench.evaluate.baselines import flashinfer_api
from ptxbench.evaluate.baselines import mla
from ptxbench.evaluate.baselines import reference as own_reference
from ptxbench.evaluate.baselines import serving
from ptxbench.evaluate.baselines.calls import Bound, Outputs, Setup, Tensors, TimedCall, warmed
from ptxbench.tasks.baseline_quality import (  # noqa: F401 - their home is tasks/ (the prompt says it too)
    QUALITY_PATH, WEAK_BASELINE_PCT, BaselineQuality, load_baseline_quality, quality_from_results,
    weak_baseline_warning, write_quality,
)
from ptxbench.tasks.flashinfer import fi_api
from ptxbench.tasks.model import Task

COMPILE_MODE = "max-autotune-no-cudagraphs"
# The baseline process's setup of one workload may compile: max-autotune of a GEMM shape benchmarks
# Triton templates against cuBLAS and can take minutes, so setup has its own, generous timeout.
SETUP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class BaselineVariant:
    """One implementation of a task's work: ``setup(inputs, sizes)`` (untimed) returns the timed call."""

    name: str
    description: str  # one line, quoted in the prompt
    setup: Setup
    requires: tuple[str, ...] = field(default=())  # modules that must import for the variant to run

    def load(self) -> str | None:
        """None when the variant can run here, else why not (a missing library is a skip, not a crash)."""
        for module in self.requires:
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - any import failure is a reason to skip, recorded
                return f"{module} could not be imported: {type(exc).__name__}: {exc}".splitlines()[0][:300]
        return None


# -- the task's work, bound to one input set ---------------------------------------------------------

def _bind_gemm_bf16(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    def work(a: Any, b_t: Any) -> Outputs:
        import torch

        return {"C": torch.matmul(a, b_t)}
    return work, (inputs["A"], inputs["B"].T)


def _bind_gemm_fp8(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    def work(a: Any, b_t: Any, scale_a: Any, scale_b: Any) -> Outputs:
        import torch

        return {"C": torch._scaled_mm(a, b_t, scale_a, scale_b, out_dtype=torch.bfloat16)}
    return work, (inputs["A"], inputs["B"].T, inputs["scale_a"], inputs["scale_b"])


def _bind_rmsnorm(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    hidden = (sizes["Hd"],)

    def work(x: Any, w: Any) -> Outputs:
        import torch.nn.functional as F

        return {"Y": F.rms_norm(x, hidden, w, eps=1e-6)}
    return work, (inputs["X"], inputs["W"])


def _bind_softmax(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    def work(x: Any) -> Outputs:
        import torch

        return {"Y": torch.softmax(x, dim=-1)}
    return work, (inputs["X"],)


def _bind_transpose(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    def work(x_t: Any) -> Outputs:
        return {"Y": x_t.contiguous()}
    return work, (inputs["X"].T,)


# -- setups ---------------------------------------------------------------------------------------------

def _eager(bind: Callable[[Tensors, Mapping[str, int]], Bound]) -> Setup:
    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        work, args = bind(inputs, sizes)
        return warmed(lambda: work(*args))
    return setup


_COMPILED: dict[tuple[Any, ...], Callable[..., Outputs]] = {}  # this process's graphs, by task and shape


def _compiled(task_id: str, bind: Callable[[Tensors, Mapping[str, int]], Bound]) -> Setup:
    """``torch.compile`` of the task's work, built once per shape per process and warmed up in setup
    (compilation and autotuning never timed); ``dynamic=False`` keeps every shape specialised."""
    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import torch

        work, args = bind(inputs, sizes)
        key = (task_id, tuple(sorted(sizes.items())),
               tuple((tuple(a.shape), tuple(a.stride()), str(a.dtype)) for a in args))
        if key not in _COMPILED:
            _COMPILED[key] = torch.compile(work, mode=COMPILE_MODE, dynamic=False)
        compiled = _COMPILED[key]
        return warmed(lambda: compiled(*args))
    return setup


# What cuDNN's fused attention runs, by version (PyTorch's own SDPA dispatcher applies the same limits):
# head dims above 128 from 9.10 on, a key length that is not a multiple of 64 from 8.9.6 on, fewer than
# 64 queries from 9.0 on. FlashAttention-2 takes head dims up to 256 and any length.
CUDNN_HEAD_DIM_256 = 91000
CUDNN_RAGGED_KEYS = 8906
CUDNN_SHORT_QUERIES = 90000


def cudnn_attention_refusal(version: int | None, sizes: Mapping[str, int]) -> str | None:
    """Why cuDNN ``version`` (``torch.backends.cudnn.version()``) cannot run attention of ``sizes``, or None.
    Checked in setup so a workload it cannot run is skipped with this reason, not left to a library error."""
    if version is None:
        return "cuDNN is not available to this PyTorch"
    needs = [(sizes["D"] > 128, CUDNN_HEAD_DIM_256, f"head dim {sizes['D']}"),
             (sizes["S"] % 64 != 0, CUDNN_RAGGED_KEYS, f"a key length of {sizes['S']}, not a multiple of 64"),
             (sizes["S"] < 64, CUDNN_SHORT_QUERIES, f"{sizes['S']} queries, fewer than 64")]
    for needed, since, what in needs:
        if needed and version < since:
            return f"cuDNN {_cudnn_text(version)} does not run attention with {what} (cuDNN {_cudnn_text(since)} does)"
    return None


def _cudnn_text(version: int) -> str:
    """91002 -> 9.10.2 (cuDNN 9 counts major * 10000 + minor * 100 + patch; cuDNN 8, major * 1000 + ...)."""
    if version >= 90000:
        return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    return f"{version // 1000}.{version // 100 % 10}.{version % 100}"


def _check_cudnn(sizes: Mapping[str, int]) -> None:
    import torch

    refusal = cudnn_attention_refusal(torch.backends.cudnn.version(), sizes)
    if refusal is not None:
        raise RuntimeError(refusal)


def _attention_forward(op_name: str) -> Setup:
    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import torch

        if "cudnn" in op_name:
            _check_cudnn(sizes)
        q, k, v = inputs["Q"], inputs["K"], inputs["V"]
        causal = bool(sizes["causal"])
        op = getattr(torch.ops.aten, op_name)
        args = (q, k, v, None, True, 0.0, causal, False) if "cudnn" in op_name else (q, k, v, 0.0, causal, False)

        def call() -> Outputs:
            out, lse = op(*args)[:2]
            return {"O": out, "LSE": lse.reshape(q.shape[:3])}
        return warmed(call)
    return setup


def _attention_backward_flash(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    import torch

    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    causal = bool(sizes["causal"])
    # untimed: the forward is run only for the bookkeeping the backward op takes (sequence offsets,
    # maximum lengths, philox seed and offset); O and LSE are the task's own inputs
    forward = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
    cum_q, cum_k, max_q, max_k, seed, offset = forward[2:8]
    del forward
    args = (inputs["dO"], q, k, v, inputs["O"], inputs["LSE"], cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset)

    def call() -> Outputs:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(*args)[:3]
        return {"dQ": dq, "dK": dk, "dV": dv}
    return warmed(call)


def _attention_backward_cudnn(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    import torch

    _check_cudnn(sizes)
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    causal = bool(sizes["causal"])
    forward = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False)
    lse = inputs["LSE"].reshape(forward[1].shape).contiguous()  # cuDNN's layout of the given LSE, untimed
    cum_q, cum_k, max_q, max_k, seed, offset = forward[2:8]
    del forward
    args = (inputs["dO"], q, k, v, inputs["O"], lse, seed, offset, None, cum_q, cum_k, max_q, max_k, 0.0, causal)

    def call() -> Outputs:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(*args)[:3]
        return {"dQ": dq, "dK": dk, "dV": dv}
    return warmed(call)


def _liger_rms_norm(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    x, w = inputs["X"], inputs["W"]
    # casting mode "gemma": the whole formula in fp32, as the task states (no offset, not in place)
    return warmed(lambda: {"Y": LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "gemma", False)})


def _liger_softmax(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    x = inputs["X"]
    return warmed(lambda: {"Y": LigerSoftmaxFunction.apply(x)})


def _compile_variant(task_id: str, bind: Callable[[Tensors, Mapping[str, int]], Bound], what: str) -> BaselineVariant:
    return BaselineVariant("compile", f"`torch.compile` of {what} (mode {COMPILE_MODE}, compiled and autotuned "
                           "before timing)", _compiled(task_id, bind), requires=("triton",))


_VARIANTS: dict[str, tuple[BaselineVariant, ...]] = {
    "gemm_bf16": (
        BaselineVariant("cublas", "cuBLAS through `torch.matmul(A, B.T)`", _eager(_bind_gemm_bf16)),
    ),
    "gemm_fp8": (
        BaselineVariant("cublaslt", "cuBLASLt through `torch._scaled_mm(A, B.T, scale_a, scale_b, "
                        "out_dtype=torch.bfloat16)`", _eager(_bind_gemm_fp8)),
    ),
    "attention_fwd": (
        BaselineVariant("cudnn", "cuDNN attention (`aten._scaled_dot_product_cudnn_attention`)",
                        _attention_forward("_scaled_dot_product_cudnn_attention")),
        BaselineVariant("flash", "FlashAttention-2 as built into PyTorch (`aten._scaled_dot_product_flash_attention`)",
                        _attention_forward("_scaled_dot_product_flash_attention")),
    ),
    "attention_bwd": (
        BaselineVariant("cudnn", "cuDNN's attention backward alone (`aten._scaled_dot_product_cudnn_attention_backward`"
                        " on the given O and LSE; no forward in the timed call)", _attention_backward_cudnn),
        BaselineVariant("flash", "FlashAttention-2's backward alone as built into PyTorch "
                        "(`aten._scaled_dot_product_flash_attention_backward` on the given O and LSE)",
                        _attention_backward_flash),
    ),
    "decode_gqa_paged": (
        BaselineVariant("flash_varlen", "the sequences' keys and values gathered from the pages (`index_select`, "
                        "timed) and FlashAttention-2's variable-length kernel as built into PyTorch "
                        "(`aten._flash_attention_forward`, grouped-query heads native)", paged.decode_gqa_paged_flash),
        BaselineVariant("flashinfer", "FlashInfer's `BatchDecodeWithPagedKVCacheWrapper` on the NHD pages in place "
                        "(`plan()` in setup; its base-2 LSE scaled to natural log, timed), where installed",
                        fi.decode_gqa_paged(tensor_cores=False), requires=fi.REQUIRES),
        BaselineVariant("flashinfer_tc", "the same wrapper with `use_tensor_cores=True` (its tensor-core decode), "
                        "where installed", fi.decode_gqa_paged(tensor_cores=True), requires=fi.REQUIRES),
    ),
    "prefill_gqa_ragged": (
        BaselineVariant("flash_varlen", "FlashAttention-2's variable-length causal kernel as built into PyTorch "
                        "(`aten._flash_attention_forward` on seq_indptr, grouped-query heads native)",
                        paged.prefill_gqa_ragged_flash),
        BaselineVariant("flashinfer", "FlashInfer's `BatchPrefillWithRaggedKVCacheWrapper`, causal, on seq_indptr "
                        "(`plan()` in setup; FlashInfer's backend for the GPU, FA3 on sm_90; natural-log LSE), "
                        "where installed", fi.prefill_gqa_ragged, requires=fi.REQUIRES),
        BaselineVariant("fa3", "FlashAttention-3's own variable-length causal kernel (`fa3_fwd_interface."
                        "flash_attn_varlen_func`, PyPI fa3-fwd) on seq_indptr (grouped-query heads native; the "
                        "longest sequence read in setup; its [H, T] LSE returned as a [T, H] view), where installed",
                        fa3.prefill_gqa_ragged, requires=fa3.REQUIRES),
    ),
    "attention_fp8_fwd": (
        BaselineVariant("cudnn", "cuDNN bf16 attention on the widened fp8 inputs (e4m3 is exact in bf16; descales "
                        "folded into the softmax scale and the output)",
                        paged.attention_fp8_sdpa("_scaled_dot_product_cudnn_attention")),
        BaselineVariant("flash", "FlashAttention-2 bf16 as built into PyTorch on the widened fp8 inputs (as above)",
                        paged.attention_fp8_sdpa("_scaled_dot_product_flash_attention")),
        BaselineVariant("flashinfer", "FlashInfer's `BatchPrefillWithRaggedKVCacheWrapper` on the e4m3 inputs (its fp8 "
                        "FA3 kernel on sm_90; Q, K, V laid out token-major and O, LSE back, timed; `plan()` in "
                        "setup), where installed", fi.attention_fp8_fwd, requires=fi.REQUIRES),
        BaselineVariant("fa3", "FlashAttention-3's own fp8 forward (`fa3_fwd_interface.flash_attn_func`, PyPI "
                        "fa3-fwd) on the e4m3 inputs as transposed views, O returned as one (no copies; the "
                        "descales expanded to its [B, H] fp32 tensors in setup), where installed",
                        fa3.attention_fp8_fwd, requires=fa3.REQUIRES),
        BaselineVariant("cudnn_fp8", "cuDNN's own fp8 SDPA forward (`pygraph.sdpa_fp8` through the cuDNN frontend's "
                        "graph API, PyPI nvidia-cudnn-frontend, on PyTorch's cuDNN) on the e4m3 inputs in place (the "
                        "graph built in setup for the shape and mask; the descales passed as they are, bf16 O "
                        "unquantised, its softmax stats returned as the LSE, a view), where installed",
                        cudnn_frontend.attention_fp8_fwd, requires=cudnn_frontend.REQUIRES),
    ),
    "mla_decode_paged": (
        BaselineVariant("efficient_varlen", "the sequences' latent and rope rows gathered from the pages "
                        "(`index_select`, timed) and PyTorch's memory-efficient (CUTLASS) variable-length kernel with "
                        "the heads as queries (`aten._efficient_attention_forward`, head dim 576, value dim 512)",
                        mla.mla_decode_efficient),
        BaselineVariant("cublas_padded", "the sequences gathered into a padded batch (timed), cuBLAS products with "
                        "fp32 scores and an fp32 masked softmax", mla.mla_decode_padded),
        BaselineVariant("flashinfer", "FlashInfer's `BatchMLAPagedAttentionWrapper` on the split query and caches "
                        "in place (`plan()` in setup, sm_scale read there; FlashInfer's backend for the GPU, FA3 "
                        "first on sm_90; natural-log LSE), where installed", fi.mla_decode_paged,
                        requires=fi.REQUIRES),
    ),
    "rmsnorm": (
        BaselineVariant("torch", "eager `torch.nn.functional.rms_norm(X, (Hd,), W, eps=1e-6)`", _eager(_bind_rmsnorm)),
        _compile_variant("rmsnorm", _bind_rmsnorm, "it"),
        BaselineVariant("liger", "Liger-Kernel's Triton RMSNorm (fp32 casting mode), where installed",
                        _liger_rms_norm, requires=("liger_kernel.ops.rms_norm",)),
    ),
    "softmax": (
        BaselineVariant("torch", "eager `torch.softmax(X, dim=-1)`", _eager(_bind_softmax)),
        _compile_variant("softmax", _bind_softmax, "it"),
        BaselineVariant("liger", "Liger-Kernel's Triton softmax, where installed", _liger_softmax,
                        requires=("liger_kernel.ops.softmax",)),
    ),
    "transpose": (
        BaselineVariant("torch", "eager `X.T.contiguous()`", _eager(_bind_transpose)),
        _compile_variant("transpose", _bind_transpose, "it"),
    ),
    "gemm_fp8_blockscale": (
        BaselineVariant("cublaslt", "cuBLASLt's 1x128 x 128x128 block scaling through `torch.nn.functional.scaled_mm("
                        "A, B.T, ..., ScalingType.BlockWise1x128, ..., ScalingType.BlockWise128x128)` (scales re-laid "
                        "out as cuBLAS wants them in setup)", _eager(serving.bind_blockscale_cublas)),
        BaselineVariant("dequant", "eager dequantisation of A and B to bf16, then cuBLAS `torch.matmul`",
                        _eager(serving.bind_blockscale_dequant)),
    ),
    "moe_grouped_gemm": (
        BaselineVariant("grouped", "PyTorch's grouped GEMM `torch._grouped_mm(X, W.transpose(-2, -1), "
                        "offs=expert_offsets)`", _eager(serving.bind_moe_grouped)),
        BaselineVariant("loop", "one cuBLAS `torch.mm` per expert with tokens (group bounds read to the host in "
                        "setup)", _eager(serving.bind_moe_loop)),
    ),
    "add_rmsnorm": (
        BaselineVariant("torch", "eager `S = X + R; F.rms_norm(S, (Hd,), W, eps=1e-6)`",
                        _eager(serving.bind_add_rmsnorm)),
        _compile_variant("add_rmsnorm", serving.bind_add_rmsnorm, "it"),
        BaselineVariant("liger", "Liger-Kernel's fused add + RMSNorm (Triton, fp32 casting mode), where installed",
                        serving.liger_add_rmsnorm, requires=("liger_kernel.ops.fused_add_rms_norm",)),
    ),
    "silu_mul": (
        BaselineVariant("torch", "eager `F.silu(X[:, 0]) * X[:, 1]`", _eager(serving.bind_silu_mul)),
        _compile_variant("silu_mul", serving.bind_silu_mul, "it"),
        BaselineVariant("liger", "Liger-Kernel's fused gate-up SwiGLU (Triton), where installed",
                        serving.liger_silu_mul, requires=("liger_kernel.ops.swiglu",)),
    ),
    "rope": (
        BaselineVariant("torch", "eager rotate-half RoPE with fp32 angles `positions * inv_freq` (inv_freq "
                        "computed in setup)", _eager(serving.bind_rope)),
        _compile_variant("rope", serving.bind_rope, "it"),
        BaselineVariant("flashinfer", "FlashInfer's `apply_rope_with_cos_sin_cache` (`is_neox=True`; the fp32 cos/sin "
                        "cache of positions 0..32767 computed in setup), where installed", fi.rope,
                        requires=fi.REQUIRES),
    ),
}


# Variants the benchmark audits but the evaluator does not time. torch.compile's max-autotune of a GEMM
# benchmarks Triton templates against the same cuBLAS/cuBLASLt call and takes minutes per shape, in each
# process that times it: on a fresh machine that would hold the first GEMM candidate for many minutes.
# benchmarks/baselines.py --compile-gemm times it beside the library; a shape where it won would move it up
# into _VARIANTS (and so into the task's text and prompt).
_AUDITED: dict[str, tuple[BaselineVariant, ...]] = {
    "gemm_bf16": (_compile_variant("gemm_bf16", _bind_gemm_bf16, "`torch.matmul(A, B.T)`"),),
    "gemm_fp8": (_compile_variant("gemm_fp8", _bind_gemm_fp8, "`torch._scaled_mm(...)`"),),
    "gemm_fp8_blockscale": (_compile_variant("gemm_fp8_blockscale", serving.bind_blockscale_dequant,
                                             "the dequantise-then-matmul path"),),
    "moe_grouped_gemm": (_compile_variant("moe_grouped_gemm", serving.bind_moe_grouped, "`torch._grouped_mm(...)`"),),
}


def variants_for(task_id: str) -> dict[str, BaselineVariant]:
    """Every variant defined for the task, loadable here or not, by name."""
    try:
        return {variant.name: variant for variant in _VARIANTS[task_id]}
    except KeyError:
        raise KeyError(f"no vendor baseline is defined for task {task_id!r}") from None


def baseline_text(task_id: str) -> str:
    """What the task's baseline is, generated from its variants: the task's ``baseline.call`` and the prompt."""
    descriptions = [v.description for v in _VARIANTS[task_id]] if task_id in _VARIANTS else []
    if not descriptions:
        raise KeyError(f"no vendor baseline is defined for task {task_id!r}")
    if len(descriptions) == 1:
        return descriptions[0]
    return ("the fastest of: " + "; ".join(descriptions)
            + " (each timed on the task's own inputs, its setup outside the timed region)")


def variant_specs(task: Task, audit: bool = False) -> dict[str, BaselineVariant]:
    """The task's variants (``audit``: also those only the benchmark times, ``_AUDITED``), refused when
    the task's recorded baseline text is not the one they generate (the prompt would then promise a
    baseline the evaluator does not run). A task whose baseline library is ``reference`` has its own reference
    (``reference``) and, where it records the FlashInfer API its definition names, that call (``flashinfer``)."""
    if task.baseline.library == "reference":
        return _imported_variants(task)
    variants = variants_for(task.id)
    if task.baseline.call != baseline_text(task.id):
        raise ValueError(f"task {task.id}: baseline.call is not the text its variants generate; set it to "
                         f"{baseline_text(task.id)!r}")
    if audit:
        variants |= {variant.name: variant for variant in _AUDITED.get(task.id, ())}
    return variants


def _imported_variants(task: Task) -> dict[str, BaselineVariant]:
    """An imported task's variants: its reference, and its FlashInfer call where it has one (the task model
    checks the call text of a task without one; this, of a task with one)."""
    variants = {"reference": BaselineVariant("reference", own_reference.DESCRIPTION, own_reference.reference_setup(task))}
    call = task.baseline.flashinfer
    if call is None:
        return variants
    if task.baseline.call != fi_api.baseline_call(call):
        raise ValueError(f"task {task.id}: baseline.call is not the text its variants generate; set it to "
                         f"{fi_api.baseline_call(call)!r}")
    variants["flashinfer"] = BaselineVariant("flashinfer", fi_api.description(call), flashinfer_api.setup_for(call),
                                             requires=flashinfer_api.requires(call))
    return variants


def baseline_variants(task: Task) -> dict[str, Callable[[Tensors, Mapping[str, int]], Outputs]]:
    """The loadable variants as plain ``call(inputs, sizes) -> outputs`` (setup and call together): for
    correctness checks and profiling scripts, never for timing (``prepare_timing`` keeps setup apart)."""
    def plain(variant: BaselineVariant) -> Callable[[Tensors, Mapping[str, int]], Outputs]:
        return lambda inputs, sizes: variant.setup(inputs, sizes)()
    return {name: plain(v) for name, v in variant_specs(task).items() if v.load() is None}
