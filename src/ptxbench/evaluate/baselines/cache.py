"""Vendor-baseline timings are measured once per (task, workload, GPU, library versions) and reused,
so evaluating many candidates of one task times the library once, not once per candidate.

Candidate code can write these files (same user, no read-only mount), so every record is signed with
this machine's key (``ptxbench.integrity``) and a record that fails its signature, its validation or
its key is logged, deleted and measured again. A value this process measured or verified is kept in
memory and never read from disk again in this process, so rewriting the file during a run changes
nothing in that run, even for a candidate that has read the key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path

from pydantic import BaseModel, ValidationError

from ptxbench import integrity
from ptxbench._io import write_atomic

BASELINE_CACHE_VERSION = 5  # 2: measured in a process no candidate was loaded into; 3: call by call, as beside a
# candidate; 4: in chunks of at most CHUNK_MS, beside a clean process in the candidate's place, the median of
# CLEAN_SESSIONS measurements; 5: a variant's setup (attention backward's forward, compilation) outside the timed call


class BaselineTiming(BaseModel):
    version: int = BASELINE_CACHE_VERSION
    key: dict[str, str]
    median_ms: float
    iqr_ms: float
    signature: str = ""  # the machine's HMAC of every other field; empty (unsigned) is never trusted

    def signed_payload(self) -> bytes:
        return self.model_dump_json(exclude={"signature"}).encode()


log = logging.getLogger(__name__)
# What this process measured or verified, by file: shared by every cache object of the process.
_memo: dict[Path, BaselineTiming] = {}
_memo_lock = threading.Lock()


class BaselineCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        integrity.signing_key()  # read now, before any candidate of this process runs, and kept

    @staticmethod
    def key(task_hash: str, workload: str, variant: str, device: dict) -> dict[str, str]:
        return {"task": task_hash, "workload": workload, "variant": variant, "gpu": str(device.get("name")),
                "torch": str(device.get("torch")), "cuda": str(device.get("cuda")), "cudnn": str(device.get("cudnn"))}

    def _path(self, key: dict[str, str]) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.root / f"{digest}.json"

    def get(self, key: dict[str, str]) -> BaselineTiming | None:
        path = self._path(key)
        with _memo_lock:
            remembered = _memo.get(path)
        if remembered is not None:
            return remembered
        record = self._read_trusted(path, key)
        if record is not None:
            with _memo_lock:
                _memo[path] = record
        return record

    def put(self, key: dict[str, str], median_ms: float, iqr_ms: float) -> None:
        record = BaselineTiming(key=key, median_ms=median_ms, iqr_ms=iqr_ms)
        record = record.model_copy(update={"signature": integrity.sign(record.signed_payload())})
        path = self._path(key)
        with _memo_lock:
            _memo[path] = record
        write_atomic(path, record.model_dump_json())

    @staticmethod
    def _read_trusted(path: Path, key: dict[str, str]) -> BaselineTiming | None:
        """The record at ``path`` if this machine's harness wrote it for ``key``; a record of another
        cache version is only stale (None); anything else found there is deleted, to be measured again."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            record = BaselineTiming.model_validate_json(text)
        except ValidationError:
            return _discard(path, "is not a baseline record")
        if record.version != BASELINE_CACHE_VERSION:
            return None
        if not integrity.verify(record.signed_payload(), record.signature):
            return _discard(path, "is not signed by this machine's harness (written before records were "
                            "signed, or changed since)")
        if record.key != key:
            return _discard(path, "holds another measurement's key")
        return record


def _discard(path: Path, why: str) -> None:
    log.warning("baseline cache entry %s %s: deleted, it will be measured again", path, why)
    path.unlink(missing_ok=True)
    return None
