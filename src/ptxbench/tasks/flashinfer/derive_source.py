"""The ``derive_inputs`` an imported task's reference carries, written here as code and copied into the
task's reference text (``source()``), so it is read, linted and tested as code.

In the task it runs beside the data assignments the importer writes: ``_INDEX_PLAN`` (which input plays
which role, ``layouts.IndexPlan`` as a dict), ``_LAYOUTS`` (each workload's layout, keyed by its sizes) and
``_FORWARD_PLAN`` (an attention backward's forward inputs, ``forward_inputs.ForwardPlan`` as a dict).
The layout fixes each sequence's pages, last-page tokens, queries and keys; every trial draws fresh page
ids and fresh routing under it, and fresh sparse and row indices, seeded by the trial's drawn data (so
trials differ and a seed reproduces).
"""

from __future__ import annotations

import inspect
from typing import Any

_INDEX_PLAN: dict[str, Any] = {}  # written by the importer into the task (empty: no index inputs)
_LAYOUTS: dict[str, dict[str, list[int]]] = {}  # likewise
_FORWARD_PLAN: dict[str, Any] = {}  # likewise (empty: no forward inputs; ``forward_inputs.ForwardPlan``)
_FORWARD_ROWS = 1024  # query rows of one head scored at a time, so a long sequence's scores fit


def _layout_key(sizes: dict[str, Any]) -> str:
    return ",".join(f"{name}={sizes[name]}" for name in sorted(_INDEX_PLAN["axes"]))


def derive_inputs(**named: Any) -> dict[str, Any]:
    derived = _derive_indices(named) if _INDEX_PLAN else {}
    if _FORWARD_PLAN:
        derived.update(_derive_forward(named))
    return derived


def _derive_forward(named: dict[str, Any]) -> dict[str, Any]:
    import math

    import torch

    plan = _FORWARD_PLAN
    q, k, v = named[plan["q"]], named[plan["k"]], named[plan["v"]]
    heads, kv_heads, queries, keys = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        for h in range(heads):
            kf, vf = k[b, h * kv_heads // heads].float(), v[b, h * kv_heads // heads].float()
            for first in range(0, queries, _FORWARD_ROWS):
                rows = torch.arange(first, min(first + _FORWARD_ROWS, queries), device=q.device)
                scores = q[b, h, rows].float() @ kf.T * scale
                if plan["causal"]:  # query i sees the keys up to its own position (the last queries' keys)
                    hidden = torch.arange(keys, device=q.device)[None, :] > rows[:, None] + (keys - queries)
                    scores = scores.masked_fill(hidden, -float("inf"))
                row_lse = torch.logsumexp(scores, dim=-1)
                out[b, h, rows] = (torch.exp(scores - row_lse[:, None]) @ vf).to(q.dtype)
                lse[b, h, rows] = row_lse / math.log(2.0) if plan["base2"] else row_lse
    return {plan["out"]: out, plan["lse"]: lse}


def _derive_indices(named: dict[str, Any]) -> dict[str, Any]:
    import torch

    plan = _INDEX_PLAN
    key = _layout_key(named)
    if key not in _LAYOUTS:
        raise ValueError(f"no layout of the index inputs is stored for the sizes {key}: an imported task derives "
                         "them for its own workloads only")
    layout = _LAYOUTS[key]
    tensors = [t for t in named.values() if isinstance(t, torch.Tensor)]
    smallest = min(tensors, key=lambda t: t.numel())
    generator = torch.Generator().manual_seed(int(smallest.float().abs().sum().item() * 1e3) % 2**31)
    device = smallest.device

    def offsets(counts: list[int]) -> Any:
        running = torch.tensor([0, *counts], dtype=torch.long).cumsum(0)
        return running.to(device=device, dtype=torch.int32)

    derived = {}
    if plan["page_indptr"]:
        derived[plan["page_indptr"]] = offsets(layout["pages"])
        used = sum(layout["pages"])
        pages = named[plan["num_pages_axis"]] if plan["num_pages_axis"] else used
        chosen = torch.randperm(pages, generator=generator)[:used]
        derived[plan["page_indices"]] = chosen.to(device=device, dtype=torch.int32)
    if plan["last_page_len"]:  # one entry per sequence; a definition that declares it longer gets zeros after
        padding = [0] * (named[plan["last_page_len_axis"]] - len(layout["last"]))
        derived[plan["last_page_len"]] = torch.tensor(layout["last"] + padding, dtype=torch.int32, device=device)
    if plan["ragged_indptr"]:
        derived[plan["ragged_indptr"]] = offsets(layout["keys"])
    if plan["query_indptr"]:
        derived[plan["query_indptr"]] = offsets(layout["queries"])
    if plan["topk_ids"]:
        tokens, top_k = (named[axis] for axis in plan["topk_shape"])
        experts = named[plan["experts_axis"]]
        load = layout.get("load")
        # each token's top_k distinct experts, drawn in proportion to the trace's expert load when it has one
        weights = (torch.tensor(load, dtype=torch.float64) + 1e-3) if load else torch.ones(experts, dtype=torch.float64)
        ids = torch.multinomial(weights.expand(tokens, experts), top_k, replacement=False, generator=generator)
        derived[plan["topk_ids"]] = ids.to(device=device, dtype=torch.int32)
    if plan["sparse_indices"]:  # each row's min(topk, cache tokens) distinct cache tokens, then -1 padding
        rows, topk = (named[axis] for axis in plan["sparse_shape"])
        cached = named[plan["num_pages_axis"]] * named[plan["page_size_axis"]]
        ids = torch.full((rows, topk), -1, dtype=torch.int32)
        for row in range(rows):
            ids[row, :min(topk, cached)] = torch.randperm(cached, generator=generator)[:topk].to(torch.int32)
        derived[plan["sparse_indices"]] = ids.to(device)
    for name, length, _, table_rows in plan["row_indices"]:  # distinct rows while the table has enough
        count, available = named[length], named[table_rows]
        if available < 1:
            raise ValueError(f"{name} indexes rows of a table with {table_rows} = {available}")
        rounds = [torch.randperm(available, generator=generator) for _ in range(-(-count // available))]
        derived[name] = torch.cat(rounds)[:count].to(device)
    return derived


def source() -> str:
    """The code above, for the task's reference (the importer appends the data it reads)."""
    return "\n\n".join(inspect.getsource(f) for f in (_layout_key, derive_inputs, _derive_forward, _derive_indices))
