"""The baseline of a task no vendor library implements here (an imported FlashInfer-Trace definition): its
own PyTorch reference on the inputs in their own dtypes, as FlashInfer-Bench times a definition's reference.
A reference is written for clarity, not speed (loops over sequences, fp32 copies), so a speedup over it says
how much faster than plain PyTorch, not than a tuned kernel; the task's text says so."""

from __future__ import annotations

from collections.abc import Mapping

from ptxbench.evaluate.baselines.calls import Setup, Tensors, TimedCall, warmed
from ptxbench.tasks.flashinfer.fi_api import REFERENCE_VARIANT
from ptxbench.tasks.model import Task
from ptxbench.tasks.reference import reference_baseline

DESCRIPTION = REFERENCE_VARIANT  # also in the call text of a task with a FlashInfer call (tasks.flashinfer.fi_api)


def reference_setup(task: Task) -> Setup:
    """The variant's setup: the reference code is executed once here, the timed call is one ``baseline`` call."""
    call = reference_baseline(task)

    def setup(inputs: Tensors, sizes: Mapping[str, int]) -> TimedCall:
        import torch

        def timed() -> dict[str, "torch.Tensor"]:
            with torch.no_grad():
                return call(**inputs, **sizes)
        return warmed(timed)
    return setup
