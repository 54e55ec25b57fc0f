"""Which untimed stages may share a GPU's memory: admission by estimated need, across lanes and runs.

Lanes and runs on one GPU run their untimed stages side by side (``gpu_lock.GpuLock.shared``); a fixed number
of them can take more memory than the card has (two moe_grouped_gemm trials beside two others on an 80 GB
card), and each then fails with an out-of-memory error it did not cause. Before its trials a lane reserves its
estimated need (``memory_need``) in a ledger beside the GPU's lock: when that need beside what the others have
reserved fits the card, it runs shared as before; when it does not, the lane runs them alone (the lock held
exclusively) instead of waiting for a share that may never come. A reservation names its process, so one a
killed process left behind is dropped by the next reader.

The ledger is advice, never evidence: it lies beside the lock, in scratch space a candidate's process can write.
A candidate that forges or deletes reservations can only make other evaluations run their trials alone (slower)
or side by side (and those that then run out of memory are run again alone, as without a ledger); no verdict
rests on it.

Standard library only, like the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ptxbench.evaluate.isolation.gpu_lock import default_lock_folder
from ptxbench.evaluate.isolation.processes import alive


class MemoryLedger:
    """The reservations of one GPU's memory (named like its lock), shared by every process on this machine."""

    def __init__(self, key: str, usable_bytes: int, folder: Path | None = None) -> None:
        """``usable_bytes``: what the card leaves to evaluations (its memory less ``memory_need.HEADROOM_BYTES``)."""
        folder = folder or default_lock_folder()
        folder.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^A-Za-z0-9_.-]", "_", key) or "gpu"
        self._path = folder / f"{slug}.memory.json"
        self._guard = folder / f"{slug}.memory.lock"
        self.usable_bytes = usable_bytes

    @contextmanager
    def _edit(self) -> Iterator[dict[str, dict[str, int]]]:
        """The live reservations, under the ledger's own lock; written back when the block ends."""
        descriptor = os.open(self._guard, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                entries = json.loads(self._path.read_text())
                if not isinstance(entries, dict):
                    entries = {}
            except (OSError, ValueError):
                entries = {}  # none yet, or torn by a crash: reservations are only ever advice
            live = {token: entry for token, entry in entries.items()
                    if isinstance(entry, dict) and isinstance(entry.get("pid"), int)
                    and isinstance(entry.get("bytes"), int) and alive(entry["pid"])}
            yield live
            temporary = self._path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(live))
            os.replace(temporary, self._path)
        finally:
            os.close(descriptor)

    def reserved_bytes(self) -> int:
        """What the live reservations hold now, all processes together."""
        with self._edit() as live:
            return sum(entry["bytes"] for entry in live.values())

    @contextmanager
    def admitted(self, need_bytes: int) -> Iterator[bool]:
        """True (and ``need_bytes`` reserved for the block) when the need fits beside the others' reservations;
        False (nothing reserved) when the caller must run alone. A need of zero is always admitted."""
        token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        with self._edit() as live:
            others = sum(entry["bytes"] for entry in live.values())
            fits = need_bytes <= 0 or others + need_bytes <= self.usable_bytes
            if fits:
                live[token] = {"pid": os.getpid(), "bytes": int(need_bytes)}
        try:
            yield fits
        finally:
            if fits:
                with self._edit() as live:
                    live.pop(token, None)
