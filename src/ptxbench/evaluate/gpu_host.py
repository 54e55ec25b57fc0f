"""One GPU's evaluator behind a process boundary, as both scale-out backends run it.

A host owns one ``GpuEvaluator`` in a process that sees exactly one GPU (``CUDA_VISIBLE_DEVICES``, set
here by the local pool or by Ray for an actor), so everything the evaluator starts inherits that GPU:
the candidate's worker, the reference computed in this process, and ``ncu``. A driver with several
GPUs runs one host per GPU and never shares a CUDA context between them.

The host also says whether its GPU is still sound after a failure: a candidate that crashed or hung
is only believed when a fresh worker can open the GPU right afterwards. Otherwise the outcome is a
*fault* — the GPU's, not the candidate's — and the driver re-queues the candidate elsewhere.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import time
from typing import Any

from pydantic import Field

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import HANDLER, EvalOptions, GpuEvaluator
from ptxbench.evaluate.status import Evaluation, InfraFailure, Status
from ptxbench.evaluate.worker import RequestFailed, WorkerDied, WorkerTimeout
from ptxbench.records import Record
from ptxbench.tasks.model import Role, Task
from ptxbench.toolchain.compile import DEFAULT_TIMEOUT_S

HOST_HANDLER = "ptxbench.evaluate.gpu_host:GpuHost"
START_TIMEOUT_S = 420.0  # the evaluator's own device query may take 300 s on a cold machine
PROBE_TIMEOUT_S = 120.0

# Statuses that a broken GPU can also produce; they are re-checked with a fresh worker before recording.
_SUSPECT = (Status.RUNTIME_ERROR, Status.TIMEOUT)


class HostSpec(Record):
    """Everything a host needs to build its evaluator; plain data, so it crosses processes and nodes.
    ``handler`` and ``reference_device`` are the GPU side's stand-ins for tests, as in ``GpuEvaluator``."""

    options: EvalOptions
    handler: str = HANDLER
    reference_device: str = "cuda"


class HostJob(Record):
    """One candidate as a host receives it."""

    task: Task
    arch: Arch
    source: str
    origin: str


class HostOutcome(Record):
    """An evaluation to record, or the fault that voided it (then ``evaluation`` is None)."""

    evaluation: Evaluation | None = None
    fault: str | None = None
    seconds: float = 0.0
    where: dict[str, Any] = Field(default_factory=dict, description="the host that evaluated it (GPU, machine, pid)")


def evaluation_bound_s(task: Task, options: EvalOptions) -> float:
    """An upper bound on one evaluation, summed from the evaluator's own per-call limits. It only
    catches a host that hangs outside those limits (a wedged driver), so it is generous on purpose."""
    calls = len(task.workloads) * options.trials
    timed = sum(1 for w in task.workloads if w.role is not Role.HELDOUT)
    bound = DEFAULT_TIMEOUT_S + 600.0 + options.call_timeout_s * (calls + 1)  # build, device+peaks, load+trials
    if options.time:
        bound += timed * (options.call_timeout_s + 10 * options.timing_budget_ms / 1e3 + 120)
    if options.profile:
        bound += options.profile_timeout_s
    return bound + PROBE_TIMEOUT_S + 60.0


class GpuHost:
    """The handler a host process serves (``Worker``) or a Ray actor wraps: start, evaluate, close."""

    def __init__(self) -> None:
        self.evaluator: GpuEvaluator | None = None
        self.info: dict[str, Any] = {}

    def start(self, spec_json: str, visible_devices: str | None = None) -> dict[str, Any]:
        """Open the GPU and say which it is; raises when it cannot be used. ``visible_devices`` pins
        this process to one GPU before CUDA is first touched (None: the environment already does)."""
        if visible_devices is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
        # A host may itself run as a daemonic worker process; the evaluator must start its own worker.
        multiprocessing.current_process().daemon = False
        spec = HostSpec.model_validate_json(spec_json)
        self.close()
        self.evaluator = GpuEvaluator(spec.options, None, spec.handler, spec.reference_device)
        self.info = {**self.evaluator.device(), "host": platform.node(), "pid": os.getpid(),
                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        return self.info

    def evaluate(self, job_json: str) -> str:
        """A ``HostJob`` in, a ``HostOutcome`` out, both as JSON (stable across processes and nodes)."""
        if self.evaluator is None:
            raise RuntimeError("the host was not started")
        started = time.monotonic()
        job = HostJob.model_validate_json(job_json)
        evaluation = self.evaluator.evaluate(job.task, job.arch, job.source, job.origin)
        fault = None
        if evaluation.infra_failure is InfraFailure.NO_GPU:
            fault = evaluation.message
        elif evaluation.status in _SUSPECT:
            problem = self._probe()
            if problem is not None:
                fault = (f"the GPU failed a health check after the candidate's {evaluation.status.value} "
                         f"({evaluation.message}): {problem}")
        outcome = HostOutcome(evaluation=None if fault else evaluation, fault=fault,
                              seconds=time.monotonic() - started, where=self.info)
        return outcome.model_dump_json()

    def _probe(self) -> str | None:
        """None when a fresh worker opens the GPU; else what went wrong."""
        assert self.evaluator is not None
        self.evaluator.worker.kill()
        try:
            self.evaluator.worker.call("device_info", timeout_s=PROBE_TIMEOUT_S)
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            return str(exc)
        finally:
            self.evaluator.worker.kill()
        return None

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None
