"""The evidence profile an evaluation was judged under, recorded in every result, run header and server job.

Two profiles answer two questions. ``publish`` is the number a report stands behind: every shown workload
timed, ncu on every candidate that passes correctness. ``sweep`` is the answer an RL trainer or a repair
loop needs thousands of times: correctness exactly as ``publish`` (every workload, held-out included, every
trial), the guards that need no extra GPU time, the timed workload alone timed, and ncu only where the proof
can matter (a correct candidate near the baseline's speed). A figure mixes neither: the two measure speed
on different workloads and prove features on different candidates. What each profile does is the evaluator's:
``evaluate.timing.profiles`` (what is timed), ``evaluate.judgement.funnel`` (what is profiled) and
``evaluate.baselines.freshness`` (when sweep measures a cached baseline again).
"""

from __future__ import annotations

from enum import Enum


class EvidenceProfile(str, Enum):
    """What evidence an evaluation gathered. A record written before profiles existed was ``publish``: that is
    what every evaluation then did."""

    PUBLISH = "publish"
    SWEEP = "sweep"

