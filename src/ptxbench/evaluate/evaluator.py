"""The GPU evaluator: build, run in an isolated worker on fresh inputs, judge in this process, time
against the vendor baseline, and prove the executed instructions with Nsight Compute.

Order of stages: build (COMPILE_ERROR) → link policy → correctness trials on every workload,
held-out ones included, each judged here from raw data (RUNTIME_ERROR, TIMEOUT, INCORRECT, and the
guards: provenance, streams, canaries, input mutation, libraries) → timing of the timed and visible
workloads with the outputs of timed calls re-checked and a physical-floor check → executed features
(ncu). Any guard finding makes the candidate REJECTED.
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, Field

from ptxbench.arch.registry import Arch
from ptxbench.check import check_source
from ptxbench.evaluate.baseline_cache import BaselineCache
from ptxbench.evaluate.compare import compare_outputs
from ptxbench.evaluate.gpu_side import CANARY_VALUE
from ptxbench.evaluate.status import Evaluation, Guard, GuardFinding, InfraFailure, Status, Timing, TrialResult
from ptxbench.evaluate.verdict import (
    base_name,
    canary_guards,
    decide,
    library_guards,
    mutation_guards,
    provenance_guards,
    unique,
)
from ptxbench.evaluate.worker import RequestFailed, Worker, WorkerDied, WorkerTimeout
from ptxbench.tasks.model import Role, Task, Workload
from ptxbench.tasks.reference import make_inputs, run_reference
from ptxbench.toolchain.compile import default_cache_dir

HANDLER = "ptxbench.evaluate.gpu_side:CandidateRunner"

# Datasheet peaks (dense): no kernel can beat them, so a faster time means the work was not done.
PEAKS = {"H200": {"bytes_per_s": 4.8e12, "bf16": 989e12, "fp8": 1979e12},
         "H100": {"bytes_per_s": 3.35e12, "bf16": 989e12, "fp8": 1979e12}}


class EvalOptions(BaseModel):
    """Every knob of ``ptxbench eval``; recorded in the run header."""

    trials: int = Field(default=3, ge=1, description="fresh input sets per workload")
    call_timeout_s: float = Field(default=60.0, gt=0)
    time: bool = True
    timing_budget_ms: float = Field(default=300.0, gt=0, description="measured time per workload and side")
    profile: bool = Field(default=True, description="prove executed instructions with ncu when it is installed")
    profile_timeout_s: float = Field(default=600.0, gt=0)


def _peaks(device_name: str) -> dict[str, float] | None:
    return next((peaks for key, peaks in PEAKS.items() if key in device_name), None)


class GpuEvaluator:
    """Evaluates candidates on one GPU; also serves as refinement's evaluator (``evaluate_source``)."""

    def __init__(self, options: EvalOptions | None = None, device: int | None = None, handler: str = HANDLER,
                 reference_device: str = "cuda") -> None:
        """``handler`` and ``reference_device`` exist so the orchestration can be tested without a GPU."""
        self.options = options or EvalOptions()
        self.reference_device = reference_device
        self.worker = Worker(handler, device, keep_spare=True)
        self._device: dict | None = None
        self._peaks: dict[str, float] | None = None
        self.baseline_cache = BaselineCache(default_cache_dir().parent / "baselines")
        self._durations: dict[str, float] = {}

    def close(self) -> None:
        self.worker.close()

    def device(self) -> dict:
        if self._device is None:
            self._device = self.worker.call("device_info", timeout_s=300)
        return self._device

    # -- the whole evaluation -------------------------------------------------------------------

    def evaluate(self, task: Task, arch: Arch, source: str, name: str = "candidate.cu") -> Evaluation:
        """The candidate's evaluation, validated (the model forbids states the evidence cannot support)."""
        self._durations = {}
        started = time.perf_counter()
        evaluation = self._evaluate(task, arch, source, name)
        durations = {**self._durations, "total": time.perf_counter() - started}
        return Evaluation.model_validate({**evaluation.model_dump(), "durations_s": durations})

    @contextmanager
    def _stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._durations[name] = self._durations.get(name, 0.0) + time.perf_counter() - started

    def _evaluate(self, task: Task, arch: Arch, source: str, name: str) -> Evaluation:
        with self._stage("build_and_static"):
            report = check_source(source, arch, task, name)
        result = report.build
        evaluation = Evaluation(candidate=name, task=task.id, task_hash=task.content_hash, arch=arch,
                                status=Status.COMPILE_ERROR, build=result, static=report.static,
                                message=result.diagnosis.summary if result.diagnosis else "")
        if not result.ok:
            return evaluation
        linked = [v for v in report.static.policy_violations if "links" in v] if report.static else []
        if linked:
            return evaluation.model_copy(update={"status": Status.REJECTED, "message": linked[0],
                                                 "guards": [GuardFinding(guard=Guard.LIBRARY_CALL, detail=linked[0])]})
        try:
            return self._run(task, evaluation, Path(result.directory) / "candidate.so")
        except WorkerDied as exc:
            return evaluation.model_copy(update={"status": Status.RUNTIME_ERROR, "message": str(exc)})

    def _run(self, task: Task, evaluation: Evaluation, shared_object: Path) -> Evaluation:
        try:
            self.device()
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            return evaluation.model_copy(update={"status": None, "infra_failure": InfraFailure.NO_GPU,
                                                 "message": f"the GPU worker could not start: {exc}"})
        if self.options.time:
            with self._stage("peaks"):  # once per evaluator: the first candidate carries it
                self.peaks()  # measured in a process no candidate has touched
        try:
            with self._stage("worker_start"):
                self.worker.renew()  # a fresh process per candidate: nothing of the previous one survives
                self.worker.wait_ready()
        except (WorkerDied, WorkerTimeout) as exc:
            return evaluation.model_copy(update={"status": None, "infra_failure": InfraFailure.HARNESS_ERROR,
                                                 "message": f"a fresh GPU worker could not start: {exc}"})
        try:
            with self._stage("load"):
                self.worker.call("load", str(shared_object), task.model_dump_json(),
                                 timeout_s=self.options.call_timeout_s)
        except WorkerTimeout as exc:  # loading runs the library's static constructors: the candidate's code
            return evaluation.model_copy(update={"status": Status.TIMEOUT, "message": f"loading the library: {exc}"})
        except RequestFailed as exc:
            if exc.kind in ("OSError", "AttributeError"):  # ctypes: the library or its entry point would not load
                return evaluation.model_copy(update={"status": Status.RUNTIME_ERROR, "message": f"loading failed: {exc}"})
            return evaluation.model_copy(update={"status": None, "infra_failure": InfraFailure.HARNESS_ERROR,
                                                 "message": f"the worker could not load the candidate: {exc}"})
        libraries_at_load = self.worker.mapped_libraries()
        own_kernels = {base_name(k.demangled) for k in evaluation.static.kernels}

        with self._stage("trials"):
            trials, guards, failure = self._trials(task, own_kernels)
        guards += library_guards(self.worker.mapped_libraries() - libraries_at_load)
        evaluation = evaluation.model_copy(update={"trials": trials, "guards": unique(guards)})
        if failure is not None:
            status, message = failure
            self.worker.kill()
            return evaluation.model_copy(update={"status": status, "message": message})
        status = decide(evaluation)
        if status is not Status.PASSED:
            return evaluation.model_copy(update={"status": status, "message": _summary(evaluation, status)})

        if self.options.time:
            with self._stage("timing"):
                evaluation = self._timing(task, evaluation)
            if evaluation.status is Status.INCORRECT:  # a timed call's outputs were wrong
                return evaluation
        if self.options.profile and shutil.which("ncu"):
            from ptxbench.evaluate.profiling import profile_requirements

            with self._stage("profile"):
                features = profile_requirements(task, evaluation.arch, shared_object, self.options.profile_timeout_s)
            evaluation = evaluation.model_copy(update={"features": features})
            missing = [f for f in features if not f.satisfied]
            if missing:
                evaluation = evaluation.model_copy(update={"guards": evaluation.guards + [
                    GuardFinding(guard=Guard.FEATURE_NOT_EXECUTED, detail=f.message) for f in missing]})
        status = decide(evaluation)
        return evaluation.model_copy(update={"status": status, "message": _summary(evaluation, status)})

    # -- stages -----------------------------------------------------------------------------------

    def _trials(self, task: Task, own_kernels: set[str]) -> tuple[list[TrialResult], list[GuardFinding],
                                                                   tuple[Status, str] | None]:
        trials: list[TrialResult] = []
        guards: list[GuardFinding] = []
        for workload in task.workloads:
            for _ in range(self.options.trials):
                seed = secrets.randbits(62)
                try:
                    with self._stage("trials.worker"):
                        reply = self.worker.call("trial", workload.sizes, seed, timeout_s=self.options.call_timeout_s)
                except WorkerTimeout as exc:
                    return trials, guards, (Status.TIMEOUT, f"workload {workload.name}: {exc}")
                except WorkerDied as exc:
                    return trials, guards, (Status.RUNTIME_ERROR, f"workload {workload.name}: {exc}")
                except RequestFailed as exc:
                    return trials, guards, (Status.RUNTIME_ERROR, f"workload {workload.name}: {exc}")
                if reply["code"] != 0:
                    return trials, guards, (Status.RUNTIME_ERROR,
                                            f"workload {workload.name}: the entry point returned cudaError {reply['code']}")
                with self._stage("trials.judge"):
                    trial, found = self._judge_trial(task, workload, seed, reply, own_kernels)
                trials.append(trial)
                guards += found
                if not trial.passed:
                    break  # the next workload says more than another seed of this one
        return trials, guards, None

    def _judge_trial(self, task: Task, workload: Workload, seed: int, reply: dict,
                     own_kernels: set[str]) -> tuple[TrialResult, list[GuardFinding]]:
        sizes = workload.sizes
        inputs = dict(make_inputs(task, sizes, seed, device=self.reference_device))
        guards = provenance_guards(reply["activities"], reply["stream"], own_kernels)
        guards += canary_guards(reply["canaries"], CANARY_VALUE)
        guards += mutation_guards(inputs, reply["inputs_after"])
        expected = run_reference(task, inputs, sizes)
        outputs = {name: tensor.to(self.reference_device) for name, tensor in reply["outputs"].items()}
        comparisons = compare_outputs(task, outputs, expected)
        return TrialResult(workload=workload.name, role=workload.role.value, seed=seed, comparisons=comparisons,
                           passed=all(c.passed for c in comparisons)), guards

    def peaks(self) -> dict[str, float]:
        """Roofline ceilings measured on this GPU once per evaluator (copy bandwidth, library matmul rates);
        empty when they could not be measured, and then no roofline share is reported."""
        if self._peaks is None:
            try:
                self._peaks = self.worker.call("peaks", timeout_s=300)
            except (RequestFailed, WorkerDied, WorkerTimeout):
                self._peaks = {}
        return self._peaks

    def _timing(self, task: Task, evaluation: Evaluation) -> Evaluation:
        from ptxbench.evaluate.baselines import baseline_variants

        device = self.device()
        datasheet = _peaks(device["name"])
        measured = self.peaks()  # cached: measured before any candidate was loaded
        fp8 = any(i.dtype.value.startswith("float8") for i in task.inputs)
        timings: list[Timing] = []
        guards = list(evaluation.guards)
        trials = list(evaluation.trials)
        for workload in [w for w in task.workloads if w.role is not Role.HELDOUT]:
            seeds = [secrets.randbits(62) for _ in range(3)]
            keys = {v: BaselineCache.key(task.content_hash, workload.name, v, device) for v in baseline_variants(task)}
            cached = {v: self.baseline_cache.get(k) for v, k in keys.items()}
            to_measure = [v for v, record in cached.items() if record is None]
            reply = self.worker.call("time", workload.sizes, seeds, to_measure, self.options.timing_budget_ms,
                                     timeout_s=self.options.call_timeout_s + 10 * self.options.timing_budget_ms / 1e3 + 120)
            inputs = dict(make_inputs(task, workload.sizes, reply["last_seed"], device=self.reference_device))
            expected = run_reference(task, inputs, workload.sizes)
            recheck = compare_outputs(task, {k: v.to(self.reference_device) for k, v in reply["last_outputs"].items()}, expected)
            if not all(c.passed for c in recheck):
                trials.append(TrialResult(workload=workload.name, role="timed-recheck", seed=reply["last_seed"],
                                          comparisons=recheck, passed=False))
                failed = evaluation.model_copy(update={"trials": trials, "timings": []})
                return failed.model_copy(update={"status": Status.INCORRECT,
                                                 "message": f"outputs of timed calls on {workload.name} were wrong"})
            stats = reply["stats"]
            for variant in to_measure:
                self.baseline_cache.put(keys[variant], *stats[variant])
            baselines = {v: (record.median_ms, record.iqr_ms) for v, record in cached.items() if record is not None}
            baselines.update({v: tuple(stats[v]) for v in to_measure})
            candidate_ms, candidate_iqr = stats["candidate"]
            best = min(baselines, key=lambda v: baselines[v][0], default=None)
            flops = task.flops_for(workload.sizes)
            moved = task.bytes_for(workload.sizes)
            seconds = candidate_ms / 1e3
            attainable = None
            if measured:
                attainable = moved / measured["bytes_per_s"]
                if flops:
                    attainable = max(attainable, flops / measured["fp8_flops" if fp8 else "bf16_flops"])
            timings.append(Timing(workload=workload.name, candidate_ms=candidate_ms, candidate_iqr_ms=candidate_iqr,
                                  baseline=best, baseline_ms=baselines[best][0] if best else None,
                                  baseline_iqr_ms=baselines[best][1] if best else None, samples=reply["samples"],
                                  tflops=flops / seconds / 1e12 if flops else None, gbps=moved / seconds / 1e9,
                                  roofline_pct=100 * attainable / seconds if attainable else None))
            if datasheet is not None:
                floor_s = max(moved / datasheet["bytes_per_s"], flops / datasheet["fp8" if fp8 else "bf16"])
                if seconds < floor_s:
                    guards.append(GuardFinding(guard=Guard.BELOW_PHYSICAL_FLOOR, detail=(
                        f"{workload.name}: {candidate_ms:.4f} ms is below the physical floor {floor_s * 1e3:.4f} ms "
                        "(datasheet bandwidth and tensor-core peak)")))
        return evaluation.model_copy(update={"timings": timings, "guards": unique(guards), "trials": trials})


def _summary(evaluation: Evaluation, status: Status) -> str:
    if status is Status.REJECTED:
        return "; ".join(g.detail for g in evaluation.guards)
    if status is Status.INCORRECT:
        failed = next(t for t in evaluation.trials if not t.passed)
        worst = next(c for c in failed.comparisons if not c.passed)
        return (f"wrong on workload {failed.workload} ({failed.role}): output {worst.output} has {worst.mismatched} of "
                f"{worst.elements} elements out of tolerance, {worst.nonfinite} NaN/Inf; worst at {worst.worst_index}: "
                f"{worst.worst_value} vs {worst.worst_expected}")
    if status is Status.PASSED and evaluation.timings:
        timed = evaluation.timings[0]
        speed = f"{timed.speedup:.2f}x the vendor baseline" if timed.speedup else "no baseline"
        verified = "executed features verified" if evaluation.features is not None else "features unverified (no ncu)"
        return f"correct on every workload; {timed.workload}: {timed.candidate_ms:.3f} ms, {speed}; {verified}"
    return "correct on every workload"
