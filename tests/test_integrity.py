"""The machine's signing key, and the vendor-baseline cache that trusts only records signed with it."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from ptxbench import integrity
from ptxbench.evaluate.baselines import cache as baseline_cache
from ptxbench.evaluate.baselines.cache import BaselineCache

DEVICE = {"name": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0", "cudnn": "91900"}


@pytest.fixture(autouse=True)
def _own_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "integrity.key"
    monkeypatch.setenv(integrity.KEY_VARIABLE, str(path))
    return path


def test_the_key_is_made_once_private_and_signs(_own_key: Path) -> None:
    tag = integrity.sign(b"payload")
    assert stat.S_IMODE(_own_key.stat().st_mode) == 0o600
    assert integrity.verify(b"payload", tag) and not integrity.verify(b"payload!", tag)
    assert not integrity.verify(b"payload", "0" * 64) and not integrity.verify(b"payload", "\u00e9" * 64)
    assert integrity.verify(b"payload", tag), "the key is not made again"
    assert not list(_own_key.parent.glob(".*")), "no temporary file is left"


def test_an_existing_key_is_used_and_the_default_lives_beside_the_caches(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    monkeypatch.delenv(integrity.KEY_VARIABLE)
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    assert integrity.key_path() == tmp_path / "cache" / integrity.KEY_FILE
    (tmp_path / "cache").mkdir()
    integrity.key_path().write_text("ab" * 32 + "\n")
    assert integrity.signing_key() == bytes.fromhex("ab" * 32)


def test_a_malformed_key_is_replaced_privately(_own_key: Path, caplog: pytest.LogCaptureFixture) -> None:
    _own_key.parent.mkdir(parents=True)
    _own_key.write_text("not a key")
    with caplog.at_level(logging.WARNING, logger="ptxbench.integrity"):
        key = integrity.signing_key()
    assert len(key) == 32 and bytes.fromhex(_own_key.read_text().strip()) == key
    assert stat.S_IMODE(_own_key.stat().st_mode) == 0o600 and "malformed" in caplog.text


def _new_process() -> None:
    """What another process would see: nothing measured or verified in memory."""
    baseline_cache._memo.clear()


def _stored(cache: BaselineCache, key: dict[str, str]) -> Path:
    return cache._path(key)


@pytest.mark.parametrize("tamper", ["faster", "unsigned", "garbage", "moved"])
def test_a_tampered_baseline_record_is_deleted_and_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           tamper: str) -> None:
    cache = BaselineCache(tmp_path)
    key = cache.key("taskhash", "square-4096", "cublas", DEVICE)
    cache.put(key, 0.25, 0.002)
    path = _stored(cache, key)
    record = json.loads(path.read_text())
    other = cache.key("taskhash", "square-8192", "cublas", DEVICE)
    if tamper == "faster":  # the candidate's gain: its baseline ten times slower
        path.write_text(json.dumps({**record, "median_ms": 2.5}))
    elif tamper == "unsigned":
        path.write_text(json.dumps({k: v for k, v in record.items() if k != "signature"}))
    elif tamper == "garbage":
        path.write_text("{")
    else:  # a genuine record of another measurement copied into this one's place
        cache.put(other, 9.0, 0.1)
        path.write_text(_stored(cache, other).read_text())
    _new_process()
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.baselines.cache"):
        assert cache.get(key) is None
    assert not path.exists() and str(path) in caplog.text
    if tamper == "moved":
        assert cache.get(other).median_ms == 9.0, "the original is still trusted where it belongs"


def test_a_signed_record_is_trusted_by_a_later_process(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path)
    key = cache.key("taskhash", "square-4096", "cublas", DEVICE)
    cache.put(key, 0.25, 0.002)
    _new_process()
    assert BaselineCache(tmp_path).get(key).median_ms == 0.25


def test_a_value_measured_in_this_process_is_not_read_again(tmp_path: Path) -> None:
    """Rewritten during the run, even with a valid signature (a candidate that read the key), the file
    changes nothing in this process."""
    cache = BaselineCache(tmp_path)
    key = cache.key("taskhash", "square-4096", "cublas", DEVICE)
    cache.put(key, 0.25, 0.002)
    path = _stored(cache, key)
    forged = baseline_cache.BaselineTiming(key=key, median_ms=2.5, iqr_ms=0.0)
    path.write_text(forged.model_copy(update={"signature": integrity.sign(forged.signed_payload())}).model_dump_json())
    assert cache.get(key).median_ms == 0.25
    assert BaselineCache(tmp_path).get(key).median_ms == 0.25, "the memory is the process's, not the object's"
    _new_process()
    assert cache.get(key).median_ms == 2.5, "a forgery with the key is trusted by a later process (stated risk)"


def test_a_value_verified_in_this_process_is_not_read_again(tmp_path: Path) -> None:
    cache = BaselineCache(tmp_path)
    key = cache.key("taskhash", "square-4096", "cublas", DEVICE)
    cache.put(key, 0.25, 0.002)
    _new_process()
    assert cache.get(key).median_ms == 0.25
    _stored(cache, key).write_text("{")
    assert cache.get(key).median_ms == 0.25
