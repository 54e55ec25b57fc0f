"""The build cache trusts an entry only while its seal holds: the record and the reused artifacts, as
this machine's harness built them. A forged result or a swapped shared object is built again."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from ptxbench import integrity
from ptxbench.arch.registry import Arch
from ptxbench.records.build import BuildResult
from ptxbench.toolchain import build_seal
from ptxbench.toolchain import compile as compile_module
from ptxbench.toolchain.build_seal import BUILD_RECORD, SEAL_FILE
from ptxbench.toolchain.compile import BuildRequest, build

SOURCE = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n'
BROKEN = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= undeclared; }\n'


@pytest.fixture(autouse=True)
def _own_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(integrity.KEY_VARIABLE, str(tmp_path / "integrity.key"))


def _new_process() -> None:
    """What another process would see: no entry sealed or checked in memory."""
    build_seal._verified.clear()


def _entry(result: BuildResult) -> Path:
    return Path(result.directory)


def _forge_ok(folder: Path) -> None:
    record = json.loads((folder / BUILD_RECORD).read_text())
    (folder / BUILD_RECORD).write_text(json.dumps({**record, "ok": True, "diagnosis": None, "log": ""}))


def _swap_shared_object(folder: Path) -> None:
    (folder / "candidate.so").write_bytes(b"\x7fELF planted by the candidate")


def _plant_cubin(folder: Path) -> None:
    (folder / "candidate.cubin").write_bytes(b"planted")


def _drop_seal(folder: Path) -> None:
    (folder / SEAL_FILE).unlink()


@pytest.mark.parametrize(("source", "tamper", "same_process"), [
    (BROKEN, _forge_ok, False),  # a failed build turned into a passing one
    (SOURCE, _swap_shared_object, False),
    (SOURCE, _swap_shared_object, True),
    (BROKEN, _plant_cubin, False),  # an artifact the static report would read
    (SOURCE, _drop_seal, False),
])
def test_a_tampered_entry_is_discarded_and_built_again(tmp_path: Path, caplog: pytest.LogCaptureFixture, source: str,
                                                      tamper: Callable[[Path], None], same_process: bool) -> None:
    request = BuildRequest(source=source, arch=Arch.SM_90A)
    first = build(request, cache_dir=tmp_path / "builds")
    assert not first.cached
    tamper(_entry(first))
    if not same_process:
        _new_process()
    with caplog.at_level(logging.WARNING, logger="ptxbench.toolchain.compile"):
        again = build(request, cache_dir=tmp_path / "builds")
    assert not again.cached and again.ok == first.ok, "built again, with the genuine outcome"
    assert str(_entry(first)) in caplog.text and "built again" in caplog.text
    if source == SOURCE:
        assert (_entry(again) / "candidate.so").read_bytes()[:4] == b"\x7fELF" and again.artifact(".cubin")
    else:
        assert again.artifact(".cubin") is None
    _new_process()
    assert build(request, cache_dir=tmp_path / "builds").cached, "the rebuilt entry is sealed again"


def test_an_intact_entry_is_reused_by_a_later_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    request = BuildRequest(source=SOURCE, arch=Arch.SM_90A)
    first = build(request, cache_dir=tmp_path)
    _new_process()
    with caplog.at_level(logging.WARNING, logger="ptxbench.toolchain.compile"):
        second = build(request, cache_dir=tmp_path)
    assert second.cached and second.key == first.key and not caplog.text


def test_a_forgery_signed_with_the_key_is_refused_by_the_process_that_sealed_the_entry(tmp_path: Path) -> None:
    """A candidate that read the key can re-seal a swapped object; this process compares with what it sealed."""
    request = BuildRequest(source=SOURCE, arch=Arch.SM_90A)
    first = build(request, cache_dir=tmp_path)
    folder = _entry(first)
    _swap_shared_object(folder)
    seal = build_seal.BuildSeal(files=build_seal.entry_digests(folder))
    (folder / SEAL_FILE).write_text(seal.model_copy(update={"signature": integrity.sign(seal.signed_payload())})
                                    .model_dump_json())
    assert not build(request, cache_dir=tmp_path).cached


def test_an_identical_build_that_finished_first_is_kept_without_alarm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Two processes build one source at once: the second finds the first's entry in place and keeps it; its
    own digests (another build.json: another duration) are not held against the first's entry."""
    request = BuildRequest(source=SOURCE, arch=Arch.SM_90A)
    real = compile_module._run_nvcc

    def racing(*args):  # type: ignore[no-untyped-def]
        result = real(*args)
        monkeypatch.setattr(compile_module, "_run_nvcc", real)
        build(request, cache_dir=tmp_path)  # the other process's build lands first
        _new_process()
        return result

    monkeypatch.setattr(compile_module, "_run_nvcc", racing)
    with caplog.at_level(logging.WARNING, logger="ptxbench.toolchain.compile"):
        result = build(request, cache_dir=tmp_path)
    assert result.cached and result.ok and not caplog.text
