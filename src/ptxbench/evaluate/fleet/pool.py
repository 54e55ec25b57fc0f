"""The local backend: the chosen GPUs of this machine, one host process per GPU (and lane).

Each host is a ``Worker`` serving ``GpuHost``, pinned to its GPU through ``CUDA_VISIBLE_DEVICES``
before CUDA starts, so the candidate's worker, the reference and ``ncu`` all run on that GPU. Builds
are not the pool's concern: on one machine every host shares the build cache, which the driver fills
ahead on every core.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
from collections.abc import Sequence
from typing import Any

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.fleet.gpu_host import (
    HOST_HANDLER, PROBE_TIMEOUT_S, START_TIMEOUT_S, HostOutcome, HostSpec, evaluation_bound_s, parse_outcome,
)
from ptxbench.evaluate.fleet.scheduler import HostFailed, Job, SerialSlot, SlotStartFailed
from ptxbench.evaluate.isolation.worker import RequestFailed, Worker, WorkerDied, WorkerTimeout


class GpuSelectionError(PtxbenchError):
    """``--gpus`` names GPUs this process cannot see, or is not a list of indices."""


@functools.lru_cache(maxsize=1)
def cuda_driver_present() -> bool:
    """Whether NVIDIA's driver library (``libcuda.so.1``) loads in this process. Without it torch sees no GPU,
    so a machine without one (CI, a laptop) learns that without importing torch: about 2.5 s of CPU at every
    ``eval`` there, for no other use."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def visible_gpu_count() -> int:
    if not cuda_driver_present():
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pin_for(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that shows a child exactly GPU ``index`` as this process numbers
    it: the index itself or, where this process is already restricted, the entry it stands for."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return str(index)
    entries = [entry.strip() for entry in listed.split(",") if entry.strip()]
    if not 0 <= index < len(entries):
        raise GpuSelectionError(f"GPU {index} is not visible: CUDA_VISIBLE_DEVICES={listed!r} shows "
                                f"{len(entries)} GPU(s), numbered from 0")
    return entries[index]


def parse_gpus(text: str) -> list[int]:
    """``"0,1"`` → [0, 1]: GPU indices as CUDA numbers them in this process (as ``cuda:N`` does)."""
    try:
        chosen = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise GpuSelectionError(f"--gpus takes GPU indices separated by commas (e.g. 0,1), not {text!r}") from None
    if not chosen or any(i < 0 for i in chosen) or len(set(chosen)) != len(chosen):
        raise GpuSelectionError(f"--gpus needs distinct non-negative indices, got {text!r}")
    return chosen


def _describe(exc: Exception) -> str:
    """What went wrong with a host process (Worker's own wording speaks of the candidate's process)."""
    if isinstance(exc, WorkerDied):
        return f"the host process exited (code {exc.exitcode}; its output above says why)"
    return str(exc)


class LocalSlot(SerialSlot):
    """One GPU of this machine behind its host process."""

    def __init__(self, index: int, spec: HostSpec, lane: int | None = None) -> None:
        super().__init__(str(index) if lane is None else f"{index}.{lane}")
        self.pin = pin_for(index)
        self.spec = spec
        self._host: Worker | None = None

    def _open(self) -> dict[str, Any]:
        host = Worker(HOST_HANDLER)
        try:
            info: dict[str, Any] = host.call("start", self.spec.model_dump_json(), self.pin, timeout_s=START_TIMEOUT_S)
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            host.kill()
            raise SlotStartFailed(f"GPU {self.name} (CUDA_VISIBLE_DEVICES={self.pin}): {_describe(exc)}") from None
        self._host = host
        return {**info, "backend": "local", "slot": self.name}

    def _run(self, job: Job, prepared: Any) -> HostOutcome:
        assert self._host is not None
        try:
            reply = self._host.call("evaluate", job.work.model_dump_json(),
                                    timeout_s=evaluation_bound_s(job.work.task, job.work.options_or(self.spec)))
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            raise HostFailed(f"the GPU's host process failed: {_describe(exc)}",
                             alive=isinstance(exc, RequestFailed)) from None
        return parse_outcome(reply)

    def _health_check(self) -> str | None:
        assert self._host is not None
        try:
            problem: str | None = self._host.call("health_check", timeout_s=PROBE_TIMEOUT_S + 60)
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            return f"the GPU's host process failed: {_describe(exc)}"
        return problem

    def _stop(self, graceful: bool) -> None:
        host, self._host = self._host, None
        if host is None:
            return
        if graceful:
            try:
                host.call("close", timeout_s=60)  # the evaluator ends the candidate's worker in order
            except (RequestFailed, WorkerDied, WorkerTimeout):
                pass
            host.close()
        else:
            host.kill()

    def _interrupt(self) -> None:
        pid = self._host.pid if self._host is not None else None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)  # the blocked call then fails as WorkerDied on the slot's thread
            except ProcessLookupError:
                pass


def local_slots(indices: Sequence[int], spec: HostSpec) -> list[LocalSlot]:
    """One slot per GPU, or per GPU and lane (named ``GPU.lane``) when several share each GPU."""
    lanes = spec.options.lanes
    return [LocalSlot(index, spec, None if lanes == 1 else lane) for index in indices for lane in range(lanes)]
