"""The FlashInfer call an imported task is timed against beside its own reference: the API its definition names
(the ``fi_api:`` tag), where PTXBench knows how to call it on the task's tensors.

A definition's inputs carry the tensors; what the call needs beyond them is derived here from the definition and
recorded in the task (``model.FlashInferCall.arguments``), never assumed:

- ``eps`` (norms): the one constant the reference assigns to an ``eps``/``EPS`` name or passes as ``eps=``.
- ``sm_scale``: the scalar input's fixed value (``scalars.fixed_scalars``, the value the reference is given).
- ``causal``: the index plan's (the definition's name or tags say causal; the importer's attended pairs agree).
- ``kv_layout``: ``NHD``, where the caches are [pages, page_size, heads, dim] (the page-size axis second).
- ``lse_base``: ``log2`` or ``ln``, from the LSE output's description and the reference (``logsumexp(...) /
  math.log(2.0)`` is base 2); FlashInfer's LSE is base 2 unless asked, so the variant converts where needed.
- ``pos_encoding_mode``: ``NONE``, where the reference applies no rotary embedding (one that may is refused).

A definition naming an API not supported here, or whose inputs do not map onto its arguments, gets no FlashInfer
variant, and the reason (``ApiBaseline.refused``) is written to the import summary. The texts of the two variants
and of the task's ``baseline.call`` are made here, so the importer and the evaluator share one source.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

from ptxbench.tasks.flashinfer.layouts import IndexPlan
from ptxbench.tasks.flashinfer.scalars import Scalar
from ptxbench.tasks.flashinfer.schema import Definition
from ptxbench.tasks.model import FlashInferCall

TAG = "fi_api"
RMSNORM = "flashinfer.norm.rmsnorm"
FUSED_ADD_RMSNORM = "flashinfer.norm.fused_add_rmsnorm"
DECODE = "flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper"
PAGED_PREFILL = "flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper"
RAGGED_PREFILL = "flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper"
MLA = "flashinfer.mla.BatchMLAPagedAttentionWrapper"
# the same objects, as FlashInfer's package re-exports them (a definition may name either)
ALIASES = {f"flashinfer.{api.rsplit('.', 1)[1]}": api
           for api in (RMSNORM, FUSED_ADD_RMSNORM, DECODE, PAGED_PREFILL, RAGGED_PREFILL)}

REFERENCE_VARIANT = "the task's own PyTorch reference (`baseline`: the definition's `run` in the inputs' dtypes)"


class _Signature(NamedTuple):
    """The definition's inputs (with their ranks; 0 a scalar) and outputs an API is called with."""

    required: dict[str, int]
    optional: dict[str, int]
    outputs: dict[str, int]


_ATTENTION_OUT = {"output": 3, "lse": 2}
_SIGNATURES = {
    RMSNORM: _Signature({"hidden_states": 2, "weight": 1}, {}, {"output": 2}),
    FUSED_ADD_RMSNORM: _Signature({"hidden_states": 2, "residual": 2, "weight": 1}, {}, {"output": 2}),
    DECODE: _Signature({"q": 3, "k_cache": 4, "v_cache": 4, "kv_indptr": 1, "kv_indices": 1, "sm_scale": 0},
                       {"kv_last_page_len": 1}, _ATTENTION_OUT),
    PAGED_PREFILL: _Signature({"q": 3, "k_cache": 4, "v_cache": 4, "qo_indptr": 1, "kv_indptr": 1, "kv_indices": 1,
                               "sm_scale": 0}, {"kv_last_page_len": 1}, _ATTENTION_OUT),
    RAGGED_PREFILL: _Signature({"q": 3, "k": 3, "v": 3, "qo_indptr": 1, "kv_indptr": 1, "sm_scale": 0}, {},
                               _ATTENTION_OUT),
    MLA: _Signature({"q_nope": 3, "q_pe": 3, "ckv_cache": 3, "kpe_cache": 3, "kv_indptr": 1, "kv_indices": 1,
                     "sm_scale": 0}, {"qo_indptr": 1, "kv_last_page_len": 1}, _ATTENTION_OUT),
}
SUPPORTED = tuple(_SIGNATURES)
_HALF = ("bfloat16", "float16")
# what a GQA wrapper's arguments could express but the import does not map (it passes none of them), as the
# reference's names would show it (its comments and strings are not read)
_UNMAPPED = {"a rotary embedding (pos_encoding_mode)": r"rotary|^rope|_rope|^cos$|^sin$",
             "a logits soft cap": r"tanh|soft_?cap", "a sliding window": r"window"}


def _supported() -> str:
    return "flashinfer." + ", ".join(api.removeprefix("flashinfer.") for api in SUPPORTED)


class ApiBaseline(NamedTuple):
    """What the import makes of a definition's ``fi_api`` tag: the call recorded in the task, or why none."""

    tag: str | None  # the API as the definition names it; None where it names none
    call: FlashInferCall | None
    refused: str | None


class _Refused(Exception):
    """The definition's API cannot be called on its tensors; the message says why."""


def api_baseline(definition: Definition, scalars: dict[str, Scalar], plan: IndexPlan) -> ApiBaseline:
    """The FlashInfer call for the definition's ``fi_api`` tag, or the reason it has none."""
    tags = definition.tag(TAG)
    if not tags:
        return ApiBaseline(None, None, None)
    if len(set(tags)) > 1:
        return ApiBaseline(tags[0], None, f"the definition names {len(set(tags))} FlashInfer APIs ({', '.join(tags)})")
    tag = tags[0]
    api = ALIASES.get(tag, tag)
    if api not in _SIGNATURES:
        return ApiBaseline(tag, None, f"PTXBench does not time {tag} as a baseline (it times {_supported()})")
    try:
        _check_tensors(definition, api)
        arguments = _arguments(definition, api, scalars, plan)
    except _Refused as exc:
        return ApiBaseline(tag, None, f"{api} cannot be called on the definition's inputs: {exc}")
    return ApiBaseline(tag, FlashInferCall(api=api, arguments=arguments), None)


def baseline_data(found: ApiBaseline, reference_call: str) -> dict[str, object]:
    """The task's ``baseline`` table: the reference alone, or the reference and the FlashInfer call."""
    if found.call is None:
        return {"library": "reference", "call": reference_call}
    return {"library": "reference", "call": baseline_call(found.call),
            "flashinfer": found.call.model_dump(mode="json")}


def _check_tensors(definition: Definition, api: str) -> None:
    signature = _SIGNATURES[api]
    ranks = {**signature.required, **signature.optional}
    missing = [n for n in signature.required if n not in definition.inputs]
    extra = [n for n in definition.inputs if n not in ranks]
    if missing or extra:
        raise _Refused("; ".join(filter(None, (missing and f"it needs inputs {', '.join(missing)}",
                                               extra and f"inputs {', '.join(extra)} have no argument there"))))
    if set(definition.outputs) != set(signature.outputs):
        raise _Refused(f"its outputs are ({', '.join(definition.outputs)}), the call's ({', '.join(signature.outputs)})")
    for kind, tensors, wanted in (("input", definition.inputs, ranks), ("output", definition.outputs, signature.outputs)):
        for name, spec in tensors.items():
            rank = len(spec.shape) if spec.shape is not None else 0
            if rank != wanted[name]:
                raise _Refused(f"{kind} {name} has {rank} dimensions, the call takes {wanted[name]}")
    floating = [n for n, s in definition.inputs.items() if s.shape and s.dtype.startswith(("float", "bfloat"))]
    dtypes = {definition.inputs[n].dtype for n in floating}
    if len(dtypes) != 1 or not dtypes <= set(_HALF):
        raise _Refused(f"its floating inputs are {', '.join(sorted(dtypes))}; the call is mapped for one of "
                       f"{' or '.join(_HALF)}")
    if definition.outputs["output"].dtype not in dtypes:
        raise _Refused(f"output is {definition.outputs['output'].dtype}, not the inputs' {next(iter(dtypes))}")
    if "lse" in definition.outputs and definition.outputs["lse"].dtype != "float32":
        raise _Refused(f"lse is {definition.outputs['lse'].dtype}; FlashInfer's is float32")


def _arguments(definition: Definition, api: str, scalars: dict[str, Scalar],
               plan: IndexPlan) -> dict[str, bool | int | float | str]:
    if api in (RMSNORM, FUSED_ADD_RMSNORM):
        return {"eps": _epsilon(definition.reference)}
    scale = scalars.get("sm_scale")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale <= 0:
        raise _Refused(f"sm_scale is {scale!r}, not one positive number in every workload")
    arguments: dict[str, bool | int | float | str] = {"sm_scale": float(scale), "lse_base": _lse_base(definition)}
    if api != DECODE:  # a decode has one query per sequence: nothing for a mask to hide
        arguments["causal"] = plan.causal if "qo_indptr" in definition.inputs else False
    if api in (DECODE, PAGED_PREFILL):
        arguments["kv_layout"] = _page_layout(definition, plan)
    if api == RAGGED_PREFILL and (definition.inputs["k"].shape or [None])[0] != plan.ragged_total_axis:
        raise _Refused("k is not laid out [tokens, heads, dim] (NHD) on the ragged offsets' tokens")
    if api in (DECODE, PAGED_PREFILL, RAGGED_PREFILL):
        names = _names(definition.reference)
        for what, pattern in _UNMAPPED.items():
            hits = sorted(n for n in names if re.search(pattern, n, re.IGNORECASE))
            if hits:
                raise _Refused(f"its reference may apply {what} ({', '.join(hits)}), which the import does not map")
        arguments["pos_encoding_mode"] = "NONE"
    return arguments


def _names(reference: str) -> set[str]:
    """The variables, attributes, functions and keywords the reference names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(reference)):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.arg)):
            found.add(node.name if isinstance(node, ast.FunctionDef) else node.arg)
    return found


def _epsilon(reference: str) -> float:
    """The one epsilon constant of the reference: assigned to an ``eps``-named variable or passed as ``eps=``."""
    found: set[float] = set()
    for node in ast.walk(ast.parse(reference)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any(n.lower() in ("eps", "epsilon", "variance_epsilon") for n in names):
                found.add(node.value.value)
        elif isinstance(node, ast.keyword) and node.arg == "eps" and isinstance(node.value, ast.Constant):
            found.add(node.value.value)
    numbers = {v for v in found if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}
    if len(numbers) != 1 or numbers != found:
        raise _Refused(f"its reference does not state one epsilon (found {sorted(map(repr, found)) or 'none'})")
    return float(numbers.pop())


_BASE2_TEXT = re.compile(r"\b(2-based|base[- ]2|log2)\b", re.IGNORECASE)
_NATURAL_TEXT = re.compile(r"\b(natural|base[- ]e|ln)\b", re.IGNORECASE)
_BASE2_CODE = re.compile(r"logsumexp\([^\n]*\)\s*/\s*math\.log\(2(\.0)?\)|\* math\.log2\(math\.e\)|torch\.log2|LOG2E")


def _lse_base(definition: Definition) -> str:
    """``log2`` or ``ln``: what the LSE output's description says and what the reference computes must agree."""
    text = definition.outputs["lse"].description or ""
    said = "log2" if _BASE2_TEXT.search(text) else "ln" if _NATURAL_TEXT.search(text) else None
    code = definition.reference
    computed = "log2" if _BASE2_CODE.search(code) else "ln" if "logsumexp" in code else None
    if said and computed and said != computed:
        raise _Refused(f"lse is described as {said} but its reference computes {computed}")
    base = said or computed
    if base is None:
        raise _Refused("neither lse's description nor the reference says the log-sum-exp's base")
    return base


def _page_layout(definition: Definition, plan: IndexPlan) -> str:
    """``NHD`` where the caches are [pages, page_size, heads, dim] (the page-size axis second, as the index plan
    reads the pages); any other layout is refused."""
    shape = definition.inputs["k_cache"].shape or []
    if definition.inputs["v_cache"].shape != shape or plan.page_size_axis is None or shape[1:2] != [plan.page_size_axis]:
        raise _Refused("k_cache and v_cache are not NHD pages of one shape ([pages, page_size, heads, dim])")
    return "NHD"


# ------------------------------------------------------------------------------------------------ texts

_WHAT = {
    RMSNORM: "`flashinfer.norm.rmsnorm` (eps {eps})",
    FUSED_ADD_RMSNORM: "`flashinfer.norm.fused_add_rmsnorm` (eps {eps}), which works in place: the hidden states and "
                       "residual are copied into buffers of its own first, timed",
    DECODE: "`BatchDecodeWithPagedKVCacheWrapper` on the {kv_layout} pages in place",
    PAGED_PREFILL: "`BatchPrefillWithPagedKVCacheWrapper` on the {kv_layout} pages in place{mask}",
    RAGGED_PREFILL: "`BatchPrefillWithRaggedKVCacheWrapper` on the ragged keys and values{mask}",
    MLA: "`BatchMLAPagedAttentionWrapper` on the split query and caches in place{mask}",
}


def description(call: FlashInferCall) -> str:
    """The FlashInfer variant in one line, as the prompt quotes it."""
    if call.api not in _WHAT:
        raise ValueError(f"PTXBench does not time {call.api} as a baseline (it times {_supported()})")
    args = call.arguments
    what = _WHAT[call.api].format(eps=args.get("eps"), kv_layout=args.get("kv_layout"),
                                  mask=", causal" if args.get("causal") else "")
    if call.api in (RMSNORM, FUSED_ADD_RMSNORM):
        return f"FlashInfer's {what}, where installed"
    lse = ("natural-log LSE" if call.api == MLA else "its base-2 LSE scaled to natural log, timed") \
        if args["lse_base"] == "ln" else "base-2 LSE"
    return f"FlashInfer's {what} (`plan()` in setup, sm_scale {args['sm_scale']!r}; {lse}), where installed"


def baseline_call(call: FlashInferCall) -> str:
    """The task's ``baseline.call`` where it has a FlashInfer call: both variants' texts, as the evaluator runs them."""
    return (f"the fastest of: {REFERENCE_VARIANT}; {description(call)} (each timed on the task's own inputs, its "
            "setup outside the timed region)")
