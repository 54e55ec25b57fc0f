"""Small FlashInfer-Trace definitions that name a FlashInfer API (``fi_api:`` tags), one per API the import maps,
shaped as the dataset's are (its input names, 2-based LSE, causal masks aligned at the bottom right, pages of one
token without ``kv_last_page_len``), and ``imported`` to import one through a dataset folder as
``ptxbench tasks import`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptxbench.tasks.flashinfer import ImportedTask, import_definition

from .flashinfer_dataset import PAGED_DECODE, PAGED_PREFILL, RAGGED_PREFILL, ROUTED_MOE, _axis, _tensor, write_dataset

RMSNORM_API = "flashinfer.norm.rmsnorm"
FUSED_API = "flashinfer.norm.fused_add_rmsnorm"
DECODE_API = "flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper"
PAGED_API = "flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper"
RAGGED_API = "flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper"
MLA_API = "flashinfer.mla.BatchMLAPagedAttentionWrapper"


def tagged(definition: dict[str, Any], api: str, name: str | None = None) -> dict[str, Any]:
    """The definition with the tag ``fi_api:<api>`` (and another name, where given)."""
    return {**definition, "name": name or definition["name"], "tags": [*definition.get("tags", []), f"fi_api:{api}"]}


def imported(definition: dict[str, Any], root: Path) -> ImportedTask:
    """The definition imported with synthetic workloads from a dataset folder written under ``root``."""
    write_dataset(root, [definition], count=4)
    op, name = definition["op_type"], definition["name"]
    return import_definition(root / "definitions" / op / f"{name}.json", [root / "workloads" / op / f"{name}.jsonl"])


_RMSNORM = '''import torch


@torch.no_grad()
def run(hidden_states, weight):
    EPS = 1e-6
    x = hidden_states.to(torch.float32)
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return ((x * inv_rms) * weight.to(torch.float32)).to(hidden_states.dtype)
'''

_FUSED_ADD_RMSNORM = '''import torch


@torch.no_grad()
def run(hidden_states, residual, weight):
    EPS = 1e-5
    x = hidden_states.to(torch.float32) + residual.to(torch.float32)
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return ((x * inv_rms) * weight.to(torch.float32)).to(hidden_states.dtype)
'''

_NORM_AXES = {"batch_size": _axis(), "hidden_size": _axis(64)}
_ROWS = ["batch_size", "hidden_size"]

RMSNORM = tagged({
    "name": "rmsnorm_h64", "op_type": "rmsnorm", "axes": _NORM_AXES,
    "inputs": {"hidden_states": _tensor(_ROWS, "bfloat16"), "weight": _tensor(["hidden_size"], "bfloat16")},
    "outputs": {"output": _tensor(_ROWS, "bfloat16")}, "reference": _RMSNORM,
}, RMSNORM_API)

FUSED_ADD_RMSNORM = tagged({
    "name": "fused_add_rmsnorm_h64", "op_type": "rmsnorm", "tags": ["fused"], "axes": _NORM_AXES,
    "inputs": {"hidden_states": _tensor(_ROWS, "bfloat16"), "residual": _tensor(_ROWS, "bfloat16"),
               "weight": _tensor(["hidden_size"], "bfloat16")},
    "outputs": {"output": _tensor(_ROWS, "bfloat16")}, "reference": _FUSED_ADD_RMSNORM,
}, FUSED_API)

DECODE = tagged(PAGED_DECODE, DECODE_API)

_DECODE_PS1 = '''import math
import torch


@torch.no_grad()
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    output = torch.zeros((batch, heads, dim), dtype=torch.bfloat16)
    lse = torch.full((batch, heads), -float("inf"), dtype=torch.float32)
    for b in range(batch):
        rows = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = k_cache.squeeze(1)[rows].float().repeat_interleave(heads // kv_heads, dim=1)
        v = v_cache.squeeze(1)[rows].float().repeat_interleave(heads // kv_heads, dim=1)
        logits = torch.einsum("hd,khd->hk", q[b].float(), k) * sm_scale
        lse[b] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[b] = torch.einsum("hk,khd->hd", torch.softmax(logits, -1), v).to(torch.bfloat16)
    return output, lse
'''

DECODE_PS1 = tagged({
    "name": "gqa_paged_decode_h4_kv2_d16_ps1", "op_type": "gqa_paged", "tags": ["stage:decode"],
    "axes": {"batch_size": _axis(), "num_qo_heads": _axis(4), "num_kv_heads": _axis(2), "head_dim": _axis(16),
             "page_size": _axis(1), "num_pages": _axis(), "len_indptr": _axis(), "num_kv_indices": _axis()},
    "constraints": ["len_indptr == batch_size + 1", "num_kv_indices == kv_indptr[-1].item()"],
    "inputs": {"q": _tensor(["batch_size", "num_qo_heads", "head_dim"], "bfloat16"),
               "k_cache": _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16"),
               "v_cache": _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16"),
               "kv_indptr": _tensor(["len_indptr"], "int32"), "kv_indices": _tensor(["num_kv_indices"], "int32"),
               "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["batch_size", "num_qo_heads", "head_dim"], "bfloat16"),
                "lse": {**_tensor(["batch_size", "num_qo_heads"], "float32"),
                        "description": "The 2-based log-sum-exp of attention logits."}},
    "reference": _DECODE_PS1,
}, DECODE_API)

# kv_last_page_len declared [len_indptr], one longer than the sequences, as the dataset's paged prefills declare it
PREFILL = tagged({
    **PAGED_PREFILL, "axes": {n: a for n, a in PAGED_PREFILL["axes"].items() if n != "batch_size"},
    "constraints": PAGED_PREFILL["constraints"][:2],
    "inputs": {**PAGED_PREFILL["inputs"], "kv_last_page_len": _tensor(["len_indptr"], "int32")},
}, PAGED_API)
RAGGED = tagged(RAGGED_PREFILL, RAGGED_API)
# MLA's ragged prefill: query and key dims 24, value dim 16 (the dataset's mla_ragged_* are 192 and 128)
MLA_RAGGED = tagged({
    **RAGGED_PREFILL, "name": "mla_ragged_prefill_causal_h4_qk24_vo16", "op_type": "mla_ragged",
    "axes": {"num_qo_heads": _axis(4), "num_kv_heads": _axis(4), "qk_dim": _axis(24), "vo_dim": _axis(16),
             "len_indptr": _axis(), "total_q": _axis(), "total_kv": _axis()},
    "inputs": {"q": _tensor(["total_q", "num_qo_heads", "qk_dim"], "bfloat16"),
               "k": _tensor(["total_kv", "num_kv_heads", "qk_dim"], "bfloat16"),
               "v": _tensor(["total_kv", "num_kv_heads", "vo_dim"], "bfloat16"),
               "qo_indptr": _tensor(["len_indptr"], "int32"), "kv_indptr": _tensor(["len_indptr"], "int32"),
               "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["total_q", "num_qo_heads", "vo_dim"], "bfloat16"),
                "lse": _tensor(["total_q", "num_qo_heads"], "float32")},
}, RAGGED_API)

_MLA_DECODE = '''import math
import torch


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    batch, heads, latent = q_nope.shape
    page_size, rope = ckv_cache.shape[1], kpe_cache.shape[-1]
    output = torch.zeros((batch, heads, latent), dtype=torch.bfloat16)
    lse = torch.full((batch, heads), -float("inf"), dtype=torch.float32)
    for b in range(batch):
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        used = (pages.numel() - 1) * page_size + int(kv_last_page_len[b])
        c = ckv_cache[pages].reshape(-1, latent)[:used].float()
        r = kpe_cache[pages].reshape(-1, rope)[:used].float()
        logits = (q_nope[b].float() @ c.T + q_pe[b].float() @ r.T) * sm_scale
        lse[b] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[b] = (torch.softmax(logits, -1) @ c).to(torch.bfloat16)
    return output, lse
'''

_MLA_PREFILL = '''import math
import torch


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    total, heads, latent = q_nope.shape
    rope = kpe_cache.shape[-1]
    output = torch.zeros((total, heads, latent), dtype=torch.bfloat16)
    lse = torch.full((total, heads), -float("inf"), dtype=torch.float32)
    for b in range(qo_indptr.shape[0] - 1):
        qs, qe = int(qo_indptr[b]), int(qo_indptr[b + 1])
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        c, r = ckv_cache[pages].reshape(-1, latent).float(), kpe_cache[pages].reshape(-1, rope).float()
        logits = (torch.einsum("qhd,kd->qhk", q_nope[qs:qe].float(), c)
                  + torch.einsum("qhd,kd->qhk", q_pe[qs:qe].float(), r)) * sm_scale
        delta = c.shape[0] - (qe - qs)
        hidden = torch.arange(c.shape[0])[None, :] > torch.arange(qe - qs)[:, None] + delta
        logits = logits.masked_fill(hidden[:, None, :], -float("inf"))
        lse[qs:qe] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[qs:qe] = torch.einsum("qhk,kd->qhd", torch.softmax(logits, -1), c).to(torch.bfloat16)
    return output, lse
'''

_MLA_AXES = {"num_qo_heads": _axis(4), "head_dim_ckv": _axis(32), "head_dim_kpe": _axis(8), "num_pages": _axis(),
             "len_indptr": _axis(), "num_kv_indices": _axis()}
_CACHES = {"ckv_cache": _tensor(["num_pages", "page_size", "head_dim_ckv"], "bfloat16"),
           "kpe_cache": _tensor(["num_pages", "page_size", "head_dim_kpe"], "bfloat16")}

MLA_DECODE = tagged({
    "name": "mla_paged_decode_h4_ckv32_kpe8_ps4", "op_type": "mla_paged", "tags": ["stage:decode"],
    "axes": {**_MLA_AXES, "batch_size": _axis(), "page_size": _axis(4)},
    "constraints": ["len_indptr == batch_size + 1", "num_kv_indices == kv_indptr[-1].item()"],
    "inputs": {"q_nope": _tensor(["batch_size", "num_qo_heads", "head_dim_ckv"], "bfloat16"),
               "q_pe": _tensor(["batch_size", "num_qo_heads", "head_dim_kpe"], "bfloat16"), **_CACHES,
               "kv_indptr": _tensor(["len_indptr"], "int32"), "kv_indices": _tensor(["num_kv_indices"], "int32"),
               "kv_last_page_len": _tensor(["batch_size"], "int32"), "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["batch_size", "num_qo_heads", "head_dim_ckv"], "bfloat16"),
                "lse": _tensor(["batch_size", "num_qo_heads"], "float32")},
    "reference": _MLA_DECODE,
}, MLA_API)

MLA_PREFILL = tagged({
    "name": "mla_paged_prefill_causal_h4_ckv32_kpe8_ps1", "op_type": "mla_paged", "tags": ["stage:prefill"],
    "axes": {**_MLA_AXES, "total_q": _axis(), "page_size": _axis(1)},
    "constraints": ["total_q == qo_indptr[-1].item()", "num_kv_indices == kv_indptr[-1].item()"],
    "inputs": {"q_nope": _tensor(["total_q", "num_qo_heads", "head_dim_ckv"], "bfloat16"),
               "q_pe": _tensor(["total_q", "num_qo_heads", "head_dim_kpe"], "bfloat16"), **_CACHES,
               "qo_indptr": _tensor(["len_indptr"], "int32"), "kv_indptr": _tensor(["len_indptr"], "int32"),
               "kv_indices": _tensor(["num_kv_indices"], "int32"), "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["total_q", "num_qo_heads", "head_dim_ckv"], "bfloat16"),
                "lse": _tensor(["total_q", "num_qo_heads"], "float32")},
    "reference": _MLA_PREFILL,
}, MLA_API)

# every API the import maps, with what a definition of it imports as
SUPPORTED = {"rmsnorm": RMSNORM, "fused_add_rmsnorm": FUSED_ADD_RMSNORM, "decode": DECODE, "decode_ps1": DECODE_PS1,
             "paged_prefill": PREFILL, "ragged_prefill": RAGGED, "mla_ragged": MLA_RAGGED, "mla_decode": MLA_DECODE,
             "mla_prefill": MLA_PREFILL}
# a definition naming an API PTXBench does not call, and one whose inputs do not fit the API it names
UNSUPPORTED = tagged(ROUTED_MOE, "flashinfer.fused_moe.trtllm_fp8_block_scale_moe")
MISFIT = tagged({**RMSNORM, "tags": []}, FUSED_API, name="rmsnorm_h64_misnamed")
