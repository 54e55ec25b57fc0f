"""The Ray backend: one GPU host per GPU of a Ray cluster, as an actor; builds as 1-CPU Ray tasks.

Where candidates are built: an actor's node cannot see the driver's build cache, and shipping a
binary built on another node would trust that node's toolchain. So each node builds for itself —
the evaluator starts with the content-addressed build (source, flags and toolchain), a cache hit
when the node already holds it. To keep building off the GPU's critical path, the driver hands an
actor its next candidate while the current one runs (``depth`` 2) and at once starts a Ray task on
that actor's node that builds the candidate into the node's cache; the actor's call takes the task's
result as an argument, so Ray runs it once the build is there. Should the task land on another node
or fail, the actor builds the candidate itself: correctness never rests on the prefetch.

Outcomes come back to the driver, which alone writes the run directory. An actor is never restarted
by Ray (``max_restarts=0``): after a fault (the actor died or gave no answer) the slot starts a fresh actor
and runs the harness's health check on it; the shared scheduler re-queues the candidate, and retires the
slot only when that check (or the restart) fails. An actor that raised is the harness's failure on that
item, recorded as such, never the GPU's.
"""

from __future__ import annotations

import functools
from typing import Any

from ptxbench.check import build_request
from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.fleet.gpu_host import (
    PROBE_TIMEOUT_S, START_TIMEOUT_S, GpuHost, HostOutcome, HostSpec, evaluation_bound_s, parse_outcome,
)
from ptxbench.evaluate.fleet.scheduler import HostFailed, Job, SerialSlot, SlotStartFailed
from ptxbench.toolchain.compile import DEFAULT_TIMEOUT_S


class RayUnavailable(PtxbenchError):
    """Ray is not installed, or its cluster has no GPU."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--backend ray needs Ray: pip install 'ptxbench[ray]'") from None
    return ray


class GpuActor:
    """A ``GpuHost`` in a Ray actor; Ray has set this process's CUDA_VISIBLE_DEVICES to its GPU."""

    def __init__(self) -> None:
        self.host = GpuHost()

    def start(self, spec_json: str) -> dict[str, Any]:
        import ray

        info = self.host.start(spec_json)
        info.update(node_id=ray.get_runtime_context().get_node_id(), ray_gpu_ids=[str(i) for i in ray.get_gpu_ids()])
        return info

    def evaluate(self, job_json: str, prebuilt: str) -> str:
        """``prebuilt`` only orders the call after the node-local build; the host rebuilds if it missed."""
        return self.host.evaluate(job_json)

    def health_check(self) -> str | None:
        return self.host.health_check()

    def close(self) -> None:
        self.host.close()


def prebuild(request_json: str) -> str:
    """Build into this node's cache. Says what happened and never raises: the actor redoes any failure."""
    from ptxbench.toolchain.compile import BuildRequest, build

    try:
        result = build(BuildRequest.model_validate_json(request_json))
    except Exception as exc:  # noqa: BLE001 - e.g. no nvcc on this node; the actor's own build will say
        return f"not built here: {type(exc).__name__}: {exc}"
    return "built" if result.ok else "built (failed; the failure is cached)"


@functools.cache
def _remote_types(cpus_per_gpu: float, lanes: int = 1) -> tuple[Any, Any]:
    """Lanes share a GPU: each actor asks for 1/lanes of one, so Ray places ``lanes`` actors per GPU
    (they coordinate their timing through the GPU's lock on that node)."""
    ray = _ray()
    actor = ray.remote(num_gpus=1 / lanes, num_cpus=cpus_per_gpu / lanes, max_restarts=0,
                       max_task_retries=0)(GpuActor)
    task = ray.remote(num_cpus=1, max_retries=0)(prebuild)
    return actor, task


def _brief(exc: BaseException) -> str:
    """One line for a Ray error: the actor's own exception where there is one, not Ray's traceback."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


class RaySlot(SerialSlot):
    """One GPU of the cluster: an actor holding one GPU, re-created after a fault."""

    depth = 2

    def __init__(self, index: int, spec: HostSpec, cpus_per_gpu: float = 1.0) -> None:
        super().__init__(f"ray{index}")
        self.spec = spec
        self.cpus_per_gpu = cpus_per_gpu
        self._actor: Any = None
        self._node_id: str | None = None

    def _open(self) -> dict[str, Any]:
        ray = _ray()
        actor_type, _ = _remote_types(self.cpus_per_gpu, self.spec.options.lanes)
        actor = actor_type.remote()
        try:
            info: dict[str, Any] = ray.get(actor.start.remote(self.spec.model_dump_json()), timeout=START_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - whatever kept the GPU from opening retires it
            ray.kill(actor)
            raise SlotStartFailed(f"GPU {self.name}: {_brief(exc)}") from None
        self._actor, self._node_id = actor, info["node_id"]
        return {**info, "backend": "ray", "slot": self.name}

    def _prepare(self, job: Job) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        _, task = _remote_types(self.cpus_per_gpu, self.spec.options.lanes)
        node = self._node_id
        strategy = NodeAffinitySchedulingStrategy(node, soft=True) if node else "DEFAULT"
        request = build_request(job.work.source, job.work.arch, job.work.task)
        return task.options(scheduling_strategy=strategy).remote(request.model_dump_json())

    def _run(self, job: Job, prepared: Any) -> HostOutcome:
        ray = _ray()
        from ray.exceptions import GetTimeoutError, RayTaskError

        limit = evaluation_bound_s(job.work.task, job.work.options_or(self.spec)) + DEFAULT_TIMEOUT_S
        try:
            reply = ray.get(self._actor.evaluate.remote(job.work.model_dump_json(), prepared), timeout=limit)
        except GetTimeoutError:
            raise HostFailed(f"the GPU's actor gave no answer within {limit:g} s", alive=False) from None
        except Exception as exc:  # noqa: BLE001 - the actor died, or raised (then it still lives)
            raise HostFailed(f"the GPU's actor failed: {_brief(exc)}", alive=isinstance(exc, RayTaskError)) from None
        return parse_outcome(reply)

    def _health_check(self) -> str | None:
        ray = _ray()
        try:
            problem: str | None = ray.get(self._actor.health_check.remote(), timeout=PROBE_TIMEOUT_S + 60)
        except Exception as exc:  # noqa: BLE001 - an actor that cannot run the check fails it
            return f"the GPU's actor failed: {_brief(exc)}"
        return problem

    def _stop(self, graceful: bool) -> None:
        ray = _ray()
        actor, self._actor = self._actor, None
        if actor is None:
            return
        if graceful:
            try:
                ray.get(actor.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - it is killed next either way
                pass
        ray.kill(actor)

    def _interrupt(self) -> None:
        if self._actor is not None:
            _ray().kill(self._actor)


def connect(address: str | None) -> bool:
    """Join the cluster at ``address`` ('auto', 'ray://host:10001') or start one on this machine (None).
    Joining ships this ptxbench to the workers, so they run the driver's evaluator, not another version.
    Returns whether this call connected (and so should disconnect)."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address is None:
        ray.init(include_dashboard=False)
    else:
        from pathlib import Path

        import ptxbench

        package = str(Path(ptxbench.__file__).resolve().parent)
        ray.init(address=address, runtime_env={"py_modules": [package], "excludes": ["__pycache__"]})
    return True


def disconnect() -> None:
    _ray().shutdown()


def ray_slots(spec: HostSpec, cpus_per_gpu: float = 1.0) -> list[RaySlot]:
    """One slot per GPU of the cluster and lane."""
    gpus = int(_ray().cluster_resources().get("GPU", 0))
    if gpus == 0:
        raise RayUnavailable("the Ray cluster has no GPU (ray.cluster_resources() lists none)")
    return [RaySlot(index, spec, cpus_per_gpu) for index in range(gpus * spec.options.lanes)]
