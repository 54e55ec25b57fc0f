"""The local multi-GPU pool on the CPU: one host process per "GPU" (pinned through CUDA_VISIBLE_DEVICES,
which the stand-in GPU side reads), a shared queue, one writer, resume, and faulting GPUs retired."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.fleet.pool import GpuSelectionError, parse_gpus, pin_for
from ptxbench.evaluate.fleet.run import GpusRetired, evaluate_candidates
from ptxbench.records.completion import ExtractionStatus
from ptxbench.records.evaluation import Generation, InfraFailure, Status
from ptxbench.records.rundir import RunDir

from .scaleout import FAKE, OPTIONS, candidates, stored


@pytest.fixture(autouse=True)
def _fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PTXBENCH_FAKE_STATE", str(tmp_path))


def _run(out: Path, count: int, handler: str = "FakeRunner", gpus: tuple[int, ...] = (0, 1)):  # type: ignore[no-untyped-def]
    return evaluate_candidates(candidates(count), Arch.SM_90A, out, OPTIONS, gpus=list(gpus),
                               handler=f"{FAKE}:{handler}", reference_device="cpu")


def test_every_item_gets_one_result_from_both_gpus_and_a_rerun_skips_them(tmp_path: Path) -> None:
    out = tmp_path / "run"
    results = _run(out, 4)
    assert [r.candidate for r in results] == [f"copy {i}" for i in range(4)], "results come back in order"
    first = stored(out)
    assert sorted(first) == ["c00", "c01", "c02", "c03"]
    assert all(evaluation.status is Status.PASSED for evaluation, _, _ in first.values())
    used = {placement["slot"] for _, placement, _ in first.values()}
    assert used == {"0", "1"}, "both GPUs took work from the shared queue"
    for _, placement, _ in first.values():
        assert placement["where"]["cuda_visible_devices"] == placement["slot"], "each host sees only its own GPU"
        assert placement["backend"] == "local" and placement["interrupted_by"] == []
    header = RunDir.load(out).header
    assert [gpu["slot"] for gpu in header.environment["gpus"]] == ["0", "1"]
    assert "backend" not in header.config and "gpus" not in header.config, "resume must not depend on them"

    _run(out, 6, gpus=(1,))
    second = stored(out)
    assert sorted(second) == [f"c{i:02d}" for i in range(6)]
    assert all(second[item][2] == first[item][2] for item in first), "finished items are not redone"
    assert {second[item][1]["slot"] for item in ("c04", "c05")} == {"1"}


def test_on_gpus_an_answer_without_code_is_an_item_and_every_item_keeps_its_labels(tmp_path: Path) -> None:
    """The GPU path records what the CPU path records: the sample without code (never sent to a GPU) and the
    generation run's labels on every evaluation, those the hosts made included."""
    labels = [Generation(run="gen", model="openai:m", provider="openai", condition="full", sample=i) for i in range(2)]
    evaluated, without_code = [c.model_copy(update={"generation": g}) for c, g in zip(candidates(2), labels)]
    without_code = without_code.model_copy(update={"source": "", "extraction": ExtractionStatus.NO_CODE})
    out = tmp_path / "run"
    results = evaluate_candidates([evaluated, without_code], Arch.SM_90A, out, OPTIONS, gpus=[0],
                                  handler=f"{FAKE}:FakeRunner", reference_device="cpu")
    assert [(r.status, r.extraction) for r in results] == [(Status.PASSED, None), (None, ExtractionStatus.NO_CODE)]
    found = stored(out)
    assert [found[item][0].generation for item in ("c00", "c01")] == labels
    assert found["c01"][1] == {"backend": "local", "slot": None}, "no GPU saw it"
    assert not (out / "items" / "softmax" / "c01" / "candidate.cu").exists()


def test_a_faulting_gpu_is_retired_and_its_candidates_go_to_another(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.fleet.scheduler"):
        results = _run(out, 6, handler="BreaksGpu1")
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]
    found = stored(out)
    assert sorted(found) == [f"c{i:02d}" for i in range(6)], "every item has exactly one result"
    assert {placement["where"]["cuda_visible_devices"] for _, placement, _ in found.values()} == {"0"}
    interrupted = [placement["interrupted_by"] for _, placement, _ in found.values() if placement["interrupted_by"]]
    assert len(interrupted) == 1, "the candidate GPU 1 broke on was re-queued, not failed"
    assert interrupted[0][0].startswith("GPU 1: the GPU failed a health check") and "uncorrectable ECC" in interrupted[0][0]
    assert "GPU 1 retired: failed the harness's health check" in caplog.text


def test_a_gpu_that_computes_the_known_good_kernel_wrong_is_retired(tmp_path: Path) -> None:
    """A crash is followed by the health check; a GPU that opens but gets the known-good matmul wrong fails it."""
    with pytest.raises(GpusRetired, match="known-good matmul is wrong"):
        _run(tmp_path / "run", 2, handler="SickGpu", gpus=(0,))
    assert all(evaluation.infra_failure is InfraFailure.NO_GPU for evaluation, _, _ in stored(tmp_path / "run").values())


@pytest.mark.slow
def test_with_two_lanes_every_candidate_a_faulting_gpu_held_goes_to_another(tmp_path: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    """The default: two hosts on each GPU. When GPU 1 breaks, whatever either of its lanes held is re-queued."""
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.fleet.scheduler"):
        results = evaluate_candidates(candidates(6), Arch.SM_90A, out, OPTIONS.model_copy(update={"lanes": 2}),
                                      gpus=[0, 1], handler=f"{FAKE}:BreaksGpu1", reference_device="cpu")
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]
    found = stored(out)
    assert sorted(found) == [f"c{i:02d}" for i in range(6)], "every item has exactly one result"
    assert {placement["where"]["cuda_visible_devices"] for _, placement, _ in found.values()} == {"0"}
    interrupted = [placement["interrupted_by"] for _, placement, _ in found.values() if placement["interrupted_by"]]
    assert 1 <= len(interrupted) <= 2 and all(i[0].startswith("GPU 1.") for i in interrupted), interrupted
    assert any("uncorrectable ECC" in i[0] for i in interrupted)


def test_when_every_gpu_is_retired_the_rest_are_recorded_as_infrastructure_failures(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(GpusRetired, match="every GPU was retired") as raised:
        _run(out, 4, handler="BreaksEveryGpu")
    found = stored(out)
    assert sorted(found) == ["c00", "c01", "c02", "c03"], "every item has exactly one result"
    failures = [evaluation.infra_failure for evaluation, _, _ in found.values()]
    assert all(evaluation.status is None for evaluation, _, _ in found.values()), "never the candidate's failure"
    assert InfraFailure.NO_GPU in failures
    assert len(raised.value.results) == 4


def test_a_gpu_that_cannot_start_is_retired_at_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    results = _run(out, 2, handler="DeadGpu1")
    assert all(r.status is Status.PASSED for r in results)
    environment = RunDir.load(out).header.environment
    assert "fallen off the bus" in environment["retired_at_start"]["1"]
    assert {placement["slot"] for _, placement, _ in stored(out).values()} == {"0"}


def test_gpu_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_gpus("0,1") == [0, 1] and parse_gpus("3") == [3]
    for bad in ("a", "0,0", "-1", ""):
        with pytest.raises(GpuSelectionError):
            parse_gpus(bad)
    assert pin_for(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,GPU-abc")
    assert pin_for(0) == "4" and pin_for(1) == "GPU-abc", "indices are this process's, mapped to what it sees"
    with pytest.raises(GpuSelectionError, match="not visible"):
        pin_for(2)


@pytest.mark.slow
def test_lanes_share_a_gpu_and_timing_runs_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spans_log = tmp_path / "spans"
    monkeypatch.setenv("PTXBENCH_FAKE_SPANS", str(spans_log))
    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))
    options = OPTIONS.model_copy(update={"time": True, "lanes": 3})
    results = evaluate_candidates(candidates(6), Arch.SM_90A, tmp_path / "run", options, gpus=[0],
                                  handler=f"{FAKE}:FakeRunner", reference_device="cpu")
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]
    slots = {placement["slot"] for _, placement, _ in stored(tmp_path / "run").values()}
    assert slots <= {"0.0", "0.1", "0.2"} and len(slots) > 1, "several lanes of GPU 0 took work"
    spans = [(kind, float(start), float(end)) for kind, _, start, end in
             (line.split() for line in spans_log.read_text().splitlines())]
    timings = [s for s in spans if s[0] == "time"]
    trials = [s for s in spans if s[0] == "trial"]
    assert timings and trials
    overlaps = [(a, b) for a in timings for b in spans if a is not b and a[1] < b[2] and b[1] < a[2]]
    assert not overlaps, f"nothing runs on the GPU while a lane times: {overlaps[:3]}"
    assert any(a[1] < b[2] and b[1] < a[2] for a in trials for b in trials if a is not b), \
        "the untimed trials of different lanes overlap"
