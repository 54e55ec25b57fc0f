"""A CPU stand-in for the ``flashinfer`` module: the entry points the FlashInfer baselines call (the decode,
ragged and paged prefill and MLA wrappers, RoPE, and ``flashinfer.norm``'s RMSNorms, each also under the
submodule an imported task's ``fi_api`` names it by), with FlashInfer's documented contracts (NHD pages, CSR page
tables, base-2 log-sum-exp unless asked otherwise, causal masks aligned at the bottom right, the cos/sin cache's
cosines-then-sines layout, fused_add_rmsnorm in place) computed in fp32 with plain PyTorch, so a test can check a
variant's argument mapping end to end against the task's own reference. With ``log`` the stand-in computes
nothing and logs each kernel launch by name instead (the timed-call audit in test_baselines.py).

Every plan and run is recorded in ``FakeFlashInfer.calls`` as ``(name, args, kwargs)``, and each entry
checks what the real one would refuse (shapes against the plan, the declared LSE mode)."""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import pytest
import torch

from .stand_ins import RecordedCalls

LN2 = math.log(2.0)


class FakeFlashInfer(RecordedCalls):
    """The stand-in's state: its recorded calls, and the launch log when it only counts."""

    prefix = "flashinfer"

    def launches(self, name: str) -> bool:
        return name.endswith(("run", "rope_with_cos_sin_cache", "rmsnorm"))


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [n, H, d], k/v [m, KH, d] -> out [n, H, dv] fp32 and the natural-log LSE [n, H]; kv head h // group."""
    group = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), k) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask[None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("hnm,mhd->nhd", torch.exp(scores - lse[..., None]), v)
    return out, lse.t()


def _page_rows(indptr: list[int], indices: torch.Tensor, lengths: list[int], page_size: int) -> list[torch.Tensor]:
    """Per sequence the rows of its tokens in the cache viewed as [pages * page_size, ...]."""
    rows = []
    for b, n in enumerate(lengths):
        pages = indices[indptr[b]:indptr[b + 1]].long()
        rows.append((pages[:, None] * page_size + torch.arange(page_size)).reshape(-1)[:n])
    return rows


class _DecodeWrapper:
    def __init__(self, fake: FakeFlashInfer, workspace: torch.Tensor, kv_layout: str = "NHD",
                 use_tensor_cores: bool = False, **kwargs: Any) -> None:
        fake.record("decode.init", (workspace, kv_layout), {"use_tensor_cores": use_tensor_cores, **kwargs})
        self.fake, self.layout, self.plan_args = fake, kv_layout, None

    def plan(self, indptr: torch.Tensor, indices: torch.Tensor, last_page_len: torch.Tensor, num_qo_heads: int,
             num_kv_heads: int, head_dim: int, page_size: int, **kwargs: Any) -> None:
        self.fake.record("decode.plan", (indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
                                         page_size), kwargs)
        assert self.layout == "NHD" and num_qo_heads % num_kv_heads == 0
        self.plan_args = (indptr.tolist(), indices.clone(), last_page_len.tolist(), num_qo_heads, num_kv_heads,
                          head_dim, page_size, kwargs.get("sm_scale") or 1.0 / math.sqrt(head_dim),
                          kwargs.get("q_data_type"))

    def run(self, q: torch.Tensor, paged_kv_cache: tuple[torch.Tensor, torch.Tensor], *,
            return_lse: bool = False, **kwargs: Any) -> Any:
        self.fake.record("decode.run", (q, paged_kv_cache), {"return_lse": return_lse, **kwargs})
        assert self.plan_args is not None, "run before plan"
        indptr, indices, last, heads, kv_heads, dim, page_size, scale, q_type = self.plan_args
        k_cache, v_cache = paged_kv_cache
        assert q.shape == (len(indptr) - 1, heads, dim) and q.dtype == q_type
        assert k_cache.shape[1:] == (page_size, kv_heads, dim) == v_cache.shape[1:]  # NHD
        lse = torch.empty(q.shape[:2], dtype=torch.float32)
        if self.fake.log is not None:
            return (torch.empty_like(q), lse) if return_lse else torch.empty_like(q)
        lengths = [(indptr[b + 1] - indptr[b] - 1) * page_size + last[b] for b in range(len(last))]
        out = torch.empty(q.shape, dtype=torch.float32)
        for b, rows in enumerate(_page_rows(indptr, indices, lengths, page_size)):
            keys, values = k_cache.reshape(-1, kv_heads, dim)[rows], v_cache.reshape(-1, kv_heads, dim)[rows]
            o, natural = _attend(q[b:b + 1], keys, values, scale)
            out[b], lse[b] = o[0], natural[0] / LN2  # FlashInfer's decode LSE is base 2
        return (out.to(q.dtype), lse) if return_lse else out.to(q.dtype)


class _RaggedPrefillWrapper:
    def __init__(self, fake: FakeFlashInfer, workspace: torch.Tensor, kv_layout: str = "NHD", **kwargs: Any) -> None:
        fake.record("prefill.init", (workspace, kv_layout), kwargs)
        self.fake, self.layout, self.plan_args = fake, kv_layout, None

    def plan(self, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, num_qo_heads: int, num_kv_heads: int,
             head_dim_qk: int, head_dim_vo: int | None = None, **kwargs: Any) -> None:
        self.fake.record("prefill.plan", (qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo),
                         kwargs)
        self.plan_args = (qo_indptr.tolist(), kv_indptr.tolist(), num_qo_heads, num_kv_heads, head_dim_qk,
                          bool(kwargs.get("causal", False)), kwargs.get("sm_scale") or 1.0 / math.sqrt(head_dim_qk),
                          kwargs.get("q_data_type"), kwargs.get("o_data_type") or kwargs.get("q_data_type"))

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *scales: torch.Tensor, return_lse: bool = False,
            lse_base: str = "log2", **kwargs: Any) -> Any:
        self.fake.record("prefill.run", (q, k, v, *scales), {"return_lse": return_lse, "lse_base": lse_base, **kwargs})
        assert self.plan_args is not None, "run before plan"
        qo, kv, heads, kv_heads, dim, causal, scale, q_type, o_type = self.plan_args
        assert self.layout == "NHD" and q.shape == (qo[-1], heads, dim) and k.shape == (kv[-1], kv_heads, dim)
        assert lse_base in ("log2", "ln") and q.dtype == q_type and q.is_contiguous() and k.is_contiguous()
        lse = torch.empty(q.shape[:2], dtype=torch.float32)
        if self.fake.log is not None:
            out = torch.empty((*q.shape[:2], v.shape[2]), dtype=o_type)
            return (out, lse) if return_lse else out
        if q.dtype == torch.float8_e4m3fn:  # FA3's fp8 kernel: per-head dequantisation scales, fp32 [heads]
            scale_q, scale_k, scale_v = scales
            assert scale_q.shape == (heads,) and scale_k.shape == scale_v.shape == (kv_heads,)
            q, k, v = (x.float() * s[None, :, None] for x, s in ((q, scale_q), (k, scale_k), (v, scale_v)))
        else:
            assert not scales
        out = torch.empty((*q.shape[:2], v.shape[2]), dtype=torch.float32)
        for b in range(len(qo) - 1):
            n, m = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
            # causal aligned at the bottom right, as FlashInfer's: query i sees keys j <= i + (m - n)
            mask = torch.arange(m)[None, :] <= torch.arange(n)[:, None] + (m - n) if causal else None
            o, natural = _attend(q[qo[b]:qo[b + 1]], k[kv[b]:kv[b + 1]], v[kv[b]:kv[b + 1]], scale, mask)
            out[qo[b]:qo[b + 1]], lse[qo[b]:qo[b + 1]] = o, natural if lse_base == "ln" else natural / LN2
        return (out.to(o_type), lse) if return_lse else out.to(o_type)


def _causal(queries: int, keys: int) -> torch.Tensor:
    """FlashInfer's causal mask, aligned at the bottom right: query i sees keys j <= i + (keys - queries)."""
    return torch.arange(keys)[None, :] <= torch.arange(queries)[:, None] + (keys - queries)


class _PagedPrefillWrapper:
    def __init__(self, fake: FakeFlashInfer, workspace: torch.Tensor, kv_layout: str = "NHD", **kwargs: Any) -> None:
        fake.record("paged_prefill.init", (workspace, kv_layout), kwargs)
        self.fake, self.layout, self.plan_args = fake, kv_layout, None

    def plan(self, qo_indptr: torch.Tensor, paged_kv_indptr: torch.Tensor, paged_kv_indices: torch.Tensor,
             paged_kv_last_page_len: torch.Tensor, num_qo_heads: int, num_kv_heads: int, head_dim_qk: int,
             page_size: int, head_dim_vo: int | None = None, causal: bool = False, **kwargs: Any) -> None:
        self.fake.record("paged_prefill.plan", (qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
                                                num_qo_heads, num_kv_heads, head_dim_qk, page_size),
                         {"head_dim_vo": head_dim_vo, "causal": causal, **kwargs})
        assert self.layout == "NHD" and len(paged_kv_last_page_len) == len(paged_kv_indptr) - 1
        self.plan_args = (qo_indptr.tolist(), paged_kv_indptr.tolist(), paged_kv_indices.clone(),
                          paged_kv_last_page_len.tolist(), num_qo_heads, num_kv_heads, head_dim_qk, page_size, causal,
                          kwargs.get("sm_scale") or 1.0 / math.sqrt(head_dim_qk), kwargs.get("q_data_type"))

    def run(self, q: torch.Tensor, paged_kv_cache: tuple[torch.Tensor, torch.Tensor], *,
            return_lse: bool = False, **kwargs: Any) -> Any:
        self.fake.record("paged_prefill.run", (q, paged_kv_cache), {"return_lse": return_lse, **kwargs})
        assert self.plan_args is not None, "run before plan"
        qo, indptr, indices, last, heads, kv_heads, dim, page_size, causal, scale, q_type = self.plan_args
        k_cache, v_cache = paged_kv_cache
        assert q.shape == (qo[-1], heads, dim) and q.dtype == q_type
        assert k_cache.shape[1:] == (page_size, kv_heads, dim) and v_cache.shape[1:3] == (page_size, kv_heads)
        out = torch.empty((*q.shape[:2], v_cache.shape[3]), dtype=torch.float32)
        lse = torch.empty(q.shape[:2], dtype=torch.float32)
        if self.fake.log is not None:
            return (out.to(q.dtype), lse) if return_lse else out.to(q.dtype)
        lengths = [(indptr[b + 1] - indptr[b] - 1) * page_size + last[b] for b in range(len(last))]
        for b, rows in enumerate(_page_rows(indptr, indices, lengths, page_size)):
            keys = k_cache.reshape(-1, kv_heads, dim)[rows]
            values = v_cache.reshape(-1, kv_heads, v_cache.shape[3])[rows]
            mask = _causal(qo[b + 1] - qo[b], len(rows)) if causal else None
            o, natural = _attend(q[qo[b]:qo[b + 1]], keys, values, scale, mask)
            out[qo[b]:qo[b + 1]], lse[qo[b]:qo[b + 1]] = o, natural / LN2  # base 2, as FlashInfer's
        return (out.to(q.dtype), lse) if return_lse else out.to(q.dtype)


class _MLAPlanMetadata:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    @classmethod
    def csr(cls, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
            kv_len_arr: torch.Tensor) -> "_MLAPlanMetadata":
        return cls(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_len_arr=kv_len_arr)


class _MLAWrapper:
    def __init__(self, fake: FakeFlashInfer, workspace: torch.Tensor, **kwargs: Any) -> None:
        fake.record("mla.init", (workspace,), kwargs)
        self.fake, self.plan_kwargs = fake, None

    def plan(self, *args: Any, metadata: _MLAPlanMetadata | None = None, **kwargs: Any) -> None:
        self.fake.record("mla.plan", args, {"metadata": metadata, **kwargs})
        assert not args and isinstance(metadata, _MLAPlanMetadata), "the canonical keyword form"
        self.plan_kwargs = {**metadata.fields, **kwargs}

    def run(self, *args: Any, query: Any = None, kv_cache: Any = None, return_lse: bool = False,
            return_lse_base_on_e: bool = False, **kwargs: Any) -> Any:
        self.fake.record("mla.run", args, {"query": query, "kv_cache": kv_cache, "return_lse": return_lse,
                                           "return_lse_base_on_e": return_lse_base_on_e, **kwargs})
        plan = self.plan_kwargs
        assert plan is not None and not args, "run after plan, in the keyword form"
        assert plan["query_layout"] == "split" and plan["kv_cache_layout"] == "split"
        asked = "basee" if return_lse_base_on_e else "base2"
        assert not return_lse or plan["lse_mode"] == asked, "the plan's lse_mode must match the run"
        q_nope, q_pe = query
        ckv, kpe = kv_cache
        batch, heads = q_nope.shape[:2]
        page_size, latent, rope = plan["page_size"], plan["head_dim_ckv"], plan["head_dim_kpe"]
        assert q_nope.shape == (batch, heads, latent) and q_pe.shape == (batch, heads, rope) and heads == plan["num_heads"]
        assert ckv.shape[1:] == (page_size, latent) and kpe.shape[1:] == (page_size, rope)
        lse = torch.empty(batch, heads, dtype=torch.float32)
        if self.fake.log is not None:
            return (torch.empty_like(q_nope), lse) if return_lse else torch.empty_like(q_nope)
        qo = plan["qo_indptr"].tolist()  # decode: one query per sequence; prefill: the queries' offsets
        assert qo[-1] == batch and len(qo) == len(plan["kv_indptr"])
        out = torch.empty(q_nope.shape, dtype=torch.float32)
        indptr, lengths = plan["kv_indptr"].tolist(), plan["kv_len_arr"].tolist()
        for b, rows in enumerate(_page_rows(indptr, plan["kv_indices"], lengths, page_size)):
            c, r = ckv.reshape(-1, latent)[rows].float(), kpe.reshape(-1, rope)[rows].float()
            queries = slice(qo[b], qo[b + 1])
            scores = (torch.einsum("qhd,kd->qhk", q_nope[queries].float(), c)
                      + torch.einsum("qhd,kd->qhk", q_pe[queries].float(), r)) * plan["sm_scale"]
            if plan["causal"]:
                scores = scores.masked_fill(~_causal(qo[b + 1] - qo[b], len(rows))[:, None, :], float("-inf"))
            natural = torch.logsumexp(scores, dim=-1)
            out[queries] = torch.einsum("qhk,kd->qhd", torch.exp(scores - natural[..., None]), c)
            lse[queries] = natural if return_lse_base_on_e else natural / LN2
        return (out.to(q_nope.dtype), lse) if return_lse else out.to(q_nope.dtype)


def _rmsnorm(fake: FakeFlashInfer, input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             out: torch.Tensor | None = None, enable_pdl: bool | None = None) -> torch.Tensor:
    fake.record("norm.rmsnorm", (input, weight), {"eps": eps, "out": out, "enable_pdl": enable_pdl})
    assert input.dim() in (2, 3) and weight.shape == input.shape[-1:] and out is None
    if fake.log is not None:
        return torch.empty_like(input)
    x = input.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(input.dtype)


def _fused_add_rmsnorm(fake: FakeFlashInfer, input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6, enable_pdl: bool | None = None) -> None:
    """In place, as FlashInfer's: ``residual += input``, then ``input = rmsnorm(residual) * weight``."""
    fake.record("norm.fused_add_rmsnorm", (input, residual, weight), {"eps": eps, "enable_pdl": enable_pdl})
    assert input.shape == residual.shape and weight.shape == input.shape[-1:]
    if fake.log is not None:
        return
    x = input.float() + residual.float()
    residual.copy_(x)
    input.copy_(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float())


def _rope(fake: FakeFlashInfer, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, head_size: int,
          cos_sin_cache: torch.Tensor, is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    fake.record("apply_rope_with_cos_sin_cache", (positions, query, key, head_size, cos_sin_cache),
                {"is_neox": is_neox})
    assert query.dim() == 2 and key.dim() == 2 and query.shape[1] % head_size == 0, "[nnz, heads * head_size]"
    assert cos_sin_cache.dtype == torch.float32 and cos_sin_cache.shape[1] == head_size
    if fake.log is not None:
        return torch.empty_like(query), torch.empty_like(key)
    half = head_size // 2
    cos = cos_sin_cache[positions.long(), :half][:, None, :]
    sin = cos_sin_cache[positions.long(), half:][:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.shape[0], -1, head_size).float()
        if is_neox:
            first, second = x[..., :half], x[..., half:]
            return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2)
    return (rotate(query).to(query.dtype).view(query.shape), rotate(key).to(key.dtype).view(key.shape))


def install(monkeypatch: pytest.MonkeyPatch, log: list[str] | None = None) -> FakeFlashInfer:
    """``flashinfer`` and its submodules (mla, decode, prefill, norm, jit) in sys.modules for the test's duration;
    returns the stand-in's state."""
    fake = FakeFlashInfer(log)
    module = types.ModuleType("flashinfer")
    mla = types.ModuleType("flashinfer.mla")
    submodules = {name: types.ModuleType(f"flashinfer.{name}") for name in ("decode", "prefill", "norm")}
    entries = {  # FlashInfer's package re-exports each at its top level
        "decode": {"BatchDecodeWithPagedKVCacheWrapper": lambda *a, **k: _DecodeWrapper(fake, *a, **k)},
        "prefill": {"BatchPrefillWithRaggedKVCacheWrapper": lambda *a, **k: _RaggedPrefillWrapper(fake, *a, **k),
                    "BatchPrefillWithPagedKVCacheWrapper": lambda *a, **k: _PagedPrefillWrapper(fake, *a, **k)},
        "norm": {"rmsnorm": lambda *a, **k: _rmsnorm(fake, *a, **k),
                 "fused_add_rmsnorm": lambda *a, **k: _fused_add_rmsnorm(fake, *a, **k)},
    }
    for name, functions in entries.items():
        for attr, value in functions.items():
            setattr(submodules[name], attr, value)
            setattr(module, attr, value)
        setattr(module, name, submodules[name])
    module.apply_rope_with_cos_sin_cache = lambda *a, **k: _rope(fake, *a, **k)  # type: ignore[attr-defined]
    mla.BatchMLAPagedAttentionWrapper = lambda *a, **k: _MLAWrapper(fake, *a, **k)  # type: ignore[attr-defined]
    mla.MLAPlanMetadata = _MLAPlanMetadata  # type: ignore[attr-defined]
    module.mla = mla  # type: ignore[attr-defined]
    jit, cpp_ext = types.ModuleType("flashinfer.jit"), types.ModuleType("flashinfer.jit.cpp_ext")
    cpp_ext.get_cuda_path = lambda: "/nonexistent/cuda"  # type: ignore[attr-defined]
    jit.cpp_ext = cpp_ext  # type: ignore[attr-defined]
    module.jit = jit  # type: ignore[attr-defined]
    for name, value in (("flashinfer", module), ("flashinfer.mla", mla), ("flashinfer.jit", jit),
                        ("flashinfer.jit.cpp_ext", cpp_ext), *((m.__name__, m) for m in submodules.values())):
        monkeypatch.setitem(sys.modules, name, value)
    monkeypatch.delenv("FLASHINFER_EXTRA_CUDAFLAGS", raising=False)  # restored after the test if a setup sets it
    return fake
