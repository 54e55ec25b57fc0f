"""Jobs from the durable store to one long-lived evaluation engine, and their stage results back.

A submission is checked (its task resolved among the bundled tasks, or given whole), keyed by what decides
its verdict (source, task hash, target, options), and committed to the store before it is acknowledged; an
identical earlier job answers it instead (its stored result, or the job still under way). One dispatcher
thread moves queued jobs to the engine in order, keeping only a few more there than it has GPU slots, so
the rest stay queued (cancellable, and counted for backpressure) and the engine always has the next builds
under way. The engine's threads report each stage as it lands; the store keeps them as the job's events.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from ptxbench import __version__
from ptxbench.context.wrappers import inline_wrapper_header
from ptxbench.errors import PtxbenchError
from ptxbench.records.evaluation import Evaluation
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.rundir import RESULT_FILE, load_result
from ptxbench.serve.evaluation import Candidate, Engine, Submission
from ptxbench.serve.models import (
    Accepted,
    CandidateRequest,
    Health,
    JobState,
    JobView,
    Metrics,
    StageEvent,
    StageSeconds,
)
from ptxbench.serve.store import JobRow, JobStore
from ptxbench.tasks.model import Task

log = logging.getLogger(__name__)
RUNS_FOLDER = "runs"
DEFAULT_RETRY_S = 10.0  # before any job finished, the expected seconds per job for Retry-After


class ServiceError(PtxbenchError):
    """A request the service refuses; ``status`` is the HTTP status that says why."""

    def __init__(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


def bundled_task(task_id: str) -> Task:
    """A bundled task by id; never a path (a client names no file on the server)."""
    from ptxbench.tasks.loader import bundled_suite

    for task in bundled_suite():
        if task.id == task_id:
            return task
    raise ServiceError(404, f"unknown task {task_id!r}; bundled tasks: {', '.join(t.id for t in bundled_suite())}")


def stage_events(evaluation: Evaluation) -> list[tuple[str, dict[str, Any]]]:
    """The GPU stages' results, read from the evaluation that ends them: correctness trials, timing, executed
    features (each only where the evaluation reached it)."""
    found: list[tuple[str, dict[str, Any]]] = []
    seconds = evaluation.durations_s
    if evaluation.trials:
        failed = next((t for t in evaluation.trials if not t.passed), None)
        found.append(("trials", {"passed": sum(t.passed for t in evaluation.trials), "run": len(evaluation.trials),
                                 "failed_workload": failed.workload if failed else None,
                                 "seconds": seconds.get("trials")}))
    if evaluation.timings:
        found.append(("timing", {"workloads": [{"workload": t.workload, "candidate_ms": t.candidate_ms,
                                                "baseline_ms": t.baseline_ms, "speedup": t.speedup}
                                               for t in evaluation.timings], "seconds": seconds.get("timing")}))
    if evaluation.features is not None:
        found.append(("features", {"satisfied": [f.requirement.label for f in evaluation.features if f.satisfied],
                                   "missing": [f.requirement.label for f in evaluation.features if not f.satisfied],
                                   "seconds": seconds.get("profile")}))
    return found


class JobService:
    """The store, the engine, and the dispatcher between them. ``max_queue``: jobs accepted and unfinished
    beyond which a submission is refused (429); ``ahead``: jobs given to the engine beyond its GPU slots;
    ``allow_task_definitions``: accept whole task definitions, whose reference is Python code this process runs
    outside any sandbox (so only for clients trusted with that)."""

    def __init__(self, state: Path, engine: Engine, *, max_queue: int = 1000, ahead: int | None = None,
                 allow_task_definitions: bool = False, evidence: EvidenceProfile = EvidenceProfile.SWEEP) -> None:
        self.state = state
        self.allow_task_definitions = allow_task_definitions
        self.evidence = evidence  # the profile of a job whose options name none
        self.store = JobStore(state)
        self.engine = engine
        self.max_queue = max_queue
        self._ahead = ahead
        self._wake = threading.Condition()
        self._accepting = threading.Lock()  # one submission at a time: the queue's bound and duplicates hold
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._started = time.time()

    # -- lifetime ---------------------------------------------------------------------------------------

    def start(self) -> None:
        requeued = self.store.requeue_unfinished()
        if requeued:
            log.warning("%d job(s) interrupted by the last stop are queued again", requeued)
        self.engine.start()
        self._thread = threading.Thread(target=self._dispatch, name="ptxbench-dispatch", daemon=True)
        self._thread.start()

    def close(self) -> int:
        """Stop dispatching, close the engine (builds under way finish; a candidate on a GPU is interrupted; the
        run directories are audited) and put the jobs it held back in the queue, so the store says what they are
        while the server is down. Returns the jobs left queued for the next start."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.engine.close()  # no job changes state after this: the engine calls back no more
        self.store.requeue_unfinished()
        unfinished = self.store.counts()[JobState.QUEUED.value]
        self.store.close()
        return unfinished

    @property
    def capacity(self) -> int:
        """Jobs the engine holds at once: one per GPU slot and the next ones building."""
        if self._ahead is not None:
            return self.engine.slot_count + self._ahead
        return max(2, 2 * self.engine.slot_count)

    # -- requests ---------------------------------------------------------------------------------------

    def submit(self, requests: list[CandidateRequest]) -> list[Accepted]:
        """Accept every request (committed before this returns) or none."""
        with self._accepting:
            return self._accept(requests)

    def _accept(self, requests: list[CandidateRequest]) -> list[Accepted]:
        prepared = [self._prepare(request) for request in requests]
        active = sum(self.store.counts()[s.value] for s in (JobState.QUEUED, JobState.BUILDING, JobState.RUNNING))
        fresh = [p for p in prepared if p[1] is None]
        if fresh and active + len(fresh) > self.max_queue:
            raise ServiceError(429, f"the queue is full ({active} job(s) unfinished, at most {self.max_queue}): "
                               "submit again later", self._retry_after(active + len(fresh) - self.max_queue))
        accepted: list[Accepted] = []
        rows: list[JobRow] = []
        first: dict[str, str] = {}
        for row, earlier in prepared:
            if earlier is None and row.dedupe in first:  # the same candidate twice in one batch: one job
                accepted.append(Accepted(id=first[row.dedupe], state=JobState.QUEUED, duplicate=True))
            elif earlier is None:
                first[row.dedupe] = row.id
                rows.append(row)
                accepted.append(Accepted(id=row.id, state=JobState.QUEUED))
            else:
                accepted.append(Accepted(id=earlier.id, state=earlier.state, duplicate=True))
        self.store.add(rows, {})
        if rows:
            with self._wake:
                self._wake.notify_all()
        return accepted

    def _prepare(self, request: CandidateRequest) -> tuple[JobRow, JobRow | None]:
        """The job row a request becomes, and the earlier job that answers it instead (None: none does)."""
        if request.task_definition is not None and not self.allow_task_definitions:
            raise ServiceError(403, "this server takes bundled task ids only: a task definition carries Python "
                               "(its reference) that the server would run unsandboxed; start it with "
                               "--allow-task-definitions to accept them from trusted clients")
        task = request.task_definition if request.task_definition is not None else bundled_task(request.task or "")
        if request.task_hash is not None and request.task_hash != task.content_hash:
            raise ServiceError(409, f"task {task.id}: the server's definition (hash {task.content_hash[:12]}) differs "
                               f"from the client's ({request.task_hash[:12]}); send the task_definition, or run the "
                               "same ptxbench on both sides")
        source = inline_wrapper_header(request.source)
        source_hash = hashlib.sha256(source.encode()).hexdigest()
        options = request.options
        if options.evidence is None:  # the server's profile, kept with the job
            options = options.model_copy(update={"evidence": self.evidence})
        dedupe = hashlib.sha256(json.dumps([source_hash, task.content_hash, request.arch.value, options.identity()],
                                           sort_keys=True).encode()).hexdigest()
        job_id = secrets.token_hex(8)
        resolved = request.model_copy(update={"source": source, "task": None, "task_definition": task,
                                              "options": options})
        row = JobRow(seq=0, id=job_id, dedupe=dedupe, state=JobState.QUEUED, request=resolved.model_dump_json(),
                     task=task.id, arch=request.arch.value, name=request.name or f"{task.id}-{job_id}.cu",
                     run_dir=f"{RUNS_FOLDER}/{request.arch.value}-{options.digest()}",
                     item=f"{source_hash[:12]}-{task.content_hash[:8]}", submitted_at=time.time(), finished_at=None,
                     verdict=None, infra=False)
        return row, self.store.answering(dedupe, redo_infra=self.engine.on_gpus)

    def _retry_after(self, excess: int) -> int:
        finished = self.engine.stage_seconds.get("total")
        per_job = finished[1] / finished[0] if finished and finished[0] else DEFAULT_RETRY_S
        slots = max(1, self.engine.slot_count)
        return int(min(600, max(1, math.ceil(per_job * max(1, excess) / slots))))

    def view(self, job_id: str) -> JobView:
        row = self.store.get(job_id)
        if row is None:
            raise ServiceError(404, f"no job {job_id!r}")
        return self._view(row)

    def _view(self, row: JobRow, with_events: bool = True) -> JobView:
        evaluation = None
        if row.state is JobState.DONE:
            evaluation = self.result(row)
        return JobView(id=row.id, state=row.state, task=row.task, arch=row.arch, name=row.name,
                       submitted_at=row.submitted_at, finished_at=row.finished_at, run_dir=row.run_dir, item=row.item,
                       events=self.store.events(row.id) if with_events else [], evaluation=evaluation,
                       evidence=_job_evidence(row.request))

    def result(self, row: JobRow) -> Evaluation:
        """The job's evaluation, read from its run directory's result file."""
        record = load_result(self.state / row.run_dir / "items" / row.task / row.item / RESULT_FILE)
        assert isinstance(record, Evaluation)  # the server's run directories are eval runs
        return record

    def listed(self, state: JobState | None, limit: int, after: str | None) -> list[JobView]:
        after_seq = 0
        if after is not None:
            row = self.store.get(after)
            if row is None:
                raise ServiceError(404, f"no job {after!r} (after=)")
            after_seq = row.seq
        return [self._view(row, with_events=False) for row in self.store.listed(state, limit, after_seq)]

    def events(self, job_id: str, after: int = -1) -> tuple[list[StageEvent], JobState]:
        row = self.store.get(job_id)
        if row is None:
            raise ServiceError(404, f"no job {job_id!r}")
        return self.store.events(job_id, after), row.state

    def cancel(self, job_id: str) -> JobView:
        """A queued job is cancelled; one being built ends at the build's end (it never reaches a GPU); one on a
        GPU is not cancellable (409); a finished one is left as it is (409)."""
        row = self.store.get(job_id)
        if row is None:
            raise ServiceError(404, f"no job {job_id!r}")
        if self.store.end(job_id, (JobState.QUEUED,), JobState.CANCELLED, {}):
            return self.view(job_id)
        if row.state is JobState.BUILDING and self.engine.cancel(row.seq):
            self.store.end(job_id, (JobState.BUILDING,), JobState.CANCELLED, {"at": "the end of its build"})
            return self.view(job_id)
        state = self.store.get(job_id).state  # type: ignore[union-attr]
        if state.finished:
            raise ServiceError(409, f"job {job_id} is already {state.value}")
        raise ServiceError(409, f"job {job_id} is running on a GPU and cannot be cancelled")

    def health(self) -> Health:
        retired = dict(self.engine.retired)
        serving = self.engine.slot_count - len(retired)
        degraded = self.engine.on_gpus and serving <= 0
        return Health(status="degraded" if degraded else "ok", version=__version__, gpus=max(0, serving),
                      retired=retired, on_gpus=self.engine.on_gpus)

    def metrics(self) -> Metrics:
        counts = self.store.counts()
        running = self.engine.running()
        busy: dict[str, int] = {}
        for slot in running.values():
            busy[slot] = busy.get(slot, 0) + 1
        gpus = {name: {"device": device.get("name"), "uuid": device.get("uuid"), "busy": busy.get(name, 0) > 0,
                       "retired": self.engine.retired.get(name)} for name, device in self.engine.devices.items()}
        for name, reason in self.engine.retired.items():
            gpus.setdefault(name, {"device": None, "busy": False, "retired": reason})
        window = 600.0
        since = max(self._started, time.time() - window)
        elapsed = time.time() - since
        finished = self.store.finished_since(since)
        return Metrics(queue_depth=counts["queued"] + counts["building"], jobs=counts,
                       stage_seconds={stage: StageSeconds(count=int(n), total_s=round(total, 3),
                                                          mean_s=round(total / n, 3) if n else 0.0)
                                      for stage, (n, total) in sorted(self.engine.stage_seconds.items())},
                       gpus=gpus, uptime_s=round(time.time() - self._started, 1),
                       finished_per_minute=round(finished * 60 / elapsed, 2) if elapsed >= 1 and finished else None)

    # -- the dispatcher ---------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and (self.engine.in_flight() >= self.capacity or
                                              not self.store.queued(1)):
                    self._wake.wait(timeout=1.0)
                if self._stopping:
                    return
                room = self.capacity - self.engine.in_flight()
            for row in self.store.queued(room):
                if self.store.move(row.id, (JobState.QUEUED,), JobState.BUILDING):  # a cancel may have come first
                    try:
                        self._hand_over(row)
                    except Exception as exc:  # noqa: BLE001 - the job's end, said in its events and the log
                        log.exception("job %s could not be handed to the engine", row.id)
                        self.store.end(row.id, (JobState.BUILDING,), JobState.FAILED,
                                       {"error": f"the server could not take the job up: {type(exc).__name__}: {exc}"})

    def _hand_over(self, row: JobRow) -> None:
        request = CandidateRequest.model_validate_json(row.request)
        task = request.task_definition
        assert task is not None  # resolved when accepted
        candidate = Candidate(task=task, item=row.item, source=request.source, origin=row.name,
                              generation=request.generation)

        def on_stage(stage: str, data: dict[str, Any]) -> None:
            current = self.store.get(row.id)
            if current is None or current.state is JobState.CANCELLED:  # cancelled while it was being built
                return
            if stage == "gpu":
                self.store.move(row.id, (JobState.BUILDING,), JobState.RUNNING)
            self.store.add_event(row.id, stage, data)

        def on_done(evaluation: Evaluation) -> None:
            for stage, data in stage_events(evaluation):
                self.store.add_event(row.id, stage, data)
            self.store.finish(row.id, evaluation.verdict, evaluation.infra_failure is not None,
                              {"verdict": evaluation.verdict, "message": evaluation.message[:2000]})
            with self._wake:
                self._wake.notify_all()

        options = request.options
        if options.evidence is None:  # kept before profiles existed: the question it asked was publish's
            options = options.model_copy(update={"evidence": EvidenceProfile.PUBLISH})
        self.engine.submit(row.seq, Submission(candidate=candidate, arch=request.arch, options=options,
                                               out=self.state / row.run_dir, on_stage=on_stage, on_done=on_done))


def _job_evidence(request: str) -> EvidenceProfile:
    """The evidence profile a kept job was accepted with; a job kept before profiles existed was publish."""
    options = json.loads(request).get("options") or {}
    return EvidenceProfile(options.get("evidence") or EvidenceProfile.PUBLISH.value)
