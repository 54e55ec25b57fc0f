"""Who may use a GPU now: the untimed work of many evaluations at once, or one evaluation's timing alone.

Several evaluations can share one GPU (lanes): correctness trials, reference computations and the ncu
stage tolerate company, but a timed measurement does not. A reader-writer lock across processes
(``flock`` on files named after the GPU's UUID) gives timing the GPU to itself, and any process of
this machine that evaluates on the same GPU (another lane, another run) takes part.

A turnstile keeps timing from starving: once a lane waits to time, no new untimed work starts until
it has had its turn. The invariant the evaluator keeps with it: a process holding a candidate's code
lives only while its lane holds the lock, so no candidate can run anything during another's timing.

With ``PTXBENCH_LOCK_TRACE`` naming a file, every hold is appended to it as one JSON line (process,
mode, what for, when asked, got and released, wall-clock seconds; a line with ``released`` null when
it is taken, so a hold that never ends shows too): how lanes share the GPU is then
measured rather than guessed (``benchmarks/evaluator_benchmark.py`` reads it). Processes that hold
candidate code see the machine read-only but scratch space (``confinement.SCRATCH_ROOTS``): their holds
reach the file only where it lies there (under /tmp, say).

Standard library only: the profiled program (``profile_one.py``) loads this file by its path.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


KEY_VARIABLE = "PTXBENCH_GPU_LOCK"  # set for worker processes: the key of the GPU they start on
TRACE_VARIABLE = "PTXBENCH_LOCK_TRACE"  # a file to append every hold to, for diagnosis


def default_lock_folder() -> Path:
    return Path(os.environ.get("PTXBENCH_LOCK_DIR") or Path(tempfile.gettempdir()) / "ptxbench-gpu-locks")


@contextmanager
def _held(path: Path, mode: int) -> Iterator[None]:
    """``flock`` of ``path`` (created if missing) in ``mode``, for the block."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(descriptor, mode)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock, also when the process dies


class GpuLock:
    """The lock of one GPU, named by its UUID (or any stable key), usable from any process."""

    def __init__(self, key: str, folder: Path | None = None) -> None:
        folder = folder or default_lock_folder()
        folder.mkdir(parents=True, exist_ok=True)
        self.key = key
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", key) or "gpu"
        self._main = folder / f"{slug}.lock"
        self._turnstile = folder / f"{slug}.turnstile"
        self.waited_s = 0.0  # time spent waiting for the GPU, for the evaluator's stage durations


    @contextmanager
    def shared(self, purpose: str = "") -> Iterator[None]:
        """Untimed GPU work: runs beside other untimed work, never during a timing."""
        started = time.perf_counter()
        asked = time.time()
        with _held(self._turnstile, fcntl.LOCK_EX):
            pass  # a lane waiting to time holds the turnstile: new untimed work queues behind it
        with _held(self._main, fcntl.LOCK_SH):
            self.waited_s += time.perf_counter() - started
            got = time.time()
            _trace("shared", purpose, asked, got, released=None)
            try:
                yield
            finally:
                _trace("shared", purpose, asked, got)

    @contextmanager
    def exclusive(self, purpose: str = "") -> Iterator[None]:
        """Timing: waits until the untimed work in progress ends, and lets nothing else start meanwhile."""
        started = time.perf_counter()
        asked = time.time()
        with _held(self._turnstile, fcntl.LOCK_EX):
            with _held(self._main, fcntl.LOCK_EX):
                self.waited_s += time.perf_counter() - started
                got = time.time()
                _trace("exclusive", purpose, asked, got, released=None)
                try:
                    yield
                finally:
                    _trace("exclusive", purpose, asked, got)


_NOW = object()


def _trace(mode: str, purpose: str, asked: float, got: float, released: object = _NOW) -> None:
    """One hold, appended to the trace file when one is named (one short write: lines stay whole): when it
    ends, and also when it begins (``released`` None), so a hold that never ended (a hang, a killed run)
    is in the trace too."""
    path = os.environ.get(TRACE_VARIABLE)
    if not path:
        return
    line = json.dumps({"pid": os.getpid(), "mode": mode, "purpose": purpose, "asked": asked, "got": got,
                       "released": time.time() if released is _NOW else released})
    try:
        with open(path, "a") as out:
            out.write(line + "\n")
    except OSError:
        pass  # diagnosis only: a trace that cannot be written never fails an evaluation


def trace_event(mode: str, purpose: str, began: float) -> None:
    """A hold-like event of the harness's own (``began`` to now, wall-clock seconds) in the trace file when one is
    named, as the holds are: a batched ncu session and how many candidates it confirmed, say."""
    _trace(mode, purpose, began, began)


PROFILER_TURN = "nsight-compute.lock"  # one file per machine: ncu serialises profiling machine-wide too


@contextmanager
def profiler_turn(folder: Path | None = None) -> Iterator[None]:
    """This machine's one Nsight Compute session at a time, taken before the profiled program asks for its
    GPU's lock and while the caller holds none.

    ncu itself lets one instance profile at a time. Were two profiled programs left to meet at ncu's own
    lock, a cycle could form across lanes and runs: A's program waits at the turnstile behind a lane T that
    waits to time; T waits for B's program to let go of its shared hold; B's program waits for ncu's turn,
    which A's ncu holds. Seen on the H200 as evaluations that never ended when lanes or runs shared a GPU.
    Taking the turn here first, holding no GPU lock, keeps every wait pointing one way."""
    folder = folder or default_lock_folder()
    folder.mkdir(parents=True, exist_ok=True)
    started, asked = time.perf_counter(), time.time()
    with _held(folder / PROFILER_TURN, fcntl.LOCK_EX):
        got = time.time()
        try:
            yield
        finally:
            _trace("profiler", f"ncu turn (waited {time.perf_counter() - started:.1f} s)", asked, got)


@contextmanager
def shared_if_known(purpose: str = "") -> Iterator[None]:
    """The GPU's lock, shared, when this process was started for a known GPU (``KEY_VARIABLE``): a worker
    holds it while its start-up runs kernels, so they never overlap a timing."""
    key = os.environ.get(KEY_VARIABLE)
    if not key:
        yield
        return
    with GpuLock(key).shared(purpose):
        yield
