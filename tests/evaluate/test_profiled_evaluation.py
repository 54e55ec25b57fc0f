"""The evaluator's executed-instruction stage on the CPU, with a fake ncu (tests/evaluate/fake_ncu.py) and the
fake worker: counter permission comes from the harness's probe once per evaluator, never from a candidate's
output, and copy-engine byte shares are judged, or left unverified when the report lacks their counters."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.proof.executed import BYTE_METRICS
from ptxbench.records.evaluation import Evaluation, Guard, Status

from ..conftest import EXAMPLES
from .fake_ncu import recordings, use
from .fake_runner import BEHAVIOUR
from .test_evaluator_orchestration import HANDLER, _small_softmax

NCU_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
KERNEL = "softmax_kernel(const __nv_bfloat16 *, __nv_bfloat16 *, long)"  # the example's own kernel
PROBE_REPORT = (NCU_FIXTURES / "h200_counter_probe.csv").read_text()
PLAIN_REPORT = PROBE_REPORT.replace("ptxbench_counter_probe", KERNEL)  # a plain store: no copy engine
BULK_REPORT = (NCU_FIXTURES / "h200_bulk_copy_candidate.csv").read_text().replace("k(const float *, float *)", KERNEL)
CANDIDATE_NOISE = (NCU_FIXTURES / "h200_bulk_copy_candidate_output.txt").read_text()  # a table and ERR_NVGPUCTRPERM
DENIED = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"


def _without_byte_counters(report: str) -> str:
    rows = list(csv.reader(io.StringIO(report)))
    keep = [i for i, name in enumerate(rows[0]) if name not in BYTE_METRICS]
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([[row[i] for i in keep] for row in rows])
    return out.getvalue()


def _evaluations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int = 1, time: bool = False,  # type: ignore[no-untyped-def]
                 **scripted) -> list[Evaluation]:
    folder = tmp_path / "fake-ncu"
    use(folder, monkeypatch, **scripted)
    monkeypatch.setenv(BEHAVIOUR, "correct")
    evaluator = GpuEvaluator(EvalOptions(profile=True, time=time, call_timeout_s=20, profile_timeout_s=60),
                             handler=HANDLER, reference_device="cpu")
    source = (EXAMPLES / "softmax.cu").read_text()
    try:
        return [evaluator.evaluate(_small_softmax(), Arch.SM_90A, source, "softmax.cu") for _ in range(count)]
    finally:
        evaluator.close()


def test_counters_the_probe_may_not_read_leave_every_candidate_unverified(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    evaluations = _evaluations(tmp_path, monkeypatch, count=2, probe_output=DENIED, probe_report=None,
                               candidate_report=PLAIN_REPORT)
    for evaluation in evaluations:
        assert evaluation.status is Status.PASSED and evaluation.features is None, evaluation.message
        assert "ERR_NVGPUCTRPERM" in evaluation.message and "probe kernel" in evaluation.message
    assert [r["role"] for r in recordings(tmp_path / "fake-ncu")] == ["probe"], "probed once, no candidate profiled"
    assert "profile.probe" in evaluations[0].durations_s and "profile.probe" not in evaluations[1].durations_s


def test_a_candidate_printing_the_permission_error_is_still_judged(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (evaluation,) = _evaluations(tmp_path, monkeypatch, probe_report=PROBE_REPORT, candidate_output=CANDIDATE_NOISE,
                                 candidate_report=PLAIN_REPORT)
    assert evaluation.status is Status.REJECTED and evaluation.features is not None, evaluation.message
    assert any(g.guard is Guard.FEATURE_NOT_EXECUTED for g in evaluation.guards)
    assert [r["role"] for r in recordings(tmp_path / "fake-ncu")] == ["probe", "candidate"]


def test_copies_moving_the_bytes_pass_and_a_token_share_is_rejected(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (evaluation,) = _evaluations(tmp_path, monkeypatch, probe_report=PROBE_REPORT, candidate_report=BULK_REPORT)
    assert evaluation.status is Status.PASSED and evaluation.features is not None, evaluation.message
    copy = next(f for f in evaluation.features if f.requirement.min_byte_share)
    assert copy.satisfied and copy.byte_share is not None and copy.byte_share >= 1.0
    token = BULK_REPORT.replace('"262,144","262,144"', '"8","8"')  # 16 of the small task's 1,024 bytes
    (evaluation,) = _evaluations(tmp_path, monkeypatch, probe_report=PROBE_REPORT, candidate_report=token)
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert "moving 1.6% of the task's bytes (needs 40%" in evaluation.message


def test_a_report_without_the_byte_counters_is_unverified_not_rejected(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (evaluation,) = _evaluations(tmp_path, monkeypatch, probe_report=PROBE_REPORT,
                                 candidate_report=_without_byte_counters(BULK_REPORT))
    assert evaluation.status is Status.PASSED and evaluation.features is None, evaluation.message
    assert "unverified" in evaluation.message and not evaluation.guards


@pytest.mark.parametrize(("profiled_ns", "rejected"), [("2,100,000", False), ("4,000,000", True)])
def test_a_timed_call_faster_than_its_profiled_kernels_is_rejected(tmp_path: Path, monkeypatch, profiled_ns: str,  # type: ignore[no-untyped-def]
                                                                   rejected: bool) -> None:
    """The fake worker times every call at 2 ms. Kernels that ncu measured at 2.1 ms agree with that (events also
    time the launch); at 4 ms the events said twice as fast as the kernels ran: forged inside the process. A
    disagreement seen beside other work is checked again with the GPU held alone before it is a verdict."""
    report = BULK_REPORT.replace('"2,720"', f'"{profiled_ns}"')
    (evaluation,) = _evaluations(tmp_path, monkeypatch, time=True, probe_report=PROBE_REPORT, candidate_report=report)
    roles = [r["role"] for r in recordings(tmp_path / "fake-ncu")]
    if rejected:
        assert evaluation.status is Status.REJECTED, evaluation.message
        (finding,) = [g for g in evaluation.guards if g.guard is Guard.TIMING_DISAGREES]
        assert "2 ms, 2.00x less than its own kernels" in finding.detail and "GPU to itself" in finding.detail
        assert roles == ["probe", "candidate", "candidate"] and "profile.alone" in evaluation.durations_s
    else:
        assert evaluation.status is Status.PASSED and not evaluation.guards, evaluation.message
        assert roles == ["probe", "candidate"] and "profile.alone" not in evaluation.durations_s


def _timed_with_host_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, candidate_report: str,
                          behaviour: str = "forged-when-timed") -> Evaluation:
    """The fake candidate's calls take 20 ms of the parent's wall clock where their events say 2 ms, timed and
    profiled (on every workload, or with "forged-off-timed" on all but the timed one, the one ncu profiles);
    ncu's report for its kernel is ``candidate_report``."""
    use(tmp_path / "fake-ncu", monkeypatch, probe_report=PROBE_REPORT, candidate_report=candidate_report)
    monkeypatch.setenv(BEHAVIOUR, behaviour)
    evaluator = GpuEvaluator(EvalOptions(profile=True, call_timeout_s=20, timing_budget_ms=20, profile_timeout_s=60),
                             handler=HANDLER, reference_device="cpu")
    try:
        return evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text(), "softmax.cu")
    finally:
        evaluator.close()


def test_ncu_durations_that_confirm_the_events_outweigh_the_wall_clock(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Host work inside an honest call (a device query per call) and forged events look the same on the wall
    clock; ncu tells them apart. Its kernel taking 2.7 us, the 2 ms events stand: PASSED. Its kernel taking 20 ms,
    the events were forged: REJECTED by ncu's disagreement."""
    evaluation = _timed_with_host_work(tmp_path, monkeypatch, BULK_REPORT)
    assert all(t.wall_unexplained_ms is not None and t.wall_unexplained_ms > 15 for t in evaluation.timings)
    assert all(t.wall_protocol_ms is not None for t in evaluation.timings)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert Guard.TIMING_DISAGREES not in {g.guard for g in evaluation.guards}
    slow = BULK_REPORT.replace('"2,720"', '"20,000,000"')
    assert slow != BULK_REPORT
    evaluation = _timed_with_host_work(tmp_path / "forged", monkeypatch, slow)
    assert evaluation.status is Status.REJECTED, evaluation.message
    findings = [g.detail for g in evaluation.guards if g.guard is Guard.TIMING_DISAGREES]
    assert any("Nsight Compute" in d for d in findings), findings


def test_events_forged_only_where_ncu_does_not_look_stay_caught_by_the_wall_clock(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """ncu profiles the timed workload alone. A candidate honest there (its kernel confirms its events, no host
    work beyond them) whose events on the visible workload say 2 ms where each call takes 20 ms: ncu's agreement
    on the timed workload pardons nothing else, the wall clock's finding on the visible one stands: REJECTED
    (checked to pass with every wall-clock finding dropped once ncu agreed, as before)."""
    evaluation = _timed_with_host_work(tmp_path, monkeypatch, BULK_REPORT, behaviour="forged-off-timed")
    by_workload = {t.workload: t.wall_unexplained_ms for t in evaluation.timings}
    assert by_workload["small-timed"] < 5 < 15 < by_workload["small-visible"], by_workload
    assert evaluation.status is Status.REJECTED, evaluation.message
    (finding,) = [g.detail for g in evaluation.guards if g.guard is Guard.TIMING_DISAGREES]
    assert finding.startswith("small-visible: on the harness's wall clock"), finding
