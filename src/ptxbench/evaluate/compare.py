"""Compare a candidate's output with the reference under the task's tolerance, element by element."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxbench.records.evaluation import Comparison
from ptxbench.tasks.model import Task, Tolerance
from ptxbench.tasks.reference import magnitude_key

if TYPE_CHECKING:
    import torch


def compare(name: str, actual: "torch.Tensor", expected: "torch.Tensor", tolerance: Tolerance,
            magnitude: "torch.Tensor | None" = None) -> Comparison:
    """Check every element; ``magnitude`` (|A|·|B| from the reference) is needed when the tolerance has an
    operand-rounding allowance."""
    import torch

    if tolerance.operand_rtol and magnitude is None:
        raise ValueError(f"{name}: the tolerance allows for operand rounding but no magnitude was given")
    if tuple(actual.shape) != tuple(expected.shape):
        raise ValueError(f"{name}: shape {tuple(actual.shape)} differs from the reference's {tuple(expected.shape)}")
    got = actual.double()
    want = expected.double()
    nonfinite = int((~torch.isfinite(got)).sum())
    reference_rms = float(want.pow(2).mean().sqrt()) if want.numel() else 0.0
    error = (got - want).abs()
    error = torch.where(torch.isfinite(got), error, torch.full_like(error, float("inf")))
    bound = tolerance.atol + tolerance.rms_atol * reference_rms + tolerance.rtol * want.abs()
    if tolerance.operand_rtol and magnitude is not None:
        bound = bound + tolerance.operand_rtol * magnitude.double().abs()
    excess = error - bound
    bad = excess > 0
    mismatched = int(bad.sum())
    relative = error / want.abs().clamp_min(1e-30)
    ratio = torch.where(error == 0, torch.zeros_like(error), error / bound)
    worst = int(torch.argmax(excess).item()) if want.numel() else None
    result = Comparison(
        output=name, passed=mismatched == 0 and nonfinite == 0, elements=want.numel(), mismatched=mismatched,
        nonfinite=nonfinite, max_abs_error=float(error.max()) if want.numel() else 0.0,
        max_rel_error=float(relative.max()) if want.numel() else 0.0,
        max_error_ratio=float(ratio.max()) if want.numel() else 0.0,
    )
    if worst is not None:
        index = [int(i) for i in torch.unravel_index(torch.tensor(worst), tuple(want.shape))]
        result.worst_index = index
        result.worst_value = float(got.reshape(-1)[worst])
        result.worst_expected = float(want.reshape(-1)[worst])
        result.bound_at_worst = float(bound.reshape(-1)[worst])
    return result


def compare_outputs(task: Task, actual: "dict[str, torch.Tensor]", expected: "dict[str, torch.Tensor]") -> list[Comparison]:
    """Every output of a call against ``run_reference``'s result, each under its own tolerance."""
    return [compare(spec.name, actual[spec.name], expected[spec.name], task.tolerance_for(spec.name),
                    expected.get(magnitude_key(spec.name)))
            for spec in task.outputs]
