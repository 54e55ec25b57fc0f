"""The shared queue's rules, with in-process slots that answer from a script (no processes, no GPU)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.fleet.gpu_host import HostJob, HostOutcome
from ptxbench.evaluate.fleet.scheduler import Job, SlotStartFailed, Started, schedule, start_slots
from ptxbench.records.evaluation import Evaluation, InfraFailure, Status

from .scaleout import small_softmax

TASK = small_softmax()


class ScriptedSlot:
    """Answers each job with ``answer(slot, job)``: 'ok', 'fault' (the GPU then passes its health check),
    'sick' (it fails it), 'harness' (the harness failed), 'raise' (the slot itself raised) or 'dead'
    (cannot restart)."""

    depth = 1

    def __init__(self, name: str, answer: Callable[[str, Job], str], starts: bool = True) -> None:
        self.name, self.answer, self.starts = name, answer, starts
        self.seen: list[int] = []
        self.closed = False

    def start(self) -> "Future[dict[str, Any]]":
        future: Future[dict[str, Any]] = Future()
        if self.starts:
            future.set_result({"name": self.name})
        else:
            future.set_exception(SlotStartFailed(f"GPU {self.name}: no device"))
        return future

    def submit(self, job: Job) -> "Future[HostOutcome]":
        self.seen.append(job.index)
        future: Future[HostOutcome] = Future()
        answer = self.answer(self.name, job)
        if answer == "dead":
            future.set_exception(SlotStartFailed(f"GPU {self.name} will not open"))
        elif answer == "fault":
            future.set_result(HostOutcome(fault=f"{self.name} broke", gpu_healthy=True))
        elif answer == "sick":
            future.set_result(HostOutcome(fault=f"{self.name} broke for good", gpu_healthy=False))
        elif answer == "harness":
            future.set_result(HostOutcome(harness_error="KeyError: 'outputs'"))
        elif answer == "raise":
            future.set_exception(RuntimeError("the slot's own bug"))
        else:
            future.set_result(HostOutcome(evaluation=Evaluation(
                candidate=str(job.index), task=TASK.id, task_hash=TASK.content_hash, arch=Arch.SM_90A,
                status=Status.COMPILE_ERROR)))
        return future

    def close(self) -> None:
        self.closed = True


def _jobs(count: int) -> list[Job]:
    return [Job(i, HostJob(task=TASK, arch=Arch.SM_90A, source="", origin=str(i))) for i in range(count)]


def _run(slots: list[ScriptedSlot], count: int, **limits: int) -> tuple[dict[int, str], dict[int, str], dict[str, str]]:
    done: dict[int, str] = {}
    given_up: dict[int, str] = {}
    started: Started = start_slots(slots)  # type: ignore[arg-type]
    retired = schedule(_jobs(count), started,
                       on_result=lambda job, outcome, slot: done.__setitem__(job.index, slot),
                       on_give_up=lambda job, failure, reason: given_up.__setitem__(job.index, f"{failure.value}: {reason}"),
                       **limits)
    return done, given_up, retired


def test_every_job_once_across_slots() -> None:
    slots = [ScriptedSlot("a", lambda s, j: "ok"), ScriptedSlot("b", lambda s, j: "ok")]
    done, given_up, retired = _run(slots, 7)
    assert sorted(done) == list(range(7)) and not given_up and not retired
    assert set(done.values()) == {"a", "b"}


def _results(slots: list[ScriptedSlot], count: int, **limits: int) -> tuple[dict[int, HostOutcome], dict[int, str], dict[str, str]]:
    """Like ``_run``, keeping each recorded outcome."""
    done: dict[int, HostOutcome] = {}
    given_up: dict[int, str] = {}
    retired = schedule(_jobs(count), start_slots(slots),  # type: ignore[arg-type]
                       on_result=lambda job, outcome, slot: done.__setitem__(job.index, outcome),
                       on_give_up=lambda job, failure, reason: given_up.__setitem__(job.index, f"{failure.value}: {reason}"),
                       **limits)
    return done, given_up, retired


def test_a_slot_is_retired_only_when_its_gpu_fails_the_health_check() -> None:
    slots = [ScriptedSlot("a", lambda s, j: "ok"), ScriptedSlot("b", lambda s, j: "fault" if j.index < 4 else "sick")]
    done, given_up, retired = _run(slots, 12)
    assert sorted(done) == list(range(12)) and not given_up
    assert list(retired) == ["b"] and retired["b"].startswith("failed the harness's health check: b broke for good")
    assert slots[1].closed and slots[1].seen[-1] >= 4, "faults on a healthy GPU did not retire it"


def test_faults_on_a_healthy_gpu_are_the_candidates_runtime_error_and_never_retire_it() -> None:
    bad = {0, 2, 4, 5, 6}  # candidates that kill their host wherever they run
    slots = [ScriptedSlot("a", lambda s, j: "fault" if j.index in bad else "ok")]
    done, given_up, retired = _results(slots, 8, max_attempts=1)
    assert sorted(done) == list(range(8)) and not given_up and not retired
    for index in bad:
        evaluation = done[index].evaluation
        assert evaluation is not None and evaluation.status is Status.RUNTIME_ERROR and evaluation.candidate == str(index)
        assert "passed the harness's health check" in evaluation.message and "a broke" in evaluation.message
    assert all(done[i].evaluation.status is Status.COMPILE_ERROR for i in (1, 3, 7))  # type: ignore[union-attr]


def test_a_job_that_faults_on_every_gpu_is_the_candidates_runtime_error() -> None:
    poison = 2
    slots = [ScriptedSlot(n, lambda s, j: "fault" if j.index == poison else "ok") for n in ("a", "b", "c")]
    done, given_up, retired = _results(slots, 4, max_attempts=2)
    assert sorted(done) == [0, 1, 2, 3] and not given_up
    evaluation = done[poison].evaluation
    assert evaluation is not None and evaluation.status is Status.RUNTIME_ERROR
    assert "2 times" in evaluation.message
    assert not retired, "one bad candidate does not take the GPUs down"


def test_a_job_after_which_gpus_failed_their_health_check_is_not_judged() -> None:
    poison = 1
    slots = [ScriptedSlot(n, lambda s, j: "sick" if j.index == poison else "ok") for n in ("a", "b", "c")]
    done, given_up, retired = _run(slots, 4, max_attempts=2)
    assert sorted(done) == [0, 2, 3] and list(given_up) == [poison]
    assert given_up[poison].startswith("NO_GPU: evaluation interrupted by 2 faults")
    assert len(retired) == 2, "the two GPUs it broke are retired; the third is kept for the others"


def test_the_harness_failing_on_an_item_is_recorded_for_it_and_never_retires_the_gpu() -> None:
    slots = [ScriptedSlot("a", lambda s, j: {1: "harness", 2: "raise", 3: "harness"}.get(j.index, "ok"))]
    done, given_up, retired = _run(slots, 6)
    assert sorted(done) == [0, 4, 5] and sorted(given_up) == [1, 2, 3] and not retired
    assert given_up[1].startswith("HARNESS_ERROR: the harness failed on this item") and "KeyError" in given_up[1]
    assert "RuntimeError: the slot's own bug" in given_up[2]


def test_a_slot_that_cannot_restart_is_retired_and_its_job_is_not_penalised() -> None:
    calls = {"b": 0}

    def answer(slot: str, job: Job) -> str:
        if slot == "b":
            calls["b"] += 1
            return "fault" if calls["b"] == 1 else "dead"
        return "ok"

    slots = [ScriptedSlot("a", answer), ScriptedSlot("b", answer)]
    done, given_up, retired = _run(slots, 4, max_attempts=2)
    assert sorted(done) == list(range(4)) and not given_up
    assert retired["b"].startswith("could not restart")


def test_with_no_gpu_left_the_rest_are_given_up_as_no_gpu() -> None:
    slots = [ScriptedSlot("a", lambda s, j: "sick"), ScriptedSlot("b", lambda s, j: "ok", starts=False)]
    done, given_up, retired = _run(slots, 3, max_attempts=2)
    assert not done and sorted(given_up) == [0, 1, 2]
    assert all(reason.startswith(InfraFailure.NO_GPU.value) for reason in given_up.values())
    assert "could not start" in retired["b"] and "every GPU was retired" in given_up[2]


def test_a_feed_brings_jobs_while_the_schedule_runs_and_stop_ends_it_without_waiting() -> None:
    """A server's queue: jobs put after the schedule started are run; with every GPU retired, those that arrive
    later are given up too; ``stop`` returns at once."""
    import threading
    import time

    from ptxbench.evaluate.fleet.scheduler import JobFeed

    slots = [ScriptedSlot("0", lambda slot, job: "sick" if job.index == 2 else "ok")]
    started = start_slots(slots)  # type: ignore[arg-type]
    feed = JobFeed()
    done: list[int] = []
    given_up: list[int] = []
    handed: list[tuple[int, str]] = []
    retired: list[str] = []
    runner = threading.Thread(target=schedule, args=([], started), kwargs={
        "on_result": lambda job, outcome, slot: done.append(job.index),
        "on_give_up": lambda job, failure, reason: given_up.append(job.index), "feed": feed,
        "on_start": lambda job, slot: handed.append((job.index, slot)),
        "on_retire": lambda slot, reason: retired.append(slot)})
    runner.start()

    def settle(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 5
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert condition()

    jobs = _jobs(4)
    for job in jobs[:2]:
        feed.put(job)
    settle(lambda: done == [0, 1])
    assert handed == [(0, "0"), (1, "0")] and runner.is_alive(), "an empty queue waits for the feed"
    feed.put(jobs[2])  # the GPU fails its health check: retired, and the job has no GPU left
    settle(lambda: given_up == [2])
    assert retired == ["0"]
    feed.put(jobs[3])
    settle(lambda: given_up == [2, 3])
    feed.stop()
    runner.join(timeout=5)
    assert not runner.is_alive()
