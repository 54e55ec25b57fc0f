"""The server's durable job queue: SQLite (stdlib, WAL, full sync) in the server's state folder.

A job is committed before the server answers 202, so an accepted job survives the server being killed: on
start, jobs that were being built or run go back to the queue (``requeue_unfinished``) and are run again,
and one whose result had already reached its run directory is answered from there. The results themselves
are not here: they are the run directory's files, as ``eval`` writes them; a job row names its run directory
and item, and keeps the stage results it announced (``events``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptxbench.errors import PtxbenchError
from ptxbench.serve.models import JobState, StageEvent

DB_FILE = "jobs.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    dedupe TEXT NOT NULL,
    state TEXT NOT NULL,
    request TEXT NOT NULL,
    task TEXT NOT NULL,
    arch TEXT NOT NULL,
    name TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    item TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    finished_at REAL,
    verdict TEXT,
    infra INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq);
CREATE INDEX IF NOT EXISTS jobs_by_dedupe ON jobs (dedupe, seq);
CREATE TABLE IF NOT EXISTS events (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    stage TEXT NOT NULL,
    at REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (job, seq)
);
"""


class StoreError(PtxbenchError):
    """The state folder holds a job store this ptxbench cannot use."""


@dataclass(frozen=True)
class JobRow:
    seq: int
    id: str
    dedupe: str
    state: JobState
    request: str  # the CandidateRequest as accepted, its task resolved (JSON)
    task: str
    arch: str
    name: str
    run_dir: str
    item: str
    submitted_at: float
    finished_at: float | None
    verdict: str | None
    infra: bool


_COLUMNS = "seq, id, dedupe, state, request, task, arch, name, run_dir, item, submitted_at, finished_at, verdict, infra"


def _row(values: tuple[Any, ...]) -> JobRow:
    seq, id_, dedupe, state, request, task, arch, name, run_dir, item, submitted, finished, verdict, infra = values
    return JobRow(seq, id_, dedupe, JobState(state), request, task, arch, name, run_dir, item, submitted, finished,
                  verdict, bool(infra))


class JobStore:
    """One connection shared by the server's threads under a lock: every write is one committed transaction."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / DB_FILE
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._check_version()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a usable job store ({exc}); give another --state folder") from None

    def _check_version(self) -> None:
        found = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if found is None:
            self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif found[0] != str(SCHEMA_VERSION):
            raise StoreError(f"{self.path}: job store schema {found[0]}, this ptxbench reads {SCHEMA_VERSION}; "
                             "give another --state folder")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, parameters).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- jobs -------------------------------------------------------------------------------------------

    def add(self, rows: list[JobRow], events: dict[str, dict[str, Any]]) -> None:
        """Commit new jobs, each with its first event (``accepted``), in one transaction."""
        with self._transaction() as db:
            for row in rows:
                db.execute(f"INSERT INTO jobs ({_COLUMNS.replace('seq, ', '')}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           (row.id, row.dedupe, row.state.value, row.request, row.task, row.arch, row.name,
                            row.run_dir, row.item, row.submitted_at, row.finished_at, row.verdict, int(row.infra)))
                db.execute("INSERT INTO events VALUES (?, 0, 'accepted', ?, ?)",
                           (row.id, row.submitted_at, json.dumps(events.get(row.id, {}))))

    def get(self, job_id: str) -> JobRow | None:
        found = self._query(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _row(found[0]) if found else None

    def by_seq(self, seq: int) -> JobRow | None:
        found = self._query(f"SELECT {_COLUMNS} FROM jobs WHERE seq = ?", (seq,))
        return _row(found[0]) if found else None

    def answering(self, dedupe: str, redo_infra: bool) -> JobRow | None:
        """The latest job that answers a submission with this key: one not cancelled nor failed, and, with
        ``redo_infra`` (a server with GPUs), not finished with an infrastructure failure (those are evaluated
        again, as a resumed ``eval`` does)."""
        infra = "AND NOT (state = 'done' AND infra = 1)" if redo_infra else ""
        found = self._query(f"SELECT {_COLUMNS} FROM jobs WHERE dedupe = ? AND state NOT IN ('cancelled', 'failed') "
                            f"{infra} ORDER BY seq DESC LIMIT 1", (dedupe,))
        return _row(found[0]) if found else None

    def listed(self, state: JobState | None, limit: int, after_seq: int = 0) -> list[JobRow]:
        where, parameters = ("WHERE seq > ?", (after_seq,)) if state is None else \
            ("WHERE state = ? AND seq > ?", (state.value, after_seq))
        return [_row(r) for r in self._query(f"SELECT {_COLUMNS} FROM jobs {where} ORDER BY seq LIMIT ?",
                                             (*parameters, limit))]

    def queued(self, limit: int) -> list[JobRow]:
        return self.listed(JobState.QUEUED, limit)

    def counts(self) -> dict[str, int]:
        found = dict(self._query("SELECT state, COUNT(*) FROM jobs GROUP BY state"))
        return {state.value: int(found.get(state.value, 0)) for state in JobState}

    def move(self, job_id: str, source: tuple[JobState, ...], target: JobState) -> bool:
        """``job_id`` from one of ``source`` to ``target``; False (nothing changed) if it was in no such state."""
        marks = ",".join("?" * len(source))
        with self._transaction() as db:
            changed = db.execute(f"UPDATE jobs SET state = ? WHERE id = ? AND state IN ({marks})",
                                 (target.value, job_id, *(s.value for s in source))).rowcount
        return changed == 1

    def finish(self, job_id: str, verdict: str, infra: bool, event: dict[str, Any]) -> None:
        with self._transaction() as db:
            now = time.time()
            db.execute("UPDATE jobs SET state = 'done', finished_at = ?, verdict = ?, infra = ? WHERE id = ?",
                       (now, verdict, int(infra), job_id))
            self._add_event(db, job_id, "done", event, now)

    def end(self, job_id: str, source: tuple[JobState, ...], target: JobState, event: dict[str, Any]) -> bool:
        """``job_id`` ended unevaluated (cancelled, failed) if it was in one of ``source``, with its last event."""
        marks = ",".join("?" * len(source))
        with self._transaction() as db:
            now = time.time()
            changed = db.execute(f"UPDATE jobs SET state = ?, finished_at = ? WHERE id = ? AND state IN ({marks})",
                                 (target.value, now, job_id, *(s.value for s in source))).rowcount
            if changed:
                self._add_event(db, job_id, target.value, event, now)
        return changed == 1

    def requeue_unfinished(self) -> int:
        """After a restart: every job that was being built or run goes back to the queue, in its order."""
        with self._transaction() as db:
            return db.execute("UPDATE jobs SET state = 'queued' WHERE state IN ('building', 'running')").rowcount

    def finished_since(self, since: float) -> int:
        return int(self._query("SELECT COUNT(*) FROM jobs WHERE state = 'done' AND finished_at >= ?", (since,))[0][0])

    # -- events -----------------------------------------------------------------------------------------

    def add_event(self, job_id: str, stage: str, data: dict[str, Any]) -> None:
        with self._transaction() as db:
            self._add_event(db, job_id, stage, data, time.time())

    def _add_event(self, db: sqlite3.Connection, job_id: str, stage: str, data: dict[str, Any], at: float) -> None:
        last = db.execute("SELECT COALESCE(MAX(seq), -1) FROM events WHERE job = ?", (job_id,)).fetchone()[0]
        db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)", (job_id, last + 1, stage, at, json.dumps(data)))

    def events(self, job_id: str, after: int = -1) -> list[StageEvent]:
        found = self._query("SELECT seq, stage, at, data FROM events WHERE job = ? AND seq > ? ORDER BY seq",
                            (job_id, after))
        return [StageEvent(seq=s, stage=stage, at=at, data=json.loads(data)) for s, stage, at, data in found]
