"""Which workloads each evidence profile times (``records.evidence``), and at what budget.

``publish`` times every shown workload (timed and visible) at ``EvalOptions.timing_budget_ms`` per side. ``sweep``
times the task's timed workload alone, at the same budget: that is where its saving is (one workload instead of
three to six; on an H200 the six interleaved GEMM workloads held the GPU 5.8 s per candidate,
``benchmarks/results/serve_h200.md``), not in a shorter measurement. The budget is kept because the measurements
say a shorter one breaks the spread target of SPREAD_TARGET_PCT: at 100 ms (1 ms chunks) the candidate's median
repeated within 0.14-1.06 % across four evaluations on every bf16 GEMM workload and within 0.85-1.29 % on every
rmsnorm one, while at 50 ms the ratio to the baseline spread 12.4 % (gemm_bf16 square-4096) and the candidate's
time 9.1 % (rmsnorm t32-h4096-decode) (``timing_evaluations_{gemm_bf16,rmsnorm}_h200.json``, one H200). To be
measured again on the H100 with ``benchmarks/serve_throughput.py --evidence both``.
"""

from __future__ import annotations

from ptxbench.records.evidence import EvidenceProfile
from ptxbench.tasks.model import Role, Task, Workload

SPREAD_TARGET_PCT = 2.0
"""The spread across evaluations a sweep's timed-workload time is meant to stay within (issue 40)."""


def timed_workloads(task: Task, shown: list[Workload], evidence: EvidenceProfile) -> list[Workload]:
    """Of ``shown`` (the workloads that may be timed: held-out ones are never timed), those the profile times."""
    shown = [w for w in shown if w.role is not Role.HELDOUT]
    if evidence is EvidenceProfile.SWEEP:
        return [w for w in shown if w.name == task.timed().name]
    return shown
