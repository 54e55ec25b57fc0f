"""Builds FlashInfer-Trace datasets in the Hugging Face layout for the tests: definitions/<op>/<name>.json,
workloads/<op>/<name>.jsonl and blob/workloads/<op>/<name>/<name>_<uuid>.safetensors (written by the
safetensors package) for the index inputs, solutions/<author>/<op>/<name>/<solution>.json.

``synthetic_workloads`` makes workloads for any definition: small sequences whose page tables, query offsets,
ragged offsets (``<p>_indptr``, ``cu_seqlens``), last-page lengths and routing are consistent with each other
and with the axes, sizes that meet the definition's constraints over its axes (drawn again where they do not),
and scalars written once in fp32 and once in fp64 (as real traces do). The definitions below are small ones
written for the tests, one per kind of index input."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

INTEGER = ("int32", "int64")


def _roles(definition: dict[str, Any]) -> dict[str, str]:
    inputs = definition["inputs"]
    ints = [n for n, s in inputs.items() if s["shape"] is not None and s["dtype"] in INTEGER]
    roles = {}
    for name in ints:
        if name.endswith("_indptr") and name.removesuffix("_indptr") + "_indices" in ints:
            roles[name], roles[name.removesuffix("_indptr") + "_indices"] = "page_indptr", "page_indices"
        elif name == "qo_indptr":
            roles[name] = "query_indptr"
        elif name.endswith("_indptr") or name == "cu_seqlens":
            roles[name] = "ragged_indptr"
        elif name in ("kv_last_page_len", "topk_ids"):
            roles[name] = name
        else:
            roles[name] = "other"
    return roles


def _const(definition: dict[str, Any], name: str, default: int) -> int:
    axis = definition["axes"].get(name)
    return axis["value"] if axis and axis["type"] == "const" else default


def synthetic_workloads(definition: dict[str, Any], count: int, seed: int = 0,
                        blob_root: Path | None = None) -> list[dict[str, Any]]:
    """``count`` workload traces for ``definition``; index inputs as blobs under ``blob_root`` (written there)
    or as ``random`` inputs when it is None (the importer then draws their layout)."""
    from safetensors.numpy import save_file
    import numpy as np

    from ptxbench.tasks import formula
    from ptxbench.tasks.flashinfer.workloads import checkable

    rng = random.Random(f"{definition['name']}:{seed}")
    roles = _roles(definition)
    page_size = _const(definition, "page_size", 1)
    decode = "decode" in definition["name"]
    traces = []
    for index in range(count):
        uuid = f"{index:04d}{rng.getrandbits(96):024x}"
        batch = rng.randint(1, 3) + index % 2
        pages = [rng.randint(1, 3) for _ in range(batch)]
        last = [rng.randint(1, page_size) for _ in range(batch)]
        ragged = [rng.randint(2, 9) for _ in range(batch)]
        keys = [(p - 1) * page_size + (l if "kv_last_page_len" in roles else page_size) for p, l in zip(pages, last)]
        if "ragged_indptr" in roles.values():
            keys = ragged
        queries = [1 if decode else rng.randint(1, k) for k in keys]
        tokens = rng.randint(1, 6) + 4 * index
        constraints = [c for c in definition.get("constraints", []) if checkable(c, set(definition["axes"]))]
        for _ in range(20):  # the other axes take the tokens' count: drawn again until the constraints hold
            axes: dict[str, int] = {}
            for name, axis in definition["axes"].items():
                if axis["type"] != "var":
                    continue
                axes[name] = {"len_indptr": batch + 1, "batch_size": batch, "num_kv_indices": sum(pages),
                              "num_pages": sum(pages) + 2, "total_q": sum(queries), "total_kv": sum(keys),
                              "len_cu_seqlens": batch + 1, "num_seqs": batch,
                              "total_seq_len": sum(keys)}.get(name, tokens)
            sizes = {n: (a["value"] if a["type"] == "const" else axes[n]) for n, a in definition["axes"].items()}
            if all(formula.holds(c, sizes) for c in constraints):
                break
            tokens = rng.randint(1, 6) + 4 * index
        arrays: dict[str, Any] = {}
        for name, role in roles.items():
            if role == "page_indptr":
                arrays[name] = np.cumsum([0, *pages])
            elif role == "page_indices":
                arrays[name] = np.array(rng.sample(range(sizes.get("num_pages", sum(pages))), sum(pages)))
            elif role == "query_indptr":
                arrays[name] = np.cumsum([0, *queries])
            elif role == "ragged_indptr":
                arrays[name] = np.cumsum([0, *keys])
            elif role == "kv_last_page_len":
                arrays[name] = np.array(last)
            elif role == "topk_ids":
                rows, per = (sizes[a] for a in definition["inputs"][name]["shape"])
                experts = sizes.get("num_experts", sizes.get("num_local_experts", per))
                arrays[name] = np.array([rng.sample(range(experts), per) for _ in range(rows)]).reshape(rows, per)
        inputs: dict[str, Any] = {}
        blob = f"blob/workloads/{definition['op_type']}/{definition['name']}/{definition['name']}_{uuid}.safetensors"
        for name, spec in definition["inputs"].items():
            if spec["shape"] is None:
                value: Any = 0 if spec["dtype"] in INTEGER else 1.0 / math.sqrt(128)
                if spec["dtype"] == "float32" and index % 2:
                    value = float(np.float32(value))  # the same scalar written in fp32
                inputs[name] = {"type": "scalar", "value": value}
            elif name in arrays and blob_root is not None:
                inputs[name] = {"type": "safetensors", "path": f"./{blob}", "tensor_key": name}
            else:
                inputs[name] = {"type": "random"}
        if arrays and blob_root is not None:
            (blob_root / blob).parent.mkdir(parents=True, exist_ok=True)
            save_file({n: a.astype(definition["inputs"][n]["dtype"]) for n, a in arrays.items()}, str(blob_root / blob))
        traces.append({"definition": definition["name"], "solution": None, "evaluation": None,
                       "workload": {"uuid": uuid, "axes": axes, "inputs": inputs}})
    return traces


def write_dataset(root: Path, definitions: list[dict[str, Any]], count: int = 5, blobs: bool = True) -> Path:
    """A dataset folder at ``root`` with the definitions, synthetic workloads and one solution each."""
    for definition in definitions:
        op, name = definition["op_type"], definition["name"]
        (root / "definitions" / op).mkdir(parents=True, exist_ok=True)
        (root / "definitions" / op / f"{name}.json").write_text(json.dumps(definition, indent=1))
        traces = synthetic_workloads(definition, count, blob_root=root if blobs else None)
        (root / "workloads" / op).mkdir(parents=True, exist_ok=True)
        (root / "workloads" / op / f"{name}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
        solution = root / "solutions" / "baseline" / op / name / "torch_reference.json"
        solution.parent.mkdir(parents=True, exist_ok=True)
        solution.write_text(json.dumps({"name": f"{name}_torch", "definition": name, "author": "baseline",
                                        "spec": {"language": "python"}, "sources": []}))
    return root


# ------------------------------------------------------------------------------ small definitions

_PAGED_PREFILL = '''import math
import torch


@torch.no_grad()
def run(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    total_q, heads, dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    group = heads // kv_heads
    output = torch.zeros((total_q, heads, dim), dtype=torch.bfloat16)
    lse = torch.full((total_q, heads), -float("inf"), dtype=torch.float32)
    for b in range(qo_indptr.shape[0] - 1):
        qs, qe = int(qo_indptr[b]), int(qo_indptr[b + 1])
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = torch.cat([k_cache[pages[:-1]].reshape(-1, kv_heads, dim), k_cache[pages[-1], :int(kv_last_page_len[b])]])
        v = torch.cat([v_cache[pages[:-1]].reshape(-1, kv_heads, dim), v_cache[pages[-1], :int(kv_last_page_len[b])]])
        k = k.float().repeat_interleave(group, dim=1)
        v = v.float().repeat_interleave(group, dim=1)
        logits = torch.einsum("qhd,khd->hqk", q[qs:qe].float(), k) * sm_scale
        delta = k.shape[0] - (qe - qs)
        mask = torch.arange(k.shape[0])[None, :] > torch.arange(qe - qs)[:, None] + delta
        logits = logits.masked_fill(mask[None], -float("inf"))
        lse[qs:qe] = (torch.logsumexp(logits, -1) / math.log(2.0)).T
        output[qs:qe] = torch.einsum("hqk,khd->qhd", torch.softmax(logits, -1), v).to(torch.bfloat16)
    return output, lse
'''

_RAGGED = '''import math
import torch


@torch.no_grad()
def run(q, k, v, qo_indptr, kv_indptr, sm_scale):
    total_q, heads, dim = q.shape
    group = heads // k.shape[1]
    output = torch.zeros((total_q, heads, v.shape[2]), dtype=torch.bfloat16)
    lse = torch.full((total_q, heads), -float("inf"), dtype=torch.float32)
    for b in range(qo_indptr.shape[0] - 1):
        qs, qe, ks, ke = int(qo_indptr[b]), int(qo_indptr[b + 1]), int(kv_indptr[b]), int(kv_indptr[b + 1])
        kb = k[ks:ke].float().repeat_interleave(group, dim=1)
        vb = v[ks:ke].float().repeat_interleave(group, dim=1)
        logits = torch.einsum("qhd,khd->qhk", q[qs:qe].float(), kb) * sm_scale
        delta = (ke - ks) - (qe - qs)
        keep = torch.arange(ke - ks)[None, :] < torch.arange(qe - qs)[:, None] + 1 + delta
        logits = logits.masked_fill(~keep[:, None, :], -float("inf"))
        lse[qs:qe] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[qs:qe] = torch.einsum("qhk,khd->qhd", torch.softmax(logits, -1), vb).to(torch.bfloat16)
    return output, lse
'''

_ROUTED_MOE = '''import torch


@torch.no_grad()
def run(topk_ids, hidden_states, gemm1_weights, gemm2_weights):
    tokens, hidden = hidden_states.shape
    inter = gemm2_weights.shape[2]
    x = hidden_states.float()
    out = torch.zeros((tokens, hidden), dtype=torch.float32)
    for t in range(tokens):
        for e in topk_ids[t].tolist():
            up = gemm1_weights[e].float() @ x[t]
            act = torch.nn.functional.silu(up[inter:]) * up[:inter]
            out[t] += gemm2_weights[e].float() @ act
    return out.to(torch.bfloat16)
'''


def _axis(value: int | None = None) -> dict[str, Any]:
    return {"type": "var"} if value is None else {"type": "const", "value": value}


def _tensor(shape: list[str] | None, dtype: str) -> dict[str, Any]:
    return {"shape": shape, "dtype": dtype}


PAGED_PREFILL = {
    "name": "gqa_paged_prefill_causal_h4_kv2_d16_ps4", "op_type": "gqa_paged", "tags": ["stage:prefill"],
    "description": "A small paged causal prefill with last-page lengths.",
    "axes": {"num_qo_heads": _axis(4), "num_kv_heads": _axis(2), "head_dim": _axis(16), "page_size": _axis(4),
             "len_indptr": _axis(), "total_q": _axis(), "num_kv_indices": _axis(), "num_pages": _axis(),
             "batch_size": _axis()},
    "constraints": ["total_q == qo_indptr[-1].item()", "num_kv_indices == kv_indptr[-1].item()",
                    "len_indptr == batch_size + 1"],
    "inputs": {"q": _tensor(["total_q", "num_qo_heads", "head_dim"], "bfloat16"),
               "k_cache": _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16"),
               "v_cache": _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16"),
               "qo_indptr": _tensor(["len_indptr"], "int32"), "kv_indptr": _tensor(["len_indptr"], "int32"),
               "kv_indices": _tensor(["num_kv_indices"], "int32"),
               "kv_last_page_len": _tensor(["batch_size"], "int32"), "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["total_q", "num_qo_heads", "head_dim"], "bfloat16"),
                "lse": _tensor(["total_q", "num_qo_heads"], "float32")},
    "reference": _PAGED_PREFILL,
}

RAGGED_PREFILL = {
    "name": "gqa_ragged_prefill_causal_h4_kv2_d16", "op_type": "gqa_ragged", "tags": ["stage:prefill"],
    "axes": {"num_qo_heads": _axis(4), "num_kv_heads": _axis(2), "head_dim": _axis(16), "len_indptr": _axis(),
             "total_q": _axis(), "total_kv": _axis()},
    "constraints": ["total_q == qo_indptr[-1].item()", "total_kv == kv_indptr[-1].item()"],
    "inputs": {"q": _tensor(["total_q", "num_qo_heads", "head_dim"], "bfloat16"),
               "k": _tensor(["total_kv", "num_kv_heads", "head_dim"], "bfloat16"),
               "v": _tensor(["total_kv", "num_kv_heads", "head_dim"], "bfloat16"),
               "qo_indptr": _tensor(["len_indptr"], "int32"), "kv_indptr": _tensor(["len_indptr"], "int32"),
               "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["total_q", "num_qo_heads", "head_dim"], "bfloat16"),
                "lse": _tensor(["total_q", "num_qo_heads"], "float32")},
    "reference": _RAGGED,
}

ROUTED_MOE = {
    "name": "routed_moe_topk2_e4_h32_i16", "op_type": "moe", "tags": ["routing:pre-computed"],
    "axes": {"seq_len": _axis(), "num_experts": _axis(4), "hidden_size": _axis(32), "intermediate_size": _axis(16),
             "gemm1_out_size": _axis(32), "top_k": _axis(2)},
    "inputs": {"topk_ids": _tensor(["seq_len", "top_k"], "int32"),
               "hidden_states": _tensor(["seq_len", "hidden_size"], "bfloat16"),
               "gemm1_weights": _tensor(["num_experts", "gemm1_out_size", "hidden_size"], "bfloat16"),
               "gemm2_weights": _tensor(["num_experts", "hidden_size", "intermediate_size"], "bfloat16")},
    "outputs": {"output": _tensor(["seq_len", "hidden_size"], "bfloat16")},
    "reference": _ROUTED_MOE,
}

SMALL_DEFINITIONS = (PAGED_PREFILL, RAGGED_PREFILL, ROUTED_MOE)


# ------------------------------------------------ definitions shaped like the dataset's, kept small for a GPU test
# One per kind the GPU test evaluates with a plain kernel: a GEMM C = A @ B.T as the dataset's gemm_n*_k* (fp16,
# M the tokens), a paged GQA decode as its gqa_paged_decode_* (head_dim 128, last-page lengths, the 2-based LSE),
# and an fp8 block-scaled SwiGLU MoE as its moe_fp8_block_scale_* (blocks of 128, the activations' scales stored
# [blocks, tokens]) with its routing given as its *_routed_moe_* are: top-k on drawn logits can tie, and two correct
# kernels may then pick different experts, so routing is an input here (experts and their weights).

_GEMM = '''import torch


def run(A, B):
    return torch.matmul(A, B.T)
'''

_PAGED_DECODE = '''import math
import torch


@torch.no_grad()
def run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    batch, heads, dim = q.shape
    _, page_size, kv_heads, _ = k_cache.shape
    group = heads // kv_heads
    output = torch.zeros((batch, heads, dim), dtype=torch.bfloat16, device=q.device)
    lse = torch.full((batch, heads), -float("inf"), dtype=torch.float32, device=q.device)
    for b in range(batch):
        start, end = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if start == end:
            continue
        pages = kv_indices[start:end].long()
        used = (end - start - 1) * page_size + int(kv_last_page_len[b])
        k = k_cache[pages].reshape(-1, kv_heads, dim)[:used].float().repeat_interleave(group, dim=1)
        v = v_cache[pages].reshape(-1, kv_heads, dim)[:used].float().repeat_interleave(group, dim=1)
        logits = torch.einsum("hd,khd->hk", q[b].float(), k) * sm_scale
        lse[b] = torch.logsumexp(logits, -1) / math.log(2.0)
        output[b] = torch.einsum("hk,khd->hd", torch.softmax(logits, -1), v).to(torch.bfloat16)
    return output, lse
'''

_FP8_MOE = '''import torch


@torch.no_grad()
def run(topk_ids, topk_weights, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale):
    block = 128
    tokens, hidden = hidden_states.shape
    experts, gemm1_out, _ = gemm1_weights.shape
    inter = gemm1_out // 2

    def dequant(w, s):  # w [E, R, C] fp8, s [E, R/128, C/128]
        scale = s.float().repeat_interleave(block, dim=1).repeat_interleave(block, dim=2)
        return w.float() * scale

    x = hidden_states.float() * hidden_states_scale.float().T.repeat_interleave(block, dim=1)
    w13 = dequant(gemm1_weights, gemm1_weights_scale)
    w2 = dequant(gemm2_weights, gemm2_weights_scale)
    out = torch.zeros((tokens, hidden), dtype=torch.float32, device=x.device)
    for e in range(experts):
        rows, slots = torch.nonzero(topk_ids == e, as_tuple=True)
        if rows.numel() == 0:
            continue
        h = x[rows] @ w13[e].T
        act = torch.nn.functional.silu(h[:, inter:]) * h[:, :inter]
        out.index_add_(0, rows, (act @ w2[e].T) * topk_weights[rows, slots].float()[:, None])
    return out.to(torch.bfloat16)
'''

GEMM_F16 = {
    "name": "gemm_n256_k1024", "op_type": "gemm", "tags": ["status:verified"],
    "description": "General matrix multiply C = A @ B.T, a projection's shape kept small.",
    "axes": {"M": _axis(), "N": _axis(256), "K": _axis(1024)},
    "inputs": {"A": _tensor(["M", "K"], "float16"), "B": _tensor(["N", "K"], "float16")},
    "outputs": {"C": _tensor(["M", "N"], "float16")},
    "reference": _GEMM,
}

PAGED_DECODE = {
    "name": "gqa_paged_decode_h8_kv2_d128_ps16", "op_type": "gqa_paged", "tags": ["stage:decode", "status:verified"],
    "description": "Batched grouped-query attention decode over a paged KV cache (pages of 16): 8 query heads, "
                   "2 KV heads, head_dim 128.",
    "axes": {"batch_size": _axis(), "num_qo_heads": _axis(8), "num_kv_heads": _axis(2), "head_dim": _axis(128),
             "page_size": _axis(16), "num_pages": _axis(), "len_indptr": _axis(), "num_kv_indices": _axis()},
    "constraints": ["len_indptr == batch_size + 1", "num_kv_indices == kv_indptr[-1].item()"],
    "inputs": {"q": _tensor(["batch_size", "num_qo_heads", "head_dim"], "bfloat16"),
               "k_cache": _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16"),
               "v_cache": _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], "bfloat16"),
               "kv_indptr": _tensor(["len_indptr"], "int32"), "kv_indices": _tensor(["num_kv_indices"], "int32"),
               "kv_last_page_len": _tensor(["batch_size"], "int32"), "sm_scale": _tensor(None, "float32")},
    "outputs": {"output": _tensor(["batch_size", "num_qo_heads", "head_dim"], "bfloat16"),
                "lse": _tensor(["batch_size", "num_qo_heads"], "float32")},
    "reference": _PAGED_DECODE,
}

FP8_MOE = {
    "name": "moe_fp8_block_scale_routed_topk2_e8_h256_i128", "op_type": "moe",
    "tags": ["status:verified", "quantization:float8_e4m3fn", "routing:pre-computed"],
    "description": "FP8 block-scale SwiGLU MoE (blocks of 128) with pre-computed routing: 8 experts, top 2.",
    "axes": {"seq_len": _axis(), "num_experts": _axis(8), "hidden_size": _axis(256), "intermediate_size": _axis(128),
             "gemm1_out_size": _axis(256), "top_k": _axis(2), "num_hidden_blocks": _axis(2),
             "num_intermediate_blocks": _axis(1), "num_gemm1_out_blocks": _axis(2)},
    "inputs": {"topk_ids": _tensor(["seq_len", "top_k"], "int32"),
               "topk_weights": _tensor(["seq_len", "top_k"], "float32"),
               "hidden_states": _tensor(["seq_len", "hidden_size"], "float8_e4m3fn"),
               "hidden_states_scale": _tensor(["num_hidden_blocks", "seq_len"], "float32"),
               "gemm1_weights": _tensor(["num_experts", "gemm1_out_size", "hidden_size"], "float8_e4m3fn"),
               "gemm1_weights_scale": _tensor(["num_experts", "num_gemm1_out_blocks", "num_hidden_blocks"], "float32"),
               "gemm2_weights": _tensor(["num_experts", "hidden_size", "intermediate_size"], "float8_e4m3fn"),
               "gemm2_weights_scale": _tensor(["num_experts", "num_hidden_blocks", "num_intermediate_blocks"],
                                              "float32")},
    "outputs": {"output": _tensor(["seq_len", "hidden_size"], "bfloat16")},
    "constraints": ["gemm1_out_size == 2 * intermediate_size"],
    "reference": _FP8_MOE,
}

EVAL_DEFINITIONS = (GEMM_F16, PAGED_DECODE, FP8_MOE)
