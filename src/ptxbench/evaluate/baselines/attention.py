"""Baseline setups of the paged, ragged and fp8 attention tasks: the strongest PyTorch paths.

PyTorch has no paged-KV kernel for pages of 16 or 64 tokens (its FlashAttention-2 takes a block table
only for blocks of 256), so the paged tasks gather exactly the sequences' keys and values into one
ragged tensor inside the timed call (that copy is work a paged kernel avoids, and the baseline pays it
honestly) and run FlashAttention-2's variable-length kernel, which handles grouped-query heads
natively. Bookkeeping that depends only on the index arrays (token positions, cumulative lengths) is
built in setup, as FlashInfer's ``plan()`` does outside its timed ``run()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ptxbench.evaluate.baselines.calls import Outputs, Tensors, TimedCall, warmed

if TYPE_CHECKING:
    import torch



def _lse_per_query(lse: "torch.Tensor", queries: int, heads: int) -> "torch.Tensor":
    """FlashAttention's varlen log-sum-exp ([heads, total_q], or padded [batch, heads, max_q]) as [total_q, heads]."""
    if lse.dim() == 2:
        return lse.t()
    return lse[..., 0].reshape(queries, heads) if lse.shape[-1] == 1 else lse.reshape(queries, heads)


def _paged_tokens(indptr: list[int], pages: "torch.Tensor", last: list[int], page_size: int) -> tuple[Any, Any, int]:
    """Row numbers (in the cache viewed as [pages * page_size, ...]) of every key, sequence after sequence,
    the int32 cumulative key counts, and the longest sequence."""
    import torch

    rows, counts = [], []
    for b in range(len(indptr) - 1):
        own = pages[indptr[b]:indptr[b + 1]].long()
        n = (len(own) - 1) * page_size + last[b]
        rows.append((own[:, None] * page_size + torch.arange(page_size, device=pages.device)).reshape(-1)[:n])
        counts.append(n)
    cumulative = torch.tensor([0, *counts], device=pages.device).cumsum(0).to(torch.int32)
    return torch.cat(rows), cumulative, max(counts)


def decode_gqa_paged_flash(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    import torch

    q, k_cache, v_cache = inputs["Q"], inputs["K_cache"], inputs["V_cache"]
    batch, heads, dim = q.shape
    rows, cum_k, max_k = _paged_tokens(inputs["kv_indptr"].tolist(), inputs["kv_indices"],
                                       inputs["kv_last_page_len"].tolist(), sizes["P"])
    cum_q = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
    k_rows = k_cache.view(-1, *k_cache.shape[2:])
    v_rows = v_cache.view(-1, *v_cache.shape[2:])
    scale = 1.0 / math.sqrt(dim)

    def call() -> Outputs:
        keys, values = k_rows.index_select(0, rows), v_rows.index_select(0, rows)
        out, lse = torch.ops.aten._flash_attention_forward(q, keys, values, cum_q, cum_k, 1, max_k, 0.0, False, False,
                                                           scale=scale)[:2]
        return {"O": out, "LSE": _lse_per_query(lse, batch, heads)}
    return warmed(call)


def prefill_gqa_ragged_flash(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    import torch

    q, k, v, indptr = inputs["Q"], inputs["K"], inputs["V"], inputs["seq_indptr"]
    heads = q.shape[1]
    lengths = (indptr[1:] - indptr[:-1]).tolist()
    max_len = max(lengths)
    scale = 1.0 / math.sqrt(q.shape[-1])

    def call() -> Outputs:
        out, lse = torch.ops.aten._flash_attention_forward(q, k, v, indptr, indptr, max_len, max_len, 0.0, True, False,
                                                           scale=scale)[:2]
        return {"O": out, "LSE": _lse_per_query(lse, q.shape[0], heads)}
    return warmed(call)


def attention_fp8_sdpa(op_name: str) -> Callable[[Tensors, Mapping[str, int]], TimedCall]:
    """fp8 attention through bf16 SDPA: every e4m3 value is exact in bf16, so the timed call widens Q, K, V
    (three casts), runs the bf16 kernel with descale_q · descale_k folded into its softmax scale, and
    multiplies the output by descale_v. The scales are read once in setup (SDPA takes a host float)."""
    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import torch

        causal = bool(sizes["causal"])
        q8, k8, v8 = inputs["Q"], inputs["K"], inputs["V"]
        scale = float(inputs["descale_q"]) * float(inputs["descale_k"]) / math.sqrt(q8.shape[-1])
        descale_v = inputs["descale_v"].reshape(())  # 0-dim: the product is computed in fp32
        op = getattr(torch.ops.aten, op_name)

        def call() -> Outputs:
            q, k, v = q8.to(torch.bfloat16), k8.to(torch.bfloat16), v8.to(torch.bfloat16)
            args = (q, k, v, None, True, 0.0, causal, False) if "cudnn" in op_name else (q, k, v, 0.0, causal, False)
            out, lse = op(*args, scale=scale)[:2]
            return {"O": out * descale_v, "LSE": lse.reshape(q.shape[:3])}
        return warmed(call)
    return setup
