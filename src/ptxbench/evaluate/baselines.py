"""The vendor baselines, called the way each task's ``baseline.call`` says.

Each task has one or more variants (attention: cuDNN and FlashAttention through PyTorch's SDPA); the
evaluator times them all and keeps the fastest. For attention backward the variant calls the
library's backward kernel on the task's own inputs (the given O and LSE), so it computes exactly the
quantity the candidate computes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ptxbench.tasks.model import Task

if TYPE_CHECKING:
    import torch

Tensors = Mapping[str, "torch.Tensor"]
Baseline = Callable[[Tensors, Mapping[str, int]], dict[str, "torch.Tensor"]]


def _gemm_bf16(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    import torch

    return {"C": torch.matmul(inputs["A"], inputs["B"].T)}


def _gemm_fp8(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    import torch

    return {"C": torch._scaled_mm(inputs["A"], inputs["B"].T, inputs["scale_a"], inputs["scale_b"],
                                  out_dtype=torch.bfloat16)}


def _attention_forward(backend: str) -> Baseline:
    def call(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = inputs["Q"], inputs["K"], inputs["V"]
        causal = bool(sizes["causal"])
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            if backend == "FLASH_ATTENTION":
                out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)[:2]
            else:
                out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(
                    q, k, v, None, True, 0.0, causal, False)[:2]
        return {"O": out, "LSE": lse.reshape(q.shape[:3]).float()}
    return call


def _attention_backward_flash(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    import torch

    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    causal = bool(sizes["causal"])
    _, _, cum_q, cum_k, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
        q, k, v, 0.0, causal, False)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
        inputs["dO"], q, k, v, inputs["O"], inputs["LSE"], cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset)
    return {"dQ": dq, "dK": dk, "dV": dv}


def _attention_backward_cudnn(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    import torch

    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    causal = bool(sizes["causal"])
    forward = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False)
    lse = inputs["LSE"].reshape(forward[1].shape).contiguous()
    dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        inputs["dO"], q, k, v, inputs["O"], lse, forward[6], forward[7], None, forward[2], forward[3],
        forward[4], forward[5], 0.0, causal)
    return {"dQ": dq, "dK": dk, "dV": dv}


def _rmsnorm(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    import torch.nn.functional as F

    return {"Y": F.rms_norm(inputs["X"], (sizes["Hd"],), inputs["W"], eps=1e-6)}


def _softmax(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    import torch

    return {"Y": torch.softmax(inputs["X"], dim=-1)}


def _transpose(inputs: Tensors, sizes: Mapping[str, int]) -> dict[str, "torch.Tensor"]:
    return {"Y": inputs["X"].T.contiguous()}


_VARIANTS: dict[str, dict[str, Baseline]] = {
    "gemm_bf16": {"cublas": _gemm_bf16},
    "gemm_fp8": {"cublaslt": _gemm_fp8},
    "attention_fwd": {"cudnn": _attention_forward("CUDNN_ATTENTION"), "flash": _attention_forward("FLASH_ATTENTION")},
    "attention_bwd": {"cudnn": _attention_backward_cudnn, "flash": _attention_backward_flash},
    "rmsnorm": {"torch": _rmsnorm},
    "softmax": {"torch": _softmax},
    "transpose": {"torch": _transpose},
}


def baseline_variants(task: Task) -> dict[str, Baseline]:
    """Every vendor variant for the task, by name."""
    try:
        return _VARIANTS[task.id]
    except KeyError:
        raise KeyError(f"no vendor baseline is defined for task {task.id!r}") from None
