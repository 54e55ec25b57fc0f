"""The GPU evaluator: build, run in an isolated worker on fresh inputs, judge in this process, time
against the vendor baseline, and prove the executed instructions with Nsight Compute.

Order of stages: build (COMPILE_ERROR) → link policy → correctness trials on every workload,
held-out ones included, each judged here from raw data (RUNTIME_ERROR, TIMEOUT, INCORRECT, and the
guards: provenance, streams, canaries, input mutation, libraries) → timing of the timed and visible
workloads with the outputs of timed calls re-checked and a physical-floor check → executed features
(ncu). Any guard finding makes the candidate REJECTED. Under the ``sweep`` evidence profile (``records.evidence``)
the trials and their guards are the same; only the timed workload is timed (``timing.profiles``), a cached clean
baseline time is measured again when old or drifted (``baselines.freshness``), and ncu runs only for candidates
near the baseline's speed (``judgement.funnel``), in an ncu session shared with the other candidates of the machine
waiting for ncu then (``proof.batching``).

This module is the stage pipeline: which process runs what, under which hold of the GPU's lock, and what a
failure at each stage means for the candidate. How a time is measured is the timing protocol's
(``timing.protocol``); every check that can reject is in ``judgement.guards`` (its table ``GUARDS``); the status
follows from the evidence in ``judgement.verdict``.

Sharing the GPU: untimed stages hold the GPU's lock shared and timing holds it alone (``GpuLock``), so
several evaluations (lanes, or other runs on this machine) overlap their untimed work and never
disturb a measurement. A process holding the candidate's code exists only while its lane holds the
lock: trials run in one fresh process, timing in another, and each is ended before the lock is let go.
Vendor baselines are timed in the evaluator's baseline process, which never loads candidate code, call
by call in turn with the candidate (so both are measured under the same conditions); the candidate's
process is stopped meanwhile, and a baseline slowed beyond its clean, cached time is not trusted. No
candidate code can thus buy itself a slower baseline.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, Field

from ptxbench.arch.registry import Arch
from ptxbench.check import check_source
from ptxbench.evaluate.baselines.cache import BaselineCache
from ptxbench.evaluate.baselines.freshness import CleanTimeAges
from ptxbench.evaluate.child.cuda_driver import CUDA_ERROR_MEMORY_ALLOCATION
from ptxbench.evaluate.child.gpu_side import CANARY_VALUE
from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.evaluate.timing.fresh_inputs import freshened_inputs, replay
from ptxbench.evaluate.judgement.guards import (
    canary_guards,
    datasheet_peaks,
    feature_guards,
    forged_reply_guards,
    library_guards,
    mutation_guards,
    physical_floor_guards,
    profiled_foreign_guards,
    profiled_launch_guards,
    provenance_guards,
    timed_launch_guards,
    timing_agreement_guards,
    wall_clock_guards,
    wall_findings_confirmed,
)
from ptxbench.evaluate.isolation.gpu_lock import KEY_VARIABLE, GpuLock
from ptxbench.evaluate.isolation.memory_ledger import MemoryLedger
from ptxbench.evaluate.isolation.worker import ForgedReply, RequestFailed, Worker, WorkerDied, WorkerTimeout
from ptxbench.evaluate.judgement.funnel import not_profiled
from ptxbench.evaluate.judgement.launches import base_name, kernel_durations_ms, launches_of
from ptxbench.evaluate.isolation.memory_need import GIB, HEADROOM_BYTES, trials_need, unfit_workloads, workload_need
from ptxbench.evaluate.judgement.static_only import verdict_before_running
from ptxbench.evaluate.timing.profiles import timed_workloads
from ptxbench.evaluate.timing.protocol import (
    BASELINE_DISTURBANCE,
    BaselineFailed,
    Interleaved,
    baseline_call,
    call_limit_s,
    clean_times,
    interleaved,
    timing_of,
)
from ptxbench.evaluate.judgement.verdict import decide, summary, unique
from ptxbench.paths import cache_root
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.evaluation import (
    Evaluation,
    GuardFinding,
    InfraFailure,
    KernelProfile,
    RequirementExecution,
    Status,
    Timing,
    TrialResult,
)
from ptxbench.tasks.model import Role, Task, Workload
from ptxbench.tasks.reference import make_inputs, run_reference
from ptxbench.toolchain.discover import find_toolchain

HANDLER = "ptxbench.evaluate.child.gpu_side:CandidateRunner"
WORKER_SPARES = 4  # fresh processes starting ahead: two are used per candidate (trials, timing)
# Two lanes per GPU: on the H200 a run of GEMM candidates with ncu went from 5.6 to 7.7 per minute (8.7 to
# 12.2 after start-up), and a third lane added nothing (evaluator_h200.md). A candidate that runs out of
# memory beside another lane's is tried again alone (TrialsEnded.out_of_memory).
DEFAULT_LANES = 2
ALONE_TOO = "out of GPU memory also when run alone on the GPU"
TIMING_SHORT_WAIT_S = 2.0  # before timing is taken again after the harness ran short of memory


def _out_of_memory(exc: RequestFailed) -> bool:
    """torch's allocation failing in the worker (OutOfMemoryError), or a CUDA call there reporting the
    error a candidate's failed cudaMalloc left behind ("AcceleratorError: CUDA error: out of memory")."""
    return exc.kind in ("OutOfMemoryError", HARNESS_SHORT_IN_WORKER) or "CUDA error: out of memory" in str(exc)


# The harness's own allocation in the candidate's process failing (child.gpu_side.HarnessOutOfMemory): drawing
# the inputs and outputs of a trial or of timing, a baseline's setup.
HARNESS_SHORT_IN_WORKER = "HarnessOutOfMemory"


def _harness_short_in_worker(exc: BaseException) -> bool:
    return isinstance(exc, RequestFailed) and exc.kind == HARNESS_SHORT_IN_WORKER


class TrialsEnded(NamedTuple):
    """Why the correctness trials stopped before every workload passed."""

    status: Status
    message: str
    out_of_memory: bool = False  # the GPU's memory ran out: possibly taken by another evaluation beside it
    harness_short: bool = False  # it ran out in the harness's own allocation (drawing inputs, the reference)
    workload: str | None = None  # where it stopped


def _harness_out_of_memory(exc: BaseException) -> bool:
    """The harness's own allocation on the GPU failing: torch's OutOfMemoryError, or the CUDA error it raises
    when the driver refuses ("AcceleratorError: CUDA error: out of memory")."""
    return type(exc).__name__ in ("OutOfMemoryError", "AcceleratorError") and "out of memory" in str(exc)


class _TimingShort(Exception):
    """The GPU's memory ran out for the harness's own allocations during timing (the input sets, a baseline's setup
    or its check), in either process; ``candidate_loaded``: whether the candidate's code was in its process then."""

    def __init__(self, message: str, candidate_loaded: bool) -> None:
        super().__init__(message)
        self.candidate_loaded = candidate_loaded


def _mentions_out_of_memory(text: str) -> bool:
    return "out of memory" in text.lower() or "OutOfMemoryError" in text or HARNESS_SHORT_IN_WORKER in text


class Failed(NamedTuple):
    """A stage that ended the evaluation early: the candidate's status, or no status and the harness's
    ``infra_failure`` (never counted against the candidate), and why."""

    status: Status | None
    message: str
    infra_failure: InfraFailure | None = None

    def applied(self, evaluation: Evaluation) -> Evaluation:
        update: dict[str, object] = {"status": self.status, "message": self.message}
        if self.infra_failure is not None:
            update["infra_failure"] = self.infra_failure
        return evaluation.model_copy(update=update)


class Trials(NamedTuple):
    """The correctness trials of one fresh process: the trials run, the guards' findings, and why they
    stopped early (None: every workload passed)."""

    results: list[TrialResult]
    guards: list[GuardFinding]
    ended: TrialsEnded | None


class Profiled(NamedTuple):
    """One profiled call: the requirements judged on its executed counts, its launches as ncu saw them, and
    whether it ran with the GPU to itself."""

    features: list[RequirementExecution]
    launched: list[KernelProfile]
    alone: bool


class EvalOptions(BaseModel):
    """Every knob of ``ptxbench eval``; recorded in the run header."""

    trials: int = Field(default=3, ge=1, description="fresh input sets per workload")
    call_timeout_s: float = Field(default=60.0, gt=0)
    time: bool = True
    timing_budget_ms: float = Field(default=100.0, gt=0, description=(
        "measured time per workload and side (candidate, baseline), at least MIN_SAMPLES calls each"))
    profile: bool = Field(default=True, description="prove executed instructions with ncu when it is installed")
    profile_timeout_s: float = Field(default=600.0, gt=0)
    lanes: int = Field(default=DEFAULT_LANES, ge=1, le=16, description=(
        "candidates evaluated at once on each GPU: their untimed stages overlap, timing runs alone"))
    evidence: EvidenceProfile = Field(default=EvidenceProfile.PUBLISH, description=(
        "publish: every shown workload timed, ncu for every correct candidate; sweep: the same correctness, the "
        "timed workload alone timed, ncu only near the baseline's speed (records.evidence). Recorded in its own "
        "field of every result and header, not among the options"))


class GpuEvaluator:
    """Evaluates candidates on one GPU; also serves as refinement's evaluator (``evaluate_source``)."""

    def __init__(self, options: EvalOptions | None = None, device: int | None = None, handler: str = HANDLER,
                 reference_device: str = "cuda") -> None:
        """``handler`` and ``reference_device`` exist so the orchestration can be tested without a GPU."""
        self.options = options or EvalOptions()
        self.reference_device = reference_device
        self.worker = Worker(handler, device, spares=WORKER_SPARES, isolate=True)
        # Vendor baselines and peaks are timed in a process that lives as long as the evaluator and never
        # loads candidate code, so no candidate can reach the measurement it is compared against.
        self.baselines = Worker(handler, device)
        self._device: dict | None = None
        self._peaks: dict[str, float] | None = None
        self.baseline_cache = BaselineCache(cache_root() / "baselines")
        self._clean_ages = CleanTimeAges()  # sweep only: when a cached clean time is measured again
        self._durations: dict[str, float] = {}
        self._lock: GpuLock | None = None
        self._isolation: str | None = None  # the last candidate worker's isolation mode (Worker.isolation)
        # ncu's counter access on this GPU, learnt once by the harness's own probe: (None,) readable,
        # (why not,) unreadable; None until probed (see _counters_unreadable)
        self._counter_probe: tuple[str | None] | None = None
        self._memory_ledger: MemoryLedger | None = None

    def close(self) -> None:
        self.worker.close()
        self.baselines.close()

    def device(self) -> dict:
        if self._device is None:
            self._device = self.worker.call("device_info", timeout_s=300)
            _ = self.lock  # names the GPU's lock for every process started from now on
            # The spares and the baseline process start now, in parallel, rather than one after another
            # once the first candidate has arrived (that cost the first candidate ~12 s on an H200).
            self.worker.prestart()
            self.baselines.prestart()
        return self._device

    @property
    def lock(self) -> GpuLock:
        """The GPU's lock, shared with every evaluation on this GPU (named by its UUID)."""
        if self._lock is None:
            device = self.device()
            key = str(device.get("uuid") or f"{device.get('name')}-{self.worker.device}")
            self._lock = GpuLock(key)
            os.environ[KEY_VARIABLE] = key  # workers started from now on take it while their start-up runs kernels
        return self._lock

    @property
    def memory_ledger(self) -> MemoryLedger:
        """The reservations of this GPU's memory by every evaluation's untimed stages (named like the lock)."""
        if self._memory_ledger is None:
            card = self._card_bytes()
            usable = card - HEADROOM_BYTES if card else 1 << 62  # a device that does not say: nothing to hold to
            self._memory_ledger = MemoryLedger(self.lock.key, usable)
        return self._memory_ledger

    def _card_bytes(self) -> int | None:
        memory = self.device().get("memory_bytes")
        return int(memory) if isinstance(memory, int) and memory > 0 else None

    def _free_bytes(self) -> int | None:
        """The GPU's free memory as the harness's own process sees it (None where it computes on the CPU)."""
        if not self.reference_device.startswith("cuda"):
            return None
        import torch

        torch.cuda.empty_cache()
        return int(torch.cuda.mem_get_info()[0])

    def _short_alone(self, message: str, need_bytes: int) -> Failed:
        """The harness's own allocation failed with the GPU held alone and the candidate's process now ended: when
        the GPU has what the workload needs once that process is gone, the process held it (the candidate's
        RUNTIME_ERROR: the contract lets no memory outlive a call); otherwise something outside the evaluation
        holds it, and the item is the harness's failure, never the candidate's."""
        free = self._free_bytes()
        if free is not None and free >= need_bytes:
            return Failed(Status.RUNTIME_ERROR, (
                f"{ALONE_TOO}: {message} (with the candidate's process ended the GPU has {free / GIB:.1f} GiB free, "
                f"more than the {need_bytes / GIB:.1f} GiB the workload needs: that process held the memory)"))
        seen = f"{free / GIB:.1f} GiB free" if free is not None else "free memory unknown"
        return _harness_failure(f"{ALONE_TOO}: {message} (the workload needs about {need_bytes / GIB:.1f} GiB; "
                                f"{seen} with the candidate's process ended: held outside this evaluation)")

    # -- the whole evaluation -------------------------------------------------------------------

    def evaluate(self, task: Task, arch: Arch, source: str, name: str = "candidate.cu") -> Evaluation:
        """The candidate's evaluation, validated (the model forbids states the evidence cannot support)."""
        self._durations = {}
        waited = self._lock.waited_s if self._lock is not None else 0.0
        started = time.perf_counter()
        evaluation = self._evaluate(task, arch, source, name)
        if evaluation.not_run:  # said in the one line every listing shows, not only in the record
            names = ", ".join(evaluation.not_run)
            evaluation = evaluation.model_copy(update={"message": (
                f"{evaluation.message} ({len(evaluation.not_run)} workload(s) not run: too large for this GPU: {names})"
            ).strip()})
        durations = {**self._durations, "total": time.perf_counter() - started}
        if self._lock is not None:
            durations["gpu_lock_wait"] = self._lock.waited_s - waited
        return Evaluation.model_validate({**evaluation.model_dump(), "durations_s": durations,
                                          "evidence": self.options.evidence})

    @contextmanager
    def _stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self._count(name, time.perf_counter() - started)

    def _release_cached_memory(self) -> None:
        """Give the GPU memory this process's allocator keeps after computing references back to the driver: kept,
        it is out of reach of the worker and baseline processes (and other lanes) that run next, which on an
        80 GB card then ran out of memory timing the baseline of a large workload."""
        if self.reference_device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def _count(self, name: str, seconds: float) -> None:
        self._durations[name] = self._durations.get(name, 0.0) + seconds

    def _evaluate(self, task: Task, arch: Arch, source: str, name: str) -> Evaluation:
        with self._stage("build_and_static"):
            report = check_source(source, arch, task, name)
        result = report.build
        evaluation = Evaluation(candidate=name, task=task.id, task_hash=task.content_hash, arch=arch,
                                status=Status.COMPILE_ERROR, build=result, static=report.static,
                                message=result.diagnosis.message if result.diagnosis else "")
        decided = verdict_before_running(evaluation)
        if decided is not None:
            return decided
        try:
            return self._run(task, evaluation, Path(result.directory) / "candidate.so")
        except ForgedReply as exc:
            return _forged(evaluation, exc)
        except WorkerDied as exc:
            return evaluation.model_copy(update={"status": Status.RUNTIME_ERROR, "message": str(exc)})

    def _run(self, task: Task, evaluation: Evaluation, shared_object: Path) -> Evaluation:
        try:
            self.device()
        except (RequestFailed, WorkerDied, WorkerTimeout) as exc:
            return Failed(None, f"the GPU worker could not start: {exc}", InfraFailure.NO_GPU).applied(evaluation)
        if self.options.time and self._peaks is None:
            failure = self._baseline_worker_ready()
            if failure is not None:
                return failure.applied(evaluation)
            with self._stage("peaks"), self.lock.exclusive("peaks"):  # once per evaluator: the first candidate carries it
                self.peaks()  # measured in the baseline process, which no candidate touches
        card = self._card_bytes()
        not_run = unfit_workloads(task, card, timed=self.options.time) if card else {}
        if not_run:
            evaluation = evaluation.model_copy(update={"not_run": not_run})
            if task.timed().name in not_run or len(not_run) == len(task.workloads):
                return _harness_failure(f"workload {task.timed().name} cannot be evaluated on this GPU: "
                                        f"{not_run.get(task.timed().name) or next(iter(not_run.values()))}"
                                        ).applied(evaluation)
        workloads = [w for w in task.workloads if w.name not in not_run]
        own_kernels = _own_kernels(evaluation)
        # Admitted by memory: beside the others' reservations when the need fits the card, else alone at once.
        with self.memory_ledger.admitted(trials_need(task, workloads)) as fits:
            attempt = self._trials_in_fresh_process(task, shared_object, own_kernels, alone=not fits,
                                                    workloads=workloads)
        if isinstance(attempt, Failed):
            return attempt.applied(evaluation)
        trials, guards, ended = attempt
        evaluation = evaluation.model_copy(update={"isolation": self._isolation})
        if ended is not None and ended.out_of_memory and fits:
            # The GPU's memory is shared with whatever else holds the lock shared (other lanes' candidates,
            # other runs): a candidate that ran out of it is tried again alone before it is blamed.
            attempt = self._trials_in_fresh_process(task, shared_object, own_kernels, alone=True, workloads=workloads)
            if isinstance(attempt, Failed):
                return attempt.applied(evaluation)
            trials, guards, ended = attempt
        if ended is not None and ended.harness_short:  # the harness's own allocation failed, alone
            need = workload_need(task, task.workload(ended.workload)).trials if ended.workload else 0
            failed = self._short_alone(ended.message, need)
            evaluation = evaluation.model_copy(update={"trials": trials, "guards": unique(guards)})
            return failed.applied(evaluation)
        if ended is not None and ended.out_of_memory:
            # first: the worker's message may run over several lines (torch's hints)
            ended = ended._replace(message=f"{ALONE_TOO}: {ended.message}")
        evaluation = evaluation.model_copy(update={"trials": trials, "guards": unique(guards)})
        if ended is not None:
            return evaluation.model_copy(update={"status": ended.status, "message": ended.message})
        status = decide(evaluation)
        if status is not Status.PASSED:
            return evaluation.model_copy(update={"status": status, "message": summary(evaluation, status)})

        if self.options.time:
            self._release_cached_memory()  # the references of the trials: the timing processes need the memory
            with self._stage("timing"):
                evaluation, final = self._timing(task, evaluation, shared_object)
            self._release_cached_memory()  # the re-checks' references
            if final:  # a timed call failed, or its outputs were wrong
                return evaluation
        if self.options.profile and find_toolchain().has("ncu"):
            from ptxbench.evaluate.proof.profiling import ProfiledRunFailed

            skipped = not_profiled(self.options.evidence, next(
                (t for t in evaluation.timings if t.workload == task.timed().name), None))
            if skipped is not None:  # sweep's funnel: its speed decides before its features would
                status = decide(evaluation)
                return evaluation.model_copy(update={"status": status,
                                                     "message": f"{summary(evaluation, status)} ({skipped})"})
            unreadable = self._counters_unreadable()
            if unreadable is not None:  # the harness's probe says so; no candidate's output can
                status = decide(evaluation)
                return evaluation.model_copy(update={"status": status,
                                                     "message": f"{summary(evaluation, status)} ({unreadable})"})
            timed_ms = _timed_median(evaluation, task.timed().name)
            try:
                features, launched, alone = self._profiled(task, evaluation.arch, shared_object)
                disagreement = timing_agreement_guards(timed_ms, launched, alone)
                if disagreement and not alone:  # kernels beside other work run slower: only a profile alone decides
                    features, launched, alone = self._profiled(task, evaluation.arch, shared_object, alone=True)
                    disagreement = timing_agreement_guards(timed_ms, launched, alone)
            except ProfiledRunFailed as exc:
                return evaluation.model_copy(update={"status": Status.RUNTIME_ERROR,
                                                     "message": f"executed-instruction proof: {exc}"})
            durations = kernel_durations_ms(launched)
            if durations:
                evaluation = evaluation.model_copy(update={"timings": [
                    t.model_copy(update={"profiled_kernel_ms": durations}) if t.workload == task.timed().name else t
                    for t in evaluation.timings]})
            # ncu's kernel durations confirm the profiled workload's event times: its wall-clock excess is host
            # work, which the other workloads' wall-clock findings are judged again without
            evaluation = evaluation.model_copy(update={"guards": wall_findings_confirmed(
                evaluation.guards, evaluation.timings, task.timed().name, bool(durations) and not disagreement)})
            guards = feature_guards(features)
            guards += profiled_foreign_guards(launched, own_kernels)
            guards += profiled_launch_guards(_last_launches(evaluation, task.timed().name), launched)
            guards += disagreement
            unverified = [f.message for f in features if not f.verified]
            if unverified and not guards:  # neither used nor held against it: the evaluation's features stay unknown
                status = decide(evaluation)
                return evaluation.model_copy(update={"status": status, "message": (
                    f"{summary(evaluation, status)} ({'; '.join(unverified)})")})
            evaluation = evaluation.model_copy(update={"features": features, "guards": unique(evaluation.guards + guards)})
        status = decide(evaluation)
        return evaluation.model_copy(update={"status": status, "message": summary(evaluation, status)})

    def _counters_unreadable(self) -> str | None:
        """Why ncu cannot read this GPU's counters, or None when it can: the harness's own probe kernel
        profiled once per evaluator (one GPU), so a candidate's output never decides it."""
        if self._counter_probe is None:
            from ptxbench.evaluate.proof.profiling import probe_counters

            with self._stage("profile.probe"):  # the probe's program holds the GPU's lock (shared) itself
                self._counter_probe = (probe_counters(self.options.profile_timeout_s),)
        return self._counter_probe[0]

    def _profiled(self, task: Task, arch: Arch, shared_object: Path, alone: bool = False) -> Profiled:
        """``profile_requirements`` and whether it ran with the GPU to itself: tried again alone when the GPU's
        memory ran out beside another evaluation (as the trials are), or alone from the start."""
        from ptxbench.evaluate.proof.profiling import ProfiledRunFailed, profile_requirements

        if not alone:
            # sweep shares ncu's session with the other candidates waiting for it then (proof.batching)
            batched = self.options.evidence is EvidenceProfile.SWEEP
            try:
                with self._stage("profile"):  # the profiled program holds the GPU's lock (shared) itself
                    return Profiled(*profile_requirements(task, arch, shared_object, self.options.profile_timeout_s,
                                                          batched=batched), alone=False)
            except ProfiledRunFailed as exc:
                if not exc.out_of_memory:
                    raise
        try:
            with self._stage("profile.alone"):
                return Profiled(*profile_requirements(task, arch, shared_object, self.options.profile_timeout_s,
                                                      alone=True), alone=True)
        except ProfiledRunFailed as exc:
            if exc.out_of_memory:
                raise ProfiledRunFailed(f"{ALONE_TOO}: {exc}", out_of_memory=True) from None
            raise

    def _trials_in_fresh_process(self, task: Task, shared_object: Path, own_kernels: set[str], alone: bool,
                                 workloads: list[Workload] | None = None) -> Failed | Trials:
        """Load the candidate into a fresh process and run the trials of ``workloads`` (all the task's by default),
        the GPU's lock held shared (or alone); how the evaluation ends when the process or the load failed."""
        # A fresh process is awaited before the lock is taken: a starting worker takes the lock itself.
        failure = self._fresh_worker()
        if failure is not None:
            return failure
        stage = "trials.alone" if alone else "trials"
        with self.lock.exclusive("trials alone") if alone else self.lock.shared("trials"):
            try:
                failure = self._load(task, shared_object)
                if failure is not None:
                    return failure
                self._isolation = self.worker.isolation
                libraries_at_load = self.worker.mapped_libraries()
                with self._stage(stage):
                    trials, guards, ended = self._trials(task, own_kernels, shared_object, workloads, alone)
                guards += library_guards(self.worker.mapped_libraries() - libraries_at_load)
            finally:
                self.worker.kill()  # the candidate's process ends while its lane still holds the GPU
        return Trials(trials, guards, ended)

    def _fresh_worker(self, stage: str = "worker_start") -> Failed | None:
        """Continue in a process nothing has run in; how the evaluation ends when none could start."""
        try:
            with self._stage(stage):
                self.worker.renew()  # a fresh process: nothing of the previous candidate survives
                self.worker.wait_ready()
        except (WorkerDied, WorkerTimeout) as exc:
            return _harness_failure(f"a fresh GPU worker could not start: {exc}")
        return None

    def _load(self, task: Task, shared_object: Path, stage: str = "load") -> Failed | None:
        """Load the candidate into the current worker; how the evaluation ends when that fails."""
        try:
            with self._stage(stage):
                self.worker.call("load", str(shared_object), task.model_dump_json(),
                                 timeout_s=self.options.call_timeout_s)
        except WorkerTimeout as exc:  # loading runs the library's static constructors: the candidate's code
            return Failed(Status.TIMEOUT, f"loading the library: {exc}")
        except RequestFailed as exc:
            if exc.kind in ("OSError", "AttributeError"):  # ctypes: the library or its entry point would not load
                return Failed(Status.RUNTIME_ERROR, f"loading failed: {exc}")
            return _harness_failure(f"the worker could not load the candidate: {exc}")
        return None

    # -- stages -----------------------------------------------------------------------------------

    def _trials(self, task: Task, own_kernels: set[str], shared_object: Path | None = None,
                workloads: list[Workload] | None = None, alone: bool = False) -> Trials:
        """Each workload's trials in the loaded worker. Beside others the expected outputs are computed while the
        candidate runs; alone, before it is asked (so its call and the reference never compete for memory, and a
        failed allocation of either says whose need did not fit)."""
        trials: list[TrialResult] = []
        guards: list[GuardFinding] = []
        for workload in task.workloads if workloads is None else workloads:
            for _ in range(self.options.trials):
                seed = secrets.randbits(62)
                try:
                    with self._stage("trials.worker"):
                        if alone:
                            with self._stage("trials.expect"):
                                inputs, expected = self._expect(task, workload, seed)
                        self.worker.send("trial", workload.sizes, seed)
                        if not alone:  # the expected outputs are computed here while the candidate runs there
                            with self._stage("trials.expect"):
                                inputs, expected = self._expect(task, workload, seed)
                        reply = self.worker.receive(self.options.call_timeout_s)
                except ForgedReply as exc:
                    guards += forged_reply_guards(str(exc))
                    return Trials(trials, guards, TrialsEnded(Status.REJECTED, f"workload {workload.name}: {exc}"))
                except WorkerTimeout as exc:
                    return Trials(trials, guards, TrialsEnded(Status.TIMEOUT, f"workload {workload.name}: {exc}"))
                except (WorkerDied, RequestFailed) as exc:
                    if _harness_short_in_worker(exc):  # the harness's allocation in the candidate's process
                        return Trials(trials, guards, TrialsEnded(Status.RUNTIME_ERROR, (
                            f"workload {workload.name}: the harness ran out of GPU memory in the candidate's process "
                            f"{str(exc).partition(': ')[2]}"), out_of_memory=True, harness_short=True,
                            workload=workload.name))
                    out_of_memory = isinstance(exc, RequestFailed) and _out_of_memory(exc)
                    message = self._diagnosed(f"workload {workload.name}: {exc}", task, workload, shared_object,
                                              out_of_memory)
                    return Trials(trials, guards, TrialsEnded(Status.RUNTIME_ERROR, message, out_of_memory,
                                                              workload=workload.name))
                except Exception as exc:
                    if not _harness_out_of_memory(exc):
                        raise
                    # another lane's candidate holds the GPU's memory: never this candidate's fault
                    return Trials(trials, guards, TrialsEnded(Status.RUNTIME_ERROR, (
                        f"workload {workload.name}: the harness ran out of GPU memory drawing the inputs or the "
                        f"reference: {str(exc).splitlines()[0]}"), out_of_memory=True, harness_short=True,
                        workload=workload.name))
                if reply["code"] != 0:
                    out_of_memory = reply["code"] == CUDA_ERROR_MEMORY_ALLOCATION
                    return Trials(trials, guards, TrialsEnded(Status.RUNTIME_ERROR, self._diagnosed(
                        f"workload {workload.name}: the entry point returned cudaError {reply['code']}", task, workload,
                        shared_object, out_of_memory), out_of_memory))
                for phase, seconds in (reply.get("phases_s") or {}).items():
                    if isinstance(seconds, float):  # the worker's own account, kept for diagnosis only
                        self._count(f"trials.worker.{phase}", seconds)
                try:
                    with self._stage("trials.judge"):
                        trial, found = self._judge_trial(task, workload, seed, reply, inputs, expected, own_kernels)
                except Exception as exc:
                    if not _harness_out_of_memory(exc):
                        raise
                    return Trials(trials, guards, TrialsEnded(Status.RUNTIME_ERROR, (
                        f"workload {workload.name}: the harness ran out of GPU memory comparing the outputs: "
                        f"{str(exc).splitlines()[0]}"), out_of_memory=True, harness_short=True, workload=workload.name))
                del reply  # the worker's tensors are released before its next call
                trials.append(trial)
                guards += found
                if not trial.passed:
                    break  # the next workload says more than another seed of this one
        return Trials(trials, guards, None)

    def _diagnosed(self, message: str, task: Task, workload: Workload | None, shared_object: Path | None,
                   out_of_memory: bool = False) -> str:
        """``message`` of a failed call, with compute-sanitizer's first finding on ``workload`` appended when
        it names a CUDA error (``diagnosis.sanitizer``); run while this lane holds the GPU's lock."""
        if workload is None or shared_object is None or out_of_memory:
            return message
        from ptxbench.evaluate.diagnosis.sanitizer import with_diagnosis

        with self._stage("diagnosis"):
            return with_diagnosis(message, task, workload.sizes, shared_object)

    def _expect(self, task: Task, workload: Workload, seed: int, fresh_keys: tuple[int, ...] = ()) -> tuple[dict, dict]:
        """The trial's inputs as drawn here (to check the candidate left its copy unchanged) and the reference;
        ``fresh_keys``: the changes timing made to that input set before its last timed call (``fresh_inputs``)."""
        inputs = dict(make_inputs(task, workload.sizes, seed, device=self.reference_device))
        if fresh_keys:
            replay(inputs, freshened_inputs(task), fresh_keys)
        return inputs, run_reference(task, inputs, workload.sizes)

    def _judge_trial(self, task: Task, workload: Workload, seed: int, reply: dict, inputs: dict, expected: dict,
                     own_kernels: set[str]) -> tuple[TrialResult, list[GuardFinding]]:
        guards = provenance_guards(reply["activities"], reply["stream"], own_kernels)
        guards += canary_guards(reply["canaries"], CANARY_VALUE)
        guards += mutation_guards(inputs, reply["inputs_after"])
        outputs = {name: tensor.to(self.reference_device) for name, tensor in reply["outputs"].items()}
        comparisons = compare_outputs(task, outputs, expected)
        return TrialResult(workload=workload.name, role=workload.role.value, seed=seed, comparisons=comparisons,
                           passed=all(c.passed for c in comparisons),
                           launches=launches_of(reply["activities"], reply["stream"])), guards

    def peaks(self) -> dict[str, float]:
        """Roofline ceilings measured on this GPU once per evaluator (copy bandwidth, library matmul rates);
        empty when they could not be measured, and then no roofline share is reported."""
        if self._peaks is None:
            try:
                self._peaks = self.baselines.call("peaks", timeout_s=300)
            except (RequestFailed, WorkerDied, WorkerTimeout):
                self.baselines.kill()
                self._peaks = {}
        return self._peaks

    def _timing(self, task: Task, evaluation: Evaluation, shared_object: Path) -> tuple[Evaluation, bool]:
        """``_timing_once``, taken again once when the harness's own allocations found the GPU's memory gone (another
        run's processes may have held it; every process of an evaluation gives its memory back after timing). Short
        twice: the candidate's RUNTIME_ERROR only when its code was loaded and the GPU has what the workload needs
        once its process is gone, otherwise the harness's failure (``_short_alone``)."""
        for attempt in range(2):
            try:
                return self._timing_once(task, evaluation, shared_object)
            except _TimingShort as short:
                self._release_cached_memory()
                if attempt == 0:
                    time.sleep(TIMING_SHORT_WAIT_S)
                    continue
                need = max((workload_need(task, w).timing for w in task.workloads
                            if w.role is not Role.HELDOUT and w.name not in evaluation.not_run), default=0)
                if not short.candidate_loaded:
                    return _harness_failure(f"{ALONE_TOO}: {short}").applied(evaluation), True
                return self._short_alone(str(short), need).applied(evaluation), True
        raise AssertionError("unreachable")

    def _timing_once(self, task: Task, evaluation: Evaluation, shared_object: Path) -> tuple[Evaluation, bool]:
        """Time the timed and visible workloads with the GPU to this lane alone (the protocol: ``timing.protocol``),
        then re-check the outputs of timed calls; True with an evaluation that already has its verdict (a
        failure). Clean baseline times are cached per GPU (``BaselineCache``) and read with the GPU held.

        A variant without a cached clean time is first checked in both processes (loaded, set up and run
        once on the workload's shape, under SETUP_TIMEOUT_S: compiling and autotuning happen there, never
        in a timed call); one that fails is skipped with its reason, which each Timing records beside the
        other variants' clean times."""
        from ptxbench.evaluate.baselines.variants import SETUP_TIMEOUT_S, variant_specs

        device = self.device()
        sweep = self.options.evidence is EvidenceProfile.SWEEP
        workloads = timed_workloads(task, [w for w in task.workloads if w.name not in evaluation.not_run],
                                    self.options.evidence)
        specs = variant_specs(task)
        keys = {w.name: {v: BaselineCache.key(task.content_hash, w.name, v, device) for v in specs}
                for w in workloads}
        clean: dict[str, dict[str, tuple[float, float]]] = {w.name: {} for w in workloads}  # (median, IQR) ms
        skipped: dict[str, dict[str, str]] = {w.name: {} for w in workloads}  # variants that cannot run, why

        def check(worker: Worker, workload: Workload, names: list[str]) -> dict[str, str | None]:
            return worker.call("check_baselines", workload.sizes, names, 0, worker is self.baselines,
                               timeout_s=SETUP_TIMEOUT_S)
        budget_ms = self.options.timing_budget_ms
        limit_s = call_limit_s(self.options.call_timeout_s, budget_ms)
        measured: dict[str, Interleaved] = {}
        # awaited before the lock: a starting worker takes the lock itself
        failure = self._fresh_worker("timing.worker_start")
        if failure is None:
            failure = self._baseline_worker_ready("timing.worker_start")
        if failure is not None:
            return failure.applied(evaluation), True
        candidate_loaded = False
        with self.lock.exclusive("timing"):
            # read with the GPU held: another lane that timed while this one waited may have measured them
            for workload_name, variants in keys.items():
                for variant, key in variants.items():
                    record = self.baseline_cache.get(key)
                    if record is not None and sweep and self._clean_ages.stale(key):
                        record = None  # measured again below (baselines.freshness)
                    if record is not None:
                        clean[workload_name][variant] = (record.median_ms, record.iqr_ms)
            try:
                with self._stage("timing.baselines"), baseline_call(self.baselines):
                    self.baselines.call("set_task", task.model_dump_json(), timeout_s=self.options.call_timeout_s)
                    missing = [(w, v) for w in workloads for v in keys[w.name] if v not in clean[w.name]]
                    if missing:  # the fresh worker, before the candidate is loaded, runs the baseline too
                        self.worker.call("set_task", task.model_dump_json(), timeout_s=self.options.call_timeout_s)
                    for workload in workloads:
                        unchecked = [v for w, v in missing if w is workload]
                        if unchecked:  # both processes: the worker times the same variant in the candidate's place
                            for worker in (self.baselines, self.worker):
                                reasons = check(worker, workload, [v for v in unchecked if v not in skipped[workload.name]])
                                skipped[workload.name] |= {v: r for v, r in reasons.items() if r is not None}
                    missing = [(w, v) for w, v in missing if v not in skipped[w.name]]
                    unmeasurable = [w.name for w in workloads if not clean[w.name] and len(skipped[w.name]) == len(specs)]
                    if unmeasurable:
                        reasons_text = "; ".join(f"{v}: {r}" for v, r in skipped[unmeasurable[0]].items())
                        raise BaselineFailed(f"no baseline variant can run on {unmeasurable[0]} ({reasons_text})")
                    measured_clean = clean_times(self.worker, self.baselines, missing, budget_ms, limit_s)
                    for (workload_name, variant), (median_ms, iqr_ms) in measured_clean.items():
                        self.baseline_cache.put(keys[workload_name][variant], median_ms, iqr_ms)
                        self._clean_ages.measured(keys[workload_name][variant])
                        clean[workload_name][variant] = (median_ms, iqr_ms)
                failure = self._load(task, shared_object, "timing.load")
                if failure is not None:
                    return failure.applied(evaluation), True
                candidate_loaded = True
                with self._stage("timing.interleaved"):
                    for workload in workloads:
                        fastest = min(clean[workload.name], key=lambda v: clean[workload.name][v][0])
                        with self._stage(f"timing.workload.{workload.name}"):
                            measured[workload.name] = interleaved(self.worker, self.baselines, workload, fastest,
                                                                  budget_ms, limit_s)
                        for part, seconds in (measured[workload.name].spent or {}).items():
                            self._count(f"timing.protocol.{part}", seconds)
                        if sweep:
                            self._clean_ages.used(keys[workload.name][fastest], measured[workload.name].baseline[0],
                                                  clean[workload.name][fastest][0], BASELINE_DISTURBANCE)
            except BaselineFailed as exc:
                if _mentions_out_of_memory(str(exc)):
                    raise _TimingShort(f"timing the vendor baseline: {str(exc).splitlines()[0]}", candidate_loaded
                                       ) from None
                return _harness_failure(f"timing the vendor baseline: {exc}").applied(evaluation), True
            except ForgedReply as exc:
                return _forged(evaluation, exc), True
            except WorkerTimeout as exc:
                return evaluation.model_copy(update={"status": Status.TIMEOUT, "message": f"timing: {exc}"}), True
            except (WorkerDied, RequestFailed) as exc:
                if isinstance(exc, RequestFailed) and exc.kind in ("OutOfMemoryError", HARNESS_SHORT_IN_WORKER):
                    # torch's allocations in that process are the harness's (inputs, outputs, baselines' setup)
                    raise _TimingShort(f"timing: {str(exc).splitlines()[0]}", candidate_loaded) from None
                failed = next((w for w in workloads if w.name not in measured), None)  # measured in order
                return evaluation.model_copy(update={"status": Status.RUNTIME_ERROR, "message": self._diagnosed(
                    f"timing: {exc}", task, failed, shared_object)}), True
            finally:
                self.worker.kill()
                self._release_baseline_memory()
        try:
            with self.lock.shared("recheck"):
                checked = self._timings_checked(task, evaluation, workloads, clean, measured)
        except Exception as exc:
            if not _harness_out_of_memory(exc):
                raise
            self._release_cached_memory()  # another lane's work held the memory: the re-check again, alone
            with self.lock.exclusive("recheck alone"):
                checked = self._timings_checked(task, evaluation, workloads, clean, measured)
        timings = [t.model_copy(update={"baseline_variants": {
            **{v: ms for v, (ms, _) in clean[t.workload].items()}, **skipped[t.workload]}}) for t in checked.timings]
        checked = checked.model_copy(update={"timings": timings})
        return checked, checked.status is Status.INCORRECT

    def _release_baseline_memory(self) -> None:
        """The baseline process gives back the last measurement's buffers (it lives on; the next timing on this GPU
        may be another run's). A process that cannot is ended: a fresh one starts for the next timing."""
        with suppress(BaselineFailed), baseline_call(self.baselines):
            if self.baselines.alive():
                self.baselines.call("release_timing", timeout_s=self.options.call_timeout_s)

    def _baseline_worker_ready(self, stage: str = "worker_start") -> Failed | None:
        """The baseline process started (before any lock is taken: starting, it takes the lock itself)."""
        _ = self.lock  # tells the process about to start which lock to take (KEY_VARIABLE)
        try:
            with self._stage(stage), baseline_call(self.baselines):
                self.baselines.wait_ready()
        except BaselineFailed as exc:
            return _harness_failure(f"the vendor-baseline worker could not start: {exc}")
        return None

    def _timings_checked(self, task: Task, evaluation: Evaluation, workloads: list[Workload],
                         clean_of: dict[str, dict[str, tuple[float, float]]],
                         measured: dict[str, Interleaved]) -> Evaluation:
        """Timings with throughput and roofline shares, once the outputs of timed calls are re-checked;
        ``clean_of``: per workload, each vendor variant's clean (median, IQR) in ms."""
        datasheet = datasheet_peaks(self.device()["name"])
        peaks = self.peaks()  # cached: measured before any candidate was loaded
        fp8 = any(i.dtype.value.startswith("float8") for i in task.inputs)
        timings: list[Timing] = []
        guards = list(evaluation.guards)
        for workload in workloads:
            reply = measured[workload.name]
            assert reply.candidate is not None and reply.launches is not None and reply.checked
            for call in reply.checked:  # a candidate's measurement (``interleaved``) has them all
                _, expected = self._expect(task, workload, call.seed, call.fresh_keys)
                recheck = compare_outputs(task, {k: v.to(self.reference_device) for k, v in call.outputs.items()},
                                          expected)
                del expected
                if not all(c.passed for c in recheck):
                    trials = [*evaluation.trials, TrialResult(workload=workload.name, role="timed-recheck",
                                                              seed=call.seed, comparisons=recheck, passed=False)]
                    return evaluation.model_copy(update={
                        "trials": trials, "timings": [], "status": Status.INCORRECT,
                        "message": f"outputs of timed calls on {workload.name} were wrong"})
            guards += timed_launch_guards(workload.name, _last_launches(evaluation, workload.name), reply.launches,
                                          _own_kernels(evaluation))
            timings.append(timing_of(task, workload, reply, clean_of[workload.name][reply.variant], peaks))
            guards += physical_floor_guards(workload.name, reply.candidate[0], task.floor_bytes_for(workload.sizes),
                                            task.flops_for(workload.sizes), datasheet, fp8)
            guards += wall_clock_guards(workload.name, reply.candidate[0], reply.unexplained_ms, reply.protocol_ms)
        return evaluation.model_copy(update={"timings": timings, "guards": unique(guards)})


def _own_kernels(evaluation: Evaluation) -> set[str]:
    """The base names of the kernels in the candidate's module, as its static report lists them."""
    return {base_name(k.demangled) for k in evaluation.static.kernels} if evaluation.static else set()


def _timed_median(evaluation: Evaluation, workload: str) -> float | None:
    """The candidate's event-timed median on ``workload``, or None when it was not timed."""
    return next((t.candidate_ms for t in evaluation.timings if t.workload == workload), None)


def _last_launches(evaluation: Evaluation, workload: str) -> dict[str, int] | None:
    """What the workload's last passing trial launched (past a fresh process's one-time work): the launches a
    timed or profiled call of that workload must repeat."""
    trial = next((t for t in reversed(evaluation.trials) if t.workload == workload and t.passed), None)
    return trial.launches if trial is not None else None


def _harness_failure(message: str) -> Failed:
    """An evaluation the harness could not finish: no status, never the candidate's fault."""
    return Failed(None, message, InfraFailure.HARNESS_ERROR)


def _forged(evaluation: Evaluation, exc: ForgedReply) -> Evaluation:
    return evaluation.model_copy(update={"status": Status.REJECTED, "message": str(exc), "timings": [],
                                         "guards": [*evaluation.guards, *forged_reply_guards(str(exc))]})
