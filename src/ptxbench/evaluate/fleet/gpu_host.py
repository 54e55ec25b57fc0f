"""One GPU's evaluator behind a process boundary, as both scale-out backends run it.

A host owns one ``GpuEvaluator`` in a process that sees exactly one GPU (``CUDA_VISIBLE_DEVICES``, set
here by the local pool or by Ray for an actor), so everything the evaluator starts inherits that GPU:
the candidate's worker, the reference computed in this process, and ``ncu``. A driver with several
GPUs runs one host per GPU and never shares a CUDA context between them.

The host also says whether its GPU is still sound after a failure: a candidate that crashed or hung,
or an evaluation that could not open the GPU or raised, is followed by the harness's own health check (a
known-good matmul in a fresh worker, ``CandidateRunner.health_check``). Only a failed health check
makes the outcome a *fault* of the GPU (``gpu_healthy`` False), which retires it; whatever a candidate
does otherwise stays that candidate's verdict, because a GPU retired on a candidate's word would let one
bad kernel take every later candidate of the run down with it. An exception of the harness itself on a
sound GPU is reported as ``harness_error``: recorded for that item, never counted against the GPU.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import time
import traceback
from typing import Any

from pydantic import Field, ValidationError

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import HANDLER, EvalOptions, GpuEvaluator
from ptxbench.evaluate.isolation.worker import RequestFailed, WorkerDied, WorkerTimeout
from ptxbench.evaluate.timing.protocol import call_limit_s
from ptxbench.records import Record
from ptxbench.records.evaluation import Evaluation, InfraFailure, Status
from ptxbench.tasks.model import Role, Task
from ptxbench.toolchain.compile import DEFAULT_TIMEOUT_S

HOST_HANDLER = "ptxbench.evaluate.fleet.gpu_host:GpuHost"
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
    """One candidate as a host receives it; ``options``: this job's own (a server's jobs differ), else the
    host's ``HostSpec.options``."""

    task: Task
    arch: Arch
    source: str
    origin: str
    options: EvalOptions | None = None

    def options_or(self, spec: HostSpec) -> EvalOptions:
        return self.options if self.options is not None else spec.options


class HostOutcome(Record):
    """An evaluation to record, or the fault that voided it, or the harness's failure (then ``evaluation``
    is None)."""

    evaluation: Evaluation | None = None
    fault: str | None = None
    gpu_healthy: bool | None = Field(default=None, description=(
        "After a fault: whether the GPU then passed the harness's health check (None: not checked)"))
    harness_error: str | None = Field(default=None, description=(
        "The harness itself failed on this item (raised, or replied with something unreadable) on a sound GPU"))
    seconds: float = 0.0
    where: dict[str, Any] = Field(default_factory=dict, description="the host that evaluated it (GPU, machine, pid)")


HEALTH_RELATIVE_TOLERANCE = 1e-2  # fp32 matmul of 256-deep sums, even with TF32 on, is far closer


def health_problem(report: dict[str, Any]) -> str | None:
    """None when a ``CandidateRunner.health_check`` report shows a sound GPU; else what is wrong. Decided
    here, in the harness's process, not by the worker that ran the check."""
    try:
        error, scale = float(report["max_abs_error"]), float(report["reference_max_abs"])
    except (KeyError, TypeError, ValueError) as exc:
        return f"the health check's report is unreadable ({type(exc).__name__}: {exc}): {report!r}"
    if not math.isfinite(error) or not math.isfinite(scale) or scale <= 0:
        return f"the known-good matmul gave non-finite or empty results (error {error}, scale {scale})"
    if error > HEALTH_RELATIVE_TOLERANCE * scale:
        return (f"the known-good matmul is wrong on the GPU: max error {error:.3g} against results up to "
                f"{scale:.3g} (allowed {HEALTH_RELATIVE_TOLERANCE:g} of that)")
    return None


def parse_outcome(reply: str) -> HostOutcome:
    """A host's reply; one that cannot be read is the harness's failure on this item, not the GPU's."""
    try:
        return HostOutcome.model_validate_json(reply)
    except ValidationError as exc:
        return HostOutcome(harness_error=f"the GPU's host sent a reply that is not a HostOutcome: {exc}")


def evaluation_bound_s(task: Task, options: EvalOptions) -> float:
    """An upper bound on one evaluation, summed from the evaluator's own per-call limits. It only
    catches a host that hangs outside those limits (a wedged driver), so it is generous on purpose."""
    calls = len(task.workloads) * options.trials
    timed = sum(1 for w in task.workloads if w.role is not Role.HELDOUT)
    bound = DEFAULT_TIMEOUT_S + 600.0 + options.call_timeout_s * (calls + 1)  # build, device+peaks, load+trials
    if options.time:
        bound += timed * call_limit_s(options.call_timeout_s, options.timing_budget_ms)
    if options.profile:
        bound += options.profile_timeout_s
    return bound + PROBE_TIMEOUT_S + 60.0


class GpuHost:
    """The handler a host process serves (``Worker``) or a Ray actor wraps: start, evaluate, close."""

    def __init__(self) -> None:
        self.evaluator: GpuEvaluator | None = None
        self.spec: HostSpec | None = None
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
        self.spec = spec
        self.evaluator = GpuEvaluator(spec.options, None, spec.handler, spec.reference_device)
        self.info = {**self.evaluator.device(), "host": platform.node(), "pid": os.getpid(),
                     "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        return self.info

    def evaluate(self, job_json: str) -> str:
        """A ``HostJob`` in, a ``HostOutcome`` out, both as JSON (stable across processes and nodes)."""
        if self.evaluator is None:
            raise RuntimeError("the host was not started")
        started = time.monotonic()
        outcome = self._judge(HostJob.model_validate_json(job_json))
        outcome.seconds, outcome.where = time.monotonic() - started, self.info
        return outcome.model_dump_json()

    def _judge(self, job: HostJob) -> HostOutcome:
        """The evaluation, unless the health check that follows a suspect one says the GPU is at fault."""
        assert self.evaluator is not None and self.spec is not None
        self.evaluator.options = job.options_or(self.spec)  # read per evaluation; workers and caches stay
        try:
            evaluation = self.evaluator.evaluate(job.task, job.arch, job.source, job.origin)
        except Exception as exc:  # noqa: BLE001 - the harness's own failure, unless the GPU is what broke
            failure = f"{type(exc).__name__}: {exc}"
            problem = self.health_check()
            if problem is not None:
                return HostOutcome(fault=f"the evaluation raised ({failure}) and the GPU failed a health check: "
                                         f"{problem}", gpu_healthy=False)
            return HostOutcome(harness_error=f"the evaluator raised: {failure}\n{traceback.format_exc()}")
        if evaluation.infra_failure is InfraFailure.NO_GPU:  # before the candidate ran: never its doing
            problem = self.health_check()
            if problem is None:
                return HostOutcome(harness_error=f"{evaluation.message} (the GPU then passed a health check)")
            return HostOutcome(fault=f"{evaluation.message}; the GPU then failed a health check: {problem}",
                               gpu_healthy=False)
        if evaluation.status in _SUSPECT:
            problem = self.health_check()
            if problem is not None:
                return HostOutcome(fault=f"the GPU failed a health check after the candidate's "
                                         f"{evaluation.status.value} ({evaluation.message}): {problem}",
                                   gpu_healthy=False)
        return HostOutcome(evaluation=evaluation)

    def health_check(self) -> str | None:
        """None when a fresh worker runs the known-good computation correctly on this GPU; else what went
        wrong. The worker is ended either way, so the next evaluation starts afresh."""
        if self.evaluator is None:
            return "the host was not started"
        self.evaluator.worker.kill()
        try:
            report = self.evaluator.worker.call("health_check", timeout_s=PROBE_TIMEOUT_S)
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            return str(exc)
        finally:
            self.evaluator.worker.kill()
        return health_problem(report) if isinstance(report, dict) else f"the health check replied {report!r}"

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None
