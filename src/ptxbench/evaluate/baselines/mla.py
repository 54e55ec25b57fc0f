"""Baseline setups of MLA decode over a paged latent cache: the strongest PyTorch paths.

No library PyTorch carries takes MLA's shapes whole: FlashAttention-2 and cuDNN stop at head dim 256,
and the scores here run over 576 dimensions (latent 512 + rope 64) with 512-dimensional values.
FlashInfer's and FlashMLA's kernels do (FlashInfer's is the ``flashinfer`` variant, where installed:
``flashinfer.py``). Without them, two paths remain:

- ``efficient_varlen``: the 128 heads of a sequence read one shared latent head, so MLA decode is
  attention with the heads as the queries. PyTorch's memory-efficient (CUTLASS) kernel takes any head
  dim, a value dim of its own and variable lengths: queries [1, B*H, 1, 576] against the gathered keys
  [1, L, 1, 576], whose first 512 columns are the values (a view, no copy).
- ``cublas_padded``: the sequences gathered into a zero-padded [B, max n_b, ...] batch and two cuBLAS
  products with fp32 output around an fp32 masked softmax.

Both gather the sequences' tokens from the pages inside the timed call (the copy a paged kernel avoids,
paid honestly), and build what depends only on the index arrays (token rows, cumulative lengths, the
padding mask) and read sm_scale in setup, as FlashInfer's ``plan()`` does outside its timed ``run()``.
``torch.compile`` is left out: the gathered shapes follow the lengths, which are drawn anew for every
trial, so a shape-specialised graph would be compiled (and autotuned) in every setup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ptxbench.evaluate.baselines.calls import Outputs, Tensors, TimedCall, warmed
from ptxbench.evaluate.baselines.attention import _paged_tokens

if TYPE_CHECKING:
    import torch


LATENT = 512


def _rows(inputs: Tensors) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The two caches viewed as one token row per line: [NP * P, 512] and [NP * P, 64]."""
    ckv, kpe = inputs["ckv_cache"], inputs["kpe_cache"]
    return ckv.view(-1, ckv.shape[-1]), kpe.view(-1, kpe.shape[-1])


def mla_decode_efficient(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    import torch

    q_nope, q_pe = inputs["q_nope"], inputs["q_pe"]
    batch, heads, _ = q_nope.shape
    rows, cum_k, max_k = _paged_tokens(inputs["kv_indptr"].tolist(), inputs["kv_indices"],
                                       inputs["kv_last_page_len"].tolist(), sizes["P"])
    cum_q = torch.arange(batch + 1, dtype=torch.int32, device=q_nope.device) * heads
    ckv_rows, kpe_rows = _rows(inputs)
    scale = float(inputs["sm_scale"].reshape(()))

    def call() -> Outputs:
        keys = torch.cat([ckv_rows.index_select(0, rows), kpe_rows.index_select(0, rows)], dim=-1)  # [L, 576]
        query = torch.cat([q_nope, q_pe], dim=-1)  # [B, H, 576]
        out, lse = torch.ops.aten._efficient_attention_forward(
            query.view(1, batch * heads, 1, -1), keys.unsqueeze(0).unsqueeze(2), keys[None, :, None, :LATENT], None,
            cum_q, cum_k, heads, max_k, 0.0, 0, True, scale=scale)[:2]
        # LSE per sequence [B, 1, H rounded up to 32]: its first H entries are the heads
        return {"output": out.view(batch, heads, LATENT), "lse": lse[:, 0, :heads]}
    return warmed(call)


def _fp32_bmm(a: "torch.Tensor", b: "torch.Tensor") -> "torch.Tensor":
    """bf16 operands, fp32 accumulation and fp32 result (cuBLAS's ``out_dtype``): a bf16 result would round
    the scores to 8 bits before the exponential. The CPU (tests) has no such kernel and multiplies fp32
    copies of the same values."""
    import torch

    if a.is_cuda:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


def mla_decode_padded(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
    import torch

    q_nope, q_pe = inputs["q_nope"], inputs["q_pe"]
    batch, heads, _ = q_nope.shape
    page_size = sizes["P"]
    indptr, last = inputs["kv_indptr"].tolist(), inputs["kv_last_page_len"].tolist()
    lengths = [(indptr[b + 1] - indptr[b] - 1) * page_size + last[b] for b in range(batch)]
    longest = max(lengths)
    device = q_nope.device
    # token rows per sequence, padded with row 0 (its scores masked to -inf, so its weight is exactly 0)
    index = torch.zeros(batch, longest, dtype=torch.int64, device=device)
    mask = torch.full((batch, 1, longest), float("-inf"), dtype=torch.float32, device=device)
    slots = torch.arange(page_size, device=device)
    for b, n in enumerate(lengths):
        pages = inputs["kv_indices"][indptr[b]:indptr[b + 1]].long()
        index[b, :n] = (pages[:, None] * page_size + slots).reshape(-1)[:n]
        mask[b, :, :n] = 0.0
    flat = index.view(-1)
    ckv_rows, kpe_rows = _rows(inputs)
    scale = float(inputs["sm_scale"].reshape(()))

    def call() -> Outputs:
        c = ckv_rows.index_select(0, flat).view(batch, longest, -1)
        r = kpe_rows.index_select(0, flat).view(batch, longest, -1)
        scores = _fp32_bmm(q_nope, c.transpose(1, 2)) + _fp32_bmm(q_pe, r.transpose(1, 2))
        scores = torch.add(mask, scores, alpha=scale)
        lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - lse.unsqueeze(-1)).to(c.dtype)
        return {"output": torch.bmm(weights, c), "lse": lse}
    return warmed(call)
