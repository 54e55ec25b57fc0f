"""Run a task's PyTorch reference and draw its inputs.

Both run in the harness's process, never in a candidate's. References compute in fp32 (or wider) and
return outputs in that precision, so the comparison sees the candidate's rounding, not the reference's.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ptxbench.tasks.model import InitKind, Task, TensorSpec

if TYPE_CHECKING:
    import torch


def _namespace(task: Task) -> dict[str, Any]:
    import torch

    namespace: dict[str, Any] = {"torch": torch, "math": math, "__name__": f"ptxbench_reference_{task.id}"}
    exec(compile(task.reference, f"<reference of {task.id}>", "exec"), namespace)  # noqa: S102 - task data is ours
    return namespace


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


def _draw(spec: TensorSpec, sizes: dict[str, int], generator: "torch.Generator", device: str) -> "torch.Tensor":
    import torch

    shape = spec.concrete_shape(sizes)
    init = spec.init
    if init.kind is InitKind.UNIFORM:
        values = (torch.rand(shape, generator=generator, device=device) * 2 - 1) * init.scale
    elif init.kind is InitKind.POSITIVE:
        values = (0.5 + torch.rand(shape, generator=generator, device=device)) * init.scale
    else:
        values = torch.randn(shape, generator=generator, device=device) * init.scale
    if init.outlier_fraction > 0:
        mask = torch.rand(shape, generator=generator, device=device) < init.outlier_fraction
        values = torch.where(mask, values * init.outlier_scale, values)
    return values.to(getattr(torch, spec.dtype.value))


def make_inputs(task: Task, sizes: dict[str, int], seed: int, device: str = "cpu") -> MappingProxyType:
    """A fresh input set: drawn inputs from ``seed``, then derived ones from the task's ``derive_inputs``."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    drawn = {spec.name: _draw(spec, sizes, generator, device) for spec in task.inputs if spec.init.kind is not InitKind.DERIVED}
    derived_specs = [spec for spec in task.inputs if spec.init.kind is InitKind.DERIVED]
    if derived_specs:
        with torch.no_grad():
            derived = _namespace(task)["derive_inputs"](**drawn, **sizes)
        for spec in derived_specs:
            tensor = derived[spec.name].to(getattr(torch, spec.dtype.value))
            if tuple(tensor.shape) != spec.concrete_shape(sizes):
                raise ValueError(f"derive_inputs of {task.id}: {spec.name} has the wrong shape {tuple(tensor.shape)}")
            drawn[spec.name] = tensor.contiguous()
    return MappingProxyType({spec.name: drawn[spec.name] for spec in task.inputs})
