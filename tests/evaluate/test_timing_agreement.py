"""Timing forged inside the candidate's process is bounded by clocks it cannot reach (Nsight Compute's durations
and the parent's wall clock), without accusing an honest call of several kernels that ncu, running each kernel
alone with cold caches, sums to more than the call takes back to back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.judgement.guards import (
    MIN_TIMED_SHARE_OF_PROFILED,
    WALL_HOST_ALLOWANCE_MS,
    WALL_PROTOCOL_FACTOR,
    profiled_floor_ms,
    timing_agreement_guards,
    wall_allowance_ms,
    wall_clock_guards,
    wall_findings_confirmed,
)
from ptxbench.evaluate.timing.protocol import wall_unexplained
from ptxbench.records.evaluation import Guard, GuardFinding, Status

from ..conftest import EXAMPLES
from .test_evaluator_orchestration import BEHAVIOUR, HANDLER, _small_softmax


def _launches(*ms: float) -> list[SimpleNamespace]:
    return [SimpleNamespace(duration_ns=value * 1e6) for value in ms]


def test_one_kernel_must_take_nearly_what_ncu_measured() -> None:
    assert profiled_floor_ms([0.2]) == pytest.approx(MIN_TIMED_SHARE_OF_PROFILED * 0.2)
    assert timing_agreement_guards(0.185, _launches(0.2), alone=True) == []
    (finding,) = timing_agreement_guards(0.16, _launches(0.2), alone=True)
    assert finding.guard is Guard.TIMING_DISAGREES and "1.25x less than its own kernels" in finding.detail


def test_an_honest_split_kv_decode_and_merge_is_not_accused() -> None:
    """The case seen on an H100: 0.1627 ms timed, 0.2019 ms summed under ncu over a decode and a merge kernel."""
    assert timing_agreement_guards(0.1627, _launches(0.1899, 0.0120), alone=True) == []
    # the same sum in one kernel is a forgery
    assert timing_agreement_guards(0.1627, _launches(0.2019), alone=True)
    # several kernels still cannot beat their longest one, nor a large share of their sum
    assert timing_agreement_guards(0.10, _launches(0.1899, 0.0120), alone=True)
    assert timing_agreement_guards(0.10, _launches(*[0.02] * 10), alone=True)


def test_the_wall_clock_bounds_what_an_event_time_can_hide() -> None:
    # per call: the candidate's chunk took 6 ms beyond its events over 4 calls, the baseline's 2 ms: 1 ms each
    assert wall_unexplained({"candidate": 0.010, "baseline": 0.006}, {"candidate": [1.0] * 4,
                                                                      "baseline": [1.0] * 4}) == pytest.approx(1.0)
    assert wall_clock_guards("w", 0.1, WALL_HOST_ALLOWANCE_MS * 0.9) == [], "host work inside the call is allowed"
    assert wall_clock_guards("w", 2.0, 1.5) == [], "a call that took less than twice its event time"
    (finding,) = wall_clock_guards("w", 0.1, 0.9)
    assert finding.guard is Guard.TIMING_DISAGREES and "wall clock" in finding.detail
    assert wall_clock_guards("w", 0.1, None) == []


def test_the_wall_clock_allows_for_the_protocols_own_host_time() -> None:
    # measured on an H100: a plain 0.08 ms GEMM read 0.57 ms a call beyond its baseline's wall time, nothing forged,
    # where each call's protocol took 1.2 ms of host time on the baseline's side
    assert wall_clock_guards("w03", 0.0836, 0.567, protocol_ms=1.2) == []
    assert wall_allowance_ms(0.0836, 1.2) == pytest.approx(1.2 * WALL_PROTOCOL_FACTOR)
    (finding,) = wall_clock_guards("w03", 0.0836, 0.9, protocol_ms=0.3)  # a cheap protocol: 0.9 ms is not noise
    assert "0.3 ms a call" in finding.detail
    assert wall_clock_guards("w", 2.0, 20.0, protocol_ms=1.2), "a call ten times longer than it says is still caught"


def _timing(workload: str, candidate_ms: float, unexplained_ms: float | None) -> SimpleNamespace:
    return SimpleNamespace(workload=workload, candidate_ms=candidate_ms, wall_unexplained_ms=unexplained_ms,
                           wall_protocol_ms=0.2)


def test_ncu_durations_that_confirm_the_events_clear_only_the_wall_clocks_findings() -> None:
    timings = [_timing("w", 0.1, 5.0)]
    wall = wall_clock_guards("w", 0.1, 5.0)
    ncu = timing_agreement_guards(0.1, _launches(1.0), alone=True)
    other = [GuardFinding(guard=Guard.FOREIGN_KERNELS, detail="x")]
    assert wall and ncu
    assert wall_findings_confirmed(wall + other, timings, "w", events_agree_with_ncu=True) == other
    assert wall_findings_confirmed(wall + ncu + other, timings, "w", events_agree_with_ncu=False) == wall + ncu + other
    assert wall_findings_confirmed(ncu, timings, "w", events_agree_with_ncu=True) == ncu, "only the wall clock's yield"


def test_host_work_that_ncu_confirmed_on_one_workload_is_allowed_on_the_others_and_nothing_more() -> None:
    """ncu profiles the timed workload only: its wall-clock excess (5 ms a call, host work ncu showed) is the
    candidate's own allowance on the other workloads, not a pardon for them. A workload whose calls take 5.3 ms
    beyond their events is the same host work; one whose calls take 25 ms beyond (events forged where ncu does
    not look) is REJECTED. Without host work on the profiled workload, the other's 5 ms stands against it."""
    honest = [_timing("timed", 0.1, 5.0), _timing("visible", 0.1, 5.3)]
    guards = [g for t in honest for g in wall_clock_guards(t.workload, t.candidate_ms, t.wall_unexplained_ms, 0.2)]
    assert len(guards) == 2
    assert wall_findings_confirmed(guards, honest, "timed", events_agree_with_ncu=True) == []
    forged = [_timing("timed", 0.1, 5.0), _timing("visible", 0.1, 25.0)]
    guards = [g for t in forged for g in wall_clock_guards(t.workload, t.candidate_ms, t.wall_unexplained_ms, 0.2)]
    (finding,) = wall_findings_confirmed(guards, forged, "timed", events_agree_with_ncu=True)
    assert finding.detail.startswith("visible: ") and "less the 5 ms of host work" in finding.detail
    only_there = [_timing("timed", 0.1, 0.0), _timing("visible", 0.1, 5.0)]
    guards = wall_clock_guards("visible", 0.1, 5.0, 0.2)
    (finding,) = wall_findings_confirmed(guards, only_there, "timed", events_agree_with_ncu=True)
    assert finding.detail.startswith("visible: ") and "host work per call that ncu" not in finding.detail


def test_a_forged_event_time_is_rejected_without_the_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    """Event times that say 2 ms where each call takes 20 ms of the parent's wall clock: REJECTED with --no-profile."""
    monkeypatch.setenv(BEHAVIOUR, "forged-when-timed")
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20, timing_budget_ms=20), handler=HANDLER,
                             reference_device="cpu")
    try:
        evaluation = evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text())
    finally:
        evaluator.close()
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert {g.guard for g in evaluation.guards} == {Guard.TIMING_DISAGREES}
    assert all(t.wall_unexplained_ms is not None and t.wall_unexplained_ms > 15 for t in evaluation.timings)
