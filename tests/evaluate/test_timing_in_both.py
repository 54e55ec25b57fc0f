"""``timing.in_both``: the two processes' read-back after a measurement overlaps, and a failing candidate
never leaves the baseline process's reply to be read as the answer to its next request."""

from __future__ import annotations

import time

import pytest

from ptxbench.evaluate.isolation.worker import RequestFailed, Worker
from ptxbench.evaluate.timing.protocol import in_both

HANDLER = "tests.evaluate.test_timing_in_both:Side"
SLOW_S = 0.6


class Side:
    """A process that answers after a pause, and says who it is."""

    def __init__(self) -> None:
        self.name = "unnamed"

    def named(self, name: str) -> str:
        self.name = name
        return name

    def read_back(self) -> str:
        time.sleep(SLOW_S)
        return f"{self.name} read back"

    def broken_read_back(self) -> str:
        raise ValueError("the candidate's process failed")

    def who(self) -> str:
        return self.name


@pytest.fixture
def sides():  # type: ignore[no-untyped-def]
    with Worker(HANDLER) as worker, Worker(HANDLER) as baselines:
        worker.call("named", "candidate", timeout_s=60)
        baselines.call("named", "baseline", timeout_s=60)
        yield worker, baselines


def test_both_replies_come_back_and_the_two_calls_overlap(sides) -> None:  # type: ignore[no-untyped-def]
    worker, baselines = sides
    started = time.perf_counter()
    assert in_both(worker, baselines, "read_back", 60) == ("candidate read back", "baseline read back")
    assert time.perf_counter() - started < 1.6 * SLOW_S, "one after the other, not at once"


def test_a_failing_candidate_call_is_raised_and_the_baseline_reply_is_drained(sides) -> None:  # type: ignore[no-untyped-def]
    worker, baselines = sides
    baselines.send("read_back")  # what in_both sends the baseline first, done here to fail only the candidate
    baselines.receive(60)
    with pytest.raises(RequestFailed, match="the candidate's process failed"):
        _both_with_failing_candidate(worker, baselines)
    assert baselines.call("who", timeout_s=60) == "baseline", "the next request got the dropped reply"


def _both_with_failing_candidate(worker: Worker, baselines: Worker) -> None:
    """in_both where the candidate's side of the method fails: the candidate's process runs the broken one."""
    original = worker.call

    def call(method: str, *args: object, timeout_s: float) -> object:
        return original("broken_read_back" if method == "read_back" else method, *args, timeout_s=timeout_s)

    worker.call = call  # type: ignore[method-assign]
    try:
        in_both(worker, baselines, "read_back", 60)
    finally:
        worker.call = original  # type: ignore[method-assign]
