"""FlashAttention-3's own forward kernels as baselines (``fa3_fwd_interface``, PyPI fa3-fwd), where installed:
the Hopper fp8 (e4m3) attention forward that serving engines run on sm_90, and its bf16 variable-length
prefill, called directly rather than through a wrapper's plan.

Each call is on the task's own tensors without copies where FA3's strides allow: it needs only the head
dimension contiguous, so attention_fp8_fwd's [B, H, S, D] inputs go in as [B, S, H, D] transposed views and its
[B, S, H, D] output comes back as a [B, H, S, D] view (the harness compares values, not strides; PyTorch's
FlashAttention-2 SDPA returns such a view too). Its log-sum-exp is natural log already, of the scores with the
softmax scale and the descales applied: [B, H, S] is the task's layout, and the varlen [H, T] is handed back as
its [T, H] transpose (a view). The fp8 descales are FA3's fp32 [B, KH] tensors (per batch entry and kv head,
the query's too), expanded from the task's one element in setup; the ragged task's longest sequence, which
FA3 takes as a host int, is read in setup as well (a device sync).

The wheel was built for torch 2.10 and CUDA 13: its extension calls libtorch through the stable C shims
(``aoti_torch_*``, ``torch_*``), which later versions keep, but links libtorch_cuda and libcudart.so.13 by name,
so a torch of another CUDA, or one that dropped a shim, fails its import, and the variant is then skipped with
that reason. Nothing here imports torch or fa3_fwd_interface at module level.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ptxbench.evaluate.baselines.calls import Outputs, Tensors, TimedCall, warmed

REQUIRES = ("fa3_fwd_interface",)


def attention_fp8_fwd(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """``flash_attn_func`` on the e4m3 Q, K, V as [B, S, H, D] views, causal as the workload says (FA3 aligns
    its mask at the bottom right, the same as the task's when queries = keys), bf16 O and the LSE."""
    from fa3_fwd_interface import flash_attn_func

    q8, k8, v8 = inputs["Q"], inputs["K"], inputs["V"]
    batch, _, _, dim = q8.shape
    kv_heads = k8.shape[1]
    causal = bool(sizes["causal"])
    scale = 1.0 / math.sqrt(dim)
    q, k, v = q8.transpose(1, 2), k8.transpose(1, 2), v8.transpose(1, 2)
    descale_q, descale_k, descale_v = (inputs[name].reshape(1, 1).float().expand(batch, kv_heads).contiguous()
                                       for name in ("descale_q", "descale_k", "descale_v"))

    def call() -> Outputs:
        out, lse = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, q_descale=descale_q,
                                   k_descale=descale_k, v_descale=descale_v, return_attn_probs=True)
        return {"O": out.transpose(1, 2), "LSE": lse}
    return warmed(call)


def prefill_gqa_ragged(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    """``flash_attn_varlen_func``, causal, queries and keys both on seq_indptr (int32, as FA3 takes them),
    grouped-query heads native; the longest sequence read once in setup."""
    from fa3_fwd_interface import flash_attn_varlen_func

    q, k, v, indptr = inputs["Q"], inputs["K"], inputs["V"], inputs["seq_indptr"]
    longest = int((indptr[1:] - indptr[:-1]).max())
    scale = 1.0 / math.sqrt(q.shape[-1])

    def call() -> Outputs:
        out, lse = flash_attn_varlen_func(q, k, v, indptr, indptr, longest, longest, softmax_scale=scale, causal=True,
                                          return_attn_probs=True)
        return {"O": out, "LSE": lse.t()}
    return warmed(call)
