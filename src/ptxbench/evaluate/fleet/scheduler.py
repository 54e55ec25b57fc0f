"""A shared queue of candidates over a set of GPU slots, whichever backend provides them.

A slot is one GPU's host (a local process or a Ray actor) that evaluates jobs one after another and
hands back futures. The driver thread alone receives outcomes, so it alone writes the run directory.

A GPU is retired only on the harness's own evidence: when it cannot be (re)opened, or fails the health
check (a known-good kernel in a fresh worker) that follows every fault. Counting a slot's faults instead
let candidates retire GPUs: three crashing kernels in a row took a sound GPU out of the run, and every
later candidate was recorded NO_GPU. So after a fault (the host died, hung, or its GPU could not be used)
the slot restarts its host and runs the health check at once, and the job goes back to the front of the
queue for another GPU. A job interrupted ``max_attempts`` times while each GPU then passed its health
check is the candidate's doing (it killed or wedged its host): it is recorded as the candidate's
RUNTIME_ERROR. If a GPU failed its health check after one of those attempts, the job is given up as
NO_GPU instead (not judged), so a candidate that breaks GPUs cannot take them all in turn. A failure of
the harness itself (an exception, an unreadable reply) is recorded for that item as HARNESS_ERROR with
its message and never counts against the GPU. When no slot is left, every job still queued is given up
with the reasons.

A long-lived caller (``engine``: a server) gives ``schedule`` a ``JobFeed`` instead of a fixed list: jobs arrive
while it runs, and it runs until the feed is stopped, leaving the jobs in flight to whoever closes the slots.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.fleet.gpu_host import HostJob, HostOutcome
from ptxbench.records.evaluation import Evaluation, InfraFailure, Status

log = logging.getLogger(__name__)


class SlotStartFailed(PtxbenchError):
    """A slot's GPU could not be opened (at the start or at a restart after a fault)."""


@dataclass
class Job:
    """One candidate in the queue, with the faults that interrupted it so far."""

    index: int
    work: HostJob
    faults: list[str] = field(default_factory=list)
    avoid: set[str] = field(default_factory=set)
    gpu_failed_after: bool = False  # a GPU failed its health check after one of the faults


class Slot(Protocol):
    """One GPU. ``start`` and ``submit`` never block; their futures run in submission order."""

    name: str
    depth: int  # jobs handed to the slot at once (more than one lets a backend prepare the next)

    def start(self) -> "Future[dict[str, Any]]": ...

    def submit(self, job: Job) -> "Future[HostOutcome]": ...

    def close(self) -> None: ...


class HostFailed(Exception):
    """A call to a GPU's host failed in transport (died, hung, raised); ``alive`` when it can still be
    closed in order."""

    def __init__(self, message: str, alive: bool) -> None:
        super().__init__(message)
        self.alive = alive


class SerialSlot:
    """A slot whose calls run one at a time on a thread of its own, so the driver never blocks on a GPU.

    Subclasses open the GPU's host (``_open``), evaluate on it (``_run``, raising ``HostFailed``), run the
    harness's health check on it (``_health_check``), stop it (``_stop``) and stop a call in flight from
    another thread (``_interrupt``). After a fault the host is restarted and checked at once, and the
    outcome says whether the GPU passed (``gpu_healthy``); a host that raised is stopped and the next job
    opens the GPU afresh. ``_prepare`` runs in the driver's thread when a job is handed over.
    """

    depth = 1

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"ptxbench-gpu-{name}")
        self._ready = False
        self._busy = False
        self._closed = False

    def start(self) -> "Future[dict[str, Any]]":
        return self._executor.submit(self._start)

    def submit(self, job: Job) -> "Future[HostOutcome]":
        return self._executor.submit(self._evaluate, job, self._prepare(job))

    def close(self) -> None:
        """Stop the GPU's host; a job still running there (on a retired GPU) is interrupted, not awaited."""
        if self._closed:
            return
        self._closed = True
        if self._busy:
            self._interrupt()
        self._executor.submit(self._halt, True)
        self._executor.shutdown(wait=True)

    def _start(self) -> dict[str, Any]:
        if self._closed:
            raise SlotStartFailed(f"GPU {self.name} is closed")
        info = self._open()
        self._ready = True
        return info

    def _evaluate(self, job: Job, prepared: Any) -> HostOutcome:
        if self._closed:
            raise SlotStartFailed(f"GPU {self.name} is closed")
        if not self._ready:
            self._start()  # after a fault the GPU must open again before it gets more work
        self._busy = True
        try:
            outcome = self._run(job, prepared)
        except HostFailed as exc:
            self._halt(graceful=exc.alive)
            if exc.alive:  # the host raised: the harness's failure, the GPU is not implicated
                return HostOutcome(harness_error=str(exc))
            problem = self._recover()
            return HostOutcome(fault=str(exc) if problem is None else f"{exc}; then {problem}",
                               gpu_healthy=problem is None)
        finally:
            self._busy = False
        if outcome.fault is not None or outcome.harness_error is not None:
            self._halt(graceful=True)
        return outcome

    def _recover(self) -> str | None:
        """After the host died or hung: a fresh host and the harness's health check on its GPU. None when
        the GPU is sound (and the new host ready); else why not."""
        if self._closed:
            return f"GPU {self.name} was closed"
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 - any failure to reopen the GPU is its failure
            return f"the GPU could not be reopened: {exc}"
        problem = self._health_check()
        if problem is not None:
            self._halt(graceful=False)
            return f"the GPU failed a health check: {problem}"
        return None

    def _halt(self, graceful: bool) -> None:
        if self._ready:
            self._ready = False
            self._stop(graceful)

    def _prepare(self, job: Job) -> Any:
        return None

    def _open(self) -> dict[str, Any]:
        raise NotImplementedError

    def _run(self, job: Job, prepared: Any) -> HostOutcome:
        raise NotImplementedError

    def _health_check(self) -> str | None:
        raise NotImplementedError

    def _stop(self, graceful: bool) -> None:
        raise NotImplementedError

    def _interrupt(self) -> None:
        raise NotImplementedError


@dataclass
class Started:
    slots: list[Slot]
    devices: dict[str, dict[str, Any]]
    retired: dict[str, str]


def start_slots(slots: Sequence[Slot]) -> Started:
    """Open every slot's GPU at once; a slot that cannot start is retired with the reason."""
    futures = [(slot, slot.start()) for slot in slots]
    wait([future for _, future in futures])
    live: list[Slot] = []
    devices: dict[str, dict[str, Any]] = {}
    retired: dict[str, str] = {}
    for slot, future in futures:
        try:
            devices[slot.name] = future.result()
            live.append(slot)
        except Exception as exc:  # noqa: BLE001 - any failure to open the GPU retires it
            retired[slot.name] = f"could not start: {exc}"
            log.warning("GPU %s retired: could not start: %s", slot.name, exc)
            slot.close()
    return Started(live, devices, retired)


@dataclass
class _SlotState:
    slot: Slot
    load: int = 0
    retired: bool = False


def candidate_fault(job: Job, message: str) -> HostOutcome:
    """The candidate's RUNTIME_ERROR for a job whose every attempt ended its host while the GPU stayed sound."""
    task = job.work.task
    return HostOutcome(evaluation=Evaluation(
        candidate=job.work.origin, task=task.id, task_hash=task.content_hash, arch=job.work.arch,
        status=Status.RUNTIME_ERROR, message=message))


class JobFeed:
    """Jobs that arrive while ``schedule`` runs. ``stop`` ends the schedule at its next turn without waiting
    for the jobs in flight (their caller closes the slots, and keeps what it needs to run them again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: list[Job] = []
        self._signal: Future[None] = Future()
        self.stopped = False

    def put(self, job: Job) -> None:
        with self._lock:
            self._jobs.append(job)
            self._wake()

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            self._wake()

    def drain(self) -> tuple[list[Job], "Future[None]"]:
        """The jobs that arrived since the last call, and a future that is set when more arrive (or on stop)."""
        with self._lock:
            jobs, self._jobs = self._jobs, []
            if self._signal.done() and not self.stopped:
                self._signal = Future()
            return jobs, self._signal

    def _wake(self) -> None:
        if not self._signal.done():
            self._signal.set_result(None)


def schedule(jobs: Sequence[Job], started: Started, *,
             on_result: Callable[[Job, HostOutcome, str], None],
             on_give_up: Callable[[Job, InfraFailure, str], None],
             max_attempts: int = 2, feed: JobFeed | None = None,
             on_start: Callable[[Job, str], None] | None = None,
             on_retire: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """Run every job to a result or a give-up; returns the retired slots with their reasons. With ``feed``, also
    every job put there, until it is stopped. ``on_start`` hears each job handed to a slot (by its name),
    ``on_retire`` each slot retired (name, reason)."""
    states = {slot.name: _SlotState(slot) for slot in started.slots}
    retired = dict(started.retired)
    queue: deque[Job] = deque(jobs)
    inflight: dict[Future[HostOutcome], tuple[_SlotState, Job]] = {}

    def retire(state: _SlotState, reason: str) -> None:
        state.retired = True
        retired[state.slot.name] = reason
        log.warning("GPU %s retired: %s", state.slot.name, reason)
        state.slot.close()
        if on_retire is not None:
            on_retire(state.slot.name, reason)

    def fault(state: _SlotState, job: Job, reason: str, gpu_healthy: bool) -> None:
        if state.retired:  # a job caught in a retirement: not its fault, nothing counted
            queue.appendleft(job)
            return
        job.faults.append(f"GPU {state.slot.name}: {reason}")
        job.avoid.add(state.slot.name)
        if not gpu_healthy:
            job.gpu_failed_after = True
            retire(state, f"failed the harness's health check: {reason}")
        if len(job.faults) < max_attempts:
            queue.appendleft(job)
            log.warning("GPU %s faulted while evaluating %s (re-queued): %s", state.slot.name, job.work.origin, reason)
        elif job.gpu_failed_after:
            on_give_up(job, InfraFailure.NO_GPU, f"evaluation interrupted by {len(job.faults)} faults "
                       f"({'; '.join(job.faults)}), and a GPU failed the harness's health check after one: "
                       "not judged")
        else:
            on_result(job, candidate_fault(job, (
                f"the candidate's evaluation killed or hung its GPU host {len(job.faults)} times, and the GPU "
                f"passed the harness's health check after each ({'; '.join(job.faults)})")), state.slot.name)

    arrival: Future[None] | None = None
    while queue or inflight or feed is not None:
        if feed is not None:
            if feed.stopped:
                break
            arrived, arrival = feed.drain()
            queue.extend(arrived)
        live = [s for s in states.values() if not s.retired]
        for state in live:
            while state.load < state.slot.depth:
                job = _take(queue, state.slot.name, {s.slot.name for s in live})
                if job is None:
                    break
                inflight[state.slot.submit(job)] = (state, job)
                state.load += 1
                if on_start is not None:
                    on_start(job, state.slot.name)
        if not inflight and queue:  # no slot could take them: none is left
            reasons = "; ".join(f"GPU {name}: {why}" for name, why in retired.items()) or "no GPU was given"
            while queue:
                on_give_up(queue.popleft(), InfraFailure.NO_GPU, f"no GPU left to evaluate on (every GPU was retired: {reasons})")
        if not inflight and arrival is None:
            break
        done, _ = wait([*inflight, *([arrival] if arrival is not None else [])], return_when=FIRST_COMPLETED)
        for future in done:
            if future not in inflight:  # the feed's signal: new jobs (or stop), taken at the top
                continue
            state, job = inflight.pop(future)
            state.load -= 1
            try:
                outcome = future.result()
            except SlotStartFailed as exc:
                queue.appendleft(job)
                if not state.retired:
                    retire(state, f"could not restart: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - the harness's own failure: this item's, not the GPU's
                outcome = HostOutcome(harness_error=f"{type(exc).__name__}: {exc}")
            if outcome.harness_error is not None:
                on_give_up(job, InfraFailure.HARNESS_ERROR, f"the harness failed on this item (not the candidate's "
                           f"verdict, and not held against the GPU): {outcome.harness_error}")
            elif outcome.fault is None and outcome.evaluation is not None:
                on_result(job, outcome, state.slot.name)
            else:
                fault(state, job, outcome.fault or "no evaluation came back", outcome.gpu_healthy is not False)
    return retired


def _take(queue: deque[Job], slot: str, live: set[str]) -> Job | None:
    """The first job this slot may take: one that has not faulted on it, unless no other GPU could."""
    for position, job in enumerate(queue):
        if slot not in job.avoid or not (live - job.avoid - {slot}):
            del queue[position]
            return job
    return None
