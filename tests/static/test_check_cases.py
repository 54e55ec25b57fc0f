"""What `check` must tell apart (issue: foundation, 'Done when')."""

from __future__ import annotations

from ptxbench.arch.registry import Arch
from ptxbench.check import check_file
from ptxbench.static.report import Stage
from ptxbench.tasks.loader import get_task

from ..conftest import FIXTURES


def _wgmma_check(report):  # type: ignore[no-untyped-def]
    assert report.build.ok, report.build.log
    return next(r for r in report.static.requirements if "wgmma.bf16" in r.requirement.any_of)


def test_feature_in_source_but_eliminated_before_ptx() -> None:
    report = check_file(FIXTURES / "wgmma_dead_code.cu", Arch.SM_90A, get_task("gemm_bf16"))
    wgmma = _wgmma_check(report)
    assert wgmma.stage is Stage.ELIMINATED_BEFORE_PTX
    assert "written in the source but absent from the PTX" in wgmma.message
    assert not report.ok


def test_guarded_wgmma_on_plain_sm90_is_empty_and_said_so() -> None:
    task = get_task("gemm_bf16")
    plain = check_file(FIXTURES / "wgmma_guarded.cu", Arch.SM_90, task)
    wgmma = _wgmma_check(plain)
    assert wgmma.stage is Stage.UNSUPPORTED_ON_TARGET
    assert "compiled away" in wgmma.message and "arch=compute_90a,code=sm_90a" in wgmma.message
    assert any("diagnostic target" in note for note in plain.static.notes)
    specific = check_file(FIXTURES / "wgmma_guarded.cu", Arch.SM_90A, task)
    assert _wgmma_check(specific).stage is Stage.IN_SASS


def test_mma_sync_only_kernel_has_hmma_but_no_hgmma() -> None:
    report = check_file(FIXTURES / "gemm_mma_sync.cu", Arch.SM_90A, get_task("gemm_bf16"))
    wgmma = _wgmma_check(report)
    assert wgmma.stage is Stage.NOT_WRITTEN
    assert "the SASS does use mma.sync instead" in wgmma.message
    (kernel,) = report.static.kernels
    assert any(m.startswith("HMMA.16816.F32.BF16") for m in kernel.sass)
    assert not any(m.startswith("HGMMA") for m in kernel.sass)
    assert kernel.features == ["mma.sync"]
    assert kernel.demangled.startswith("mma_sync_gemm(")


def test_wgmma_kernel_for_sm90a_reaches_sass_with_its_shape() -> None:
    report = check_file(FIXTURES / "wgmma_unguarded.cu", Arch.SM_90A)
    assert report.build.ok and report.static is not None
    (kernel,) = report.static.kernels
    assert kernel.sass["HGMMA.64x128x16.F32.BF16"] == 1
    assert "wgmma.bf16" in kernel.features
    found = {e.feature: e for e in report.static.features}
    assert found["wgmma.bf16"].in_source and found["wgmma.bf16"].in_ptx and found["wgmma.bf16"].in_sass
    assert report.static.ptx["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"] == 1


def test_setmaxnreg_without_register_cap_is_flagged() -> None:
    report = check_file(FIXTURES / "setmaxnreg_no_cap.cu", Arch.SM_90A)
    assert report.build.ok and report.static is not None
    assert any(w.code == "C7508" and w.meaning for w in report.static.warnings)
    evidence = next(e for e in report.static.features if e.feature == "setmaxnreg")
    assert evidence.in_ptx and not evidence.in_sass
    assert any("setmaxnreg is ignored" in note for note in report.static.notes)


def test_library_loading_is_a_policy_violation() -> None:
    report = check_file(FIXTURES / "dlopen_library.cu", Arch.SM_90A, get_task("transpose"))
    assert report.build.ok and report.static is not None
    assert any("dlopen" in v for v in report.static.policy_violations)
    assert not report.ok


def test_resources_come_from_ptxas() -> None:
    report = check_file(FIXTURES / "gemm_mma_sync.cu", Arch.SM_90A)
    (kernel,) = report.static.kernels
    assert kernel.resources.registers and kernel.resources.registers > 0
    assert kernel.resources.spill_store_bytes == 0


def test_sass_the_compiler_adds_by_itself_is_not_credited_to_the_candidate() -> None:
    """ptxas wraps TMA issue in ELECT on its own: without elect.sync in the PTX, no elect.sync credit."""
    from ptxbench.arch.registry import load_registry, probe_path

    report = check_file(probe_path(load_registry().get("tma.load")), Arch.SM_90A)
    (kernel,) = report.static.kernels
    assert kernel.sass.get("ELECT", 0) >= 1
    assert "tma.load" in kernel.features and "elect.sync" not in kernel.features


def test_a_file_that_is_not_text_is_refused_in_one_sentence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from ptxbench.check import read_candidate
    from ptxbench.errors import CandidateError

    for name, data in (("elf.cu", b"\x7fELF\x02\x01\x01\x00\xff\xfe"), ("nul.cu", b"int x;\x00\n")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CandidateError) as raised:
            read_candidate(tmp_path / name)
        assert str(raised.value) == f"{tmp_path / name}: not a text file (a candidate is one CUDA C++ source)"
    (tmp_path / "crlf.cu").write_bytes(b"int x;\r\nint y;\r\n")
    assert read_candidate(tmp_path / "crlf.cu") == "int x;\nint y;\n"
