"""Import a FlashInfer-Bench (FlashInfer-Trace) definition and its workloads as a PTXBench task.

A definition names an operator (``op_type``), its axes (``const`` with a value, or ``var`` bound by each
workload), input and output tensors (shape as axis names, ``null`` for a Python scalar; a dtype), and a
PyTorch reference: a top-level ``run(inputs...)`` returning the outputs. A workload trace (one JSON
object per line of a ``.jsonl``) binds the var axes and says how each input is made. The schema is
written here as the subset PTXBench reads, so importing needs no ``flashinfer-bench`` package.

The mapping, and what it refuses (one line each, naming the field):

- const axes become axes with that single choice, so names and formulas keep them; var axes plain axes.
- tensors keep name, shape and dtype (types a candidate can be given in C: bf16, f16, f32, fp8, int32,
  int8); a scalar input must have one value in every workload, and is fixed in the reference.
- int32 page tables (``<p>_indptr`` with ``<p>_indices``, FlashInfer's paged-KV layout) are derived:
  the drawn inputs cannot hold valid indices, so ``derive_inputs`` makes a random partition and a
  random choice of pages. Any other integer input is refused.
- ``reference`` wraps ``run``: floating inputs upcast to fp32 first, so the reference computes in fp32
  as every PTXBench reference does; its outputs are returned by name.
- the family, the required features and the FLOP formula come from ``op_type`` (``flops`` overrides).
- workloads keep their order; the largest is timed, every third of the others is held out.

An imported task has no vendor baseline (none is defined for it): correctness and features are
judged, and a speedup needs a baseline added to ``evaluate/baselines.py`` when it joins the suite.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ptxbench.errors import TaskError
from ptxbench.tasks import formula
from ptxbench.tasks.loader import parse_task
from ptxbench.tasks.model import DType, Family, Task

# ---------------------------------------------------------------------------------------- the schema


class _Schema(BaseModel):
    # fields PTXBench does not read (tags' meanings, solutions, evaluations) are allowed and ignored
    model_config = ConfigDict(extra="ignore")


class AxisConst(_Schema):
    type: Literal["const"]
    value: int = Field(ge=0)
    description: str | None = None


class AxisVar(_Schema):
    type: Literal["var"]
    description: str | None = None


class TensorSpec(_Schema):
    shape: list[str] | None
    dtype: str
    description: str | None = None


class Definition(_Schema):
    name: str = Field(min_length=1)
    op_type: str = Field(min_length=1)
    axes: dict[str, Annotated[Union[AxisConst, AxisVar], Field(discriminator="type")]] = Field(min_length=1)
    inputs: dict[str, TensorSpec] = Field(min_length=1)
    outputs: dict[str, TensorSpec] = Field(min_length=1)
    reference: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    description: str | None = None
    constraints: list[str] = Field(default_factory=list)


class InputSpec(_Schema):
    type: Literal["random", "scalar", "safetensors"]
    value: int | float | bool | None = None


class WorkloadSpec(_Schema):
    axes: dict[str, int]
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    uuid: str = Field(min_length=1)


class WorkloadTrace(_Schema):
    definition: str
    workload: WorkloadSpec


# ------------------------------------------------------------------------------------------ mapping

_DTYPES = {"float32": DType.F32, "float16": DType.F16, "bfloat16": DType.BF16, "float8_e4m3fn": DType.E4M3,
           "float8_e4m3": DType.E4M3, "float8_e5m2": DType.E5M2, "int32": DType.I32, "int8": DType.I8}
_MATRIX = {DType.BF16: ("wgmma.bf16", "tcgen05.mma.f16"), DType.F16: ("wgmma.f16", "tcgen05.mma.f16"),
           DType.E4M3: ("wgmma.fp8", "tcgen05.mma.f8f6f4"), DType.E5M2: ("wgmma.fp8", "tcgen05.mma.f8f6f4")}
_ATTENTION = ("gqa_paged", "gqa_ragged", "mla_paged", "mla_ragged", "gqa")
_NORMS = ("rmsnorm", "fused_add_rmsnorm", "norm")
_FLOPS = {  # op_type -> FLOPs of one call, over the definition's own axis names
    "gqa_paged decode": "4 * num_qo_heads * head_dim * num_kv_indices * page_size",  # one query per sequence
    "rmsnorm": "0", "fused_add_rmsnorm": "0", "norm": "0",
}
HELD_OUT_EVERY = 3


class ImportProblem(TaskError):
    """A definition or workload that cannot become a PTXBench task; the message says which field and why."""


def _is_decode(definition: Definition) -> bool:
    return any(tag.replace(" ", "") == "stage:decode" for tag in definition.tags) or "decode" in definition.name


def _family(definition: Definition) -> Family:
    op = definition.op_type
    if op == "gemm":
        return Family.GEMM
    if op in _ATTENTION:
        return Family.ATTENTION_DECODE if _is_decode(definition) else Family.ATTENTION_FORWARD
    if op in _NORMS:
        return Family.MEMORY_BOUND
    if op in {f.value for f in Family}:
        return Family(op)
    known = ", ".join(["gemm", *_ATTENTION, *_NORMS])
    raise ImportProblem(f"op_type {op!r} has no PTXBench family (known: {known})")


def _dtype(where: str, spec: TensorSpec) -> DType:
    if spec.dtype not in _DTYPES:
        raise ImportProblem(f"{where} has dtype {spec.dtype}, which a PTXBench task cannot use "
                            f"(supported: {', '.join(sorted(set(_DTYPES) - {'float8_e4m3'}))})")
    return _DTYPES[spec.dtype]


def _run_parameters(reference: str) -> list[str]:
    try:
        module = ast.parse(reference)
    except SyntaxError as exc:
        raise ImportProblem(f"reference is not valid Python: {exc.msg} (line {exc.lineno})") from None
    run = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "run"), None)
    if run is None:
        raise ImportProblem("reference does not define a top-level function `run`")
    if run.args.vararg or run.args.kwarg or run.args.posonlyargs or run.args.kwonlyargs:
        raise ImportProblem("reference `run` must take the inputs as plain named parameters")
    return [a.arg for a in run.args.args]


def _page_tables(definition: Definition) -> list[tuple[str, str]]:
    """(indptr, indices) input pairs of FlashInfer's paged layout; any other integer input is refused."""
    integer = [n for n, s in definition.inputs.items() if s.shape is not None and _DTYPES.get(s.dtype) in (DType.I32, DType.I8)]
    pairs = []
    for name in integer:
        if name.endswith("_indptr") and name.removesuffix("_indptr") + "_indices" in integer:
            pairs.append((name, name.removesuffix("_indptr") + "_indices"))
    paired = {n for pair in pairs for n in pair}
    for name in integer:
        if name not in paired:
            raise ImportProblem(f"input {name} is an integer tensor with no rule to draw valid values (only "
                                "`<p>_indptr` with `<p>_indices` page tables are derived)")
    for indptr, indices in pairs:
        for name in (indptr, indices):
            if definition.inputs[name].dtype != "int32" or len(definition.inputs[name].shape or []) != 1:
                raise ImportProblem(f"input {name} of a page table must be a 1-D int32 tensor")
    return pairs


def _scalars(definition: Definition, workloads: list[WorkloadSpec]) -> dict[str, int | float | bool]:
    fixed: dict[str, int | float | bool] = {}
    for name, spec in definition.inputs.items():
        if spec.shape is not None:
            continue
        values = {repr(w.inputs[name].value) if name in w.inputs else None for w in workloads}
        if None in values or any(w.inputs[name].type != "scalar" for w in workloads if name in w.inputs):
            raise ImportProblem(f"scalar input {name} has no value in every workload (a `scalar` input with a value)")
        if len(values) != 1:
            raise ImportProblem(f"scalar input {name} differs across workloads ({', '.join(sorted(values))}): "
                                "a task fixes its scalars; import the workloads of one value at a time")
        fixed[name] = workloads[0].inputs[name].value  # type: ignore[assignment]
    for name, spec in definition.outputs.items():
        if spec.shape is None:
            raise ImportProblem(f"output {name} is a Python scalar: a kernel's outputs are tensors")
    return fixed


def _flops(definition: Definition, override: str | None) -> str:
    if override is not None:
        text = override
    elif definition.op_type == "gemm":
        a, b = (definition.inputs[n].shape or [] for n in list(definition.inputs)[:2])
        out = next(iter(definition.outputs.values())).shape or []
        reduced = [axis for axis in a if axis in b and axis not in out]
        if len(out) != 2 or len(reduced) != 1:
            raise ImportProblem("gemm definition: cannot tell M, N and K from the first two inputs and the output; "
                                "pass --flops")
        text = f"2 * {out[0]} * {out[1]} * {reduced[0]}"
    elif definition.op_type in _FLOPS:
        text = _FLOPS[definition.op_type]
    elif f"{definition.op_type} decode" in _FLOPS and _is_decode(definition):
        text = _FLOPS[f"{definition.op_type} decode"]
    else:
        raise ImportProblem(f"no FLOP formula is known for op_type {definition.op_type!r}: pass --flops")
    unknown = formula.names_in(text) - set(definition.axes)
    if unknown:
        raise ImportProblem(f"FLOP formula {text!r} uses axes the definition does not have: {sorted(unknown)}; "
                            "pass --flops")
    return text


def _requirements(family: Family, definition: Definition) -> dict[str, list[dict[str, Any]]]:
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
    return {"sm_90a": [{"any_of": [hopper], "min_flop_share": share}, {"any_of": ["tma.load"]}, {"any_of": ["mbarrier"]}],
            "sm_100a": [{"any_of": [blackwell], "min_flop_share": share}, {"any_of": ["tcgen05.alloc"]},
                        {"any_of": ["tcgen05.ld"]}, {"any_of": ["tma.load"]}, {"any_of": ["mbarrier"]}]}


def _reference(definition: Definition, parameters: list[str], scalars: dict[str, Any],
               tables: list[tuple[str, str]]) -> str:
    code = [definition.reference.strip("\n"), "", "",
            f"_RUN_INPUTS = {tuple(parameters)!r}", f"_OUTPUTS = {tuple(definition.outputs)!r}",
            f"_SCALARS = {scalars!r}", "", "",
            "def reference(**named):",
            "    # the definition's `run` on fp32 copies of its floating inputs: the reference computes in fp32",
            "    args = {n: named[n].float() if named[n].is_floating_point() else named[n]",
            "            for n in _RUN_INPUTS if n not in _SCALARS}",
            "    args.update(_SCALARS)",
            "    produced = run(**args)",
            "    if isinstance(produced, dict):",
            "        produced = tuple(produced[n] for n in _OUTPUTS)",
            "    elif not isinstance(produced, (tuple, list)):",
            "        produced = (produced,)",
            "    return {n: t.float() for n, t in zip(_OUTPUTS, produced)}"]
    if tables:
        # (indptr, indices, the axis of indptr's length, the axis of the indices' count) per page table
        axes = tuple((p, i, (definition.inputs[p].shape or [""])[0], (definition.inputs[i].shape or [""])[0])
                     for p, i in tables)
        code += ["", "", f"_PAGE_TABLES = {axes!r}", "", "",
                 "def derive_inputs(**named):",
                 "    # FlashInfer's paged layout: indptr splits the indices into one run per sequence (each at",
                 "    # least one page), the indices name distinct pages; seeded by the drawn data, so trials differ",
                 "    first = next(t for t in named.values() if isinstance(t, torch.Tensor))",
                 "    generator = torch.Generator().manual_seed(int(first.float().abs().sum().item() * 1e3) % 2**31)",
                 "    derived = {}",
                 "    for indptr, indices, length_axis, count_axis in _PAGE_TABLES:",
                 "        sequences, used = named[length_axis] - 1, named[count_axis]",
                 "        cuts = torch.randperm(max(used - 1, 0), generator=generator)[:sequences - 1] + 1",
                 "        bounds = torch.cat([torch.zeros(1, dtype=torch.long), cuts.sort().values,",
                 "                            torch.full((1,), used, dtype=torch.long)])",
                 "        derived[indptr] = bounds.to(device=first.device, dtype=torch.int32)",
                 "        pages = named.get('num_pages', used)",
                 "        chosen = torch.randperm(pages, generator=generator)[:used]",
                 "        derived[indices] = chosen.to(device=first.device, dtype=torch.int32)",
                 "    return derived"]
    return "\n".join(code)


def _task_id(name: str) -> str:
    ident = re.sub(r"[^a-z0-9_]", "_", name.lower())
    if not re.match(r"^[a-z][a-z0-9_]*$", ident):
        raise ImportProblem(f"definition name {name!r} cannot become a task id (it must start with a letter)")
    return ident


def _workload_name(index: int, spec: WorkloadSpec) -> str:
    return f"w{index:02d}-" + re.sub(r"[^A-Za-z0-9_.-]", "-", spec.uuid)[:8]


def _workloads(definition: Definition, specs: list[WorkloadSpec], tables: list[tuple[str, str]],
               weight: str) -> list[dict[str, Any]]:
    consts = {n: a.value for n, a in definition.axes.items() if isinstance(a, AxisConst)}
    variables = [n for n, a in definition.axes.items() if isinstance(a, AxisVar)]
    checked = [c for c in definition.constraints if _parses(c, set(definition.axes))]
    rows: list[tuple[str, dict[str, int]]] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for index, spec in enumerate(specs):
        missing = [n for n in variables if n not in spec.axes]
        if missing:
            raise ImportProblem(f"workload {spec.uuid}: no value for axis {missing[0]}")
        unknown = sorted(set(spec.axes) - set(variables))
        if unknown:
            raise ImportProblem(f"workload {spec.uuid}: {unknown[0]} is not a var axis of {definition.name}")
        sizes = {n: consts[n] if n in consts else spec.axes[n] for n in definition.axes}
        for constraint in checked:
            if not formula.holds(constraint, sizes):
                raise ImportProblem(f"workload {spec.uuid} breaks the definition's constraint {constraint!r}")
        for indptr, indices in tables:
            sequences = sizes[(definition.inputs[indptr].shape or [""])[0]] - 1
            used = sizes[(definition.inputs[indices].shape or [""])[0]]
            if not 1 <= sequences <= used <= sizes.get("num_pages", used):
                raise ImportProblem(f"workload {spec.uuid}: the page table needs 1 <= sequences ({sequences}) "
                                    f"<= indices ({used}) <= num_pages")
        key = tuple(sorted(sizes.items()))
        if key not in seen:
            seen.add(key)
            rows.append((_workload_name(index, spec), sizes))
    if len(rows) < 2:
        raise ImportProblem(f"{len(rows)} distinct workload(s): a task needs one timed and at least one held out")
    timed = max(range(len(rows)), key=lambda i: (formula.evaluate(weight, rows[i][1]), -i))
    others = [i for i in range(len(rows)) if i != timed]
    held = {i for n, i in enumerate(others) if n % HELD_OUT_EVERY == HELD_OUT_EVERY - 1} or {others[-1]}
    return [{"name": name, "role": "timed" if i == timed else "heldout" if i in held else "visible", "sizes": sizes}
            for i, (name, sizes) in enumerate(rows)]


def _parses(constraint: str, axes: set[str]) -> bool:
    """Whether a constraint is one PTXBench can check (arithmetic and comparisons over the axes)."""
    try:
        return formula.names_in(constraint) <= axes
    except formula.FormulaError:
        return False


def task_data(definition: Definition, workloads: list[WorkloadSpec], flops: str | None = None) -> dict[str, Any]:
    """The task, as the data of its TOML file."""
    if not workloads:
        raise ImportProblem(f"definition {definition.name} comes with no workloads: give its workloads .jsonl")
    family = _family(definition)
    parameters = _run_parameters(definition.reference)
    if parameters != list(definition.inputs):
        raise ImportProblem(f"reference `run` takes ({', '.join(parameters)}) but the inputs are "
                            f"({', '.join(definition.inputs)}), in that order")
    scalars = _scalars(definition, workloads)
    for kind, specs in (("input", definition.inputs), ("output", definition.outputs)):
        for name, spec in specs.items():
            if spec.shape is not None:
                _dtype(f"{kind} {name}", spec)
    tables = _page_tables(definition)
    tensors: dict[str, list[dict[str, Any]]] = {"inputs": [], "outputs": []}
    for kind, specs in (("inputs", definition.inputs), ("outputs", definition.outputs)):
        for name, spec in specs.items():
            if spec.shape is None:
                continue
            entry = {"name": name, "dtype": _dtype(f"{kind[:-1]} {name}", spec).value, "shape": list(spec.shape),
                     "description": spec.description or name}
            if kind == "inputs" and any(name in pair for pair in tables):
                entry["init"] = {"kind": "derived"}
            tensors[kind].append(entry)
    flops_text = _flops(definition, flops)
    # the timed workload is the largest: the most FLOPs, then the most elements moved
    weight = f"({flops_text}) * 1e6 + " + " + ".join(
        "*".join(spec.shape) or "1" for spec in [*definition.inputs.values(), *definition.outputs.values()] if spec.shape is not None)
    axes = [{"name": n, "description": a.description or n, **({"choices": [a.value], "minimum": min(a.value, 1)}
                                                               if isinstance(a, AxisConst) else {})}
            for n, a in definition.axes.items()]
    fixed = "".join(f"\n{name} = {value!r} in every call (fixed by the workloads)." for name, value in scalars.items())
    constraints = "".join(f"\nThe sizes satisfy `{c}`." for c in definition.constraints)
    tables_text = "".join(f"\n{p} and {i} are a page table: sequence s uses the pages {i}[{p}[s]:{p}[s + 1]]."
                          for p, i in tables)
    statement = (f"{(definition.description or definition.name).strip()}\n\n"
                 f"Imported from the FlashInfer-Bench definition `{definition.name}` (op_type "
                 f"{definition.op_type}). The computation is its reference, computed in fp32:{fixed}{constraints}"
                 f"{tables_text}\n\n```python\n{definition.reference.strip()}\n```")
    return {
        "id": _task_id(definition.name), "family": family.value,
        "title": f"{definition.name} (FlashInfer-Bench {definition.op_type})", "statement": statement,
        "reference": _reference(definition, parameters, scalars, tables), "flops": flops_text,
        "baseline": {"library": "torch", "call": f"none: no vendor baseline is defined for the imported definition "
                                                 f"{definition.name}"},
        "axes": axes, **tensors, "workloads": _workloads(definition, workloads, tables, weight),
        "requirements": _requirements(family, definition),
    }


# ------------------------------------------------------------------------------------- files and TOML


def _one_line(error: ValidationError, where: str) -> str:
    first = error.errors()[0]
    location = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return f"{where}: {location}: {first['msg']}"


def read_definition(path: Path) -> Definition:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ImportProblem(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ImportProblem(f"{path}: not JSON: {exc.msg} (line {exc.lineno})") from None
    try:
        return Definition.model_validate(data)
    except ValidationError as exc:
        raise ImportProblem(_one_line(exc, str(path))) from None


def read_workloads(path: Path, definition: str) -> list[WorkloadSpec]:
    """The workloads of ``definition`` in a workload-trace JSONL (traces of other definitions are skipped)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ImportProblem(f"cannot read {path}: {exc.strerror}") from None
    found = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            trace = WorkloadTrace.model_validate_json(line)
        except ValidationError as exc:
            raise ImportProblem(_one_line(exc, f"{path}:{number}")) from None
        if trace.definition == definition:
            found.append(trace.workload)
    return found


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _toml_text(text: str) -> str:
    return f"'''\n{text}\n'''" if "'''" not in text and "\r" not in text else json.dumps(text, ensure_ascii=False)


def to_toml(data: dict[str, Any]) -> str:
    """The task data as a TOML file laid out like the suite's (long texts as literal blocks)."""
    lines = []
    for key, value in data.items():
        if key in ("statement", "reference"):
            lines.append(f"{key} = {_toml_text(value)}")
        elif not (isinstance(value, list) and value and isinstance(value[0], dict)) and key != "requirements":
            lines.append(f"{key} = {_toml_value(value)}")
    for key in ("axes", "inputs", "outputs", "workloads"):
        for table in data[key]:
            lines += ["", f"[[{key}]]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for arch, requirements in data["requirements"].items():
        for requirement in requirements:
            lines += ["", f"[[requirements.{arch}]]"] + [f"{k} = {_toml_value(v)}" for k, v in requirement.items()]
    return "\n".join(lines) + "\n"


def import_definition(definition_path: Path, workload_paths: list[Path], flops: str | None = None) -> tuple[Task, str]:
    """The task and its TOML text, from a definition file and workload-trace files (checked by loading it)."""
    definition = read_definition(definition_path)
    workloads = [w for path in workload_paths for w in read_workloads(path, definition.name)]
    text = to_toml(task_data(definition, workloads, flops))
    try:
        task = parse_task(text, f"the task imported from {definition_path.name}")
    except TaskError as exc:
        raise ImportProblem(str(exc)) from None
    return task, text
