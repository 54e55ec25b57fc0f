"""scripts/flashinfer_prebuild.py: every built FlashInfer module lands where FlashInfer loads an ahead-of-time
module from (``data/aot/<name>/<name>.so``), and it covers exactly the tasks with flashinfer variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import repo_script
from .evaluate import fake_flashinfer

prebuild = repo_script("scripts/flashinfer_prebuild.py")


def test_each_built_module_is_installed_under_its_own_name(tmp_path: Path) -> None:
    ops, aot = tmp_path / "cached_ops", tmp_path / "aot"
    for name in ("rope", "batch_decode_x"):
        (ops / name).mkdir(parents=True)
        (ops / name / f"{name}.so").write_bytes(name.encode())
        (ops / name / "rope.cuda.o").write_bytes(b"object")  # objects stay behind
    (ops / "unbuilt").mkdir()  # a module whose build failed: nothing to install
    assert prebuild.install_aot(ops, aot) == ["batch_decode_x", "rope"]
    assert (aot / "rope" / "rope.so").read_bytes() == b"rope"
    assert sorted(p.relative_to(aot).as_posix() for p in aot.rglob("*") if p.is_file()) == [
        "batch_decode_x/batch_decode_x.so", "rope/rope.so"]


def test_it_builds_the_tasks_flashinfer_covers() -> None:
    assert prebuild.flashinfer_tasks(None) == {"decode_gqa_paged": ["flashinfer", "flashinfer_tc"],
                                               "prefill_gqa_ragged": ["flashinfer"], "attention_fp8_fwd": ["flashinfer"],
                                               "mla_decode_paged": ["flashinfer"], "rope": ["flashinfer"]}
    assert prebuild.flashinfer_tasks(["rope", "softmax"]) == {"rope": ["flashinfer"]}


def test_each_variant_is_built_and_checked_against_the_reference(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    fake = fake_flashinfer.install(monkeypatch)
    assert prebuild.build_one("rope", device="cpu")
    assert "rope/flashinfer: built and ran" in capsys.readouterr().out
    monkeypatch.setattr(fake, "log", [])  # the stand-in now returns unwritten outputs: the check must fail
    assert not prebuild.build_one("rope", device="cpu")
    assert "Q_out FAILS" in capsys.readouterr().out
