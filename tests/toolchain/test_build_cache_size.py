"""The build cache stays within a size limit, oldest use first, and what it keeps is still sealed."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from ptxbench import integrity
from ptxbench.arch.registry import Arch
from ptxbench.toolchain import build_cache, build_seal
from ptxbench.toolchain.build_cache import CacheSizeError, clear, entries, info, parse_size, prune
from ptxbench.toolchain.build_seal import SEAL_FILE
from ptxbench.toolchain.compile import BuildRequest, build

SOURCE = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 3.0f; }\n'
DAY = 86400.0


@pytest.fixture(autouse=True)
def _own_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(integrity.KEY_VARIABLE, str(tmp_path / "integrity.key"))
    monkeypatch.delenv(build_cache.MAX_SIZE_VARIABLE, raising=False)


def _entry(root: Path, index: int, size: int, days_ago: float) -> Path:
    """A cache entry as far as its size and last use go."""
    key = f"{index:02x}" + "0" * 62
    folder = root / key[:2] / key
    folder.mkdir(parents=True)
    (folder / "candidate.so").write_bytes(b"\0" * size)
    used = time.time() - days_ago * DAY
    os.utime(folder, (used, used))
    return folder


def test_sizes_read_as_people_write_them() -> None:
    assert parse_size("500M") == 500 * 10**6 and parse_size("5 GB") == 5 * 10**9 and parse_size("2GiB") == 2 * 2**30
    assert parse_size("1.5g") == 1_500_000_000 and parse_size("0") == 0 and parse_size("off") is None
    with pytest.raises(CacheSizeError, match="'5 parsecs' is not a size"):
        parse_size("5 parsecs")


def test_prune_removes_the_longest_unused_entries_until_within_the_limit(tmp_path: Path) -> None:
    root = tmp_path / "builds"
    old, middle, new = (_entry(root, i, 1000, days) for i, days in ((1, 30), (2, 20), (3, 10)))
    (root / "01" / ".0100000000-staging").mkdir()  # a build in progress is not an entry
    assert [e.path for e in entries(root)] == [old, middle, new]
    assert info(root).entries == 3 and info(root).bytes == 3000 and info(root).unfinished == 1
    build_cache.mark_used(old)  # reused now: the newest use
    result = prune(2000, root)
    assert (result.removed, result.freed_bytes, result.entries, result.bytes) == (1, 1000, 2, 2000)
    assert not middle.exists() and old.exists() and new.exists()
    assert prune(0, root, spare_recent_s=DAY).removed == 1 and old.exists(), "used within the spared time: kept"
    assert not any(p.name.startswith(".removed-") for p in (root / "03").iterdir()), "nothing left aside"


def test_clear_removes_entries_and_stale_leftovers_but_not_a_build_in_progress(tmp_path: Path) -> None:
    root = tmp_path / "builds"
    for index in range(3):
        _entry(root, index, 10, days_ago=index)
    stale, running = root / "00" / ".00aa-crashed", root / "01" / ".01bb-running"
    for folder, days in ((stale, 2), (running, 0)):
        folder.mkdir()
        used = time.time() - days * DAY
        os.utime(folder, (used, used))
    unrelated = root / "not-a-shard" / "keep"
    unrelated.mkdir(parents=True)
    result = clear(root)
    assert (result.removed, result.freed_bytes, result.entries) == (3, 30, 0)
    assert not stale.exists() and running.exists() and unrelated.exists()


def test_a_build_keeps_only_what_is_read_back_and_the_limit_spares_what_is_in_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "builds"
    stale = [_entry(root, i, 400_000, days_ago=10 + i) for i in range(1, 4)]
    monkeypatch.setenv(build_cache.MAX_SIZE_VARIABLE, "500k")
    request = BuildRequest(source=SOURCE, arch=Arch.SM_90A)
    first = build(request, cache_dir=root)
    entry = Path(first.directory)
    assert first.ok and not first.cached
    assert sorted(p.name for p in entry.iterdir()) == sorted(["build.json", SEAL_FILE, "candidate.cu", "candidate.so",
                                                             "candidate.ptx", "candidate.cubin"]), \
        "nvcc's intermediates are not kept"
    left = [e.path for e in entries(root)]
    assert left == [stale[0], entry], "the oldest entries went until the cache fits; the new one stays"
    build_seal._verified.clear()  # as another process sees it: only the seal vouches for the entry
    with caplog.at_level(logging.WARNING):
        again = build(request, cache_dir=root)
    assert again.cached and again.directory == first.directory and not caplog.records, "its seal still holds"
    assert prune(0, root).removed == 2
    rebuilt = build(request, cache_dir=root)
    assert rebuilt.ok and not rebuilt.cached and not caplog.records
