"""The vocabulary every vendor-baseline module shares: the shapes of a variant's setup and timed call, and
the warm-up a setup ends with. Its own module so that ``variants`` and the per-family variant modules it
imports (attention, MLA, serving ops) use one definition without importing each other."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Tensors = Mapping[str, "torch.Tensor"]
Outputs = dict[str, "torch.Tensor"]
TimedCall = Callable[[], Outputs]
Setup = Callable[[Tensors, Mapping[str, int]], TimedCall]
# (work function, its positional arguments): the task's work with every view and constant prepared
Bound = tuple[Callable[..., Outputs], tuple[Any, ...]]


def warmed(call: TimedCall) -> TimedCall:
    """Run the call once in setup: first-call costs (handles, module loads, JIT) are never timed."""
    call()
    return call
