"""The records of the serving API: what a client sends, what the server answers and keeps.

Requests are versioned records, validated field by field with ``extra`` fields refused, so a typo
(``"trails": 5``) is a 422 naming the field rather than an option silently left at its default. The same
models are what ``ptxbench.client`` sends and reads, and what the job store keeps.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ptxbench.arch.registry import Arch
from ptxbench.records import Record
from ptxbench.records.evaluation import Evaluation, Generation
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.version import Versioned
from ptxbench.serve.evaluation import DEFAULT_LANES, EvalOptions
from ptxbench.static.report import current_stage
from ptxbench.tasks.model import Task

API_VERSION = 1
MAX_BATCH = 1000
MAX_SOURCE_CHARS = 2_000_000


class JobOptions(EvalOptions):
    """``ptxbench eval``'s options for one job; ``lanes`` is the server's (``ptxbench serve --lanes``)."""

    model_config = ConfigDict(extra="forbid")

    lanes: int = Field(default=DEFAULT_LANES, exclude=True, description="the server's; never sent or kept")
    evidence: EvidenceProfile | None = Field(default=None, description=(  # type: ignore[assignment]
        "publish | sweep; None: the server's (ptxbench serve --evidence, sweep unless told), resolved when the job "
        "is accepted, so the job kept says which"))

    @model_validator(mode="before")
    @classmethod
    def _no_lanes(cls, data: Any) -> Any:
        if isinstance(data, dict) and "lanes" in data:
            raise ValueError("lanes is the server's setting (ptxbench serve --lanes), not a job's")
        return data

    def identity(self) -> dict[str, Any]:
        """What decides the verdict (lanes are not part of it). The profile is part of it only when it is sweep,
        so a publish job's hashes are those of the jobs kept before profiles existed."""
        exclude = {"lanes"} | ({"evidence"} if self.evidence in (None, EvidenceProfile.PUBLISH) else set())
        return self.model_dump(mode="json", exclude=exclude)

    def digest(self) -> str:
        """What decides the verdict, as one short hash."""
        text = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class CandidateRequest(Versioned):
    """One candidate: its CUDA source, its task (a bundled task's id, or a whole task definition), the target,
    and the options of ``ptxbench eval``."""

    RECORD = "candidate request"
    model_config = ConfigDict(extra="forbid")

    version: int = API_VERSION
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS, description="The candidate's CUDA C++ source")
    task: str | None = Field(default=None, description="A bundled task's id")
    task_definition: Task | None = Field(default=None, description="A whole task (as `ptxbench tasks show --json`)")
    task_hash: str | None = Field(default=None, description=(
        "The task's content hash as the client knows it: refused (409) when the server's task differs"))
    arch: Arch = Arch.SM_90A
    options: JobOptions = Field(default_factory=JobOptions)
    name: str | None = Field(default=None, max_length=500, description="The candidate's name in its evaluation")
    generation: Generation | None = Field(default=None, description="The labels of the run that sampled it")

    @field_validator("arch")
    @classmethod
    def _benchmark_arch(cls, arch: Arch) -> Arch:
        if not arch.is_arch_specific:
            raise ValueError(f"{arch.value} is the plain target; the tasks' requirements exist on "
                             f"{arch.specific.value}")
        return arch

    @field_validator("source")
    @classmethod
    def _text(cls, source: str) -> str:
        if "\0" in source or not source.strip():
            raise ValueError("a candidate is the text of one CUDA C++ source (empty, or with NUL bytes)")
        return source

    @model_validator(mode="after")
    def _one_task(self) -> "CandidateRequest":
        if (self.task is None) == (self.task_definition is None):
            raise ValueError("give either task (a bundled task's id) or task_definition (a whole task)")
        return self


class SubmitRequest(Versioned):
    """A batch of candidates, accepted or refused as a whole."""

    RECORD = "submit request"
    model_config = ConfigDict(extra="forbid")

    version: int = API_VERSION
    candidates: list[CandidateRequest] = Field(min_length=1, max_length=MAX_BATCH)


class JobState(str, Enum):
    QUEUED = "queued"  # accepted and committed; waiting for the engine
    BUILDING = "building"  # with the engine: built and read on the CPU, then waiting for a GPU
    RUNNING = "running"  # on a GPU
    DONE = "done"  # its evaluation is in the run directory
    CANCELLED = "cancelled"
    FAILED = "failed"  # the server could not take it up (its last event says why); nothing was evaluated

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.CANCELLED, JobState.FAILED)


class StageEvent(Record):
    """A stage's result as it landed: ``accepted``, ``build`` (the static stage), ``stored`` (answered from a
    stored result), ``gpu`` (handed to a GPU), then from the evaluation ``trials``, ``timing``, ``features``,
    and last ``done`` (or ``cancelled``, ``failed``)."""

    seq: int
    stage: str
    at: float = Field(description="Unix time it landed")
    data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("data")
    @classmethod
    def _current_stage_words(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A ``build`` event stored before the stage vocabulary was one (``LEGACY_STAGES``' words): today's words."""
        requirements = data.get("requirements")
        if isinstance(requirements, list):
            data = {**data, "requirements": [{**r, "stage": current_stage(r.get("stage"))} if isinstance(r, dict)
                                             else r for r in requirements]}
        return data


class JobView(Versioned):
    """A job as ``GET /v1/jobs/{id}`` shows it: its state, its stage results so far, and once done the
    ``Evaluation`` that ``ptxbench eval`` writes for the same candidate."""

    RECORD = "job"

    version: int = API_VERSION
    id: str
    state: JobState
    task: str
    arch: Arch
    name: str
    submitted_at: float
    finished_at: float | None = None
    run_dir: str = Field(description="The run directory the result is recorded in (on the server)")
    item: str
    events: list[StageEvent] = Field(default_factory=list)
    evaluation: Evaluation | None = None
    evidence: EvidenceProfile = Field(default=EvidenceProfile.PUBLISH, description=(
        "The evidence profile the job was accepted with (publish for a job kept before profiles existed)"))


class Accepted(Record):
    id: str
    state: JobState
    duplicate: bool = Field(default=False, description="An earlier identical job answers it (same source, task, "
                                                       "arch and options)")


class SubmitReply(Record):
    version: int = API_VERSION
    jobs: list[Accepted]


class JobList(Record):
    version: int = API_VERSION
    jobs: list[JobView]


class ErrorReply(Record):
    error: str


class Health(Record):
    status: Literal["ok", "degraded"]
    version: str
    gpus: int = Field(description="GPU slots serving (GPU × lane)")
    retired: dict[str, str] = Field(default_factory=dict)
    on_gpus: bool


class StageSeconds(Record):
    count: int
    total_s: float
    mean_s: float


class Metrics(Record):
    queue_depth: int = Field(description="Jobs accepted and not yet on a GPU")
    jobs: dict[str, int] = Field(description="Jobs per state")
    stage_seconds: dict[str, StageSeconds]
    gpus: dict[str, dict[str, Any]] = Field(description="Per GPU slot: its device, whether busy, retired and why")
    uptime_s: float
    finished_per_minute: float | None = Field(description="Over the last 10 minutes of finished jobs")
