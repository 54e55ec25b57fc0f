"""Several candidates' profiled calls in one Nsight Compute session: the sweep profile's proof at a lower price.

An ncu session costs its start-up and the reading back of its report whatever it profiles: on an H200 one call
of the GEMM reference took 2.36 s under ncu, four programs in one session 6.91 s (``serve_h200.md``). Under
``sweep`` the evaluators of one machine (a server's lanes, concurrent runs) therefore meet at the machine's ncu
turn (``gpu_lock.profiler_turn``) by group commit: each writes its request into the spool, then waits for the
turn; whoever gets it profiles every request waiting at that moment (``MAX_BATCH`` at most, its own among them)
in one session and writes each one's outcome before it lets the turn go. A waiter that gets the turn afterwards
finds its outcome and returns at once. No request waits for company: a batch is what queued while the previous
session ran, and a candidate that finds no one else waiting is profiled in a session of its own, as publish does.

Each candidate runs in its own process (``child/profile_batch.py`` starts their ``profile_one.py`` commands one
after the other) and is judged on the launches of its own process id alone. A batch whose record is missing
(ncu failed or hung, the launcher was killed) or whose report holds a launch of any other process (a candidate's
child, a daemon) says nothing reliable about any one of its candidates: each is then profiled again in a session
of its own, exactly as ``publish`` does; so is a candidate none of whose launches the session recorded (it failed,
was killed at its limit, or ran nothing on the GPU): a batch only ever confirms launches, and every failure is
judged in a session of the candidate's own. A batch that confirms no candidate's launches at all pauses batching
on the machine for ten minutes (``Spool.pause``), so an ncu that does not follow the launcher's processes as
expected costs one wasted session, not one per batch. The spool, the batch's report and its record lie in the
caches' folder, which every process hosting candidate code sees read-only, and every candidate's plan also protects
the other candidates' plan folders: no candidate can write a request, an outcome, the report or another one's
inputs.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import ClassVar

from pydantic import Field, ValidationError

from ptxbench.evaluate.child.profile_one import OUT_OF_MEMORY_MARK
from ptxbench.evaluate.isolation.confinement import compile_cache_environment
from ptxbench.evaluate.isolation.gpu_lock import profiler_turn, trace_event
from ptxbench.evaluate.isolation.processes import alive
from ptxbench.evaluate.proof.executed import NCU_METRICS
from ptxbench.evaluate.proof.ncu import (
    ProfiledRunFailed, import_report, ncu_session, output_tail, profiled_program_command, program_environment)
from ptxbench.records.evaluation import KernelProfile
from ptxbench.records.version import RecordVersionError, Versioned
from ptxbench.toolchain.tools import ncu_record_command

LAUNCHER = Path(__file__).parent.parent / "child" / "profile_batch.py"
MAX_BATCH = 8  # candidates per session: beyond a few the session's fixed cost is shared thinly already
STALE_S = 3600.0  # an outcome nobody collected within this is removed (its requester died)
ALONE_IN_QUEUE = "no other candidate waits for ncu"
SESSION_SLACK_S = 60.0  # the session's limit beyond the sum of its candidates' limits: ncu's start-up and exit
PAUSE_S = 600.0  # after a batch that confirmed no candidate's launches, candidates are profiled alone this long


class ProfileRequest(Versioned):
    """One candidate's profiled call, waiting in the spool: the ``profile_one.py`` command and where it runs."""

    RECORD: ClassVar[str] = "ncu batch request"
    version: int = 1
    id: str
    requester: int = Field(description="the evaluator's process id: a request of a process that is gone is dropped")
    command: list[str]
    plan: str = Field(description="the plan file the command reads (the leader adds the batch's folders to protect)")
    home: str
    timeout_s: float
    asked: float = Field(description="time.time() when it was written: the oldest are profiled first")


class ProfileOutcome(Versioned):
    """What one candidate's part of a batched session showed, or ``solo``: profile it in a session of its own."""

    RECORD: ClassVar[str] = "ncu batch outcome"
    version: int = 1
    id: str
    batch_size: int
    solo: str | None = Field(default=None, description="why the batch says nothing about this candidate")
    exit: int | None = None
    killed: bool = False
    output: str = ""
    profiles: list[KernelProfile] = Field(default_factory=list)

    @property
    def out_of_memory(self) -> bool:
        return OUT_OF_MEMORY_MARK in self.output


class Spool:
    """The folder where requests wait and outcomes are left (``requests/``, ``outcomes/``, ``batches/``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests, self.outcomes, self.batches = root / "requests", root / "outcomes", root / "batches"
        for folder in (self.requests, self.outcomes, self.batches):
            folder.mkdir(parents=True, exist_ok=True)

    def submit(self, request: ProfileRequest) -> None:
        _write(self.requests / f"{request.id}.json", request.model_dump_json())

    def withdraw(self, request_id: str) -> None:
        with suppress(FileNotFoundError):
            (self.requests / f"{request_id}.json").unlink()

    def collect(self, request_id: str) -> ProfileOutcome | None:
        """The outcome left for ``request_id`` (removed from the spool), or None (also for one that does not read)."""
        path = self.outcomes / f"{request_id}.json"
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        path.unlink(missing_ok=True)
        try:
            return ProfileOutcome.model_validate_json(text)
        except (ValidationError, RecordVersionError):  # another ptxbench's, or damaged: profiled again here
            return None

    def leave(self, outcome: ProfileOutcome) -> None:
        _write(self.outcomes / f"{outcome.id}.json", outcome.model_dump_json())

    def pause(self, why: str, seconds: float = PAUSE_S) -> None:
        """No batched session on this machine for ``seconds``: ``why`` (``{until}`` filled in) is the reason each
        candidate is meanwhile profiled alone. A batch that confirmed no candidate's launches costs a session for
        nothing and then every candidate's own: where ncu does not follow the launcher's processes as expected,
        batching would only slow the proof down."""
        until = time.time() + seconds
        stamp = time.strftime("%H:%M:%S", time.localtime(until))
        _write(self.root / "paused.json", json.dumps({"until": until, "why": why.replace("{until}", stamp)}))

    def paused(self) -> str | None:
        """Why batched sessions are paused now, or None."""
        try:
            found = json.loads((self.root / "paused.json").read_text())
            return str(found["why"]) if float(found["until"]) > time.time() else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def claim(self, own: ProfileRequest, limit: int = MAX_BATCH) -> list[ProfileRequest]:
        """``own`` and the oldest other requests waiting (``limit`` in all), taken out of the spool. Unreadable
        requests, those of processes that are gone and those naming another command than the profiled program are
        removed; so are outcomes nobody collected in time."""
        waiting: list[ProfileRequest] = []
        for path in self.requests.glob("*.json"):
            try:
                request = ProfileRequest.model_validate_json(path.read_text())
            except FileNotFoundError:
                continue
            except (ValidationError, RecordVersionError, ValueError):
                path.unlink(missing_ok=True)
                continue
            if request.id != own.id and not (alive(request.requester) and _runs_profiled_program(request)
                                             and Path(request.plan).is_file()):
                path.unlink(missing_ok=True)
                continue
            if request.id != own.id:
                waiting.append(request)
        chosen = [own, *sorted(waiting, key=lambda r: r.asked)[:max(limit - 1, 0)]]
        for request in chosen:
            self.withdraw(request.id)
        now = time.time()
        for path in self.outcomes.glob("*.json"):
            with suppress(FileNotFoundError):
                if now - path.stat().st_mtime > STALE_S:
                    path.unlink()
        return chosen


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` whole: written beside it, then renamed over it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    partial.replace(path)


def _runs_profiled_program(request: ProfileRequest) -> bool:
    """Whether another process's request runs ``profile_one.py`` on its own plan and nothing else: the leader
    starts what a request names, so it starts nothing but the harness's profiled program."""
    return request.command == profiled_program_command(Path(request.plan))


def default_spool() -> Spool:
    """The machine's spool, under the caches' folder (read-only to every process hosting candidate code)."""
    from ptxbench.paths import cache_root

    return Spool(cache_root() / "ncu-spool")


def new_request(command: list[str], plan: Path, home: Path, timeout_s: float) -> ProfileRequest:
    return ProfileRequest(id=secrets.token_hex(8), requester=os.getpid(), command=command, plan=str(plan),
                          home=str(home), timeout_s=timeout_s, asked=time.time())


def profiled_together(request: ProfileRequest, spool: Spool | None = None) -> ProfileOutcome:
    """``request``'s part of a batched session: left by the session that took it, or of the one this process
    leads when the turn comes to it first. The caller holds no GPU lock (as for ``profiling.run_under_ncu``)."""
    spool = spool or default_spool()
    paused = spool.paused()
    if paused is not None:
        return ProfileOutcome(id=request.id, batch_size=1, solo=paused)
    spool.submit(request)
    try:
        with profiler_turn():
            outcome = spool.collect(request.id)
            if outcome is not None:
                return outcome
            # not taken yet, or taken by a leader that died before leaving outcomes: lead a session now
            batch = spool.claim(request)
            if len(batch) == 1:  # no one else waits: the session of its own that publish runs, without a launcher
                return ProfileOutcome(id=request.id, batch_size=1, solo=ALONE_IN_QUEUE)
            began = time.time()
            try:
                outcomes = run_batch(batch, spool)
            except (OSError, ValueError) as exc:  # the batch is only a saving: its failure is no candidate's
                outcomes = all_solo(batch, f"the batched session failed: {type(exc).__name__}: {exc}")
            confirmed = sum(o.solo is None for o in outcomes)
            trace_event("profiler", f"ncu batch of {len(batch)}: {confirmed} confirmed", began)
            if not confirmed:
                spool.pause(f"batched ncu sessions paused until {{until}}: the last one, of {len(batch)}, confirmed "
                            f"no candidate's launches ({outcomes[0].solo})")
            for other in outcomes[1:]:
                spool.leave(other)
            return outcomes[0]
    finally:
        spool.withdraw(request.id)


def run_batch(batch: list[ProfileRequest], spool: Spool) -> list[ProfileOutcome]:
    """One ncu session over ``batch`` (the caller holds the ncu turn): each request's outcome, in order."""
    with _batch_folder(spool) as folder:
        _protect_each_other(batch)
        entries = [{"id": r.id, "command": r.command, "cwd": r.home, "timeout_s": r.timeout_s,
                    "environment": {"HOME": r.home, **compile_cache_environment(r.home)},
                    "output": str(folder / f"{r.id}.out")} for r in batch]
        record, report = folder / "processes.json", folder / "profile.ncu-rep"
        (folder / "batch.json").write_text(json.dumps({"entries": entries, "record": str(record)}))
        home = folder / "home"
        home.mkdir()
        program = [sys.executable, "-I", str(LAUNCHER), str(folder / "batch.json")]
        limit = sum(r.timeout_s for r in batch) + SESSION_SLACK_S
        command = ncu_record_command(program, report, NCU_METRICS, every_process=True)
        try:
            session_exit, session_output = ncu_session(command, program_environment(home), home, limit)
        except ProfiledRunFailed as exc:  # the whole session hung: no one candidate's doing that can be told
            return all_solo(batch, f"the batched ncu session: {exc}")
        ran = _read_record(record)
        if ran is None:
            why = (f"the batched ncu session of {len(batch)} left no record of its processes "
                   f"(exit {session_exit}; {output_tail(session_output, lines=2)})")
            return all_solo(batch, why)
        outputs = {r.id: _read_text(folder / f"{r.id}.out") for r in batch}
        try:
            rows = import_report(report) if report.is_file() and report.stat().st_size else []
        except ValueError as exc:
            return all_solo(batch, f"the batched session's report: {exc}")
        return split(batch, ran, rows, outputs)


def all_solo(batch: list[ProfileRequest], why: str) -> list[ProfileOutcome]:
    """Every request of ``batch`` sent to a session of its own, for ``why``."""
    return [ProfileOutcome(id=r.id, batch_size=len(batch), solo=why) for r in batch]


def split(batch: list[ProfileRequest], ran: dict[str, dict], rows: list[tuple[int | None, KernelProfile]],
          outputs: dict[str, str]) -> list[ProfileOutcome]:
    """Each request's launches, by the process id its entry ran as; every request ``solo`` when any launch
    belongs to no candidate's process, or two candidates' processes shared an id."""
    pids = {entry["pid"]: request_id for request_id, entry in ran.items()}
    foreign = sorted({pid for pid, _ in rows if pid not in pids}, key=str)
    if len(pids) != len(ran) or set(ran) != {r.id for r in batch}:
        why = "the batched session's record does not name one process per candidate"
    elif foreign:
        why = (f"the batched session's report holds launches of process {', '.join(map(str, foreign))}, "
               f"which ran no candidate")
    else:
        why = None
    if why is not None:
        return all_solo(batch, why)
    mine: dict[str, list[KernelProfile]] = {r.id: [] for r in batch}
    for pid, profile in rows:
        mine[pids[pid]].append(profile)
    return [ProfileOutcome(id=r.id, batch_size=len(batch), exit=ran[r.id]["exit"], killed=bool(ran[r.id]["killed"]),
                           output=outputs[r.id], profiles=mine[r.id],
                           solo=None if mine[r.id] else "no launch of its process in the batched session")
            for r in batch]


def _read_record(record: Path) -> dict[str, dict] | None:
    """The launcher's record, by request id, or None when it wrote none (or an unreadable one)."""
    try:
        entries = json.loads(record.read_text())["entries"]
        return {str(e["id"]): {"pid": int(e["pid"]), "exit": e["exit"], "killed": bool(e["killed"])} for e in entries}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_text(path: Path, limit: int = 64_000) -> str:
    try:
        with open(path, "rb") as source:
            return source.read()[-limit:].decode(errors="replace")
    except OSError:
        return ""


def _protect_each_other(batch: list[ProfileRequest]) -> None:
    """Every candidate's plan made to protect every other candidate's plan folder too (the spool is protected
    already, as the caches' folder): one candidate cannot change another's inputs while it waits its turn."""
    folders = [str(Path(r.plan).parent) for r in batch]
    for request in batch:
        path = Path(request.plan)
        plan = json.loads(path.read_text())
        plan["protect"] = list(dict.fromkeys([*plan.get("protect", []), *folders]))
        path.write_text(json.dumps(plan))


@contextmanager
def _batch_folder(spool: Spool) -> Iterator[Path]:
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="batch-", dir=spool.batches))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
