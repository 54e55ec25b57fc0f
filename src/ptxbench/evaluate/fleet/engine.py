"""A long-lived evaluator: the GPU hosts started once and kept, fed one candidate at a time.

``evaluate_candidates`` starts its hosts for one call and closes them at the end, so every call pays for the
workers, the baseline process, the measured peaks and the first clean baseline times anew. A server
(``ptxbench serve``) keeps one ``Engine`` for its lifetime instead: one host per GPU and lane, their
evaluators warm, and one scheduler thread (``schedule`` with a ``JobFeed``) handing them candidates as they
arrive, with the same fault handling and GPU retirement as ``eval``.

Each candidate is built and read on a pool of threads first (the static stage: its report is the first
stage result a caller hears), while the GPUs evaluate earlier ones; then it joins the GPUs' queue. Every
result is recorded into the run directory its submission names exactly as ``eval`` records it (the item's
``candidate.cu``, ``build.log``, ``placement.json``, ``result.json`` last), through one ``RunLedger`` per
run directory that is audited when the engine closes. An item whose result is already stored is answered
from it where it answers the same question (a finished one; an infrastructure failure is evaluated again where
GPUs are), as a resumed ``eval`` does. Without GPUs the same path builds and reads each candidate and records what the build decides
(``static_only``), as ``eval`` does on such a machine.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.arch.registry import Arch
from ptxbench.check import check_source
from ptxbench.evaluate.evaluator import DEFAULT_LANES, HANDLER, EvalOptions
from ptxbench.evaluate.fleet.gpu_host import HostJob, HostOutcome, HostSpec
from ptxbench.evaluate.fleet.run import (
    Candidate,
    _audit,
    _attributed,
    _header,
    _record,
    _reusable,
    _without_code,
    gpu_environment,
)
from ptxbench.evaluate.fleet.scheduler import Job, JobFeed, SerialSlot, Started, schedule, start_slots
from ptxbench.evaluate.judgement.static_only import static_verdict
from ptxbench.records.check import CheckReport
from ptxbench.records.evaluation import Evaluation, InfraFailure
from ptxbench.records.rundir import RunDir, RunLedger
from ptxbench.toolchain.priority import lower_this_thread

log = logging.getLogger(__name__)

StageListener = Callable[[str, dict[str, Any]], None]
"""Hears a stage's result as it lands: the stage's name and what it found (plain JSON data)."""


@dataclass
class Submission:
    """One candidate for the engine: where its result is recorded, and who hears its stages and its end."""

    candidate: Candidate
    arch: Arch
    options: EvalOptions
    out: Path
    on_stage: StageListener
    on_done: Callable[[Evaluation], None]
    cancelled: bool = field(default=False, init=False)


def build_stage(report: CheckReport) -> dict[str, Any]:
    """The static stage's result as a caller hears it: built or not (and why), and each requirement's evidence."""
    build = report.build
    diagnosis = build.diagnosis.message if build.diagnosis is not None else None
    requirements = [{"requirement": r.requirement.label, "stage": r.stage.value}
                    for r in (report.static.requirements if report.static is not None else [])]
    return {"ok": build.ok, "cached": build.cached, "seconds": round(build.duration_s, 3), "diagnosis": diagnosis,
            "requirements": requirements}


class Engine:
    """GPU hosts kept for the engine's lifetime, fed one ``Submission`` at a time (``submit``).

    ``gpus``: local GPU indices (None: every visible one; empty: none, the static path); ``lanes``: hosts per
    GPU; ``builders``: candidates built at once ahead of the GPUs; ``handler`` and ``reference_device`` are the
    GPU side's stand-ins for tests, as in ``evaluate_candidates``; ``protect``: folders made read-only to
    candidates beside the cache (the run directories' parent).
    """

    def __init__(self, gpus: Sequence[int] | None = None, lanes: int = DEFAULT_LANES, *, builders: int | None = None,
                 handler: str = HANDLER, reference_device: str = "cuda", protect: Sequence[Path] = ()) -> None:
        self.spec = HostSpec(options=EvalOptions(lanes=lanes), handler=handler, reference_device=reference_device)
        self._gpus = gpus
        self._protect = list(protect)
        self._builders = ThreadPoolExecutor(max_workers=builders or min(8, os.cpu_count() or 1),
                                            thread_name_prefix="ptxbench-build", initializer=lower_this_thread)
        self._feed = JobFeed()
        self._lock = threading.RLock()  # the run directories, the counters and the submissions below
        self._submissions: dict[int, Submission] = {}
        self._running: dict[int, str] = {}  # key -> the slot evaluating it
        self._runs: dict[Path, tuple[RunDir, RunLedger]] = {}
        self._slots: list[SerialSlot] = []
        self._started: Started | None = None
        self._thread: threading.Thread | None = None
        self._restore_protected: Callable[[], None] | None = None
        self.retired: dict[str, str] = {}
        self.devices: dict[str, dict[str, Any]] = {}
        self.stage_seconds: dict[str, list[float]] = {}  # stage -> [count, total seconds]
        self.closed = False

    # -- lifetime ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Open every GPU (a GPU that cannot start is retired with its reason) and start the scheduler."""
        from ptxbench.evaluate.fleet.pool import local_slots, visible_gpu_count
        from ptxbench.evaluate.isolation.confinement import name_protected_paths
        from ptxbench.paths import cache_root

        self._restore_protected = name_protected_paths([*self._protect, cache_root()])
        chosen = list(self._gpus) if self._gpus is not None else list(range(visible_gpu_count()))
        self._slots = list(local_slots(chosen, self.spec))
        if not self._slots:
            return
        self._started = start_slots(self._slots)
        self.devices = dict(self._started.devices)
        self.retired = dict(self._started.retired)
        self._thread = threading.Thread(target=self._schedule, name="ptxbench-scheduler", daemon=True)
        self._thread.start()

    @property
    def on_gpus(self) -> bool:
        """Whether candidates run on GPUs (else they are built and read only)."""
        return bool(self._slots)

    @property
    def slot_count(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        """Stop feeding the GPUs, close their hosts (a candidate still running is interrupted: its caller runs it
        again later), and audit every run directory written to."""
        if self.closed:
            return
        self.closed = True
        self._feed.stop()
        self._builders.shutdown(wait=True, cancel_futures=True)
        if self._thread is not None:
            self._thread.join()
        for slot in self._slots:
            slot.close()
        with self._lock:
            for _, ledger in self._runs.values():
                _audit(ledger)
        if self._restore_protected is not None:
            self._restore_protected()

    # -- work -------------------------------------------------------------------------------------------

    def submit(self, key: int, submission: Submission) -> None:
        """Evaluate ``submission`` (``key``: the caller's name for it, unique among those in flight). Its
        listeners are called from the engine's threads."""
        if self.closed:
            raise RuntimeError("the engine is closed")
        with self._lock:
            self._submissions[key] = submission
        self._builders.submit(self._build, key, submission)

    def cancel(self, key: int) -> bool:
        """Cancel a submission still being built (it ends there, unrecorded); False once it went to a GPU."""
        with self._lock:
            submission = self._submissions.get(key)
            if submission is None or key in self._running or submission.cancelled:
                return False
            submission.cancelled = True
            return True

    def in_flight(self) -> int:
        """Submissions not finished yet (being built, waiting for a GPU, or on one)."""
        with self._lock:
            return len(self._submissions)

    def running(self) -> dict[int, str]:
        with self._lock:
            return dict(self._running)

    def _build(self, key: int, submission: Submission) -> None:
        try:
            self._build_then_queue(key, submission)
        except Exception as exc:  # noqa: BLE001 - the harness's failure on this item, recorded as such
            log.exception("building %s failed in the harness", submission.candidate.origin)
            candidate = submission.candidate
            self._finish(key, Evaluation(candidate=candidate.origin, task=candidate.task.id,
                                         task_hash=candidate.task.content_hash, arch=submission.arch,
                                         infra_failure=InfraFailure.HARNESS_ERROR,
                                         message=f"the harness failed before the GPU: {type(exc).__name__}: {exc}"),
                         None)

    def _build_then_queue(self, key: int, submission: Submission) -> None:
        candidate, arch = submission.candidate, submission.arch
        rundir, ledger = self._run(submission)
        with self._lock:
            stored = _reusable(rundir, candidate, arch, submission.options, ledger, on_gpus=self.on_gpus,
                               resumption=None)
        if stored is not None:
            submission.on_stage("stored", {"item": str(rundir.item(candidate.task.id, candidate.item))})
            self._finish(key, stored, None, record=False)
            return
        if candidate.extraction is not None:  # nothing to build or run
            placement = {"backend": "local", "slot": None} if self.on_gpus else None
            self._finish(key, _without_code(candidate, arch), placement)
            return
        if submission.cancelled:
            self._drop(key)
            return
        started = time.monotonic()
        report = check_source(candidate.source, arch, candidate.task, candidate.origin)
        self._count("serve.build_and_static", time.monotonic() - started)
        submission.on_stage("build", build_stage(report))
        with self._lock:
            cancelled = submission.cancelled  # at the stage boundary: then it never reaches a GPU
            if cancelled:
                self._drop(key)
            elif self.on_gpus:
                self._feed.put(Job(key, HostJob(task=candidate.task, arch=arch, source=candidate.source,
                                                origin=candidate.origin, options=submission.options)))
        if not cancelled and not self.on_gpus:
            self._finish(key, static_verdict(report, candidate.task.content_hash, candidate.generation), None)

    def _schedule(self) -> None:
        assert self._started is not None

        def on_start(job: Job, slot: str) -> None:
            with self._lock:
                self._running[job.index] = slot
                submission = self._submissions[job.index]
            submission.on_stage("gpu", {"slot": slot, "attempt": len(job.faults) + 1})

        def on_result(job: Job, outcome: HostOutcome, slot: str) -> None:
            assert outcome.evaluation is not None
            self._finish(job.index, outcome.evaluation, {"backend": "local", "slot": slot, "seconds": outcome.seconds,
                                                         "where": outcome.where, "interrupted_by": job.faults})

        def on_give_up(job: Job, failure: InfraFailure, reason: str) -> None:
            candidate = self._submissions[job.index].candidate
            self._finish(job.index, Evaluation(candidate=candidate.origin, task=candidate.task.id,
                                               task_hash=candidate.task.content_hash, arch=job.work.arch,
                                               infra_failure=failure, message=reason),
                         {"backend": "local", "slot": None, "interrupted_by": job.faults})

        def on_retire(slot: str, reason: str) -> None:
            with self._lock:
                self.retired[slot] = reason

        try:
            schedule([], self._started, on_result=on_result, on_give_up=on_give_up, feed=self._feed,
                     on_start=on_start, on_retire=on_retire)
        except Exception:  # noqa: BLE001 - said in the log; the submissions in flight stay unfinished
            log.exception("the engine's scheduler stopped")

    # -- results ----------------------------------------------------------------------------------------

    def _run(self, submission: Submission) -> tuple[RunDir, RunLedger]:
        """The submission's run directory, opened once (its header says the engine's GPUs) with its ledger."""
        with self._lock:
            found = self._runs.get(submission.out)
            if found is None:
                environment = {**gpu_environment(self.devices, self.retired, "local"), "served": True}
                rundir = RunDir.open(submission.out, _header(submission.arch, submission.options, environment))
                found = self._runs[submission.out] = (rundir, RunLedger(rundir))
            return found

    def _finish(self, key: int, evaluation: Evaluation, placement: dict[str, Any] | None, *,
                record: bool = True) -> None:
        with self._lock:
            submission = self._submissions.pop(key, None)
            self._running.pop(key, None)
            if submission is None:
                return
            evaluation = _attributed(submission.candidate, evaluation, submission.options)
            if record:
                _, ledger = self._run(submission)
                _record(ledger, submission.candidate, evaluation, placement)
                for stage, seconds in evaluation.durations_s.items():
                    self._count(stage, seconds)
        submission.on_done(evaluation)

    def _drop(self, key: int) -> None:
        with self._lock:
            self._submissions.pop(key, None)

    def _count(self, stage: str, seconds: float) -> None:
        with self._lock:
            counted = self.stage_seconds.setdefault(stage, [0, 0.0])
            counted[0] += 1
            counted[1] += seconds
