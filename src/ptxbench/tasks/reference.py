"""Run a task's PyTorch reference and draw its inputs.

Both run in the harness's process, never in a candidate's. References compute in fp32 (or wider) and
return outputs in that precision, so the comparison sees the candidate's rounding, not the reference's.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ptxbench.tasks.model import InitKind, InputInit, Task, TensorSpec

if TYPE_CHECKING:
    import torch


def _namespace(task: Task) -> dict[str, Any]:
    import torch

    namespace: dict[str, Any] = {"torch": torch, "math": math, "__name__": f"ptxbench_reference_{task.id}"}
    exec(compile(task.reference, f"<reference of {task.id}>", "exec"), namespace)  # noqa: S102 - task data is ours
    return namespace


def reference_baseline(task: Task) -> Callable[..., dict[str, "torch.Tensor"]]:
    """``baseline(**inputs, **sizes)`` of the task's reference code: the reference on the inputs in their own
    dtypes, the baseline of a task whose ``baseline.library`` is ``reference`` (an imported definition)."""
    namespace = _namespace(task)
    if "baseline" not in namespace:
        raise ValueError(f"the reference code of {task.id} defines no `baseline`")
    return namespace["baseline"]


def magnitude_key(output: str) -> str:
    """Where a reference reports |A|·|B| for an output with an operand-rounding allowance."""
    return f"{output}_magnitude"


def run_reference(task: Task, inputs: dict[str, "torch.Tensor"], sizes: dict[str, int]) -> dict[str, "torch.Tensor"]:
    """The expected outputs by name, in fp32 or wider, plus ``<output>_magnitude`` for every output whose
    tolerance allows for operand rounding.

    A reference returns its outputs as a tuple in task order, or as a dict by name (the form that can
    also carry magnitudes).
    """
    import torch

    with torch.no_grad():
        produced = _namespace(task)["reference"](**inputs, **sizes)
    if isinstance(produced, dict):
        result = dict(produced)
    else:
        produced = produced if isinstance(produced, (tuple, list)) else (produced,)
        if len(produced) != len(task.outputs):
            raise ValueError(f"reference of {task.id} returned {len(produced)} tensors for {len(task.outputs)} outputs")
        result = {spec.name: tensor for spec, tensor in zip(task.outputs, produced)}
    for spec in task.outputs:
        wanted = [spec.name] + ([magnitude_key(spec.name)] if task.tolerance_for(spec.name).operand_rtol else [])
        for key in wanted:
            if key not in result:
                raise ValueError(f"reference of {task.id} did not return {key}")
            if tuple(result[key].shape) != spec.concrete_shape(sizes):
                raise ValueError(f"reference of {task.id}: {key} has shape {tuple(result[key].shape)}, "
                                 f"expected {spec.concrete_shape(sizes)}")
    return result


# Drawing a tensor allocates it once, in its own dtype, and fills it a block at a time: the fp32 values,
# the outlier draw and mask, and their product and select take at most 16 bytes per element of a block
# (13 at their peak), so a block of DRAW_CHUNK_BYTES // 16 elements bounds what drawing needs beside the
# tensor itself. Drawing the whole tensor in fp32 first needed several times its size (16 GiB beside the
# 7.5 GB of DeepSeek-V3's 256 expert weights). A tensor that fits in one block is drawn by the same calls
# in the same order as it was then, so its values did not change.
DRAW_CHUNK_BYTES = 256 << 20
_TEMPORARY_BYTES_PER_ELEMENT = 16


def _values(init: InputInit, count: int, generator: "torch.Generator", device: str) -> "torch.Tensor":
    """``count`` fp32 values of ``init``'s distribution, outliers included (before any row offset)."""
    import torch

    if init.kind is InitKind.UNIFORM:
        values = torch.rand(count, generator=generator, device=device).mul_(2).sub_(1).mul_(init.scale)
    elif init.kind is InitKind.POSITIVE:
        values = torch.rand(count, generator=generator, device=device).add_(0.5).mul_(init.scale)
    else:
        values = torch.randn(count, generator=generator, device=device).mul_(init.scale)
    if init.outlier_fraction > 0:
        mask = torch.rand(count, generator=generator, device=device) < init.outlier_fraction
        values = torch.where(mask, values * init.outlier_scale, values)
    return values


def _row_offsets(init: InputInit, rows: int, generator: "torch.Generator", device: str) -> "torch.Tensor | None":
    """Per row, the offset added to it: ``row_offset`` on a random ``row_offset_fraction`` of the rows (at
    least one), 0 elsewhere; None when the input has no row offset."""
    import torch

    if init.row_offset_fraction == 0 or rows == 0:
        return None
    chosen = torch.randperm(rows, generator=generator, device=device)[:max(1, round(init.row_offset_fraction * rows))]
    offsets = torch.zeros(rows, dtype=torch.float32, device=device)
    offsets[chosen] = init.row_offset
    return offsets


def _draw(spec: TensorSpec, sizes: dict[str, int], generator: "torch.Generator", device: str,
          chunk_bytes: int | None = None) -> "torch.Tensor":
    """One input, filled block by block into its one allocation (see DRAW_CHUNK_BYTES): whole rows (runs
    along the last dimension) per block where a row fits, else pieces of one row. The values depend on
    the seed, the device and the shape only, so every process that draws from one seed gets the same."""
    import torch

    shape = spec.concrete_shape(sizes)
    out = torch.empty(shape, dtype=getattr(torch, spec.dtype.value), device=device)
    cols = shape[-1] if shape else 1
    rows = out.numel() // cols if cols else 0
    table = out.view(rows, cols)
    budget = max(1, (DRAW_CHUNK_BYTES if chunk_bytes is None else chunk_bytes) // _TEMPORARY_BYTES_PER_ELEMENT)
    offsets = _row_offsets(spec.init, rows, generator, device)
    if cols <= budget:
        step = max(1, budget // max(cols, 1))
        for first in range(0, rows, step):
            last = min(rows, first + step)
            values = _values(spec.init, (last - first) * cols, generator, device).view(last - first, cols)
            if offsets is not None:
                values += offsets[first:last, None]
            table[first:last].copy_(values)
    else:
        for row in range(rows):
            for first in range(0, cols, budget):
                last = min(cols, first + budget)
                values = _values(spec.init, last - first, generator, device)
                if offsets is not None:
                    values += offsets[row:row + 1]
                table[row, first:last].copy_(values)
    return out


def make_inputs(task: Task, sizes: dict[str, int], seed: int, device: str = "cpu") -> MappingProxyType:
    """A fresh input set: drawn inputs from ``seed``, then derived ones from the task's ``derive_inputs``."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    drawn = {spec.name: _draw(spec, sizes, generator, device) for spec in task.inputs if spec.init.kind is not InitKind.DERIVED}
    drawn.update(derive_inputs(task, drawn, sizes))
    return MappingProxyType({spec.name: drawn[spec.name] for spec in task.inputs})


def derive_inputs(task: Task, drawn: dict[str, "torch.Tensor"], sizes: dict[str, int]) -> dict[str, "torch.Tensor"]:
    """The derived inputs (page tables, routing, the forward pass attention backward consumes) from the
    drawn ones, converted to their dtypes and checked for shape; empty for a task without any.

    Separate from drawing so the layouts of a workload can be checked without drawing its largest
    tensors, which the layouts do not read."""
    import torch

    derived_specs = [spec for spec in task.inputs if spec.init.kind is InitKind.DERIVED]
    if not derived_specs:
        return {}
    with torch.no_grad():
        derived = _namespace(task)["derive_inputs"](**drawn, **sizes)
    result = {}
    for spec in derived_specs:
        tensor = derived[spec.name].to(getattr(torch, spec.dtype.value))
        if tuple(tensor.shape) != spec.concrete_shape(sizes):
            raise ValueError(f"derive_inputs of {task.id}: {spec.name} has the wrong shape {tuple(tensor.shape)}")
        result[spec.name] = tensor.contiguous()
    return result
