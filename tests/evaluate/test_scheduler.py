"""The shared queue's rules, with in-process slots that answer from a script (no processes, no GPU)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.gpu_host import HostJob, HostOutcome
from ptxbench.evaluate.scheduler import Job, SlotStartFailed, Started, schedule, start_slots
from ptxbench.evaluate.status import Evaluation, InfraFailure, Status

from .scaleout import small_softmax

TASK = small_softmax()


class ScriptedSlot:
    """Answers each job with ``answer(slot, job)``: 'ok', 'fault', or 'dead' (cannot restart)."""

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
            future.set_result(HostOutcome(fault=f"{self.name} broke"))
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


def test_a_fault_requeues_the_job_to_another_slot_and_retires_the_slot_after_repeats() -> None:
    slots = [ScriptedSlot("a", lambda s, j: "ok"), ScriptedSlot("b", lambda s, j: "fault")]
    done, given_up, retired = _run(slots, 5, retire_after=2)
    assert sorted(done) == list(range(5)) and set(done.values()) == {"a"} and not given_up
    assert retired == {"b": "faulted 2 times in a row: b broke; b broke"} and slots[1].closed
    assert len(slots[1].seen) == 2, "a retired slot gets no more work"


def test_a_slot_that_evaluates_between_faults_is_not_retired() -> None:
    bad = {0, 2, 4}  # candidates that fault wherever they run, each followed by a good one
    slots = [ScriptedSlot("a", lambda s, j: "fault" if j.index in bad else "ok")]
    done, given_up, retired = _run(slots, 6, max_attempts=1, retire_after=2)
    assert sorted(done) == [1, 3, 5] and sorted(given_up) == [0, 2, 4] and not retired


def test_a_job_that_faults_on_every_gpu_is_given_up_not_failed() -> None:
    poison = 2
    slots = [ScriptedSlot(n, lambda s, j: "fault" if j.index == poison else "ok") for n in ("a", "b", "c")]
    done, given_up, retired = _run(slots, 4, max_attempts=2, retire_after=5)
    assert sorted(done) == [0, 1, 3]
    assert given_up[poison].startswith("HARNESS_ERROR: evaluation interrupted by 2 GPU faults")
    assert not retired, "one bad candidate does not take the GPUs down"


def test_a_slot_that_cannot_restart_is_retired_and_its_job_is_not_penalised() -> None:
    calls = {"b": 0}

    def answer(slot: str, job: Job) -> str:
        if slot == "b":
            calls["b"] += 1
            return "fault" if calls["b"] == 1 else "dead"
        return "ok"

    slots = [ScriptedSlot("a", answer), ScriptedSlot("b", answer)]
    done, given_up, retired = _run(slots, 4, max_attempts=2, retire_after=3)
    assert sorted(done) == list(range(4)) and not given_up
    assert retired["b"].startswith("could not restart")


def test_with_no_gpu_left_the_rest_are_given_up_as_no_gpu() -> None:
    slots = [ScriptedSlot("a", lambda s, j: "fault"), ScriptedSlot("b", lambda s, j: "ok", starts=False)]
    done, given_up, retired = _run(slots, 3, max_attempts=2, retire_after=1)
    assert not done and sorted(given_up) == [0, 1, 2]
    assert all(reason.startswith(InfraFailure.NO_GPU.value) for reason in given_up.values())
    assert "could not start" in retired["b"] and "every GPU was retired" in given_up[2]
