"""Scalar inputs (``shape: null``): a task fixes each to one value, the same in every workload.

Traces write a scalar such as ``sm_scale = 1/sqrt(128)`` sometimes as the fp32 value and sometimes as the
fp64 one; both are the same number in the scalar's dtype, and a kernel receives it in that dtype. So values
are compared after rounding to the scalar's dtype: equal there, they are one scalar (the first workload's
value is kept); different there, the definition's workloads hold several tasks and are refused.
"""

from __future__ import annotations

import struct

from ptxbench.tasks.flashinfer.schema import Definition, ImportProblem, WorkloadSpec

Scalar = int | float | bool


def _bfloat16(value: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def in_dtype(value: Scalar, dtype: str) -> Scalar:
    """``value`` as the scalar's dtype holds it (floats rounded to it; integers and booleans as they are)."""
    if isinstance(value, bool) or not isinstance(value, float):
        return value
    try:
        if dtype == "float32":
            return struct.unpack("<f", struct.pack("<f", value))[0]
        if dtype == "float16":
            return struct.unpack("<e", struct.pack("<e", value))[0]
    except (OverflowError, struct.error):
        return value
    if dtype == "bfloat16":
        return _bfloat16(value)
    return value


def fixed_scalars(definition: Definition, workloads: list[WorkloadSpec]) -> dict[str, Scalar]:
    """Each scalar input's one value; refused where a workload lacks it or two differ in the scalar's dtype."""
    fixed: dict[str, Scalar] = {}
    for name, spec in definition.inputs.items():
        if spec.shape is not None:
            continue
        given = [w.inputs.get(name) for w in workloads]
        if any(g is None or g.type != "scalar" or g.value is None for g in given):
            raise ImportProblem(f"scalar input {name} has no value in every workload (a `scalar` input with a value)")
        values = [g.value for g in given]  # type: ignore[union-attr]
        distinct = {in_dtype(v, spec.dtype) for v in values}  # type: ignore[arg-type]
        if len(distinct) != 1:
            shown = ", ".join(sorted({repr(v) for v in values}))
            raise ImportProblem(f"scalar input {name} differs across workloads in {spec.dtype} ({shown}): a task "
                                "fixes its scalars; import the workloads of one value at a time")
        fixed[name] = values[0]  # type: ignore[assignment]
    for name, spec in definition.outputs.items():
        if spec.shape is None:
            raise ImportProblem(f"output {name} is a Python scalar: a kernel's outputs are tensors")
    return fixed
