"""Fresh input contents for every timed round, so that no timed call can be answered from a cache of earlier ones.

Timing rotates three input sets over hundreds of calls. A candidate that fingerprints a few elements of its
inputs and keeps earlier outputs in device memory it never frees (against the contract: no allocation outlives
the call) answers most timed calls with a copy, and passes with a time its kernels never achieve. Before every
timed round its input set is changed in place (``freshen``): a share of the elements of each freshened input,
spread evenly over the tensor from a random offset, is overwritten with elements taken from other positions of
the same tensor, so the values stay those the task draws. Positions come from integer arithmetic on a key
derived from the set's secret seed and the round, never from a device generator, so the parent replays the same
changes on any device (``replay``) and checks the outputs of the last timed call against the reference of the
inputs that call really had. A cache keyed on a sample of elements then hands back a stale output, which that
check finds; one keyed on every element misses every time and saves nothing.

Only drawn floating-point inputs are freshened: integer inputs (page tables, offsets, positions) carry the
workload's structure, which a baseline's setup may have planned for. A drawn input that a derived floating-point
input is computed from (attention backward's Q, K and V, from which O and LSE come) is left alone too, or the
derived one would no longer match it; which inputs those are is found by trying, once per task, on its smallest
workload on the CPU (``freshened_inputs``). Both sides of a measurement freshen alike, outside the timed region,
so the protocol's cost is the same for the candidate and its baseline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ptxbench.tasks.model import InitKind, Task

if TYPE_CHECKING:
    import torch

FRESH_SHARE = 1 / 64
"""Share of a freshened tensor's elements overwritten per round: every 64th element, so every row of a matrix
longer than 64 changes (a GEMM's stale output is off in every element by several times its tolerance)."""
FRESH_CAP = 1 << 22
"""At most this many elements per tensor and round (16 MB of indices), which bounds the cost on the largest
weights (moe_grouped_gemm's 3.7 G elements: about one in 900 changes, still several in every row)."""
_KEY_BITS = 62
_MULTIPLIER = 0x2545F491  # odd, below 2**30; reduced per tensor so that position * multiplier stays below 2**62


def round_key(seed: int, turn: int) -> int:
    """The key of round ``turn``'s change to the input set drawn from ``seed`` (both the parent's secrets)."""
    return (seed * 0x9E3779B97F4A7C15 + turn * 0xBF58476D1CE4E5B9) % (1 << _KEY_BITS)


def _is_float(dtype_name: str) -> bool:
    return dtype_name.startswith(("float", "bfloat"))


def _raw(tensor: "torch.Tensor") -> "torch.Tensor":
    """The tensor's elements as integers of the same width (float8 and bfloat16 included), flattened."""
    import torch

    by_size = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return tensor.view(-1).view(by_size[tensor.element_size()])


def freshen_tensor(tensor: "torch.Tensor", key: int) -> None:
    """Overwrite ``min(FRESH_CAP, numel * FRESH_SHARE)`` elements of ``tensor`` (in place), one in every stretch of
    ``numel / count`` from a random offset, with elements from other positions of it, chosen by ``key`` alone."""
    import torch

    flat = _raw(tensor)
    total = flat.numel()
    if total < 2:
        return
    count = max(1, min(FRESH_CAP, math.ceil(total * FRESH_SHARE)))
    stride = total // count
    offset = key % stride
    shift = (key >> 20) % total
    multiplier = (_MULTIPLIER % max(3, (2**62) // total)) | 1
    device = flat.device
    dst = torch.arange(count, device=device, dtype=torch.int64) * total // count + offset  # unique, end to end
    mixed = dst * multiplier
    src = ((mixed ^ (mixed >> 31)) + shift) % total  # not tied to dst modulo any small number
    flat[dst] = flat[src]  # the gather is read in full before the scatter: positions are unique, the result exact


def freshen(inputs: Mapping[str, "torch.Tensor"], names: Iterable[str], key: int) -> None:
    """Freshen the named inputs of one input set for one round (each input with its own key)."""
    for index, name in enumerate(names):
        freshen_tensor(inputs[name], (key + index * 0x632BE59BD9B4E019) % (1 << _KEY_BITS))


def replay(inputs: Mapping[str, "torch.Tensor"], names: Iterable[str], keys: Iterable[int]) -> None:
    """The changes of the rounds ``keys``, in order, applied to a freshly drawn input set: the inputs the
    candidate's last timed call of that set had."""
    names = tuple(names)
    for key in keys:
        freshen(inputs, names, key)


_FRESHENED: dict[str, tuple[str, ...]] = {}
"""``freshened_inputs`` by task content hash: tried once per task and process."""


def _freshened(task: Task) -> tuple[str, ...]:
    import torch

    from ptxbench.tasks.reference import derive_inputs, make_inputs

    drawn = [s.name for s in task.inputs if s.init.kind is not InitKind.DERIVED and _is_float(s.dtype.value)]
    derived_floats = [s.name for s in task.inputs if s.init.kind is InitKind.DERIVED and _is_float(s.dtype.value)]
    if not derived_floats or not drawn:
        return tuple(drawn)
    smallest = min(task.workloads, key=lambda w: sum(s.numel(w.sizes) for s in task.inputs))
    inputs = dict(make_inputs(task, smallest.sizes, seed=0, device="cpu"))
    drawn_any = {s.name for s in task.inputs if s.init.kind is not InitKind.DERIVED}
    kept = []
    for name in drawn:
        changed = {n: t.clone() for n, t in inputs.items() if n in drawn_any}
        freshen_tensor(changed[name], round_key(1, 1))
        if torch.equal(changed[name], inputs[name]):
            continue  # too small to change: nothing to learn from it, and nothing to gain
        rederived = derive_inputs(task, changed, smallest.sizes)
        if all(torch.equal(rederived[d], inputs[d]) for d in derived_floats):  # both in their dtype
            kept.append(name)
    return tuple(kept)


def freshened_inputs(task: Task) -> tuple[str, ...]:
    """The inputs of ``task`` that timing freshens: its drawn floating-point inputs that no derived
    floating-point input depends on (tried once per task on its smallest workload, on the CPU)."""
    if task.content_hash not in _FRESHENED:
        _FRESHENED[task.content_hash] = _freshened(task)
    return _FRESHENED[task.content_hash]


WARM_UP_ROUNDS = 3
"""The first rounds of a measurement, dropped from its times (``timing.interleaved``) and never checked here."""
CHECKED_CALLS = 2
"""Timed calls of the candidate, beside its last, whose outputs the parent checks: drawn uniformly from the calls
after the warm-up (``CheckedCalls``). A candidate fast on a share h of its calls by handing back outputs it kept
(stale, since the inputs change every round) is caught unless none of the checked calls is one of them:
probability (1 - h) ** (CHECKED_CALLS + 1), at most 1/8 for a median it moved (h > 1/2), 1/125 at h = 0.8."""
CHECKED_BYTES = 1 << 30
"""At most this many bytes of kept outputs per workload (fewer checked calls for the largest outputs)."""


class CheckedCalls:
    """Which timed calls' outputs are kept for the parent's check: a uniform sample of ``slots`` of the calls
    offered (reservoir sampling), chosen by a generator seeded from a secret the candidate does not see, so it
    cannot tell which of its calls will be checked."""

    def __init__(self, slots: int, secret: int) -> None:
        import random

        self.slots = slots
        self._random = random.Random(secret)
        self._offered = 0
        self.taken = 0

    def offer(self) -> int | None:
        """For the next call: the slot its outputs go to (replacing what was there), or None to keep it out."""
        self._offered += 1
        if self.taken < self.slots:
            self.taken += 1
            return self.taken - 1
        if self._random.random() < self.slots / self._offered:
            return self._random.randrange(self.slots)
        return None


def checked_slots(output_bytes: int) -> int:
    """How many timed calls beside the last are kept for the check, for outputs of ``output_bytes`` in all."""
    return max(1, min(CHECKED_CALLS, CHECKED_BYTES // max(1, output_bytes)))
