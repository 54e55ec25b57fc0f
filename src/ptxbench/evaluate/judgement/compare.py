"""Compare a candidate's output with the reference under the task's tolerance, element by element."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ptxbench.records.evaluation import Comparison
from ptxbench.tasks.model import Task, Tolerance
from ptxbench.tasks.reference import magnitude_key

if TYPE_CHECKING:
    import torch


# Elements compared at a time: the comparison works in fp64 with several temporaries per element, so a whole
# 256M-element output took about 16 GiB at once in the harness's process (softmax's r8192-c32768 ran out of memory
# on an 80 GB H100 beside another run); in slices of this many it takes about 1 GiB, with the same result.
COMPARE_SLICE_ELEMENTS = 1 << 24


def _first_max(values: list[float]) -> int:
    """The index of the first largest of ``values``, NaN counting as largest (as ``torch.argmax`` does)."""
    best = 0
    for i, value in enumerate(values):
        if math.isnan(values[best]):
            break
        if math.isnan(value) or value > values[best]:
            best = i
    return best


def compare(name: str, actual: "torch.Tensor", expected: "torch.Tensor", tolerance: Tolerance,
            magnitude: "torch.Tensor | None" = None) -> Comparison:
    """Check every element; ``magnitude`` (|A|·|B| from the reference) is needed when the tolerance has an
    operand-rounding allowance. The elements are taken in slices of ``COMPARE_SLICE_ELEMENTS`` (the result is the
    same as in one pass)."""
    import torch

    if tolerance.operand_rtol and magnitude is None:
        raise ValueError(f"{name}: the tolerance allows for operand rounding but no magnitude was given")
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(f"{name}: shape {tuple(actual.shape)} differs from the reference's {tuple(expected.shape)}")
    total = expected.numel()
    flat_got, flat_want = actual.reshape(-1), expected.reshape(-1)
    flat_magnitude = magnitude.reshape(-1) if tolerance.operand_rtol and magnitude is not None else None
    slices = [(start, min(start + COMPARE_SLICE_ELEMENTS, total)) for start in range(0, total, COMPARE_SLICE_ELEMENTS)]
    squares = sum(float(flat_want[a:b].double().pow(2).sum()) for a, b in slices)
    reference_rms = math.sqrt(squares / total) if total else 0.0
    nonfinite = mismatched = 0
    maxima: dict[str, list[float]] = {"error": [], "relative": [], "ratio": [], "excess": []}
    worst_in_slice: list[int] = []
    for a, b in slices:
        got, want = flat_got[a:b].double(), flat_want[a:b].double()
        finite = torch.isfinite(got)
        nonfinite += int((~finite).sum())
        error = torch.where(finite, (got - want).abs(), torch.full_like(want, float("inf")))
        bound = tolerance.atol + tolerance.rms_atol * reference_rms + tolerance.rtol * want.abs()
        if flat_magnitude is not None:
            bound = bound + tolerance.operand_rtol * flat_magnitude[a:b].double().abs()
        excess = error - bound
        mismatched += int((excess > 0).sum())
        maxima["error"].append(float(error.max()))
        maxima["relative"].append(float((error / want.abs().clamp_min(1e-30)).max()))
        maxima["ratio"].append(float(torch.where(error == 0, torch.zeros_like(error), error / bound).max()))
        at = int(torch.argmax(excess).item())
        worst_in_slice.append(a + at)
        maxima["excess"].append(float(excess[at]))
        del got, want, finite, error, bound, excess

    def largest(key: str) -> float:
        return float(torch.tensor(maxima[key], dtype=torch.float64).max()) if maxima[key] else 0.0

    result = Comparison(
        output=name, passed=mismatched == 0 and nonfinite == 0, elements=total, mismatched=mismatched,
        nonfinite=nonfinite, max_abs_error=largest("error"), max_rel_error=largest("relative"),
        max_error_ratio=largest("ratio"),
    )
    if total:
        worst = worst_in_slice[_first_max(maxima["excess"])]
        index = [int(i) for i in torch.unravel_index(torch.tensor(worst), tuple(expected.shape))]
        got_worst, want_worst = float(flat_got[worst].double()), float(flat_want[worst].double())
        bound_worst = tolerance.atol + tolerance.rms_atol * reference_rms + tolerance.rtol * abs(want_worst)
        if flat_magnitude is not None:
            bound_worst += tolerance.operand_rtol * abs(float(flat_magnitude[worst].double()))
        result.worst_index = index
        result.worst_value = got_worst
        result.worst_expected = want_worst
        result.bound_at_worst = bound_worst
    return result


def compare_outputs(task: Task, actual: "dict[str, torch.Tensor]", expected: "dict[str, torch.Tensor]") -> list[Comparison]:
    """Every output of a call against ``run_reference``'s result, each under its own tolerance."""
    return [compare(spec.name, actual[spec.name], expected[spec.name], task.tolerance_for(spec.name),
                    expected.get(magnitude_key(spec.name)))
            for spec in task.outputs]
