"""A shared queue of candidates over a set of GPU slots, whichever backend provides them.

A slot is one GPU's host (a local process or a Ray actor) that evaluates jobs one after another and
hands back futures. The driver thread alone receives outcomes, so it alone writes the run directory.

Faults are the GPU's, never the candidate's: the job goes back to the front of the queue for another
GPU, and the slot is restarted before its next job. A slot is retired when it cannot (re)start or has
faulted ``retire_after`` times in a row (a GPU that evaluates in between is sound; what faulted was
more likely the candidates). A job interrupted ``max_attempts`` times is given up as an
infrastructure failure rather than allowed to take down every GPU in turn (a candidate may be what
breaks them). When no slot is left, every job still queued is given up with the reasons.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.gpu_host import HostJob, HostOutcome
from ptxbench.evaluate.status import InfraFailure

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

    Subclasses open the GPU's host (``_open``), evaluate on it (``_run``, raising ``HostFailed``), stop it
    (``_stop``) and stop a call in flight from another thread (``_interrupt``). After any fault the
    host is stopped and the next job opens the GPU afresh. ``_prepare`` runs in the driver's thread
    when a job is handed over.
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
            return HostOutcome(fault=str(exc))
        finally:
            self._busy = False
        if outcome.fault is not None:
            self._halt(graceful=True)
        return outcome

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
    faults: list[str] = field(default_factory=list)
    retired: bool = False


def schedule(jobs: Sequence[Job], started: Started, *,
             on_result: Callable[[Job, HostOutcome, str], None],
             on_give_up: Callable[[Job, InfraFailure, str], None],
             max_attempts: int = 2, retire_after: int = 3) -> dict[str, str]:
    """Run every job to a result or a give-up; returns the retired slots with their reasons."""
    states = {slot.name: _SlotState(slot) for slot in started.slots}
    retired = dict(started.retired)
    queue: deque[Job] = deque(jobs)
    inflight: dict[Future[HostOutcome], tuple[_SlotState, Job]] = {}

    def retire(state: _SlotState, reason: str) -> None:
        state.retired = True
        retired[state.slot.name] = reason
        log.warning("GPU %s retired: %s", state.slot.name, reason)
        state.slot.close()

    def fault(state: _SlotState, job: Job, reason: str) -> None:
        if state.retired:  # a job caught in a retirement: not its fault, nothing counted
            queue.appendleft(job)
            return
        state.faults.append(reason)
        job.faults.append(f"GPU {state.slot.name}: {reason}")
        job.avoid.add(state.slot.name)
        if len(job.faults) >= max_attempts:
            on_give_up(job, InfraFailure.HARNESS_ERROR, f"evaluation interrupted by {len(job.faults)} GPU faults ({'; '.join(job.faults)}); "
                            "not the candidate's verdict")
        else:
            queue.appendleft(job)
            log.warning("GPU %s faulted while evaluating %s (re-queued): %s", state.slot.name, job.work.origin, reason)
        if len(state.faults) >= retire_after:
            retire(state, f"faulted {len(state.faults)} times in a row: {'; '.join(state.faults)}")

    while queue or inflight:
        live = [s for s in states.values() if not s.retired]
        for state in live:
            while state.load < state.slot.depth:
                job = _take(queue, state.slot.name, {s.slot.name for s in live})
                if job is None:
                    break
                inflight[state.slot.submit(job)] = (state, job)
                state.load += 1
        if not inflight:
            reasons = "; ".join(f"GPU {name}: {why}" for name, why in retired.items()) or "no GPU was given"
            while queue:
                on_give_up(queue.popleft(), InfraFailure.NO_GPU, f"no GPU left to evaluate on (every GPU was retired: {reasons})")
            break
        done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
        for future in done:
            state, job = inflight.pop(future)
            state.load -= 1
            try:
                outcome = future.result()
            except SlotStartFailed as exc:
                queue.appendleft(job)
                if not state.retired:
                    retire(state, f"could not restart: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - a failure of the slot, never of the candidate
                outcome = HostOutcome(fault=f"{type(exc).__name__}: {exc}")
            if outcome.fault is None and outcome.evaluation is not None:
                state.faults.clear()
                on_result(job, outcome, state.slot.name)
            else:
                fault(state, job, outcome.fault or "no evaluation came back")
    return retired


def _take(queue: deque[Job], slot: str, live: set[str]) -> Job | None:
    """The first job this slot may take: one that has not faulted on it, unless no other GPU could."""
    for position, job in enumerate(queue):
        if slot not in job.avoid or not (live - job.avoid - {slot}):
            del queue[position]
            return job
    return None
