"""The work of one call, as formulas over the task's axes: useful FLOPs from the op type and the shapes,
and the bytes a correct kernel must move (what it reads, not whole buffers it only indexes into).

- ``gemm``: ``2 * M * N * K`` from the first two inputs and the output.
- attention (``gqa_*``, ``mla_*``, ``attention``): ``2 * heads * (qk_dim + vo_dim) * pairs``, where pairs are
  the (query, key) products computed: the keys read in a decode (one query per sequence), the attended pairs
  of a prefill (``layouts.ATTENDED_PAIRS``, from the layout). The dims are read from the shapes: heads and
  ``vo_dim`` from the first output, ``qk_dim`` summed over the query inputs (``q``, or ``q_nope`` + ``q_pe``).
- ``moe``: ``2 * tokens * top_k * (local share) * (gemm1 + gemm2 weights per expert)``; the local share is
  ``num_local_experts / num_experts`` under expert parallelism (the expected share of routed tokens).
- DeepSeek sparse attention (``dsa_paged``): as attention, over ``rows * min(topk, cache tokens)`` pairs (each
  query row attends to its ``sparse_indices``, distinct tokens of the cache, ``-1`` where it holds fewer).
- a chunked GDN prefill: ``6 * tokens * v_heads * K * V``, the three state products every token needs
  (``q·S``, ``k·S`` and the rank-one update, ``2 * K * V`` each), whatever the chunking.
- norms, rope, the Mamba state update, GDN decode and MTP: 0 (bandwidth-bound: bytes are the work).

Bytes: every input and output once, except a paged cache (first dims ``num_pages, page_size``), counted for
the tokens its page table names (``kv_tokens``, or ``num_kv_indices * page_size`` where every page is full),
and an expert weight (first dim the experts), counted for at most ``min(experts, tokens * top_k)`` experts.
That is an upper estimate (tokens may share experts), so the physical-floor guard's bytes (``floor_bytes``)
count only ``min(experts, top_k)`` of them. Likewise a sparse attention's cache counts ``min(cache tokens,
rows * topk)`` tokens, its floor ``min(cache tokens, topk)`` (one row's); a table read through row indices
(rope's cos/sin cache) its ``min(rows, entries)`` rows, unless an output has its shape (a state cache returned
updated: every row is read to be written); an input the reference only writes into (``reads``) 0.
"""

from __future__ import annotations

import re

from ptxbench.tasks import formula
from ptxbench.tasks.flashinfer.layouts import ATTENDED_PAIRS, KV_TOKENS, IndexPlan
from ptxbench.tasks.flashinfer.reads import unread_inputs
from ptxbench.tasks.flashinfer.schema import Definition, ImportProblem, TensorSpec

ATTENTION_OPS = ("gqa_paged", "gqa_ragged", "mla_paged", "mla_ragged", "gqa", "mha", "attention")
NORM_OPS = ("rmsnorm", "fused_add_rmsnorm", "norm")
SPARSE_ATTENTION_OPS = ("dsa_paged",)
BANDWIDTH_OPS = ("rope", "mamba_ssu")  # elementwise or per-slot state updates: bytes are the work
DTYPE_BYTES = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e4m3": 1,
               "float8_e5m2": 1, "int8": 1, "int64": 8}
_FLOATING = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e4m3", "float8_e5m2")


def _product(dims: list[str]) -> str:
    return " * ".join(dims) or "1"


def is_decode(definition: Definition) -> bool:
    return any(v.replace(" ", "") == "decode" for v in definition.tag("stage")) or "decode" in definition.name


def is_chunked_prefill(definition: Definition) -> bool:
    """A GDN prefill (stage tag, or ragged ``cu_seqlens``): its tokens run through the state in chunks of
    matrix products, where decode and MTP update it token by token."""
    return definition.op_type == "gdn" and ("prefill" in definition.tag("stage") or "cu_seqlens" in definition.inputs)


def _cache_tokens(plan: IndexPlan) -> str:
    return f"{plan.num_pages_axis} * {plan.page_size_axis}"


def _keys_read(definition: Definition, plan: IndexPlan) -> str:
    if plan.paged:
        if KV_TOKENS in plan.extra_axes():
            return KV_TOKENS
        return f"{plan.page_count_axis} * {plan.page_size_axis}" if plan.page_size_axis else str(plan.page_count_axis)
    if plan.ragged_total_axis:
        return plan.ragged_total_axis
    raise ImportProblem(f"{definition.op_type} definition: no page table or ragged offsets say which keys are read; "
                        "pass --flops")


def _attention_flops(definition: Definition, plan: IndexPlan) -> str:
    output = next(iter(definition.outputs.values())).shape or []
    if len(output) != 3:
        raise ImportProblem(f"{definition.op_type} definition: the first output is not [tokens, heads, dim]; "
                            "pass --flops")
    count, heads, vo = output
    queries = [s.shape for s in definition.inputs.values()
               if s.shape and len(s.shape) == 3 and s.shape[:2] == [count, heads] and s.dtype in _FLOATING]
    if not queries:
        raise ImportProblem(f"{definition.op_type} definition: no query input of shape [{count}, {heads}, dim]; "
                            "pass --flops")
    qk = " + ".join(q[2] for q in queries if q)
    if plan.sparse_indices and plan.sparse_shape:
        rows, topk = plan.sparse_shape
        pairs = f"{rows} * min({topk}, {_cache_tokens(plan)})"
    elif plan.query_indptr:
        pairs = ATTENDED_PAIRS
    elif plan.sequences:
        pairs = _keys_read(definition, plan)
    else:
        raise ImportProblem(f"{definition.op_type} definition without sequence offsets: pass --flops")
    return f"2 * {heads} * ({qk} + {vo}) * {pairs}"


def _gemm_flops(definition: Definition) -> str:
    """``2 * M * N * K`` from the output ``[M, N]`` and the two operands ``[M, K]``, ``[N, K]`` (or ``[K, N]``),
    found among the 2-D inputs whatever their order (block-scaled GEMMs list scales between them)."""
    out = next(iter(definition.outputs.values())).shape or []
    matrices = [s.shape for s in definition.inputs.values() if s.shape and len(s.shape) == 2]
    if len(out) == 2:
        for a in matrices:
            for b in matrices:
                if a is not b and a and b and a[0] == out[0] and out[1] in b:
                    reduced = [axis for axis in a[1:] if axis in b and axis not in out]
                    if len(reduced) == 1:
                        return f"2 * {out[0]} * {out[1]} * {reduced[0]}"
    raise ImportProblem("gemm definition: cannot tell M, N and K from its 2-D inputs and the output; pass --flops")


def _causal(definition: Definition) -> bool:
    return "causal" in definition.name or "true" in definition.tag("causal")


def _dense_attention_flops(definition: Definition) -> str:
    """Attention over ``[B, H, S, D]`` tensors (the original PTXBench's ``op_type "attention"``): ``2 * (Dqk +
    Dv)`` FLOPs per (query, key) pair and head, all pairs or the causal half with the diagonal; a backward
    (five products where the forward has two) 2.5 times that."""
    found = {n.upper(): s.shape for n, s in definition.inputs.items() if n.upper() in ("Q", "K", "V") and s.shape}
    if set(found) != {"Q", "K", "V"} or any(len(shape) != 4 for shape in found.values()):
        raise ImportProblem("attention definition: expected 4-D inputs Q, K, V ([B, H, S, D]); pass --flops")
    batch, heads, queries, qk = found["Q"]
    keys, vo = found["K"][2], found["V"][3]
    if _causal(definition):
        if keys != queries:
            raise ImportProblem("causal attention definition with queries and keys of different lengths: pass --flops")
        pairs = f"({queries} * {queries} - {queries} * ({queries} - 1) / 2)"
    else:
        pairs = f"{queries} * {keys}"
    dims = f"({qk} + {vo})" if qk != vo else f"2 * {qk}"
    backward = "bwd" in definition.name or "backward" in definition.tag("direction")
    return f"{'5' if backward else '2'} * {batch} * {heads} * {dims} * {pairs}"


def _top_k(definition: Definition) -> str:
    if "top_k" in definition.axes:
        return "top_k"
    match = re.search(r"topk(\d+)", definition.name)
    if match:
        return match.group(1)
    raise ImportProblem("moe definition: no top_k axis and no topk<N> in its name; pass --flops")


def _moe_flops(definition: Definition) -> str:
    weights = [s.shape for n, s in definition.inputs.items() if n in ("gemm1_weights", "gemm2_weights") and s.shape]
    hidden = definition.inputs.get("hidden_states")
    if len(weights) != 2 or any(len(w) != 3 for w in weights) or hidden is None or not hidden.shape:
        raise ImportProblem("moe definition: expected hidden_states and 3-D gemm1_weights, gemm2_weights; pass --flops")
    tokens = hidden.shape[0]
    local = weights[0][0]
    share = f" * {local} / num_experts" if local != "num_experts" and "num_experts" in definition.axes else ""
    per_expert = " + ".join(f"{w[1]} * {w[2]}" for w in weights)
    return f"2 * {tokens} * {_top_k(definition)}{share} * ({per_expert})"


def _gdn_flops(definition: Definition) -> str:
    """``6 * tokens * v_heads * K * V`` from ``q`` ([tokens, q_heads, K]) and ``v`` ([tokens, v_heads, V])."""
    q, v = (definition.inputs[n].shape if n in definition.inputs else None for n in ("q", "v"))
    if not q or not v or len(q) != len(v) or len(q) < 3 or q[:-2] != v[:-2]:
        raise ImportProblem("gdn definition: expected q [tokens, q_heads, K] and v [tokens, v_heads, V]; pass --flops")
    return f"6 * {_product(q[:-2])} * {v[-2]} * {q[-1]} * {v[-1]}"


def flops(definition: Definition, plan: IndexPlan, override: str | None) -> str:
    """The FLOP formula of one call; ``override`` (``--flops``) wins, checked against the axes either way."""
    op = definition.op_type
    if override is not None:
        text = override
    elif op == "gemm":
        text = _gemm_flops(definition)
    elif op == "attention":
        text = _dense_attention_flops(definition)
    elif op in ATTENTION_OPS or op in SPARSE_ATTENTION_OPS:
        text = _attention_flops(definition, plan)
    elif op == "moe":
        text = _moe_flops(definition)
    elif op == "gdn":
        text = _gdn_flops(definition) if is_chunked_prefill(definition) else "0"
    elif op in NORM_OPS or op in BANDWIDTH_OPS:
        text = "0"
    else:
        raise ImportProblem(f"no FLOP formula is known for op_type {op!r}: pass --flops")
    unknown = formula.names_in(text) - set(definition.axes) - set(plan.extra_axes())
    if unknown:
        raise ImportProblem(f"FLOP formula {text!r} uses axes the definition does not have: {sorted(unknown)}; "
                            "pass --flops")
    return text


def _tensor_bytes(definition: Definition, plan: IndexPlan, name: str, spec: TensorSpec, least: bool = False) -> str:
    """One tensor's bytes read or written once; ``least``: what every correct kernel must move of it on any
    routing (an MoE's expert weights: only top_k experts are sure to have tokens)."""
    dims = list(spec.shape or [])
    size = DTYPE_BYTES.get(spec.dtype, 4)
    if plan.sparse_indices and plan.sparse_shape and dims[:2] == [plan.num_pages_axis, plan.page_size_axis]:
        rows, topk = plan.sparse_shape
        return f"min({_cache_tokens(plan)}, {topk if least else f'{rows} * {topk}'}) * {_product(dims[2:])} * {size}"
    table = plan.table_rows(name) if name in definition.inputs else None
    if table and not any(o.shape == spec.shape for o in definition.outputs.values()):
        return f"min({table[0]}, {table[1]}) * {_product(dims[1:])} * {size}"
    if plan.paged and dims[:1] == [plan.num_pages_axis]:
        rest = dims[2:] if len(dims) > 1 and dims[1] == plan.page_size_axis else dims[1:]
        read = _keys_read(definition, plan) if dims[1:2] == [plan.page_size_axis] else str(plan.page_count_axis)
        return f"{read} * {_product(rest)} * {size}"
    if definition.op_type == "moe" and len(dims) == 3 and dims[0] in ("num_experts", "num_local_experts"):
        hidden = definition.inputs.get("hidden_states")
        tokens = hidden.shape[0] if hidden and hidden.shape else None
        if tokens:
            try:
                top_k = _top_k(definition)
            except ImportProblem:
                top_k = "1"
            experts = f"min({dims[0]}, {top_k})" if least else f"min({dims[0]}, {tokens} * {top_k})"
            return f"{experts} * {_product(dims[1:])} * {size}"
    return f"{_product(dims)} * {size}"


def bytes_moved(definition: Definition, plan: IndexPlan, least: bool = False) -> str:
    """The bytes formula: what a correct kernel reads and writes once; ``least``: the least it must move on any
    input (the physical-floor guard's bytes, where a kernel may skip some of what ``bytes`` counts)."""
    unread = set(unread_inputs(definition))
    tensors = [*((n, s) for n, s in definition.inputs.items() if n not in unread), *definition.outputs.items()]
    return " + ".join(_tensor_bytes(definition, plan, name, spec, least)
                      for name, spec in tensors if spec.shape is not None)
