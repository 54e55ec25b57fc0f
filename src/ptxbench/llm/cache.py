"""A disk cache of completions keyed by ``CompletionRequest.cache_key()``, so a rerun of a sweep pays
for no answer twice. One JSON file per key; writes are atomic, so a crash never leaves half a file
and concurrent runs sharing a directory at worst both pay for the same answer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from ptxbench.llm.types import CompletionRequest
from ptxbench.records import Record
from ptxbench.records.version import RecordVersionError
from ptxbench.records.completion import Completion

CACHE_VERSION = 1


class CacheEntry(Record):
    """What is stored: the request beside its answer, so a cache file explains itself."""

    version: int = CACHE_VERSION
    key: str
    request: CompletionRequest
    completion: Completion


def default_completion_cache() -> "CompletionCache":
    """Completions live beside the build cache (``PTXBENCH_CACHE`` moves both)."""
    from ptxbench.paths import cache_root

    return CompletionCache(cache_root() / "completions")


class CompletionCache:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, request: CompletionRequest) -> Completion | None:
        """The stored completion with ``cached=True``; None on a miss or an unreadable/old entry."""
        key = request.cache_key()
        try:
            entry = CacheEntry.model_validate_json(self.path(key).read_text())
        except (OSError, ValidationError, RecordVersionError):  # another version's entry: a miss
            return None
        if entry.version != CACHE_VERSION or entry.key != key:
            return None
        return entry.completion.model_copy(update={"cached": True})

    def put(self, request: CompletionRequest, completion: Completion) -> None:
        """Store a successful completion; failures are not cached, so a rerun retries them."""
        if completion.error is not None:
            return
        key = request.cache_key()
        entry = CacheEntry(key=key, request=request, completion=completion.model_copy(update={"cached": False}))
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key[:8]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(entry.model_dump_json(indent=1))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
