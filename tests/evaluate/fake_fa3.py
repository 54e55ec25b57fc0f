"""A CPU stand-in for ``fa3_fwd_interface`` (PyPI fa3-fwd): the two entry points the FA3 baselines call, with
FA3's contracts as its interface and flash_api.cpp state them, computed in fp32 with plain PyTorch, so a test can
check a variant's argument mapping end to end against the task's own reference. With ``log`` the stand-in
computes nothing and logs each kernel launch by name instead (the timed-call audit in test_baselines.py).

Each call is recorded in ``FakeFA3.calls`` as ``(name, args, kwargs)`` and checks what the real one refuses or
gets wrong: a head dimension that is not contiguous, K and V heads that do not divide Q's, fp8 descales that are
not fp32 [batch, kv heads], cumulative lengths that are not int32, a longest sequence that is not a host int or
is shorter than a sequence. Outputs are laid out as FA3 allocates them: O [B, S, H, D] (or [T, H, D]) contiguous,
bf16 for e4m3 inputs; the natural-log LSE [B, H, S] (or [H, T])."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from .stand_ins import RecordedCalls


class FakeFA3(RecordedCalls):
    """The stand-in's state: its recorded calls, and the launch log when it only counts."""

    prefix = "fa3"


def _check_operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1, "FA3 needs the head dimension contiguous"
    assert q.dtype == k.dtype == v.dtype and q.dtype in (torch.bfloat16, torch.float8_e4m3fn)
    assert q.shape[-2] % k.shape[-2] == 0 and k.shape == v.shape and q.shape[-1] == k.shape[-1]


def _check_descales(q: torch.Tensor, batch: int, kv_heads: int, scales: tuple[Any, ...]) -> None:
    """FA3 reads fp8 descales as fp32 [batch, kv heads] each, the query's too; bf16 takes none."""
    if q.dtype != torch.float8_e4m3fn:
        assert all(s is None for s in scales), "descales are for e4m3 inputs only"
    for s in scales:
        assert s is None or (s.dtype == torch.float32 and tuple(s.shape) == (batch, kv_heads)), \
            "FA3's descales are fp32 [batch, kv heads] (the query's too)"


def _descales(batch: int, kv_heads: int, scales: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
    """The descales as the kernel applies them: ones where not given."""
    return tuple(torch.ones(batch, kv_heads) if s is None else s for s in scales)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool,
            descales: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: q [n, H, d], k/v [m, KH, d], descales [KH] each -> out [n, H, d] fp32 and the natural-log
    LSE [H, n] of the scores scaled by ``scale`` and the q and k descales; query head h reads kv head h // group."""
    group = q.shape[1] // k.shape[1]
    dq, dk, dv = (s.repeat_interleave(group) for s in descales)
    keys, values = k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), keys) * (scale * dq * dk)[:, None, None]
    if causal:  # aligned at the bottom right: query i sees keys j <= i + (m - n)
        n, m = q.shape[0], k.shape[0]
        visible = torch.arange(m)[None, :] <= torch.arange(n)[:, None] + (m - n)
        scores = scores.masked_fill(~visible[None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("hnm,mhd->nhd", torch.exp(scores - lse[..., None]), values) * dv[None, :, None]
    return out, lse


def _out_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype


def _flash_attn_func(fake: FakeFA3, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     softmax_scale: float | None = None, causal: bool = False, qv: Any = None, q_descale: Any = None,
                     k_descale: Any = None, v_descale: Any = None, window_size: tuple[int, int] = (-1, -1),
                     return_attn_probs: bool = False, **kwargs: Any) -> Any:
    scales = (q_descale, k_descale, v_descale)
    fake.record("flash_attn_func", (q, k, v), {"softmax_scale": softmax_scale, "causal": causal, "qv": qv,
                                               "q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale,
                                               "window_size": window_size, "return_attn_probs": return_attn_probs,
                                               **kwargs})
    _check_operands(q, k, v)
    assert q.dim() == 4 and k.shape[0] == q.shape[0] and qv is None and tuple(window_size) == (-1, -1)
    batch, seq, heads, dim = q.shape
    _check_descales(q, batch, k.shape[2], scales)
    out = torch.empty(batch, seq, heads, dim, dtype=_out_dtype(q))
    lse = torch.empty(batch, heads, seq, dtype=torch.float32)
    if fake.log is None:
        descales = _descales(batch, k.shape[2], scales)
        for b in range(batch):
            out[b], lse[b] = _attend(q[b], k[b], v[b], softmax_scale or dim ** -0.5, causal,
                                     tuple(s[b] for s in descales))
    return (out, lse) if return_attn_probs else out


def _lengths(cu_seqlens: torch.Tensor) -> list[int]:
    assert cu_seqlens.dtype == torch.int32 and cu_seqlens.is_contiguous() and cu_seqlens.dim() == 1, \
        "cu_seqlens: int32, contiguous"
    bounds = cu_seqlens.tolist()
    return [end - start for start, end in zip(bounds, bounds[1:])]


def _flash_attn_varlen_func(fake: FakeFA3, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                            max_seqlen_k: int, seqused_q: Any = None, seqused_k: Any = None,
                            softmax_scale: float | None = None, causal: bool = False, qv: Any = None,
                            q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
                            window_size: tuple[int, int] = (-1, -1), return_attn_probs: bool = False,
                            **kwargs: Any) -> Any:
    scales = (q_descale, k_descale, v_descale)
    fake.record("flash_attn_varlen_func", (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
                {"seqused_q": seqused_q, "seqused_k": seqused_k, "softmax_scale": softmax_scale, "causal": causal,
                 "qv": qv, "q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale,
                 "window_size": window_size, "return_attn_probs": return_attn_probs, **kwargs})
    _check_operands(q, k, v)
    assert q.dim() == 3 and seqused_q is None and seqused_k is None and qv is None and tuple(window_size) == (-1, -1)
    assert type(max_seqlen_q) is int and type(max_seqlen_k) is int, "FA3 takes the longest sequences as host ints"
    n_q, n_k = _lengths(cu_seqlens_q), _lengths(cu_seqlens_k)
    assert len(n_q) == len(n_k) and sum(n_q) == q.shape[0] and sum(n_k) == k.shape[0]
    assert max(n_q) <= max_seqlen_q and max(n_k) <= max_seqlen_k, "a sequence longer than the longest given"
    total, heads, dim = q.shape
    _check_descales(q, len(n_q), k.shape[1], scales)
    out = torch.empty(total, heads, dim, dtype=_out_dtype(q))
    lse = torch.empty(heads, total, dtype=torch.float32)
    if fake.log is None:
        descales = _descales(len(n_q), k.shape[1], scales)
        qo, kv = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(n_q)):
            rows, keys = slice(qo[b], qo[b + 1]), slice(kv[b], kv[b + 1])
            out[rows], lse[:, rows] = _attend(q[rows], k[keys], v[keys], softmax_scale or dim ** -0.5, causal,
                                              tuple(s[b] for s in descales))
    return (out, lse) if return_attn_probs else out


def install(monkeypatch: pytest.MonkeyPatch, log: list[str] | None = None) -> FakeFA3:
    """``fa3_fwd_interface`` in sys.modules for the test's duration; returns the stand-in's state."""
    fake = FakeFA3(log)
    module = types.ModuleType("fa3_fwd_interface")
    module.flash_attn_func = lambda *a, **k: _flash_attn_func(fake, *a, **k)  # type: ignore[attr-defined]
    module.flash_attn_varlen_func = lambda *a, **k: _flash_attn_varlen_func(fake, *a, **k)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fa3_fwd_interface", module)
    return fake

