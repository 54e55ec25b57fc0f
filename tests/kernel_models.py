"""What the NumPy models of the reference kernels share: the kernels' own constants, read from their source so a
model runs what the kernel compiles, and the wrapper header's tile orders that several kernels use."""

from __future__ import annotations

import re
from pathlib import Path


def kernel_constants(kernel: Path, *names: str) -> dict[str, int]:
    """Each ``constexpr int NAME = <literal>;`` of ``kernel``, by name; an assertion naming the first that has
    changed form (the model must then be updated with it)."""
    source = kernel.read_text()
    found = {}
    for name in names:
        match = re.search(rf"constexpr int {name} = (\d+);", source)
        assert match, f"{name}: the kernel's constants changed form: update this model with them"
        found[name] = int(match.group(1))
    return found


def grouped_tile(t: int, rows: int, cols: int, group: int) -> tuple[int, int]:
    """ptx::grouped_tile (ptx_wrappers.cuh): tile ``t`` of a ``rows`` x ``cols`` grid walked ``group`` rows at a time."""
    per_group = group * cols
    g = t // per_group
    first = g * group
    rows_here = min(rows - first, group)
    r = t - g * per_group
    return first + r % rows_here, r // rows_here
