"""The build cache's seal: what proves that a cache entry is the one this machine's harness wrote.

Candidate code can write the cache (same user, no read-only mount). Each entry holds a seal: the SHA-256 of
its record and of every artifact that is reused, signed with the machine's key (``ptxbench.integrity``). An
entry whose seal does not hold is discarded and built again (``compile``). What this process sealed or
verified is remembered, so within the process an entry is checked against those digests, not only against a
signature that a candidate which read the key could forge; an entry the cache removes (``build_cache``) is
forgotten, so a build of it later is checked afresh.

Both ``compile`` (which seals and checks entries) and ``build_cache`` (which removes them) use this module, and
it uses neither. ``BuildSeal`` is the cache's own envelope, read and written here only, so it stays beside
the code that signs it, as ``llm.cache`` and ``evaluate.baselines.cache`` keep theirs; the record it vouches
for, ``BuildResult``, is in ``records.build``.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from pydantic import BaseModel

from ptxbench._io import write_atomic
from ptxbench.integrity import file_sha256, sign, verify
from ptxbench.records.build import BuildResult

BUILD_RECORD = "build.json"
SEAL_FILE = "seal.json"
SEAL_VERSION = 1
REUSED_ARTIFACTS = tuple(f"candidate{suffix}" for suffix in (".so", ".ptx", ".cubin"))

_verified: dict[str, dict[str, str]] = {}  # cache entry folder -> the digests this process sealed or checked
_verified_lock = threading.Lock()


class BuildSeal(BaseModel):
    """The SHA-256 of ``build.json`` and of each reused artifact present, and the machine's tag of them."""

    version: int = SEAL_VERSION
    files: dict[str, str]
    signature: str = ""

    def signed_payload(self) -> bytes:
        return self.model_dump_json(exclude={"signature"}).encode()


def entry_digests(folder: Path) -> dict[str, str]:
    names = (BUILD_RECORD, *REUSED_ARTIFACTS)
    return {name: file_sha256(folder / name) for name in names if (folder / name).is_file()}


def seal(staging: Path) -> dict[str, str]:
    """Seal the entry being staged; returns the digests sealed."""
    sealed = BuildSeal(files=entry_digests(staging))
    sealed = sealed.model_copy(update={"signature": sign(sealed.signed_payload())})
    write_atomic(staging / SEAL_FILE, sealed.model_dump_json(indent=1))
    return sealed.files


def remember(directory: Path, digests: dict[str, str]) -> None:
    """``directory`` holds what this process sealed or checked: ``digests``."""
    with _verified_lock:
        _verified[str(directory)] = digests


def forget(directory: Path) -> None:
    """An entry removed from the cache (``build_cache``): a build of it later is checked afresh."""
    with _verified_lock:
        _verified.pop(str(directory), None)


def checked_record(directory: Path, key: str) -> tuple[BuildResult | None, str]:
    """The entry's record when its files are the ones sealed for ``key`` here, else why they are not.
    The record is parsed from the very bytes that were hashed, so it cannot be swapped in between."""
    if any((directory / name).is_symlink() for name in (BUILD_RECORD, SEAL_FILE, *REUSED_ARTIFACTS)):
        return None, "holds a link where a file belongs"
    try:
        record = (directory / BUILD_RECORD).read_bytes()
    except OSError:
        return None, "has an unreadable record"
    digests = {**entry_digests(directory), BUILD_RECORD: hashlib.sha256(record).hexdigest()}
    with _verified_lock:
        remembered = _verified.get(str(directory))
    if remembered is not None:
        if digests != remembered:
            return None, "changed since this process sealed or checked it"
    else:
        try:
            found = BuildSeal.model_validate_json((directory / SEAL_FILE).read_text())
        except (OSError, ValueError):
            return None, "has no readable seal (written before entries were sealed, or changed)"
        if found.version != SEAL_VERSION or not verify(found.signed_payload(), found.signature):
            return None, "has a seal not signed by this machine's harness"
        if found.files != digests:
            return None, "holds files other than the ones sealed"
    try:
        result = BuildResult.model_validate_json(record)
    except ValueError:
        return None, "has an unreadable record"
    if result.key != key or Path(result.directory) != directory:
        return None, "has a record of another build"
    remember(directory, digests)
    return result, ""
