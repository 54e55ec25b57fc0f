"""The GPU lock across processes: untimed work overlaps, timing runs alone and is not starved."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from ptxbench.evaluate.isolation.gpu_lock import GpuLock


def _hold(folder: str, mode: str, seconds: float, log: str, name: str) -> None:
    lock = GpuLock("GPU-test", Path(folder))
    with getattr(lock, mode)():
        with open(log, "a") as out:
            out.write(f"{name} start {time.monotonic()}\n")
        time.sleep(seconds)
        with open(log, "a") as out:
            out.write(f"{name} end {time.monotonic()}\n")


def _spans(log: Path) -> dict[str, tuple[float, float]]:
    marks: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        name, what, when = line.split()
        marks.setdefault(name, {})[what] = float(when)
    return {name: (m["start"], m["end"]) for name, m in marks.items()}


def _run(folder: Path, plan: list[tuple[str, str, float, float]]) -> dict[str, tuple[float, float]]:
    """``plan``: (name, mode, delay before starting, seconds held)."""
    context = multiprocessing.get_context("spawn")
    log = folder / "log"
    processes = []
    for name, mode, delay, seconds in plan:
        time.sleep(delay)
        process = context.Process(target=_hold, args=(str(folder), mode, seconds, str(log), name))
        process.start()
        processes.append(process)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return _spans(log)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_untimed_work_overlaps_but_timing_runs_alone(tmp_path: Path) -> None:
    spans = _run(tmp_path, [("shared1", "shared", 0, 1.5), ("shared2", "shared", 0, 1.5),
                            ("timing", "exclusive", 0.3, 0.5)])
    assert _overlap(spans["shared1"], spans["shared2"]), "untimed work of two lanes runs together"
    assert not _overlap(spans["timing"], spans["shared1"]) and not _overlap(spans["timing"], spans["shared2"])


def test_a_waiting_timing_goes_before_untimed_work_that_arrives_later(tmp_path: Path) -> None:
    spans = _run(tmp_path, [("first", "shared", 0, 3.0), ("timing", "exclusive", 0.8, 0.3),
                            ("late", "shared", 1.0, 0.3)])
    assert spans["timing"][0] >= spans["first"][1], "timing waits for the work in progress"
    assert spans["late"][0] >= spans["timing"][1], "work that arrived while timing waited goes after it"


def test_a_dead_holder_releases_the_gpu(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    holder = context.Process(target=_hold, args=(str(tmp_path), "exclusive", 60, str(tmp_path / "log"), "dies"))
    holder.start()
    time.sleep(1.0)
    holder.kill()
    holder.join()
    started = time.monotonic()
    with GpuLock("GPU-test", tmp_path).exclusive():
        assert time.monotonic() - started < 5


def test_every_hold_is_traced_when_a_trace_file_is_named(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import json

    from ptxbench.evaluate.isolation.gpu_lock import TRACE_VARIABLE

    lock = GpuLock("GPU-test", tmp_path)
    with lock.shared("trials"):
        pass  # no trace file named: nothing is written anywhere
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_VARIABLE, str(trace))
    with lock.shared("trials"):
        time.sleep(0.05)
    with lock.exclusive("timing"):
        pass
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    begun = [h for h in lines if h["released"] is None]  # written when taken: a hold that never ends shows too
    holds = [h for h in lines if h["released"] is not None]
    assert [(h["mode"], h["purpose"]) for h in begun] == [("shared", "trials"), ("exclusive", "timing")]
    assert [(h["mode"], h["purpose"]) for h in holds] == [("shared", "trials"), ("exclusive", "timing")]
    assert lines.index(begun[0]) < lines.index(holds[0]) < lines.index(begun[1])
    assert all(h["asked"] <= h["got"] <= h["released"] for h in holds)
    assert holds[0]["released"] - holds[0]["got"] >= 0.05


def test_one_profiler_session_at_a_time_and_run_under_ncu_takes_the_turn(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """ncu runs are serialised machine-wide before the profiled program asks for a GPU's lock (see
    ``profiler_turn``); shown with a stand-in for ncu that reports whether the turn is free while it runs."""
    import fcntl
    import os
    import sys

    from ptxbench.evaluate.proof import profiling
    from ptxbench.evaluate.isolation.gpu_lock import PROFILER_TURN

    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path))
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('turn free')\n"
             "except BlockingIOError:\n    print('turn held')\n")
    monkeypatch.setattr(profiling, "ncu_record_command",
                        lambda program, report, metrics: [sys.executable, "-c", probe, str(tmp_path / PROFILER_TURN)])
    code, output = profiling.run_under_ncu(["unused"], tmp_path / "report", tmp_path, timeout_s=30)
    assert code == 0 and output.strip() == "turn held"
    descriptor = os.open(tmp_path / PROFILER_TURN, os.O_RDWR)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released once the run ended
    os.close(descriptor)
