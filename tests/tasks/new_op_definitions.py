"""Small FlashInfer-Trace definitions of the op types gdn, dsa_paged, mamba_ssu and rope, written for the tests
in the dataset's form (sizes cut down so their references run in milliseconds on the CPU), and a writer of a
definition with its workloads as the files ``ptxbench tasks import`` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _axis(value: int | None = None) -> dict[str, Any]:
    return {"type": "var"} if value is None else {"type": "const", "value": value}


def _tensor(shape: list[str] | None, dtype: str) -> dict[str, Any]:
    return {"shape": shape, "dtype": dtype}


def write(folder: Path, definition: dict[str, Any], axes: list[dict[str, int]],
          scalars: dict[str, float] | None = None) -> tuple[Path, Path]:
    """The definition's JSON and a JSONL of one workload per ``axes`` entry (tensors random, scalars given)."""
    folder.mkdir(parents=True, exist_ok=True)
    inputs = {n: {"type": "scalar", "value": (scalars or {})[n]} if s["shape"] is None else {"type": "random"}
              for n, s in definition["inputs"].items()}
    traces = [{"definition": definition["name"], "solution": None, "evaluation": None,
               "workload": {"uuid": f"{definition['name']}-{i}", "axes": a, "inputs": inputs}}
              for i, a in enumerate(axes)]
    path, jsonl = folder / f"{definition['name']}.json", folder / f"{definition['name']}.jsonl"
    path.write_text(json.dumps(definition))
    jsonl.write_text("".join(json.dumps(t) + "\n" for t in traces))
    return path, jsonl


_ROPE = '''import torch


@torch.no_grad()
def run(q, k, cos_sin_cache, positions):
    rotary = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache[positions].float().chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]

    def rotate(x):
        x = x.float()
        first, second = x[..., :rotary // 2], x[..., rotary // 2:rotary]
        turned = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
        return torch.cat((turned, x[..., rotary:]), dim=-1).to(torch.bfloat16)

    return rotate(q), rotate(k)
'''

ROPE = {
    "name": "rope_small_d8_rd4", "op_type": "rope", "tags": [],
    "axes": {"num_tokens": _axis(), "num_qo_heads": _axis(2), "num_kv_heads": _axis(1), "head_size": _axis(8),
             "rotary_dim": _axis(4), "max_seq_len": _axis()},
    "inputs": {"q": _tensor(["num_tokens", "num_qo_heads", "head_size"], "bfloat16"),
               "k": _tensor(["num_tokens", "num_kv_heads", "head_size"], "bfloat16"),
               "cos_sin_cache": _tensor(["max_seq_len", "rotary_dim"], "float32"),
               "positions": _tensor(["num_tokens"], "int64")},
    "outputs": {"q_out": _tensor(["num_tokens", "num_qo_heads", "head_size"], "bfloat16"),
                "k_out": _tensor(["num_tokens", "num_kv_heads", "head_size"], "bfloat16")},
    "reference": _ROPE,
}

# ---------------------------------------------------------------------------------------------- gdn
# The delta rule on a k-last state [.., H, V, K]: S <- g S (I - beta k k^T) + beta v k^T, out = scale q S^T.

_GDN_STEP = '''

def _step(S, q, k, v, g, beta, scale):
    # S [H, K, V]; q, k [H, K]; v [H, V]; g, beta [H]
    S = g[:, None, None] * S
    old = torch.einsum("hk,hkv->hv", k, S)
    new = beta[:, None] * v + (1 - beta[:, None]) * old
    S = S + torch.einsum("hk,hv->hkv", k, new - old)
    return S, scale * torch.einsum("hk,hkv->hv", q, S)


def _gates(A_log, a, dt_bias, b):
    g = torch.exp(-torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float()))
    return g, torch.sigmoid(b.float())
'''

_GDN_DECODE = '''import torch
import torch.nn.functional as F
''' + _GDN_STEP + '''

@torch.no_grad()
def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    group = v.shape[2] // q.shape[2]
    g, beta = _gates(A_log, a, dt_bias, b)
    outputs, states = [], []
    for i in range(q.shape[0]):
        S = state[i].float().transpose(-1, -2)
        S, out = _step(S, q[i, 0].float().repeat_interleave(group, 0), k[i, 0].float().repeat_interleave(group, 0),
                       v[i, 0].float(), g[i, 0], beta[i, 0], scale)
        outputs.append(out)
        states.append(S.transpose(-1, -2))
    return torch.stack(outputs)[:, None].to(torch.bfloat16), torch.stack(states)
'''

_GDN_PREFILL = '''import torch
import torch.nn.functional as F
''' + _GDN_STEP + '''

@torch.no_grad()
def run(q, k, v, state, A_log, a, dt_bias, b, cu_seqlens, scale):
    group = v.shape[1] // q.shape[1]
    g, beta = _gates(A_log, a, dt_bias, b)
    output = torch.zeros(v.shape, dtype=torch.bfloat16)
    new_state = torch.zeros(state.shape, dtype=torch.float32)
    for s in range(cu_seqlens.shape[0] - 1):
        S = state[s].float().transpose(-1, -2)
        for t in range(int(cu_seqlens[s]), int(cu_seqlens[s + 1])):
            S, out = _step(S, q[t].float().repeat_interleave(group, 0), k[t].float().repeat_interleave(group, 0),
                           v[t].float(), g[t], beta[t], scale)
            output[t] = out.to(torch.bfloat16)
        new_state[s] = S.transpose(-1, -2)
    return output, new_state
'''

_GDN_MTP = '''import torch
import torch.nn.functional as F
''' + _GDN_STEP + '''

@torch.no_grad()
def run(q, k, v, initial_state, initial_state_indices, A_log, a, dt_bias, b, scale, intermediate_states_buffer=None):
    group = v.shape[2] // q.shape[2]
    g, beta = _gates(A_log, a, dt_bias, b)
    output = torch.zeros(v.shape, dtype=torch.bfloat16)
    keep = intermediate_states_buffer is not None
    for i in range(q.shape[0]):
        slot = int(initial_state_indices[i])
        S = initial_state[slot].float().transpose(-1, -2)
        for t in range(q.shape[1]):
            S, out = _step(S, q[i, t].float().repeat_interleave(group, 0), k[i, t].float().repeat_interleave(group, 0),
                           v[i, t].float(), g[i, t], beta[i, t], scale)
            output[i, t] = out.to(torch.bfloat16)
            if keep:
                intermediate_states_buffer[slot, t] = S.transpose(-1, -2)
    return output, initial_state.clone()
'''

_GDN_AXES = {"num_q_heads": _axis(2), "num_k_heads": _axis(2), "num_v_heads": _axis(4), "head_size": _axis(16)}
_GATES = {"A_log": _tensor(["num_v_heads"], "float32"), "dt_bias": _tensor(["num_v_heads"], "float32")}


def _per_token(lead: list[str]) -> dict[str, dict[str, Any]]:
    return {"q": _tensor([*lead, "num_q_heads", "head_size"], "bfloat16"),
            "k": _tensor([*lead, "num_k_heads", "head_size"], "bfloat16"),
            "v": _tensor([*lead, "num_v_heads", "head_size"], "bfloat16")}


_STATE = ["num_v_heads", "head_size", "head_size"]

GDN_DECODE = {
    "name": "gdn_decode_small", "op_type": "gdn", "tags": ["stage:decode"],
    "axes": {"batch_size": _axis(), "seq_len": _axis(1), **_GDN_AXES},
    "inputs": {**_per_token(["batch_size", "seq_len"]), "state": _tensor(["batch_size", *_STATE], "float32"),
               "A_log": _GATES["A_log"], "a": _tensor(["batch_size", "seq_len", "num_v_heads"], "bfloat16"),
               "dt_bias": _GATES["dt_bias"], "b": _tensor(["batch_size", "seq_len", "num_v_heads"], "bfloat16"),
               "scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["batch_size", "seq_len", "num_v_heads", "head_size"], "bfloat16"),
                "new_state": _tensor(["batch_size", *_STATE], "float32")},
    "reference": _GDN_DECODE,
}

GDN_PREFILL = {
    "name": "gdn_prefill_small", "op_type": "gdn", "tags": ["stage:prefill"],
    "axes": {"total_seq_len": _axis(), "num_seqs": _axis(), **_GDN_AXES, "len_cu_seqlens": _axis()},
    "constraints": ["len_cu_seqlens == num_seqs + 1", "total_seq_len == cu_seqlens[-1].item()"],
    "inputs": {**_per_token(["total_seq_len"]), "state": _tensor(["num_seqs", *_STATE], "float32"),
               "A_log": _GATES["A_log"], "a": _tensor(["total_seq_len", "num_v_heads"], "bfloat16"),
               "dt_bias": _GATES["dt_bias"], "b": _tensor(["total_seq_len", "num_v_heads"], "bfloat16"),
               "cu_seqlens": _tensor(["len_cu_seqlens"], "int64"), "scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["total_seq_len", "num_v_heads", "head_size"], "bfloat16"),
                "new_state": _tensor(["num_seqs", *_STATE], "float32")},
    "reference": _GDN_PREFILL,
}

GDN_MTP = {
    "name": "gdn_mtp_small", "op_type": "gdn", "tags": ["stage:mtp"],
    "axes": {"batch_size": _axis(), "seq_len": _axis(), **_GDN_AXES, "pool_size": _axis()},
    "constraints": ["seq_len > 1"],
    "inputs": {**_per_token(["batch_size", "seq_len"]), "initial_state": _tensor(["pool_size", *_STATE], "float32"),
               "initial_state_indices": _tensor(["batch_size"], "int32"), "A_log": _GATES["A_log"],
               "a": _tensor(["batch_size", "seq_len", "num_v_heads"], "bfloat16"), "dt_bias": _GATES["dt_bias"],
               "b": _tensor(["batch_size", "seq_len", "num_v_heads"], "bfloat16"), "scale": _tensor(None, "float32"),
               "intermediate_states_buffer": _tensor(["pool_size", "seq_len", *_STATE], "float32")},
    "outputs": {"output": _tensor(["batch_size", "seq_len", "num_v_heads", "head_size"], "bfloat16"),
                "final_state": _tensor(["pool_size", *_STATE], "float32")},
    "reference": _GDN_MTP,
}

# ---------------------------------------------------------------------------------------------- mamba

_MAMBA = '''import torch
import torch.nn.functional as F


@torch.no_grad()
def run(state, x, dt, A, B, C, D, dt_bias, state_batch_indices):
    ratio = x.shape[1] // B.shape[1]
    dt = F.softplus(dt.float() + dt_bias.float())
    new_state = state.clone()
    output = torch.zeros(x.shape, dtype=torch.float32)
    for i in range(x.shape[0]):
        slot = int(state_batch_indices[i])
        if slot < 0:
            continue
        b, c = B[i].float().repeat_interleave(ratio, 0), C[i].float().repeat_interleave(ratio, 0)
        decay = torch.exp(A.float() * dt[i][..., None])
        s = new_state[slot].float() * decay + (dt[i] * x[i].float())[..., None] * b[:, None]
        new_state[slot] = s.to(state.dtype)
        output[i] = (s * c[:, None]).sum(-1) + x[i].float() * D.float()
    return output.to(x.dtype), new_state
'''

MAMBA = {
    "name": "mamba_ssu_small", "op_type": "mamba_ssu", "tags": ["stage:decode"],
    "axes": {"batch_size": _axis(), "state_cache_size": _axis(), "nheads": _axis(4), "head_dim": _axis(4),
             "dstate": _axis(8), "ngroups": _axis(2)},
    "constraints": ["nheads % ngroups == 0", "state_cache_size >= batch_size"],
    "inputs": {"state": _tensor(["state_cache_size", "nheads", "head_dim", "dstate"], "bfloat16"),
               "x": _tensor(["batch_size", "nheads", "head_dim"], "bfloat16"),
               "dt": _tensor(["batch_size", "nheads", "head_dim"], "bfloat16"),
               "A": _tensor(["nheads", "head_dim", "dstate"], "float32"),
               "B": _tensor(["batch_size", "ngroups", "dstate"], "bfloat16"),
               "C": _tensor(["batch_size", "ngroups", "dstate"], "bfloat16"),
               "D": _tensor(["nheads", "head_dim"], "bfloat16"), "dt_bias": _tensor(["nheads", "head_dim"], "bfloat16"),
               "state_batch_indices": _tensor(["batch_size"], "int32")},
    "outputs": {"output": _tensor(["batch_size", "nheads", "head_dim"], "bfloat16"),
                "new_state": _tensor(["state_cache_size", "nheads", "head_dim", "dstate"], "bfloat16")},
    "reference": _MAMBA,
}

# ---------------------------------------------------------------------------------------------- dsa

_DSA = '''import math
import torch


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, sm_scale):
    ckv = ckv_cache.reshape(-1, ckv_cache.shape[-1]).float()
    kpe = kpe_cache.reshape(-1, kpe_cache.shape[-1]).float()
    output = torch.zeros(q_nope.shape, dtype=torch.bfloat16)
    lse = torch.full(q_nope.shape[:2], -float("inf"), dtype=torch.float32)
    for t in range(q_nope.shape[0]):
        keys = sparse_indices[t][sparse_indices[t] != -1].long()
        logits = (q_nope[t].float() @ ckv[keys].T + q_pe[t].float() @ kpe[keys].T) * sm_scale
        lse[t] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[t] = (torch.softmax(logits, -1) @ ckv[keys]).to(torch.bfloat16)
    return output, lse
'''

DSA = {
    "name": "dsa_sparse_small_ps2", "op_type": "dsa_paged", "tags": ["sparse:topk"],
    "axes": {"num_tokens": _axis(), "num_qo_heads": _axis(2), "head_dim_ckv": _axis(8), "head_dim_kpe": _axis(4),
             "page_size": _axis(2), "topk": _axis(6), "num_pages": _axis()},
    "constraints": ["sparse_indices.shape[-1] == topk"],
    "inputs": {"q_nope": _tensor(["num_tokens", "num_qo_heads", "head_dim_ckv"], "bfloat16"),
               "q_pe": _tensor(["num_tokens", "num_qo_heads", "head_dim_kpe"], "bfloat16"),
               "ckv_cache": _tensor(["num_pages", "page_size", "head_dim_ckv"], "bfloat16"),
               "kpe_cache": _tensor(["num_pages", "page_size", "head_dim_kpe"], "bfloat16"),
               "sparse_indices": _tensor(["num_tokens", "topk"], "int32"), "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["num_tokens", "num_qo_heads", "head_dim_ckv"], "bfloat16"),
                "lse": _tensor(["num_tokens", "num_qo_heads"], "float32")},
    "reference": _DSA,
}

_INDEXER = '''import torch


@torch.no_grad()
def run(q, k_cache, seq_lens, block_table):
    top = torch.full((q.shape[0], 4), -1, dtype=torch.int32)
    for b in range(q.shape[0]):
        keys = k_cache[block_table[b]].reshape(-1, k_cache.shape[-1])[:int(seq_lens[b])].float()
        scores = torch.relu(q[b].float() @ keys.T).sum(0)
        chosen = torch.topk(scores, min(4, scores.numel())).indices
        top[b, :chosen.numel()] = chosen.to(torch.int32)
    return top
'''

INDEXER = {
    "name": "dsa_topk_indexer_small", "op_type": "dsa_paged", "tags": ["stage:indexer"],
    "axes": {"batch_size": _axis(), "heads": _axis(2), "dim": _axis(8), "page_size": _axis(2), "topk": _axis(4),
             "max_num_pages": _axis(), "num_pages": _axis()},
    "inputs": {"q": _tensor(["batch_size", "heads", "dim"], "bfloat16"),
               "k_cache": _tensor(["num_pages", "page_size", "dim"], "bfloat16"),
               "seq_lens": _tensor(["batch_size"], "int32"),
               "block_table": _tensor(["batch_size", "max_num_pages"], "int32")},
    "outputs": {"topk_indices": _tensor(["batch_size", "topk"], "int32")},
    "reference": _INDEXER,
}
