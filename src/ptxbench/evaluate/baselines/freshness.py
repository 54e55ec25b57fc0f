"""When sweep measures a cached clean baseline time again (``records.evidence``).

Publish trusts a clean time cached per GPU and library versions for good: a report's evaluations are few and
each also times its baseline interleaved. A sweep asks thousands of questions over hours, in which the GPU's
clock and temperature can move away from what the clean time saw; the clean time is then re-measured:

- after SWEEP_BASELINE_EVERY candidates have been compared against it in this process (its age);
- at the next candidate after one whose interleaved baseline drifted from the clean time by more than the
  allowance given, either way: the interleaved baseline, measured beside every candidate, is how drift is seen.
  The harness reads no clocks or temperatures (``doctor`` lists GPUs through nvidia-smi, nothing polls NVML),
  so a drift that moves both the same way shows only through the cache's age. A candidate that slows the
  baseline beside it costs one re-measurement (about a second on a GEMM), never a wrong time.
"""

from __future__ import annotations

import hashlib
import json

SWEEP_BASELINE_EVERY = 50
"""Candidates compared against one clean time before sweep measures it again (a re-measurement of CLEAN_SESSIONS
interleaved sessions is about 1.5 s on a bf16 GEMM: 0.03 s a candidate); to be tuned once sweep is measured."""


def _name(key: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


class CleanTimeAges:
    """Per cached clean time (by its ``BaselineCache`` key): candidates compared since it was measured or first
    read here, and whether drift was seen. Lives as long as its evaluator (a server's lifetime)."""

    def __init__(self, every: int = SWEEP_BASELINE_EVERY) -> None:
        self.every = every
        self._uses: dict[str, int] = {}
        self._drifted: set[str] = set()

    def stale(self, key: dict[str, str]) -> bool:
        """Whether the cached time for ``key`` is to be measured again before it is used."""
        name = _name(key)
        return name in self._drifted or self._uses.get(name, 0) >= self.every

    def measured(self, key: dict[str, str]) -> None:
        name = _name(key)
        self._uses[name] = 0
        self._drifted.discard(name)

    def used(self, key: dict[str, str], interleaved_ms: float, clean_ms: float, allowance: float) -> None:
        """One candidate compared against the clean time ``clean_ms`` with its baseline interleaved at
        ``interleaved_ms``; drift is noted when the two differ by more than ``allowance`` (a fraction)."""
        name = _name(key)
        self._uses[name] = self._uses.get(name, 0) + 1
        if clean_ms > 0 and abs(interleaved_ms / clean_ms - 1) > allowance:
            self._drifted.add(name)
