"""One evaluation's verdict and its evidence, with a validator that forbids states that cannot be true.

The status says what happened to the candidate; infrastructure failures (no GPU, a tool missing, the
harness itself failing) are kept apart, so they are never counted against a model. Evidence exists
only where the status allows it: no timing unless every correctness check passed, no "feature
used" without executed counts. A model's answer that held no code is an evaluation too, with its
extraction failure instead of a status (nothing was built), so every sample a model was asked for is
in every count; a candidate a model wrote carries its generation run's labels (model, context, sample).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import Field, model_validator

from ptxbench.arch.registry import Arch
from ptxbench.records import Record
from ptxbench.records.build import BuildResult
from ptxbench.records.completion import ExtractionStatus
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.version import Versioned
from ptxbench.static.report import StaticReport
from ptxbench.tasks.model import Requirement

EVALUATION_VERSION = 4
"""2: ``extraction`` (an answer without a candidate is an item) and ``generation`` (the labels of the run that
sampled the candidate); version 1 records read as they are, without either. 3: ``judged`` (what was judged, so
a stored result is reused only for the same question); version 2 records read without it. 4: ``evidence`` (the
evidence profile, ``records.evidence``); version 3 records read as ``publish``, what every evaluation then was."""


class Comparison(Record):
    """Where and how far an output is off: the feedback a model needs to fix it (computed by
    ``ptxbench.evaluate.judgement.compare``)."""

    output: str
    passed: bool
    elements: int
    mismatched: int
    nonfinite: int
    max_abs_error: float
    max_rel_error: float
    max_error_ratio: float = 0.0
    """The largest error divided by its bound: below 1 passes; how far from passing when above."""
    worst_index: list[int] | None = None
    worst_value: float | None = None
    worst_expected: float | None = None
    bound_at_worst: float | None = None


Dims = tuple[int, int, int]


class KernelProfile(Record):
    """One profiled kernel launch, as ncu saw it from outside the candidate's process (read by
    ``ptxbench.evaluate.proof.executed``)."""

    launch_id: int
    name: str
    stream: str | None = None
    grid: Dims | None = Field(default=None, description="grid size in blocks (x, y, z)")
    block: Dims | None = Field(default=None, description="block size in threads (x, y, z)")
    duration_ns: float | None = None
    executed: dict[str, int] = Field(default_factory=dict, description="full SASS mnemonic -> warp-level count")
    bytes: dict[str, float] = Field(default_factory=dict, description=(
        "byte counters of ptxbench.evaluate.proof.executed.BYTE_METRICS present in the report, in bytes; a counter ncu "
        "did not report is absent"))


class RequirementExecution(Record):
    """One requirement judged on executed counts; ``flop_share`` only for matrix features, ``byte_share``
    only for requirements with a minimum share of the task's bytes. ``verified`` False: the counters
    needed to judge it were not in the report, so it is neither satisfied nor held against the candidate."""

    requirement: Requirement
    executed: dict[str, int] = Field(description="executed mnemonics of the requirement's features")
    flop_share: float | None = None
    byte_share: float | None = None
    satisfied: bool
    verified: bool = True
    message: str


class Status(str, Enum):
    COMPILE_ERROR = "COMPILE_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    INCORRECT = "INCORRECT"
    REJECTED = "REJECTED"
    PASSED = "PASSED"


class InfraFailure(str, Enum):
    """The harness could not judge the candidate; never the candidate's fault."""

    NO_GPU = "NO_GPU"
    TOOL_MISSING = "TOOL_MISSING"
    HARNESS_ERROR = "HARNESS_ERROR"


class Guard(str, Enum):
    LIBRARY_CALL = "library_call"
    FOREIGN_KERNELS = "foreign_kernels"
    NO_OWN_KERNEL = "no_own_kernel"
    OTHER_STREAM = "other_stream"
    INPUT_MUTATION = "input_mutation"
    OUT_OF_BOUNDS_WRITE = "out_of_bounds_write"
    BELOW_PHYSICAL_FLOOR = "below_physical_floor"
    FEATURE_NOT_EXECUTED = "feature_not_executed"
    FORGED_REPLY = "forged_reply"
    LAUNCHES_DIFFER = "launches_differ"  # timed or profiled calls launched other kernels than the trials did
    HOST_TRANSFER = "host_transfer"  # task data copied to the host inside the call (computing on the CPU)
    TIMING_DISAGREES = "timing_disagrees"  # the timed call was faster than its own kernels under Nsight Compute


class GuardFinding(Record):
    guard: Guard
    detail: str


class TrialResult(Record):
    """One call on one fresh input set."""

    workload: str
    role: str
    seed: int
    comparisons: list[Comparison] = Field(default_factory=list)
    passed: bool
    launches: dict[str, int] | None = Field(default=None, description=(
        "What the call launched on the stream passed in: launch (kernel base name, grid, block; or runtime copy) "
        "-> count. Timed and profiled calls must launch the same"))


class Timing(Record):
    """Median and inter-quartile range of CUDA-event times with L2 flushed before each call; the
    candidate and its baseline are timed call by call in turn, so both are measured under the same
    conditions."""

    workload: str
    candidate_ms: float
    candidate_iqr_ms: float
    baseline: str | None = None
    baseline_ms: float | None = None
    baseline_iqr_ms: float | None = None
    baseline_clean_ms: float | None = Field(default=None, description=(
        "The baseline timed alone in a process no candidate has touched (cached per GPU and library "
        "versions); the compared baseline is at most this plus the evaluator's disturbance allowance"))
    baseline_source: str | None = Field(default=None, description=(
        "'interleaved': timed in turn with the candidate, a millisecond at most between switches; 'clean': "
        "the interleaved time was slower than the clean time allows, so the clean time (plus the allowance) "
        "was compared"))
    samples: int
    launch_gated: bool | None = Field(default=None, description=(
        "Every timed call of both sides started on the GPU only once the host had queued all of it (the "
        "launch gate), so host delays are not in the times; False where a side fell back to a spin cover"))
    launches_per_call: dict[str, float] | None = Field(default=None, description=(
        "What each timed call launched on average, from a trace of every timed call (as TrialResult.launches)"))
    tflops: float | None = None
    gbps: float | None = None
    roofline_pct: float | None = Field(default=None, description=(
        "Share of the attainable time bound: max(bytes / measured copy bandwidth, FLOPs / best library matmul "
        "rate on this GPU) over the measured time, in percent"))
    wall_unexplained_ms: float | None = Field(default=None, description=(
        "Per timed call, how much longer the candidate's calls took on the harness's wall clock (outside the "
        "candidate's process) than their event times say, less the same for the baseline's: host work inside the "
        "call, or forged event times (the median over the measured chunks)"))
    wall_protocol_ms: float | None = Field(default=None, description=(
        "Per timed call, how much longer the baseline's calls took on the harness's wall clock than their event "
        "times say: the timing protocol's own host work per call, the scale of the noise in wall_unexplained_ms "
        "(the median over the measured chunks)"))
    profiled_kernel_ms: list[float] | None = Field(default=None, description=(
        "The durations of one call's kernel launches under Nsight Compute (each alone, caches flushed), in launch "
        "order, for the timed workload where the executed instructions were profiled"))
    baseline_variants: dict[str, float | str] = Field(default_factory=dict, description=(
        "Every vendor variant defined for the task: its clean time in ms, or the reason it was skipped "
        "(a library that cannot be loaded, a setup that failed)"))

    @property
    def speedup(self) -> float | None:
        return self.baseline_ms / self.candidate_ms if self.baseline_ms and self.candidate_ms > 0 else None

    @property
    def sol(self) -> float | None:
        """The speed-of-light score: the attainable time over the candidate's, 1 at the roofline. Anchored in the
        hardware rather than a baseline (which may be weak); derived from ``roofline_pct``, the same ratio in
        percent, so stored records of every version have it without a field of its own."""
        return self.roofline_pct / 100 if self.roofline_pct is not None else None


class Generation(Record):
    """Where a model's candidate came from: the labels of the generation run (``generate`` or ``run``) that
    sampled it, carried into its evaluation so an ``eval`` of that run groups by model and context as the
    generation run itself does."""

    run: str = Field(description="The generation run's directory name (or the generations file's name)")
    model: str | None = Field(default=None, description="'provider:name', as given to --model")
    provider: str | None = None
    condition: str | None = Field(default=None, description="Context condition (none | arch | full)")
    sample: int = Field(description="The sample's index within its task")
    turn: int = Field(default=0, description="The turn whose answer this is (the last one with code)")


class Judged(Record):
    """What an evaluation answered: the source it built and the options that shape the verdict. With the task's
    hash and the arch (the evaluation's own fields) it is the question a stored result answers, so a resumed run
    reuses the result only where the question is the same (``ptxbench.evaluate.fleet.run``)."""

    source_sha256: str = Field(description=(
        "SHA-256 of the source as built (the wrapper header inlined, UTF-8); of the empty text for an answer "
        "without code"))
    options: dict[str, Any] = Field(default_factory=dict, description=(
        "The evaluation options, without those that only say how a run is carried out (lanes)"))


def _from_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had neither ``extraction`` nor ``generation``: both read as None, their defaults."""
    return record


def _from_v2(record: dict[str, Any]) -> dict[str, Any]:
    """Version 2 had no ``judged``: it reads as None (what was judged is then told by the item's candidate.cu)."""
    return record


def _from_v3(record: dict[str, Any]) -> dict[str, Any]:
    """Version 3 had no ``evidence``: every evaluation then gathered the ``publish`` profile's evidence."""
    return {**record, "evidence": EvidenceProfile.PUBLISH.value}


class Evaluation(Versioned):
    RECORD = "evaluation"
    MIGRATIONS = {1: _from_v1, 2: _from_v2, 3: _from_v3}

    version: int = EVALUATION_VERSION
    kind: Literal["evaluation"] = Field(default="evaluation", description=(
        "What record this is, beside a CheckReport (``kind`` 'check') where either can stand"))
    candidate: str
    task: str
    task_hash: str
    arch: Arch
    status: Status | None = None
    infra_failure: InfraFailure | None = None
    extraction: ExtractionStatus | None = Field(default=None, description=(
        "Why the model's answer held no candidate (no code block, no entry point, empty, provider error): "
        "the model's failure, decided before anything is built; None for every candidate that has code"))
    generation: Generation | None = Field(default=None, description="The labels of the run that sampled it")
    judged: Judged | None = Field(default=None, description=(
        "The source and options judged, set where the result is recorded; None in records of version 2 and older"))
    evidence: EvidenceProfile = Field(default=EvidenceProfile.PUBLISH, description=(
        "The evidence profile it was judged under (publish | sweep, ``records.evidence``); publish in records of "
        "version 3 and older"))
    message: str = ""
    build: BuildResult | None = None
    static: StaticReport | None = None
    not_run: dict[str, str] = Field(default_factory=dict, description=(
        "Workloads that were not run because they cannot fit this GPU's memory even alone, each with what it "
        "needs and what the card has (evaluate.isolation.memory_need): no verdict covers them"))
    trials: list[TrialResult] = Field(default_factory=list)
    guards: list[GuardFinding] = Field(default_factory=list)
    timings: list[Timing] = Field(default_factory=list)
    features: list[RequirementExecution] | None = Field(
        default=None, description="Executed-instruction verdicts; None when no profiler ran (unverified)")
    isolation: str | None = Field(default=None, description=(
        "How the process that ran the candidate's trials was isolated, as it achieved it (read-only mounts, "
        "cgroup, or why not): the containment the evaluation's verdict rests on"))
    durations_s: dict[str, float] = Field(default_factory=dict, description=(
        "Wall seconds per stage (build_and_static, peaks, worker_start, load, trials with its parts "
        "trials.worker (request to reply), trials.expect (the reference, computed meanwhile) and trials.judge, "
        "timing with timing.worker_start, timing.baselines (clean times not yet cached) and "
        "timing.interleaved, profile, gpu_lock_wait (waiting for the GPU while other evaluations used it), "
        "total): where the evaluator's time goes"))

    @property
    def correct(self) -> bool:
        return bool(self.trials) and all(t.passed for t in self.trials)

    @property
    def features_verified(self) -> bool:
        return self.features is not None

    @property
    def verdict(self) -> str:
        """The outcome in a few words, whichever of the three it is: 'PASSED', 'infra: NO_GPU',
        'extraction: no_code_block'."""
        if self.status is not None:
            return self.status.value
        if self.extraction is not None:
            return f"extraction: {self.extraction.value}"
        return f"infra: {self.infra_failure.value if self.infra_failure else '?'}"

    @model_validator(mode="after")
    def _consistent(self) -> "Evaluation":
        if sum(x is not None for x in (self.status, self.infra_failure, self.extraction)) != 1:
            raise ValueError("an evaluation has exactly one of a status, an infrastructure failure and an "
                             "extraction failure")
        if self.extraction is ExtractionStatus.OK:
            raise ValueError("extraction holds why there is no candidate; a candidate that was extracted has none")
        if self.extraction is not None and (self.build is not None or self.trials):
            raise ValueError("an answer without a candidate was never built or run")
        if self.status is Status.COMPILE_ERROR and (self.trials or self.timings):
            raise ValueError("a candidate that did not compile has no trials or timings")
        if self.timings and not self.correct:
            raise ValueError("timings exist only for candidates that passed every correctness trial")
        if self.status is Status.PASSED:
            if not self.correct:
                raise ValueError("PASSED needs every correctness trial to pass")
            if self.guards:
                raise ValueError("PASSED cannot carry guard findings")
            if self.features is not None and not all(f.satisfied for f in self.features):
                raise ValueError("PASSED cannot have a required feature that did not execute")
        if self.status is Status.INCORRECT and self.correct:
            raise ValueError("INCORRECT needs a failed correctness trial")
        if self.status is Status.REJECTED and not self.guards:
            raise ValueError("REJECTED needs at least one guard finding")
        for requirement in self.features or []:
            if requirement.satisfied and not requirement.executed:
                raise ValueError("a feature counts as used only with executed instruction counts")
        return self
