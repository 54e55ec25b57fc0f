"""The GPU evaluator's orchestration on the CPU: a real build, a fake worker handler that answers like
the GPU side (correctly or with a scripted misbehaviour), and the verdicts the parent must reach."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.isolation.gpu_lock import TRACE_VARIABLE
from ptxbench.records.evaluation import Guard, Status
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.model import Task

from ..conftest import EXAMPLES
from .fake_runner import BEHAVIOUR, OOM_MARK

HANDLER = "tests.evaluate.fake_runner:FakeRunner"


@pytest.fixture(autouse=True)
def _wall_clock_out_of_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake worker says its event times without spending them, so its wall time beyond them is only the
    host's noise, which under CPU load (two test workers on two cores) once passed the wall clock's allowance and
    REJECTED a correct fake candidate here. Nothing in this file is about the wall clock (test_timing_agreement.py
    and test_profiled_evaluation.py are, with forged fakes): here it never decides."""
    from ptxbench.evaluate.judgement import guards

    monkeypatch.setattr(guards, "WALL_HOST_ALLOWANCE_MS", 1e9)


def _small_softmax() -> Task:
    data = get_task("softmax").model_dump(mode="json")
    data["workloads"] = [
        {"name": "small-timed", "role": "timed", "sizes": {"R": 4, "C": 64}},
        {"name": "small-visible", "role": "visible", "sizes": {"R": 3, "C": 128}},
        {"name": "small-heldout", "role": "heldout", "sizes": {"R": 5, "C": 192}},
    ]
    data["variants"] = []  # the suite's variants partition its own workloads, not these
    return Task.model_validate(data)


def _evaluate(monkeypatch: pytest.MonkeyPatch, behaviour: str, **options):  # type: ignore[no-untyped-def]
    monkeypatch.setenv(BEHAVIOUR, behaviour)
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20, **options), handler=HANDLER,
                             reference_device="cpu")
    try:
        return evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text(), "softmax.cu")
    finally:
        evaluator.close()


def test_correct_candidate_passes_with_timings_and_roofline(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluation = _evaluate(monkeypatch, "correct")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert {t.role for t in evaluation.trials} == {"timed", "visible", "heldout"}
    assert len(evaluation.trials) == 9  # three fresh seeds for each of three workloads
    assert len({t.seed for t in evaluation.trials}) == 9
    assert [t.workload for t in evaluation.timings] == ["small-timed", "small-visible"]
    timed = evaluation.timings[0]
    assert timed.speedup == pytest.approx(0.5) and timed.baseline == "torch" and timed.roofline_pct is not None
    assert evaluation.features is None and "features unverified" in evaluation.message
    stages = evaluation.durations_s
    assert {"build_and_static", "worker_start", "load", "trials", "timing", "total"} <= set(stages)
    # the stages follow one another; the wait for the GPU's lock is spent inside them
    assert stages["total"] >= sum(v for k, v in stages.items() if k not in ("total", "gpu_lock_wait") and "." not in k) > 0, stages
    assert stages["trials"] >= stages["trials.worker"] + stages["trials.judge"]
    # the timing protocol's own account of its wall time, part by part, within the measurement it splits
    protocol = {k.removeprefix("timing.protocol."): v for k, v in stages.items() if k.startswith("timing.protocol.")}
    assert {"setup", "candidate_chunks", "pause", "baseline_chunks", "read_back", "outputs",
            "chunks_beyond_measured"} == set(protocol) and min(protocol.values()) >= 0
    parts = sum(v for k, v in protocol.items() if k != "chunks_beyond_measured")
    assert parts <= stages["timing.interleaved"] + 1e-6
    assert protocol["chunks_beyond_measured"] <= protocol["candidate_chunks"] + protocol["baseline_chunks"]
    again = _evaluate(monkeypatch, "correct")  # the baseline now comes from the cache
    assert again.timings[0].baseline_ms == pytest.approx(1.0)


@pytest.mark.parametrize(("behaviour", "status", "guard"), [
    ("wrong", Status.INCORRECT, None),
    ("mutate", Status.REJECTED, Guard.INPUT_MUTATION),
    ("foreign", Status.REJECTED, Guard.FOREIGN_KERNELS),
    ("overflow", Status.REJECTED, Guard.OUT_OF_BOUNDS_WRITE),
    ("crash", Status.RUNTIME_ERROR, None),
])
def test_misbehaviour_gets_its_status(monkeypatch: pytest.MonkeyPatch, behaviour: str, status: Status,
                                      guard: Guard | None) -> None:
    evaluation = _evaluate(monkeypatch, behaviour, time=False)
    assert evaluation.status is status, evaluation.message
    assert not evaluation.timings
    if guard is not None:
        assert guard in {g.guard for g in evaluation.guards}
    if behaviour == "wrong":
        assert "wrong on workload small-timed" in evaluation.message


def test_a_copy_to_the_host_beside_an_own_kernel_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluation = _evaluate(monkeypatch, "host-copy", time=False)
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert {g.guard for g in evaluation.guards} == {Guard.HOST_TRANSFER}


@pytest.mark.parametrize(("behaviour", "guard"), [
    ("other-stream-when-timed", Guard.OTHER_STREAM),
    ("extra-kernel-when-timed", Guard.LAUNCHES_DIFFER),
    ("host-copy-when-timed", Guard.HOST_TRANSFER),
])
def test_a_candidate_that_behaves_otherwise_only_when_timed_is_rejected(monkeypatch: pytest.MonkeyPatch,
                                                                        behaviour: str, guard: Guard) -> None:
    evaluation = _evaluate(monkeypatch, behaviour)
    assert evaluation.status is Status.REJECTED, evaluation.message
    assert guard in {g.guard for g in evaluation.guards}, evaluation.guards
    assert all(t.passed for t in evaluation.trials)  # the trials alone saw nothing wrong


def test_timed_calls_record_what_they_launched(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluation = _evaluate(monkeypatch, "correct")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert evaluation.isolation, "the evaluation says how the candidate's process was isolated"
    trial = evaluation.trials[0]
    assert trial.launches and all(count == 1 for count in trial.launches.values())
    assert all(t.launches_per_call == trial.launches for t in evaluation.timings)


@pytest.mark.parametrize("behaviour", ["oom-once", "oom-torch-once", "oom-sticky-once"])
def test_running_out_of_memory_beside_another_evaluation_is_tried_again_alone(
        monkeypatch: pytest.MonkeyPatch, tmp_path, behaviour: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(OOM_MARK, str(tmp_path / "ran-out"))
    monkeypatch.setenv(TRACE_VARIABLE, str(tmp_path / "lock.jsonl"))
    evaluation = _evaluate(monkeypatch, behaviour, time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert len(evaluation.trials) == 9 and "trials.alone" in evaluation.durations_s
    lines = [json.loads(line) for line in (tmp_path / "lock.jsonl").read_text().splitlines()]
    holds = [h for h in lines if h["released"] is not None]  # ended holds (each is also traced when taken)
    assert [(h["mode"], h["purpose"]) for h in holds if h["purpose"].startswith("trials")] == [
        ("shared", "trials"), ("exclusive", "trials alone")]


@pytest.mark.parametrize("behaviour", ["oom", "oom-torch", "oom-sticky"])
def test_running_out_of_memory_alone_too_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch, behaviour: str) -> None:
    evaluation = _evaluate(monkeypatch, behaviour, time=False)
    assert evaluation.status is Status.RUNTIME_ERROR
    assert evaluation.message.startswith("out of GPU memory also when run alone on the GPU: workload"), evaluation.message
    assert "trials.alone" in evaluation.durations_s


def test_a_failure_other_than_memory_is_not_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluation = _evaluate(monkeypatch, "crash", time=False)
    assert evaluation.status is Status.RUNTIME_ERROR and "trials.alone" not in evaluation.durations_s


def test_a_profile_that_ran_out_of_memory_is_taken_again_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from ptxbench.evaluate.proof import profiling
    from ptxbench.evaluate.proof.profiling import ProfiledRunFailed

    calls: list[bool] = []

    def profile(task, arch, shared_object, timeout_s, alone=False, batched=False):  # type: ignore[no-untyped-def]
        calls.append(alone)
        if not alone or outcome == "again":
            raise ProfiledRunFailed("the call under ncu ended without a profile", out_of_memory=True)
        return [], ["kernel"]

    monkeypatch.setattr(profiling, "profile_requirements", profile)
    evaluator = GpuEvaluator(EvalOptions(profile=False), handler=HANDLER, reference_device="cpu")
    try:
        outcome = "once"
        assert evaluator._profiled(_small_softmax(), Arch.SM_90A, Path("candidate.so")) == ([], ["kernel"], True)
        assert calls == [False, True] and "profile.alone" in evaluator._durations
        outcome, calls[:] = "again", []
        with pytest.raises(ProfiledRunFailed, match="also when run alone"):
            evaluator._profiled(_small_softmax(), Arch.SM_90A, Path("candidate.so"))
        assert calls == [False, True]
    finally:
        evaluator.close()


def test_a_profile_that_failed_otherwise_is_not_taken_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from ptxbench.evaluate.proof import profiling
    from ptxbench.evaluate.proof.profiling import ProfiledRunFailed

    calls: list[bool] = []

    def profile(task, arch, shared_object, timeout_s, alone=False, batched=False):  # type: ignore[no-untyped-def]
        calls.append(alone)
        raise ProfiledRunFailed("no end within 600 s under ncu; the process was killed")

    monkeypatch.setattr(profiling, "profile_requirements", profile)
    evaluator = GpuEvaluator(EvalOptions(profile=False), handler=HANDLER, reference_device="cpu")
    try:
        with pytest.raises(ProfiledRunFailed, match="no end"):
            evaluator._profiled(_small_softmax(), Arch.SM_90A, Path("candidate.so"))
        assert calls == [False]
    finally:
        evaluator.close()


def test_hang_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BEHAVIOUR, "hang")
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=3), handler=HANDLER, reference_device="cpu")
    try:
        evaluation = evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text())
    finally:
        evaluator.close()
    assert evaluation.status is Status.TIMEOUT and "within 3 s" in evaluation.message


def test_baselines_are_timed_before_any_candidate_code_is_loaded(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A candidate sharing a process with its baseline could slow the baseline (a background thread that
    pauses while the candidate runs), and the cache would keep the slowed number for every later
    candidate. The stand-in worker refuses to time a baseline once a candidate is loaded."""
    from ptxbench.evaluate.baselines.cache import BaselineCache

    monkeypatch.setenv(BEHAVIOUR, "correct")
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20), handler=HANDLER, reference_device="cpu")
    evaluator.baseline_cache = BaselineCache(tmp_path / "baselines")
    try:
        evaluation = evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text())
    finally:
        evaluator.close()
    assert evaluation.status is Status.PASSED, evaluation.message
    assert len(list((tmp_path / "baselines").glob("*.json"))) == 2, "both timed workloads' baselines were measured"
    assert all(t.baseline_ms for t in evaluation.timings)


def test_a_baseline_variant_that_cannot_run_one_workload_is_skipped_there_with_its_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """cuDNN too old for head dim 256: the hd256 workload is timed against FlashAttention alone and its timing
    records cuDNN's reason; the other workload keeps both variants' clean times."""
    from ptxbench.evaluate.baselines.cache import BaselineCache

    data = get_task("attention_fwd").model_dump(mode="json")
    data["workloads"] = [
        {"name": "small-timed", "role": "timed", "sizes": {"B": 1, "H": 1, "S": 64, "D": 64, "causal": 0}},
        {"name": "small-hd256-ragged", "role": "visible", "sizes": {"B": 1, "H": 2, "S": 70, "D": 256, "causal": 1}},
        {"name": "small-heldout", "role": "heldout", "sizes": {"B": 1, "H": 1, "S": 17, "D": 128, "causal": 1}},
    ]
    data["variants"] = []
    monkeypatch.setenv(BEHAVIOUR, "cudnn-too-old")
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20), handler=HANDLER, reference_device="cpu")
    evaluator.baseline_cache = BaselineCache(tmp_path / "baselines")
    try:
        evaluation = evaluator.evaluate(Task.model_validate(data), Arch.SM_90A,
                                        (EXAMPLES / "attention_fwd.cu").read_text(), "attention_fwd.cu")
    finally:
        evaluator.close()
    assert evaluation.status is Status.PASSED, evaluation.message
    timings = {t.workload: t for t in evaluation.timings}
    assert set(timings["small-timed"].baseline_variants) == {"cudnn", "flash"}
    assert all(isinstance(ms, float) for ms in timings["small-timed"].baseline_variants.values())
    hd256 = timings["small-hd256-ragged"]
    assert hd256.baseline == "flash" and isinstance(hd256.baseline_variants["flash"], float)
    assert hd256.baseline_variants["cudnn"] == ("setup failed: RuntimeError: cuDNN 9.1.0 does not run attention "
                                                "with head dim 256 (cuDNN 9.10.0 does)")


def _evaluate_with_fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path, behaviour: str):  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.baselines.cache import BaselineCache

    monkeypatch.setenv(BEHAVIOUR, behaviour)
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20), handler=HANDLER, reference_device="cpu")
    evaluator.baseline_cache = BaselineCache(tmp_path / "baselines")
    try:
        return evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text())
    finally:
        evaluator.close()


def test_baseline_is_interleaved_with_the_candidate_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The baseline runs in its own clean process in rounds alternating with the candidate's; the stand-in
    baseline refuses to run unless the candidate's process is stopped (checked to fail without the stop)."""
    from .fake_runner import PIDS

    monkeypatch.setenv(PIDS, str(tmp_path / "candidate.pid"))
    evaluation = _evaluate_with_fresh_cache(monkeypatch, tmp_path, "correct")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert (tmp_path / "candidate.pid").exists(), "the check ran"
    for timing in evaluation.timings:
        assert timing.baseline_source == "interleaved" and timing.baseline_ms == timing.baseline_clean_ms == 1.0
        assert timing.candidate_ms == 2.0 and timing.samples >= 5 and timing.speedup == 0.5


def test_a_baseline_slowed_beside_the_candidate_is_replaced_by_its_clean_time(monkeypatch: pytest.MonkeyPatch,
                                                                               tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Interleaved, the baseline reads 1.5 ms against a clean 1.0 ms: the candidate gains only the allowance."""
    from ptxbench.evaluate.timing.protocol import BASELINE_DISTURBANCE

    from .fake_runner import PIDS

    monkeypatch.setenv(PIDS, str(tmp_path / "candidate.pid"))
    evaluation = _evaluate_with_fresh_cache(monkeypatch, tmp_path, "slowed-baseline")
    assert evaluation.status is Status.PASSED, evaluation.message
    for timing in evaluation.timings:
        assert timing.baseline_source == "clean" and timing.baseline_clean_ms == 1.0
        assert timing.baseline_ms == pytest.approx(1.0 * (1 + BASELINE_DISTURBANCE))


def test_the_clean_baseline_time_is_not_one_slow_outlier(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The first clean measurement of each shape reads 3 ms, the later ones 1 ms: the cached clean time is
    their median (checked to fail with one measurement), and later interleaved ones are trusted."""
    evaluation = _evaluate_with_fresh_cache(monkeypatch, tmp_path, "outlier-baseline")
    assert evaluation.status is Status.PASSED, evaluation.message
    for timing in evaluation.timings:
        assert timing.baseline_clean_ms == 1.0 and timing.baseline_ms == 1.0
        assert timing.baseline_source == "interleaved"


def test_the_clean_baseline_time_is_taken_in_the_rhythm_of_an_interleaved_one(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Timed back to back in one process, the stand-in baseline reads 1.3 ms (the power cap), alternating
    with another process 1.0 ms: the clean time, taken beside the fresh worker running the same baseline,
    is 1.0 ms like the interleaved one (checked to read 1.3 ms with the baseline process timed alone)."""
    from .fake_runner import LAST

    monkeypatch.setenv(LAST, str(tmp_path / "last.pid"))
    evaluation = _evaluate_with_fresh_cache(monkeypatch, tmp_path, "power-capped")
    assert evaluation.status is Status.PASSED, evaluation.message
    for timing in evaluation.timings:
        assert timing.baseline_clean_ms == 1.0 and timing.baseline_ms == 1.0


@pytest.mark.parametrize(("behaviour", "gated"), [("correct", True), ("ungated", False)])
def test_each_timing_says_whether_the_launch_gate_held_on_both_sides(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                                                      behaviour: str, gated: bool) -> None:  # type: ignore[no-untyped-def]
    """A candidate whose calls wait for the GPU makes its process drop the launch gate: its times may then
    hold host delays, and the record says so."""
    evaluation = _evaluate_with_fresh_cache(monkeypatch, tmp_path, behaviour)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert evaluation.timings and all(t.launch_gated is gated for t in evaluation.timings)


def test_a_process_the_candidate_abandons_ends_with_its_worker(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A daemon (forked twice, in its own session) started from the candidate's process would outlive it
    and could run on the GPU during later timings; the worker adopts it and it is killed with the worker
    (checked to survive without the subreaper)."""
    from ptxbench.evaluate.isolation.processes import process_state

    from .fake_runner import DAEMON

    monkeypatch.setenv(DAEMON, str(tmp_path / "daemon.pid"))
    evaluation = _evaluate(monkeypatch, "daemon", time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    daemon = int((tmp_path / "daemon.pid").read_text())
    deadline = time.time() + 5
    while process_state(daemon) not in (None, "Z") and time.time() < deadline:
        time.sleep(0.05)
    alive = process_state(daemon) not in (None, "Z")
    if alive:
        os.kill(daemon, signal.SIGKILL)
    assert not alive, "the abandoned process outlived the candidate's worker"


class AcceleratorError(RuntimeError):
    """What torch raises when the driver refuses an allocation (named as torch names it)."""


@pytest.mark.parametrize("short_alone_too", [False, True])
def test_the_harness_short_of_gpu_memory_tries_again_alone_and_never_blames_the_candidate(
        monkeypatch: pytest.MonkeyPatch, short_alone_too: bool) -> None:
    """Another lane's candidate may hold the GPU's memory while this lane's harness draws inputs (seen on the
    H200: a HARNESS_ERROR for the neighbour of a memory hog): the trials are taken again with the GPU alone,
    and a harness that is short even then is the harness's failure, never the candidate's verdict."""
    real_expect, real_trials = GpuEvaluator._expect, GpuEvaluator._trials_in_fresh_process
    modes: list[bool] = []
    failed: list[bool] = []

    def trials_in_fresh_process(self, task, shared_object, own_kernels, alone, **options):  # type: ignore[no-untyped-def]
        modes.append(alone)
        return real_trials(self, task, shared_object, own_kernels, alone, **options)

    def expect(self, task, workload, seed):  # type: ignore[no-untyped-def]
        if not modes[-1] or short_alone_too:
            failed.append(modes[-1])
            raise AcceleratorError("CUDA error: out of memory")
        return real_expect(self, task, workload, seed)

    monkeypatch.setattr(GpuEvaluator, "_expect", expect)
    monkeypatch.setattr(GpuEvaluator, "_trials_in_fresh_process", trials_in_fresh_process)
    evaluation = _evaluate(monkeypatch, "correct", time=False)
    assert modes == [False, True] and "trials.alone" in evaluation.durations_s
    assert failed == ([False, True] if short_alone_too else [False])
    if short_alone_too:
        assert evaluation.status is None and evaluation.infra_failure is not None, evaluation.message
        assert "the harness ran out of GPU memory" in evaluation.message
    else:
        assert evaluation.status is Status.PASSED, evaluation.message
