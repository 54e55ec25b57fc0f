"""How one side's timed samples are summed up: their median and interquartile range. Its own module because both
sides of the protocol use it, the worker (``child.gpu_side``) for what it reports and the parent (``protocol``)
for what it records, and the child must not import the parent's protocol."""

from __future__ import annotations

import statistics


def median_iqr(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    if len(ordered) < 4:
        return statistics.median(ordered), 0.0
    quartiles = statistics.quantiles(ordered, n=4)
    return statistics.median(ordered), quartiles[2] - quartiles[0]
