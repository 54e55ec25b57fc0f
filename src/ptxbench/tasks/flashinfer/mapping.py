"""A FlashInfer-Trace definition and its workloads as the data of a PTXBench task file.

- const axes become axes with that single choice (names and formulas keep them); var axes plain axes; the
  layout's axes (``kv_tokens``, ``attended_pairs``) are added where the definition has index inputs.
- tensors keep name, shape and dtype (those a candidate can be given in C: bf16, f16, f32, fp8, int64,
  int32, int8; outputs floating, as outputs are compared within a tolerance); scalars are fixed
  (``scalars``); index inputs are derived (``layouts``); scale factors (``*scale*``, ``SF_*``) are drawn
  positive, a GDN's ``q`` and ``k`` at the norm the model gives them (``gdn``); floating inputs a trace stores
  in blobs are drawn too (their values do not change the work); an attention backward's ``O`` and ``L`` are
  derived, the forward of its ``Q, K, V`` (``forward_inputs``).
- the family, the required features, the FLOP and byte formulas come from ``op_type`` and the shapes
  (``work``; ``flops`` overrides).
- the baseline is the definition's own reference in the inputs' dtypes (``reference_text.baseline``), as
  FlashInfer-Bench times it, and beside it the FlashInfer API its ``fi_api`` tag names, where ``fi_api`` maps it.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from ptxbench.tasks.flashinfer.blobs import BlobReader
from ptxbench.tasks.flashinfer.fi_api import ApiBaseline, api_baseline, baseline_data
from ptxbench.tasks.flashinfer.forward_inputs import plan_forward
from ptxbench.tasks.flashinfer.gdn import STATE_FEATURES, drawn_scale, tolerances
from ptxbench.tasks.flashinfer.layouts import ATTENDED_PAIRS, KV_TOKENS, plan_indices
from ptxbench.tasks.flashinfer.reference_text import reference_code
from ptxbench.tasks.flashinfer.scalars import fixed_scalars
from ptxbench.tasks.flashinfer.schema import AxisConst, Definition, ImportProblem, TensorSpec, WorkloadSpec
from ptxbench.tasks.flashinfer.work import (ATTENTION_OPS, BANDWIDTH_OPS, NORM_OPS, SPARSE_ATTENTION_OPS, bytes_moved,
                                            flops, is_chunked_prefill, is_decode)
from ptxbench.tasks.flashinfer.workloads import bind, with_roles
from ptxbench.tasks.model import REFERENCE_BASELINE_CALL, DType, Family

_DTYPES = {"float32": DType.F32, "float16": DType.F16, "bfloat16": DType.BF16, "float8_e4m3fn": DType.E4M3,
           "float8_e4m3": DType.E4M3, "float8_e5m2": DType.E5M2, "int64": DType.I64, "int32": DType.I32,
           "int8": DType.I8}
_MATRIX = {DType.BF16: ("wgmma.bf16", "tcgen05.mma.f16"), DType.F16: ("wgmma.f16", "tcgen05.mma.f16"),
           DType.E4M3: ("wgmma.fp8", "tcgen05.mma.f8f6f4"), DType.E5M2: ("wgmma.fp8", "tcgen05.mma.f8f6f4")}
_LAYOUT_AXES = {KV_TOKENS: "Keys read: the tokens the page table names, summed over the sequences (fixed by the "
                           "workload's layout)",
                ATTENDED_PAIRS: "(query, key) pairs computed, summed over the sequences (those the causal mask keeps, "
                                "where it is causal; fixed by the workload's layout)"}
# op types FlashInfer-Trace has that no PTXBench family judges yet, and why
_UNSUPPORTED = {
    "sampling": "sampling draws tokens at random: judging it needs a distributional check (a total variation "
                "distance over repeated trials), which PTXBench does not have",
}


def family_of(definition: Definition) -> Family:
    op = definition.op_type
    if op == "gemm":
        return Family.GEMM
    if op in ATTENTION_OPS:
        if "bwd" in definition.name or "backward" in definition.tag("direction"):
            return Family.ATTENTION_BACKWARD
        return Family.ATTENTION_DECODE if is_decode(definition) else Family.ATTENTION_FORWARD
    if op in SPARSE_ATTENTION_OPS:  # each query row gathers its own top-k keys: a decode's access, whatever the stage
        return Family.ATTENTION_DECODE
    if op == "gdn":  # a chunked prefill runs the state through matrix products; decode and MTP stream the state
        return Family.ATTENTION_FORWARD if is_chunked_prefill(definition) else Family.MEMORY_BOUND
    if op in NORM_OPS or op in BANDWIDTH_OPS:
        return Family.MEMORY_BOUND
    if op in {f.value for f in Family}:
        return Family(op)
    if op in _UNSUPPORTED:
        raise ImportProblem(f"op_type {op!r} has no PTXBench family: {_UNSUPPORTED[op]}")
    known = ", ".join(["gemm", *ATTENTION_OPS, *SPARSE_ATTENTION_OPS, *NORM_OPS, *BANDWIDTH_OPS, "gdn", "moe"])
    raise ImportProblem(f"op_type {op!r} has no PTXBench family (known: {known})")


def dtype_of(where: str, spec: TensorSpec) -> DType:
    if where.startswith("output") and spec.dtype in _DTYPES and not _DTYPES[spec.dtype].mantissa_bits:
        raise ImportProblem(f"{where} is {spec.dtype}: outputs are compared within a floating-point tolerance, so "
                            "integer outputs (indices a top-k selection chose, whose order among near-equal scores "
                            "is the reference's own) cannot be judged")
    if spec.dtype not in _DTYPES:
        raise ImportProblem(f"{where} has dtype {spec.dtype}, which a PTXBench task cannot use "
                            f"(supported: {', '.join(sorted(set(_DTYPES) - {'float8_e4m3'}))})")
    return _DTYPES[spec.dtype]


def run_parameters(definition: Definition) -> list[str]:
    """``run``'s parameters, which must be the inputs in their listed order (FlashInfer-Bench passes them so)."""
    try:
        module = ast.parse(definition.reference)
    except SyntaxError as exc:
        raise ImportProblem(f"reference is not valid Python: {exc.msg} (line {exc.lineno})") from None
    run = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "run"), None)
    if run is None:
        raise ImportProblem("reference does not define a top-level function `run`")
    if run.args.vararg or run.args.kwarg or run.args.posonlyargs or run.args.kwonlyargs:
        raise ImportProblem("reference `run` must take the inputs as plain named parameters")
    parameters = [a.arg for a in run.args.args]
    inputs = list(definition.inputs)
    if parameters != inputs:
        if sorted(parameters) == sorted(inputs):
            raise ImportProblem(f"the definition is inconsistent: its reference `run` takes ({', '.join(parameters)}) "
                                f"but it lists its inputs as ({', '.join(inputs)}); a caller passes them in the "
                                "listed order, so the definition must be fixed where it is published")
        raise ImportProblem(f"reference `run` takes ({', '.join(parameters)}) but the inputs are "
                            f"({', '.join(inputs)}), in that order")
    return parameters


def requirements(family: Family, definition: Definition) -> dict[str, list[dict[str, Any]]]:
    if family in (Family.MEMORY_BOUND, Family.ATTENTION_DECODE):  # bandwidth-bound: bytes, not FLOPs, are the work
        why = ("decode streams the KV cache, nearly all of its bytes; the task measures whether they move "
               "through the copy engine." if family is Family.ATTENTION_DECODE
               else "the task measures whether the data streams through the copy engine.")
        share = 0.5 if family is Family.ATTENTION_DECODE else 0.4
        copy = {"any_of": ["tma.load", "bulk.copy"], "min_byte_share": share, "justification": why}
        barrier = {"any_of": ["mbarrier"], "justification": "the copy engine's transfers complete on an mbarrier."}
        return {"sm_90a": [copy, barrier], "sm_100a": [copy, barrier]}
    floating = [_DTYPES[s.dtype] for s in definition.inputs.values() if s.shape and _DTYPES.get(s.dtype) in _MATRIX]
    if not floating:
        raise ImportProblem(f"{definition.op_type} definition has no bf16, f16 or fp8 input for the tensor cores")
    hopper, blackwell = _MATRIX[floating[0]]
    share = 0.95 if family is Family.GEMM else 0.9
    on_hopper, on_blackwell = [hopper], [blackwell]
    if is_chunked_prefill(definition):  # the state is a tensor-core operand too, in tf32 (``gdn``)
        on_hopper.append(STATE_FEATURES["sm_90a"])
        on_blackwell.append(STATE_FEATURES["sm_100a"])
    return {"sm_90a": [{"any_of": on_hopper, "min_flop_share": share}, {"any_of": ["tma.load"]},
                       {"any_of": ["mbarrier"]}],
            "sm_100a": [{"any_of": on_blackwell, "min_flop_share": share}, {"any_of": ["tcgen05.alloc"]},
                        {"any_of": ["tcgen05.ld"]}, {"any_of": ["tma.load"]}, {"any_of": ["mbarrier"]}]}


def task_id(name: str) -> str:
    ident = re.sub(r"[^a-z0-9_]", "_", name.lower())
    if not re.match(r"^[a-z][a-z0-9_]*$", ident):
        raise ImportProblem(f"definition name {name!r} cannot become a task id (it must start with a letter)")
    return ident


# libraries a reference may call that run on a CUDA GPU only: the task imports, and its reference runs where they are
_GPU_LIBRARIES = {"cudnn": "the cuDNN frontend (`cudnn`)", "deep_gemm": "DeepGEMM (`deep_gemm`)",
                  "_scaled_dot_product_cudnn_attention": "cuDNN attention through PyTorch",
                  "flashinfer": "FlashInfer (`flashinfer`)"}


def gpu_libraries(definition: Definition) -> list[str]:
    """The GPU-only libraries the reference calls (named in the task's text and the import summary)."""
    try:
        module = ast.parse(definition.reference)
    except SyntaxError:
        return []
    names = {a.name.split(".")[0] for n in ast.walk(module) if isinstance(n, ast.Import) for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(module) if isinstance(n, ast.ImportFrom)}
    names |= {n.attr for n in ast.walk(module) if isinstance(n, ast.Attribute)}
    return [what for key, what in _GPU_LIBRARIES.items() if key in names]


def _statement(definition: Definition, scalars: dict[str, Any], derived: list[str], forward: list[str],
               fresh: list[str]) -> str:
    fixed = "".join(f"\n{name} = {value!r} in every call (fixed by the workloads)." for name, value in scalars.items())
    constraints = "".join(f"\nThe sizes satisfy `{c}`." for c in definition.constraints)
    index = (f"\nThe index inputs {', '.join(derived)} hold each workload's layout (the trace's own where it has "
             "one); kv_tokens and attended_pairs, where present, are what that layout reads and computes."
             if derived else "")
    if fresh:
        index += (f"\nThe index inputs {', '.join(fresh)} are drawn for every call: each names rows inside its "
                  "table (a sparse row min(topk, cache tokens) distinct cache tokens, then -1; row indices distinct "
                  "rows while the table has enough).")
    if forward:
        index += (f"\n{forward[0]} and {forward[1]} are the forward of the same Q, K and V (the attention output and "
                  "its log-sum-exp), as a backward is given them.")
    libraries = gpu_libraries(definition)
    needs = (f"\nThe reference calls {' and '.join(libraries)} on the inputs in their own dtypes: it runs on a CUDA "
             "GPU where they are installed, and an evaluation elsewhere fails with that reason." if libraries else "")
    return (f"{(definition.description or definition.name).strip()}\n\n"
            f"Imported from the FlashInfer-Trace definition `{definition.name}` (op_type {definition.op_type}). The "
            f"computation is its reference, {'as its libraries compute it' if libraries else 'computed in fp32'}:"
            f"{fixed}{constraints}{index}{needs}\n\n"
            f"```python\n{definition.reference.strip()}\n```")


def _is_scale(name: str) -> bool:
    """Scale factors (``*scale*``, DeepGEMM's ``SF_A``) are drawn positive, as a quantiser makes them."""
    lowered = name.lower()
    return "scale" in lowered or lowered.startswith("sf_") or lowered.endswith("_sf")


def task_data(definition: Definition, specs: list[WorkloadSpec], blobs: BlobReader,
              flops_override: str | None = None) -> tuple[dict[str, Any], ApiBaseline]:
    """The task, as the data of its TOML file, and what became of its ``fi_api`` tag (the FlashInfer call timed
    beside the reference, or why there is none)."""
    if not specs:
        raise ImportProblem(f"definition {definition.name} comes with no workloads: give its workloads .jsonl")
    family = family_of(definition)
    run_parameters(definition)
    scalars = fixed_scalars(definition, specs)
    for kind, tensors in (("input", definition.inputs), ("output", definition.outputs)):
        for name, spec in tensors.items():
            if spec.shape is not None:
                dtype_of(f"{kind} {name}", spec)
    plan = plan_indices(definition)
    forward = plan_forward(definition)
    derived = plan.derived + (forward.derived if forward else [])
    flops_text = flops(definition, plan, flops_override)
    workloads = bind(definition, plan, specs, blobs)
    tensors_data: dict[str, list[dict[str, Any]]] = {"inputs": [], "outputs": []}
    for kind, tensors in (("inputs", definition.inputs), ("outputs", definition.outputs)):
        for name, spec in tensors.items():
            if spec.shape is None:
                continue
            entry: dict[str, Any] = {"name": name, "dtype": dtype_of(f"{kind[:-1]} {name}", spec).value,
                                     "shape": list(spec.shape), "description": spec.description or name}
            if kind == "inputs" and name in derived:
                entry["init"] = {"kind": "derived"}
            elif kind == "inputs" and _is_scale(name) and spec.dtype.startswith("float"):
                entry["init"] = {"kind": "positive"}
            elif kind == "inputs" and drawn_scale(definition, name):
                entry["init"] = {"kind": "normal", "scale": drawn_scale(definition, name)}
            tensors_data[kind].append(entry)
    extra = plan.extra_axes()
    axes = [{"name": n, "description": a.description or n, **({"choices": [a.value], "minimum": min(a.value, 1)}
                                                               if isinstance(a, AxisConst) else {})}
            for n, a in definition.axes.items()]
    axes += [{"name": n, "description": _LAYOUT_AXES[n], "minimum": 0} for n in extra]
    # the timed workload is the largest: the most FLOPs, then the most elements moved
    weight = f"({flops_text}) * 1e6 + " + " + ".join(
        "*".join(spec.shape) or "1" for spec in [*definition.inputs.values(), *definition.outputs.values()]
        if spec.shape is not None)
    axis_names = [a["name"] for a in axes]
    moved, least = bytes_moved(definition, plan), bytes_moved(definition, plan, least=True)
    api = api_baseline(definition, scalars, plan)
    return {
        "id": task_id(definition.name), "family": family.value,
        "title": f"{definition.name} (FlashInfer-Trace {definition.op_type})",
        "statement": _statement(definition, scalars, plan.layout_inputs, forward.derived if forward else [],
                                [n for n in plan.derived if n not in plan.layout_inputs]),
        "reference": reference_code(definition, scalars, plan, workloads, axis_names,
                                    upcast=not gpu_libraries(definition), forward=forward),
        "flops": flops_text, "bytes": moved, **({"floor_bytes": least} if least != moved else {}),
        "baseline": baseline_data(api, REFERENCE_BASELINE_CALL),
        **({"tolerance": tolerances(definition)} if tolerances(definition) else {}),
        "axes": axes, **tensors_data, "workloads": with_roles(workloads, weight),
        "requirements": requirements(family, definition),
    }, api
