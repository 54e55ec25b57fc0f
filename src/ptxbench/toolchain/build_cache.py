"""The build cache's size: what it holds, and removing entries oldest use first (``ptxbench cache``).

Entries live at ``<cache>/<key[:2]>/<key>/`` (``compile.build``). An entry's last use is its folder's
modification time: set when the build puts it in place and again whenever a build reuses it. After each new
entry the cache is cut back to its size limit (``PTXBENCH_CACHE_MAX_SIZE``, default 5 GB; ``off`` for none),
sparing entries used in the last ``RECENT_S`` seconds, which a running evaluation may still load (its profiled
program and sanitizer run load the shared object again, well after the build was reused). An entry is
removed by renaming it out of place first, so a build never reads half of one: it finds it whole or not at all
(and builds again). Seals are untouched: what stays is exactly what was sealed (``build_seal``).
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, Field

from ptxbench.errors import PtxbenchError
from ptxbench.paths import default_cache_dir
from ptxbench.toolchain.build_seal import forget

MAX_SIZE_VARIABLE = "PTXBENCH_CACHE_MAX_SIZE"
DEFAULT_MAX_BYTES = 5 * 10**9
RECENT_S = 7200.0
STALE_BUILD_S = 600.0  # a build's staging folder older than this was left by a build that ended (they time out)
CHECK_EVERY_S = 10.0  # a burst of builds (eval's prebuild) measures the cache once per this, not once per build
_REMOVED_PREFIX = ".removed-"
_SHARD = re.compile(r"[0-9a-f]{2}")
_KEY = re.compile(r"[0-9a-f]{64}")
_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": 10**6, "MB": 10**6, "G": 10**9, "GB": 10**9, "T": 10**12,
          "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


class CacheSizeError(PtxbenchError):
    """A size limit that cannot be read."""


class CacheEntry(NamedTuple):
    path: Path
    bytes: int
    used: float
    """Last use (seconds since the epoch): the folder's modification time."""


class CacheInfo(BaseModel):
    location: str
    entries: int
    bytes: int
    max_bytes: int | None = Field(description="The size limit applied after builds; None: no limit")
    oldest_use: str | None = None
    newest_use: str | None = None
    unfinished: int = Field(0, description="Folders of builds in progress or interrupted (removed by clear)")


class Removed(BaseModel):
    removed: int
    freed_bytes: int
    entries: int = Field(description="Entries left")
    bytes: int = Field(description="Bytes left")


def cache_dir() -> Path:
    return default_cache_dir()


def parse_size(text: str) -> int | None:
    """'5G', '500 MB', '1.5GiB', '0' -> bytes; 'off' or 'none' -> None (no limit). Units are powers of 1000,
    the ``i`` forms of 1024."""
    cleaned = text.strip().upper().replace(" ", "")
    if cleaned in ("OFF", "NONE", "UNLIMITED"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]I?B?|B)?", cleaned)
    unit = (match.group(2) or "") if match else ""
    if match is None or unit not in _UNITS:
        raise CacheSizeError(f"{text!r} is not a size: give a number with an optional unit (500M, 5G, 2GiB) or 'off'")
    return int(float(match.group(1)) * _UNITS[unit])


def max_bytes() -> int | None:
    """The limit applied after builds: ``PTXBENCH_CACHE_MAX_SIZE``, else ``DEFAULT_MAX_BYTES``."""
    setting = os.environ.get(MAX_SIZE_VARIABLE)
    if setting is None or not setting.strip():
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(setting)
    except CacheSizeError as exc:
        raise CacheSizeError(f"{MAX_SIZE_VARIABLE}: {exc}") from None


def entries(root: Path | None = None) -> list[CacheEntry]:
    """Every complete entry, oldest use first."""
    found = []
    for shard in _shards(root or cache_dir()):
        for folder in _folders(shard):
            if _KEY.fullmatch(folder.name) and folder.name.startswith(shard.name):
                try:
                    found.append(CacheEntry(folder, _size(folder), folder.stat().st_mtime))
                except FileNotFoundError:  # removed meanwhile by another process
                    continue
    return sorted(found, key=lambda entry: (entry.used, entry.path.name))


def info(root: Path | None = None) -> CacheInfo:
    root = root or cache_dir()
    held = entries(root)
    unfinished = sum(1 for shard in _shards(root) for folder in _folders(shard) if folder.name.startswith("."))
    return CacheInfo(location=str(root), entries=len(held), bytes=sum(e.bytes for e in held), max_bytes=max_bytes(),
                     oldest_use=_when(held[0].used) if held else None, newest_use=_when(held[-1].used) if held else None,
                     unfinished=unfinished)


def prune(limit: int, root: Path | None = None, *, spare_recent_s: float = 0.0) -> Removed:
    """Remove entries, oldest use first, until the cache holds at most ``limit`` bytes; entries used within the
    last ``spare_recent_s`` seconds stay even if the cache is then still larger."""
    held = entries(root)
    total = sum(entry.bytes for entry in held)
    recent = time.time() - spare_recent_s
    removed = freed = 0
    for entry in held:
        if total <= limit:
            break
        if spare_recent_s and entry.used >= recent:
            break  # sorted by use: every later entry is as recent
        if _remove(entry.path):
            removed, freed, total = removed + 1, freed + entry.bytes, total - entry.bytes
    return Removed(removed=removed, freed_bytes=freed, entries=len(held) - removed, bytes=total)


def clear(root: Path | None = None) -> Removed:
    """Remove every entry, and what interrupted builds left behind (a build still running keeps its folder)."""
    root = root or cache_dir()
    held = entries(root)
    removed = sum(_remove(entry.path) for entry in held)
    stale = time.time() - STALE_BUILD_S
    for shard in _shards(root):
        for folder in _folders(shard):  # staging folders and removals another process left half done
            if folder.name.startswith(".") and _modified(folder) < stale:
                shutil.rmtree(folder, ignore_errors=True)
    left = entries(root)
    return Removed(removed=removed, freed_bytes=sum(e.bytes for e in held) - sum(e.bytes for e in left),
                   entries=len(left), bytes=sum(e.bytes for e in left))


def mark_used(entry: Path) -> None:
    """Record a reuse (the folder's modification time), so pruning removes what was used longest ago."""
    try:
        os.utime(entry)
    except OSError:  # a read-only cache (a candidate's mount namespace): nothing to record
        pass


_checked: dict[str, float] = {}  # cache root -> when this process last measured it after a build
_checked_lock = threading.Lock()


def after_build(root: Path | None = None) -> Removed | None:
    """The limit applied after a new entry: None when there is no limit, the cache is within it, or this
    process measured it less than ``CHECK_EVERY_S`` ago."""
    limit = max_bytes()
    if limit is None:
        return None
    root = root or cache_dir()
    with _checked_lock:
        now, last = time.monotonic(), _checked.get(str(root))
        if last is not None and now - last < CHECK_EVERY_S:
            return None
        _checked[str(root)] = now
    result = prune(limit, root, spare_recent_s=RECENT_S)
    return result if result.removed else None


def human(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:,.1f} TB"


def _remove(entry: Path) -> bool:
    """Rename the entry out of place, then delete it: a reader finds it whole or not at all; this process's
    memory of its seal goes with it."""
    aside = entry.with_name(f"{_REMOVED_PREFIX}{entry.name}-{secrets.token_hex(4)}")
    try:
        os.rename(entry, aside)
    except FileNotFoundError:  # another process removed it first
        return False
    forget(entry)
    shutil.rmtree(aside, ignore_errors=True)
    return True


def _shards(root: Path) -> list[Path]:
    return [folder for folder in _folders(root) if _SHARD.fullmatch(folder.name)]


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def _folders(path: Path) -> list[Path]:
    try:
        return [Path(item.path) for item in os.scandir(path) if item.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _size(folder: Path) -> int:
    total = 0
    for item in os.scandir(folder):
        if item.is_file(follow_symlinks=False):
            total += item.stat(follow_symlinks=False).st_size
    return total


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds).isoformat(sep=" ", timespec="minutes")
