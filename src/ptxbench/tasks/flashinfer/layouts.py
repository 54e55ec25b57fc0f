"""Index inputs: which integer inputs of a definition describe a workload's layout, and the layout itself.

FlashInfer's batched operators take their raggedness as integer tensors: ``<p>_indptr`` with ``<p>_indices``
is a page table (sequence s uses the pages ``indices[indptr[s]:indptr[s + 1]]``), ``kv_last_page_len`` the
tokens in each sequence's last page, ``qo_indptr`` the queries of each sequence, an ``<p>_indptr`` without
indices (or ``cu_seqlens``) the rows of a ragged tensor (``kv_indptr`` over ``k``/``v``, a GDN prefill's
tokens), ``topk_ids`` the experts each token is routed to, ``sparse_indices`` the cache tokens each query
row attends to (DeepSeek sparse attention: ``page * page_size + offset``, ``-1`` padding), and
``<table>_indices``, ``<table>_batch_indices`` or rope's ``positions`` one row of a table per entry (a state
cache's slots, the cos/sin cache's positions). Random values are not valid ones, so these inputs are *derived*.

A workload's **layout** is what fixes the work: each sequence's pages, tokens in its last page, queries and
keys, or each expert's load. It is read from the workload's own blobs when the trace has them (the real
lengths are kept) and otherwise drawn once at import, under the definition's constraints, from the
workload's uuid. The task stores one layout per workload; each trial draws fresh page ids (distinct pages
of the cache) and fresh routing with that layout, seeded by the trial's drawn data, and fresh sparse and
row indices, which carry no layout: each sparse row names ``min(topk, cache tokens)`` distinct tokens (the
rest ``-1``), and row indices name distinct rows while the table has enough (so the rows a kernel reads are
exactly ``min(rows, entries)``; two batch entries never update one state slot).

The layout also gives what a formula over the axes cannot: the keys read (``kv_tokens``) and the (query,
key) pairs a causal mask keeps (``attended_pairs``), added as axes so FLOPs and bytes count the real work.
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

from ptxbench.tasks.flashinfer.blobs import BlobReader
from ptxbench.tasks.flashinfer.schema import Definition, ImportProblem, WorkloadSpec

INTEGER_DTYPES = ("int32", "int64", "int16", "int8", "uint8")
KV_TOKENS, ATTENDED_PAIRS = "kv_tokens", "attended_pairs"
_TOTAL_OF = re.compile(r"^\s*(\w+)\s*==\s*(\w+)\[-1\]\.item\(\)\s*$")  # "total_q == qo_indptr[-1].item()"


class IndexPlan(NamedTuple):
    """The roles of a definition's integer inputs (None where the definition has no such input)."""

    length_axis: str | None  # the indptrs' length (sequences + 1)
    page_indptr: str | None
    page_indices: str | None
    page_count_axis: str | None  # the page ids' count (``num_kv_indices``)
    page_size_axis: str | None
    num_pages_axis: str | None
    last_page_len: str | None
    last_page_len_axis: str | None  # its declared length: the sequences, or (some definitions) the indptrs' length
    query_indptr: str | None
    query_total_axis: str | None
    ragged_indptr: str | None  # keys as ragged rows, no page table
    ragged_total_axis: str | None
    topk_ids: str | None
    topk_shape: tuple[str, str] | None  # its axes: tokens, experts per token
    experts_axis: str | None
    causal: bool
    sparse_indices: str | None = None  # [rows, topk] token ids into the paged cache (num_pages_axis, page_size_axis)
    sparse_shape: tuple[str, str] | None = None
    row_indices: tuple[tuple[str, str, str, str], ...] = ()  # (input, its length axis, table, the table's rows axis)

    @property
    def paged(self) -> bool:
        return self.page_indptr is not None

    @property
    def sequences(self) -> bool:
        return self.length_axis is not None

    @property
    def derived(self) -> list[str]:
        """The inputs the task derives."""
        return [n for n in (self.page_indptr, self.page_indices, self.last_page_len, self.query_indptr,
                            self.ragged_indptr, self.topk_ids, self.sparse_indices) if n is not None] + [
            r[0] for r in self.row_indices]

    @property
    def layout_inputs(self) -> list[str]:
        """The derived inputs a workload's layout is read from (sparse and row indices carry none)."""
        fresh = {self.sparse_indices, *(r[0] for r in self.row_indices)}
        return [n for n in self.derived if n not in fresh]

    def table_rows(self, table: str) -> tuple[str, str] | None:
        """(rows axis, entries axis) where ``table`` is read by row indices: at most ``min(rows, entries)`` rows."""
        return next(((rows, length) for _, length, name, rows in self.row_indices if name == table), None)

    def extra_axes(self) -> list[str]:
        """The axes the layout adds: keys read where the page table's tokens are not a product of axes, and the
        attended pairs of a prefill (several queries per sequence)."""
        extra = []
        if self.paged and self.last_page_len is not None:
            extra.append(KV_TOKENS)
        if self.query_indptr is not None:
            extra.append(ATTENDED_PAIRS)
        return extra


def _shape(definition: Definition, name: str) -> list[str]:
    return definition.inputs[name].shape or []


def _is_offsets(name: str) -> bool:
    return name.endswith("_indptr") or name == "cu_seqlens" or name.startswith("cu_seqlens_")


def _row_table(definition: Definition, name: str) -> str | None:
    """The table whose rows ``name`` indexes: ``<table>_indices`` or ``<table>_batch_indices`` naming another
    input, or ``positions`` into ``cos_sin_cache`` (FlashInfer's rope); None for any other name."""
    if name == "positions":
        return "cos_sin_cache" if "cos_sin_cache" in definition.inputs else None
    for suffix in ("_batch_indices", "_indices"):
        table = name.removesuffix(suffix)
        if table != name and table in definition.inputs and definition.inputs[table].shape:
            return table
    return None


def _row_indices(definition: Definition, names: list[str]) -> tuple[tuple[str, str, str, str], ...]:
    found = []
    for name in names:
        table = _row_table(definition, name)
        if table is None:
            continue
        if len(_shape(definition, name)) != 1:
            raise ImportProblem(f"input {name} indexes rows of {table}: it must be 1-D")
        found.append((name, _shape(definition, name)[0], table, _shape(definition, table)[0]))
    return tuple(found)


def plan_indices(definition: Definition) -> IndexPlan:
    """The index roles of the definition's integer tensor inputs; any integer input without one is refused."""
    integer = [n for n, s in definition.inputs.items() if s.shape is not None and s.dtype in INTEGER_DTYPES]
    totals = {tensor: axis for c in definition.constraints if (m := _TOTAL_OF.match(c)) for axis, tensor in [m.groups()]}
    indptrs = [n for n in integer if _is_offsets(n)]
    pages = [n for n in indptrs if n.removesuffix("_indptr") + "_indices" in integer]
    if len(pages) > 1:
        raise ImportProblem(f"inputs {', '.join(pages)} are {len(pages)} page tables; one is derived at most")
    page_indptr = pages[0] if pages else None
    page_indices = page_indptr.removesuffix("_indptr") + "_indices" if page_indptr else None
    query = "qo_indptr" if "qo_indptr" in indptrs else None
    ragged = [n for n in indptrs if n not in (page_indptr, query)]
    if len(ragged) > 1:
        raise ImportProblem(f"inputs {', '.join(ragged)} are ragged offsets of more than one tensor; one is derived")
    rows = _row_indices(definition, [n for n in integer if n not in (page_indptr, page_indices, query, *ragged)])
    known = {page_indptr, page_indices, query, *ragged, "kv_last_page_len", "topk_ids", "sparse_indices",
             *(r[0] for r in rows)}
    for name in integer:
        if name not in known:
            raise ImportProblem(f"input {name} is an integer tensor with no rule to draw valid values (derived are "
                                "page tables <p>_indptr with <p>_indices, kv_last_page_len, qo_indptr, ragged "
                                "<p>_indptr or cu_seqlens, topk_ids, sparse_indices, and <table>_indices, "
                                "<table>_batch_indices or positions into a table's rows)")
        if definition.inputs[name].dtype not in ("int32", "int64"):
            raise ImportProblem(f"input {name} is {definition.inputs[name].dtype}: index inputs are int32 or int64 "
                                "here")
    for name in [n for n in integer if n not in ("topk_ids", "sparse_indices")]:
        if len(_shape(definition, name)) != 1:
            raise ImportProblem(f"input {name} must be a 1-D integer tensor")
    lengths = {_shape(definition, n)[0] for n in indptrs}
    if len(lengths) > 1:
        raise ImportProblem(f"the offsets {', '.join(indptrs)} have different lengths ({', '.join(sorted(lengths))})")
    last = "kv_last_page_len" if "kv_last_page_len" in integer else None
    if last and not page_indptr:
        raise ImportProblem("input kv_last_page_len needs a page table (<p>_indptr with <p>_indices)")

    def total(indptr: str | None, fallback: str | None = None) -> str | None:
        if indptr is None:
            return None
        if indptr in totals:
            return totals[indptr]
        if fallback is None:
            raise ImportProblem(f"no constraint says which axis is {indptr}[-1] (as `total == {indptr}[-1].item()`)")
        return fallback

    sparse = "sparse_indices" if "sparse_indices" in integer else None
    cache = next((s.shape for s in definition.inputs.values() if s.shape and (page_indptr or sparse)
                  and len(s.shape) >= 2 and s.shape[0] in definition.axes and "page" in s.shape[1]), None)
    if sparse and (len(_shape(definition, sparse)) != 2 or cache is None):
        raise ImportProblem("input sparse_indices must be 2-D ([rows, topk]) over a paged cache "
                            "[num_pages, page_size, ...]")
    topk = "topk_ids" if "topk_ids" in integer else None
    experts = None
    if topk:
        if len(_shape(definition, topk)) != 2:
            raise ImportProblem("input topk_ids must be 2-D: [tokens, top_k]")
        experts = next((a for a in ("num_experts", "num_local_experts") if a in definition.axes), None)
        if experts is None:
            raise ImportProblem("input topk_ids: the definition has no num_experts axis to draw expert ids from")
    causal = "causal" in definition.name or any("causal" in t for t in definition.tags)
    return IndexPlan(
        length_axis=next(iter(lengths)) if lengths else None, page_indptr=page_indptr, page_indices=page_indices,
        page_count_axis=_shape(definition, page_indices)[0] if page_indices else None,
        page_size_axis=cache[1] if cache else None, num_pages_axis=cache[0] if cache else None,
        last_page_len=last, last_page_len_axis=_shape(definition, last)[0] if last else None, query_indptr=query, query_total_axis=total(query),
        ragged_indptr=ragged[0] if ragged else None, ragged_total_axis=total(ragged[0] if ragged else None),
        topk_ids=topk, topk_shape=tuple(_shape(definition, topk)) if topk else None,  # type: ignore[arg-type]
        experts_axis=experts, causal=causal, sparse_indices=sparse,
        sparse_shape=tuple(_shape(definition, sparse)) if sparse else None,  # type: ignore[arg-type]
        row_indices=rows)


# ------------------------------------------------------------------------------------------- layouts

Layout = dict[str, list[int]]  # "pages", "last", "queries", "keys" per sequence; "load" per expert


def kv_lengths(plan: IndexPlan, layout: Layout, sizes: dict[str, int]) -> list[int]:
    """Keys of each sequence."""
    if plan.paged:
        size = sizes[plan.page_size_axis] if plan.page_size_axis else 1
        last = layout.get("last")
        return [(p - 1) * size + last[i] if last and p else p * size for i, p in enumerate(layout["pages"])]
    return list(layout.get("keys", []))


def _split(total: int, parts: int, rng: random.Random, caps: list[int] | None = None) -> list[int] | None:
    """``total`` as ``parts`` positive numbers at random (each at most ``caps[i]``); None when impossible."""
    if parts <= 0 or total < parts or (caps and (any(c < 1 for c in caps) or total > sum(caps))):
        return None
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, total])]
    if caps:
        excess = sum(max(0, c - cap) for c, cap in zip(counts, caps))
        counts = [min(c, cap) for c, cap in zip(counts, caps)]
        order = list(range(parts))
        while excess:
            rng.shuffle(order)
            for i in order:
                room = min(caps[i] - counts[i], excess)
                take = rng.randint(1, room) if room else 0
                counts[i] += take
                excess -= take
    return counts


def drawn_layout(plan: IndexPlan, spec: WorkloadSpec, sizes: dict[str, int]) -> Layout:
    """A layout under the definition's constraints, drawn from the workload's uuid (the same at every import)."""
    rng = random.Random(f"{spec.uuid}:layout")
    layout: Layout = {}
    sequences = sizes[plan.length_axis] - 1 if plan.length_axis else 0
    where = f"workload {spec.uuid}"
    if plan.paged:
        pages = _split(sizes[plan.page_count_axis], sequences, rng)
        if pages is None:
            raise ImportProblem(f"{where}: {sizes[plan.page_count_axis]} pages cannot be shared by {sequences} "
                                "sequences of at least one page")
        layout["pages"] = pages
        if plan.last_page_len:
            size = sizes[plan.page_size_axis] if plan.page_size_axis else 1
            layout["last"] = [rng.randint(1, size) for _ in pages]
    elif plan.ragged_indptr:
        keys = _split(sizes[plan.ragged_total_axis], sequences, rng)
        if keys is None:
            raise ImportProblem(f"{where}: {sizes[plan.ragged_total_axis]} keys cannot be shared by {sequences} "
                                "sequences of at least one key")
        layout["keys"] = keys
    if plan.query_indptr:
        queries = _split(sizes[plan.query_total_axis], sequences, rng, kv_lengths(plan, layout, sizes))
        if queries is None:
            raise ImportProblem(f"{where}: {sizes[plan.query_total_axis]} queries cannot be shared by {sequences} "
                                "sequences with at least one query and no more queries than keys each")
        layout["queries"] = queries
    return layout


def _offsets(where: str, name: str, values: list[int], length: int, total_axis: str | None,
             sizes: dict[str, int]) -> list[int]:
    if len(values) != length or not values or values[0] != 0 or any(b < a for a, b in zip(values, values[1:])):
        raise ImportProblem(f"{where}: {name} is not {length} non-decreasing offsets from 0")
    if total_axis is not None and values[-1] != sizes[total_axis]:
        raise ImportProblem(f"{where}: {name} ends at {values[-1]}, not at {total_axis} = {sizes[total_axis]}")
    return [b - a for a, b in zip(values, values[1:])]


def blob_layout(plan: IndexPlan, spec: WorkloadSpec, sizes: dict[str, int], blobs: BlobReader) -> Layout | None:
    """The layout the workload's blobs hold, None when it has none (every index input ``random``), checked
    against the axes; a workload that has some index blobs and not others is refused."""
    sources = {n: spec.inputs.get(n) for n in plan.layout_inputs}
    stored = [n for n, s in sources.items() if s is not None and s.type == "safetensors"]
    if not stored:
        return None
    where = f"workload {spec.uuid}"
    needed = [n for n in plan.layout_inputs if n not in (plan.page_indices, plan.topk_ids)]
    missing = [n for n in needed if n not in stored]
    if missing:
        raise ImportProblem(f"{where}: index input {missing[0]} has no blob while {stored[0]} has one")
    length = sizes[plan.length_axis] if plan.length_axis else 0
    layout: Layout = {}
    if plan.paged:
        values = blobs.integers(f"{where} {plan.page_indptr}", sources[plan.page_indptr])  # type: ignore[arg-type]
        layout["pages"] = _offsets(where, plan.page_indptr, values, length, plan.page_count_axis, sizes)
        if plan.query_indptr is None and 0 in layout["pages"]:  # decode: one query per sequence needs a key
            raise ImportProblem(f"{where}: sequence {layout['pages'].index(0)} has a query and no page")
        if plan.last_page_len:
            last = blobs.integers(f"{where} {plan.last_page_len}", sources[plan.last_page_len])  # type: ignore[arg-type]
            size = sizes[plan.page_size_axis] if plan.page_size_axis else 1
            if len(last) in (length, sizes.get(plan.last_page_len_axis or "", -1)):  # declared one longer
                last = last[:length - 1]
            if len(last) != length - 1 or any(not 1 <= v <= size for v, p in zip(last, layout["pages"]) if p):
                raise ImportProblem(f"{where}: {plan.last_page_len} is not one length in 1..{size} per sequence")
            layout["last"] = last
        if plan.num_pages_axis and sizes[plan.page_count_axis] > sizes[plan.num_pages_axis]:
            raise ImportProblem(f"{where}: {sizes[plan.page_count_axis]} page ids name more pages than the "
                                f"cache's {sizes[plan.num_pages_axis]}")
    elif plan.ragged_indptr:
        values = blobs.integers(f"{where} {plan.ragged_indptr}", sources[plan.ragged_indptr])  # type: ignore[arg-type]
        layout["keys"] = _offsets(where, plan.ragged_indptr, values, length, plan.ragged_total_axis, sizes)
    if plan.query_indptr:
        values = blobs.integers(f"{where} {plan.query_indptr}", sources[plan.query_indptr])  # type: ignore[arg-type]
        layout["queries"] = _offsets(where, plan.query_indptr, values, length, plan.query_total_axis, sizes)
        for s, (q, k) in enumerate(zip(layout["queries"], kv_lengths(plan, layout, sizes))):
            if q > k:
                raise ImportProblem(f"{where}: sequence {s} has {q} queries and only {k} keys")
    if plan.topk_ids and sources[plan.topk_ids] is not None and sources[plan.topk_ids].type == "safetensors":  # type: ignore[union-attr]
        ids = blobs.integers(f"{where} {plan.topk_ids}", sources[plan.topk_ids])  # type: ignore[arg-type]
        experts = sizes[plan.experts_axis]  # type: ignore[index]
        if any(not 0 <= e < experts for e in ids):
            raise ImportProblem(f"{where}: {plan.topk_ids} names an expert outside 0..{experts - 1}")
        layout["load"] = [ids.count(e) for e in range(experts)]
    return layout


def layout_axes(plan: IndexPlan, layout: Layout, sizes: dict[str, int]) -> dict[str, int]:
    """The values of the axes the layout adds (``IndexPlan.extra_axes``)."""
    keys = kv_lengths(plan, layout, sizes)
    values = {}
    if KV_TOKENS in plan.extra_axes():
        values[KV_TOKENS] = sum(keys)
    if ATTENDED_PAIRS in plan.extra_axes():
        queries = layout["queries"]
        values[ATTENDED_PAIRS] = sum(q * (k - q) + q * (q + 1) // 2 if plan.causal else q * k
                                     for q, k in zip(queries, keys))
    return values
