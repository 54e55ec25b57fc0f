"""The FlashInfer API an imported task's definition names (its ``fi_api`` tag, recorded in the task as
``baseline.flashinfer`` by ``ptxbench.tasks.flashinfer.fi_api``), as the ``flashinfer`` variant beside the task's
own reference, where FlashInfer is installed.

The call is the API the task names, looked up by that name, on the task's own tensors (the definition's input
names), with the arguments the import derived (sm_scale, causal, the page layout, the LSE's base, eps). As for
the bundled tasks (``flashinfer``, whose planners this reuses), setup allocates the workspace and calls
``plan()``; the timed call is ``run()``. What the definition leaves to the shapes is read from them here: the
page size from the cache, and, where a definition has no ``kv_last_page_len`` (pages of one token), full pages.
A definition that declares ``kv_last_page_len`` one longer than the sequences has it cut to one per sequence.
FlashInfer's LSE is base 2; a task that wants natural log gets it scaled by ln 2 in the timed call (the MLA
wrapper is asked for it instead). ``fused_add_rmsnorm`` works in place, so its timed call first copies the
hidden states and residual into buffers of its own: the task's inputs stay as drawn.

Nothing here imports torch or flashinfer at module level (``flashinfer``'s rule)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ptxbench.evaluate.baselines import flashinfer as fi
from ptxbench.evaluate.baselines.calls import Outputs, Setup, Tensors, TimedCall, warmed
from ptxbench.tasks.flashinfer import fi_api
from ptxbench.tasks.model import FlashInferCall

if TYPE_CHECKING:
    import torch

Arguments = Mapping[str, bool | int | float | str]


def resolve(api: str) -> Any:
    """The object a dotted FlashInfer name denotes (``flashinfer.norm.rmsnorm``: ``rmsnorm`` of ``flashinfer.norm``)."""
    module, name = api.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def requires(call: FlashInferCall) -> tuple[str, ...]:
    """The modules that must import for the call to run: flashinfer and the API's own module."""
    return tuple(dict.fromkeys((*fi.REQUIRES, call.api.rsplit(".", 1)[0])))


def _lse(lse: "torch.Tensor", arguments: Arguments) -> "torch.Tensor":
    return lse * fi.LN2 if arguments["lse_base"] == "ln" else lse


def _pages(inputs: Tensors, page_size: int) -> dict[str, "torch.Tensor"]:
    """The page table as FlashInfer plans on it: one last-page length per sequence (full pages where the
    definition has none), and the query offsets where it has them."""
    import torch

    indptr = inputs["kv_indptr"]
    batch = indptr.numel() - 1
    last = inputs.get("kv_last_page_len")
    last = last[:batch] if last is not None else torch.full((batch,), page_size, dtype=torch.int32,
                                                            device=indptr.device)
    pages = {"kv_indptr": indptr, "kv_indices": inputs["kv_indices"], "kv_last_page_len": last}
    if "qo_indptr" in inputs:
        pages["qo_indptr"] = inputs["qo_indptr"]
    return pages


def _rmsnorm(call: FlashInferCall) -> Setup:
    eps = float(call.arguments["eps"])

    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        rmsnorm = resolve(call.api)
        x, weight = inputs["hidden_states"], inputs["weight"]
        return warmed(lambda: {"output": rmsnorm(x, weight, eps=eps)})
    return setup


def _fused_add_rmsnorm(call: FlashInferCall) -> Setup:
    eps = float(call.arguments["eps"])

    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import torch

        fused = resolve(call.api)
        x, residual, weight = inputs["hidden_states"], inputs["residual"], inputs["weight"]
        x_buffer, residual_buffer = torch.empty_like(x), torch.empty_like(residual)

        def timed() -> Outputs:
            x_buffer.copy_(x)
            residual_buffer.copy_(residual)
            fused(x_buffer, residual_buffer, weight, eps=eps)  # residual += x; x = norm(residual) * weight
            return {"output": x_buffer}
        return warmed(timed)
    return setup


def _paged(call: FlashInferCall, prefill: bool) -> Setup:
    """A paged wrapper (decode, or prefill with its query offsets) planned on the task's page table in setup; the
    timed call is its ``run()`` on the pages as given."""
    args = call.arguments

    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        wrapper_class = resolve(call.api)
        fi._prepare_jit()
        q, k_cache, v_cache = inputs["q"], inputs["k_cache"], inputs["v_cache"]
        layout = str(args["kv_layout"])
        pages = _pages(inputs, fi.page_shape(k_cache, layout)[0])
        sm_scale, encoding = float(args["sm_scale"]), args["pos_encoding_mode"]
        if prefill:
            wrapper = fi.planned_paged_prefill(wrapper_class, q, k_cache, v_cache, pages, bool(args["causal"]),
                                               sm_scale, kv_layout=layout, pos_encoding_mode=encoding)
        else:
            wrapper = fi.planned_decode(wrapper_class, q, k_cache, pages, sm_scale, kv_layout=layout,
                                        pos_encoding_mode=encoding)

        def timed() -> Outputs:
            out, lse = wrapper.run(q, (k_cache, v_cache), return_lse=True)
            return {"output": out, "lse": _lse(lse, args)}
        return warmed(timed)
    return setup


def _decode(call: FlashInferCall) -> Setup:
    return _paged(call, prefill=False)


def _paged_prefill(call: FlashInferCall) -> Setup:
    return _paged(call, prefill=True)


def _ragged_prefill(call: FlashInferCall) -> Setup:
    args = call.arguments

    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        wrapper_class = resolve(call.api)
        fi._prepare_jit()
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        wrapper = fi.planned_ragged(wrapper_class, q, k, inputs["qo_indptr"], inputs["kv_indptr"],
                                    bool(args["causal"]), float(args["sm_scale"]), head_dim_vo=v.shape[-1],
                                    pos_encoding_mode=args["pos_encoding_mode"])

        def timed() -> Outputs:
            out, lse = wrapper.run(q, k, v, return_lse=True)
            return {"output": out, "lse": _lse(lse, args)}
        return warmed(timed)
    return setup


def _mla(call: FlashInferCall) -> Setup:
    args = call.arguments
    natural = args["lse_base"] == "ln"

    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import torch

        module = importlib.import_module(call.api.rsplit(".", 1)[0])
        fi._prepare_jit()
        q_nope, q_pe, ckv, kpe = inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"]
        page_size = ckv.shape[1]
        pages = _pages(inputs, page_size)
        indptr = pages["kv_indptr"]
        queries = pages.get("qo_indptr")
        if queries is None:  # a decode: one query per sequence
            queries = torch.arange(indptr.numel(), dtype=torch.int32, device=indptr.device)
        lengths = fi.sequence_lengths(indptr, pages["kv_last_page_len"], page_size)
        wrapper = fi.planned_mla(module, q_nope, q_pe, ckv, queries, indptr, pages["kv_indices"], lengths,
                                 causal=bool(args["causal"]), sm_scale=float(args["sm_scale"]), natural_lse=natural)

        def timed() -> Outputs:
            out, lse = wrapper.run(query=(q_nope, q_pe), kv_cache=(ckv, kpe), return_lse=True,
                                   return_lse_base_on_e=natural)
            return {"output": out, "lse": lse}
        return warmed(timed)
    return setup


_SETUPS: dict[str, Callable[[FlashInferCall], Setup]] = {
    fi_api.RMSNORM: _rmsnorm, fi_api.FUSED_ADD_RMSNORM: _fused_add_rmsnorm, fi_api.DECODE: _decode,
    fi_api.PAGED_PREFILL: _paged_prefill, fi_api.RAGGED_PREFILL: _ragged_prefill, fi_api.MLA: _mla,
}


def setup_for(call: FlashInferCall) -> Setup:
    """The variant's setup for the task's recorded call; a call naming an API not mapped here is refused."""
    if call.api not in _SETUPS:
        raise ValueError(f"no FlashInfer setup is defined for {call.api} (defined: {', '.join(_SETUPS)})")
    return _SETUPS[call.api](call)
