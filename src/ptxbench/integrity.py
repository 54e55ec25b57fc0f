"""This machine's harness signs what it caches, so a cache entry written by anyone else is noticed.

Candidate code runs as the harness's user. Whatever it can write, it can change: the vendor-baseline
times and the builds cached under the ptxbench cache root, and the run directory. The harness answers
with detection, discard and recompute, in three layers:

1. Signatures (this module): an HMAC-SHA256 key, made once per machine (``integrity.key`` under the
   cache root, mode 0600, or the file ``PTXBENCH_INTEGRITY_KEY`` names), signs every cache record; a
   record whose tag does not verify is deleted and measured or built again. Each harness process reads
   the key once and keeps it in memory, so replacing the key file later does not change what it accepts.
2. Memory: a process keeps what it measured or verified itself (``BaselineCache``'s memo, the build
   cache's memo of entries it sealed or checked) and the run driver keeps every file it wrote into the
   run directory; at the end of the run changed files are rewritten and files it did not write are
   moved aside (``records.rundir.RunLedger``).
3. The operating system (``evaluate.isolation``, where the machine permits): read-only bind mounts of
   the caches and the run directory in the candidate's private mount namespace.

Which guarantee holds in which mode:

- With the mount namespace (``evaluate.isolation``; root on the GPU machine): the caches and the run
  directory are read-only to candidate code and the key file is covered by an empty one, so candidate
  code can neither store a forgery nor sign one; the signatures then hold across processes and runs.
  Residual: the isolation module's own (a candidate that reaches the harness's files through
  ``/proc/<harness pid>/root`` sees the real key and writable caches), against which layer 2 holds.
- Without it (a normal user, e.g. on a laptop): candidate code CAN read the key file and so CAN forge
  a valid signature. The signatures stop careless or blind tampering (rewriting a number, copying an
  entry, swapping a shared object), not a candidate that reads the key. What holds against that one is
  layer 2 alone: within the running process, values it measured or verified are not read from disk
  again, and the run's own files are checked and restored before its summary. Entries first read in a
  later process or run, and results of an earlier run that is resumed, are trusted on their signature
  or as they are.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from ptxbench.paths import cache_root

KEY_VARIABLE = "PTXBENCH_INTEGRITY_KEY"
KEY_FILE = "integrity.key"
_KEY_BYTES = 32

log = logging.getLogger(__name__)


def key_path() -> Path:
    """Where this machine's key lives: ``PTXBENCH_INTEGRITY_KEY``, else beside the caches it signs."""
    named = os.environ.get(KEY_VARIABLE)
    return Path(named) if named else cache_root() / KEY_FILE


def signing_key() -> bytes:
    """The key, read (or made) once per process and per path, then kept in memory."""
    return _key_at(str(key_path()))


@functools.lru_cache(maxsize=None)
def _key_at(path: str) -> bytes:
    location = Path(path)
    key = _read_key(location)
    if key is None:
        _create_key(location)
        key = _read_key(location)
    if key is None:  # the file exists but is not a key: replaced by a fresh one; what it signed is recomputed
        log.warning("integrity key %s is malformed; a new key replaces it and every entry it signed is "
                    "measured or built again", location)
        _create_key(location, replace=True)
        key = _read_key(location)
    if key is None:
        raise OSError(f"cannot make the integrity key {location}")
    return key


def _read_key(path: Path) -> bytes | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        return None
    return key if len(key) == _KEY_BYTES else None


def _create_key(path: Path, *, replace: bool = False) -> None:
    """Write a fresh key to a private temporary file (0600 from its creation), then link it into place:
    of two processes creating it at once, both end up with the first one's key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as stream:
            stream.write(secrets.token_bytes(_KEY_BYTES).hex() + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        if replace:
            os.replace(temporary, path)
            return
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


def sign(payload: bytes) -> str:
    """The hex HMAC-SHA256 tag of ``payload`` under this machine's key."""
    return hmac.new(signing_key(), payload, hashlib.sha256).hexdigest()


def verify(payload: bytes, tag: str) -> bool:
    """Whether ``tag`` is ``payload``'s tag (compared in constant time; a non-ASCII tag is simply wrong)."""
    return isinstance(tag, str) and tag.isascii() and hmac.compare_digest(sign(payload), tag)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
