"""The baselines' work for the serving-path tasks: fp8 GEMM with block scales, the MoE grouped GEMM and
the fused memory-bound ops (residual add + RMSNorm, SiLU-and-mul, RoPE).

Each ``bind_*`` function binds one task's work to one input set and returns ``(work, args)``, as the
binders in ``baselines.py`` do: the binding runs in the variant's untimed setup, so it may re-lay out
small metadata (scales, offsets) the way a library wants it, never touch the data the work reads.
``liger_*`` functions are whole setups for Liger-Kernel's Triton kernels. Nothing here imports torch
at module level: the evaluator imports the variants on machines without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ptxbench.evaluate.baselines.calls import Bound, Outputs, Tensors


BLOCK = 128  # the fp8 task's scale block along K (and along N for the weights)
RMS_EPS = 1e-6


# -- fp8 GEMM with 1x128 activation and 128x128 weight scales -------------------------------------------

def bind_blockscale_cublas(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """cuBLASLt's DeepSeek-style block scaling through ``torch.nn.functional.scaled_mm`` (Hopper, CUDA
    12.9 and later). cuBLAS wants the activation scales M-major and the weight scales [KB padded to a
    multiple of 4, NB] K-major: both are re-laid out here, in setup (a few kilobytes)."""
    import torch
    import torch.nn.functional as F

    blocks = sizes["KB"]
    scale_a = inputs["scale_a"].t().contiguous().t()
    padded = -(-blocks // 4) * 4
    scale_b = F.pad(inputs["scale_b"], (0, padded - blocks)).t()
    recipe_a, recipe_b = F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128

    def work(a: Any, b_t: Any, sa: Any, sb: Any) -> Outputs:
        return {"D": F.scaled_mm(a, b_t, sa, recipe_a, sb, recipe_b, output_dtype=torch.bfloat16)}
    return work, (inputs["A"], inputs["B"].T, scale_a, scale_b)


def bind_blockscale_dequant(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """What eager PyTorch can do without block-scaled GEMM: dequantise both operands to bf16 (fp32
    products, one rounding each) and run cuBLAS's bf16 GEMM. The weight scales are expanded to one row
    per output feature in setup; the multiplications are timed."""
    import torch

    m, n, k, blocks = sizes["M"], sizes["N"], sizes["K"], sizes["KB"]
    scale_b_rows = inputs["scale_b"].repeat_interleave(BLOCK, dim=0)[:n].contiguous()

    def work(a: Any, b: Any, sa: Any, sb_rows: Any) -> Outputs:
        a16 = (a.float().view(m, blocks, BLOCK) * sa.view(m, blocks, 1)).view(m, k).to(torch.bfloat16)
        b16 = (b.float().view(n, blocks, BLOCK) * sb_rows.view(n, blocks, 1)).view(n, k).to(torch.bfloat16)
        return {"D": torch.matmul(a16, b16.T)}
    return work, (inputs["A"], inputs["B"], inputs["scale_a"], scale_b_rows)


# -- MoE grouped GEMM ---------------------------------------------------------------------------------------

def bind_moe_grouped(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """PyTorch's grouped GEMM (CUTLASS on Hopper): ``expert_offsets`` are already the exclusive ends of
    the groups, the ``offs`` convention of ``torch._grouped_mm``."""
    import torch

    def work(x: Any, w_t: Any, ends: Any) -> Outputs:
        return {"Y": torch._grouped_mm(x, w_t, offs=ends, out_dtype=torch.bfloat16)}
    return work, (inputs["X"], inputs["W"].transpose(-2, -1), inputs["expert_offsets"])


def bind_moe_loop(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """One cuBLAS GEMM per expert that received tokens, into row slices of one output. The group
    boundaries are read to the host in setup: the timed call never synchronises (a head start over the
    candidate, which reads them on the device)."""
    import torch

    ends = [int(e) for e in inputs["expert_offsets"].tolist()]
    groups = [(e, start, end) for e, (start, end) in enumerate(zip([0, *ends[:-1]], ends)) if end > start]
    rows, cols = sizes["T"], sizes["N"]

    def work(x: Any, w: Any) -> Outputs:
        y = torch.empty(rows, cols, dtype=x.dtype, device=x.device)
        for expert, start, end in groups:
            torch.mm(x[start:end], w[expert].T, out=y[start:end])
        return {"Y": y}
    return work, (inputs["X"], inputs["W"])


# -- fused memory-bound ops ------------------------------------------------------------------------------

def bind_add_rmsnorm(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """The residual add in bf16, then RMSNorm: what vLLM's and Hugging Face's unfused paths run."""
    hidden = (sizes["Hd"],)

    def work(x: Any, r: Any, w: Any) -> Outputs:
        import torch.nn.functional as F

        s = x + r
        return {"Y": F.rms_norm(s, hidden, w, eps=RMS_EPS), "R_out": s}
    return work, (inputs["X"], inputs["R"], inputs["W"])


def bind_silu_mul(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """``silu(gate) * up`` on the two halves of each row of X, as vLLM's native SiluAndMul."""
    def work(x: Any) -> Outputs:
        import torch.nn.functional as F

        return {"Y": F.silu(x[:, 0]) * x[:, 1]}
    return work, (inputs["X"],)


def bind_rope(inputs: Tensors, sizes: Mapping[str, int]) -> Bound:
    """NeoX rotate-half RoPE with the angles computed from the positions in fp32, as serving stacks
    compute their cos/sin caches; the inverse frequencies (a function of theta and D only, a model
    constant) are computed in setup."""
    import torch

    dim, theta = sizes["D"], float(sizes["theta"])
    half = dim // 2
    device = inputs["Q"].device
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))

    def work(q: Any, k: Any, positions: Any, freq: Any) -> Outputs:
        angles = positions.float()[:, None] * freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]

        def rotate(x: Any) -> Any:
            x1, x2 = x[..., :half].float(), x[..., half:].float()
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)
        return {"Q_out": rotate(q), "K_out": rotate(k)}
    return work, (inputs["Q"], inputs["K"], inputs["positions"], inv_freq)


def liger_add_rmsnorm(inputs: Tensors, sizes: Mapping[str, int]) -> Callable[[], Outputs]:
    """Liger-Kernel's fused residual add + RMSNorm (Triton), casting mode "gemma" (the norm in fp32)."""
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    x, r, w = inputs["X"], inputs["R"], inputs["W"]

    def call() -> Outputs:
        y, s = LigerFusedAddRMSNormFunction.apply(x, r, w, RMS_EPS, 0.0, "gemma", False)
        return {"Y": y, "R_out": s}
    call()
    return call


def liger_silu_mul(inputs: Tensors, sizes: Mapping[str, int]) -> Callable[[], Outputs]:
    """Liger-Kernel's SwiGLU over one fused [gate | up] tensor (Triton), X left unmodified."""
    from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

    x = inputs["X"].view(sizes["T"], 2 * sizes["N"])  # the fused [gate | up] rows it expects

    def call() -> Outputs:
        return {"Y": LigerFusedGateUpSiLUMulFunction.apply(x, False)}
    call()
    return call
