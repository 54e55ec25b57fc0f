"""Sweep's funnel: which correct candidates are worth the executed-instruction proof.

Under ``sweep`` (``records.evidence``) ncu runs only for a candidate that passed correctness and whose timed
workload ran within SWEEP_PROFILE_WITHIN times the best baseline's time: a slower kernel's reward is decided by
its speed before its features matter, and ncu costs 1.7-2.4 s a candidate (``benchmarks/results/serve_h200.md``).
Such a candidate's features stay unverified and say why; it is never REJECTED for a proof that did not run.
"""

from __future__ import annotations

from ptxbench.records.evaluation import Timing
from ptxbench.records.evidence import EvidenceProfile

SWEEP_PROFILE_WITHIN = 2.0
"""A sweep candidate is profiled only when its timed-workload time is at most this many times the best baseline's."""


def best_baseline_ms(timing: Timing) -> float | None:
    """The fastest baseline time the timing knows: the compared one, or any variant's clean time below it."""
    times = [timing.baseline_ms] if timing.baseline_ms else []
    times += [v for v in timing.baseline_variants.values() if isinstance(v, float) and v > 0]
    return min(times, default=None)


def not_profiled(evidence: EvidenceProfile, timed: Timing | None) -> str | None:
    """Why ncu is skipped for a correct candidate whose timed workload was measured as ``timed`` (None: profile
    it). Publish profiles every correct candidate; so does sweep where no timing or baseline says it is slow."""
    if evidence is not EvidenceProfile.SWEEP or timed is None:
        return None
    best = best_baseline_ms(timed)
    if best is None or timed.candidate_ms <= SWEEP_PROFILE_WITHIN * best:
        return None
    return (f"unverified, not profiled (sweep: slower than {SWEEP_PROFILE_WITHIN:g} x the baseline: "
            f"{timed.candidate_ms:.4g} ms against {best:.4g} ms)")
