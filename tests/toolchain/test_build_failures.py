"""Real failing builds, each classified and explained (nvcc 13.0 diagnostics)."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import check_file
from ptxbench.tasks.loader import get_task
from ptxbench.toolchain.compile import BuildRequest, build
from ptxbench.toolchain.diagnose import CompileFailure

from ..conftest import FIXTURES


@pytest.mark.parametrize(
    ("fixture", "failure", "first_error"),
    [
        ("cpp_syntax_error.cu", CompileFailure.CPP_ERROR, 'candidate.cu(3): error: identifier "undeclared_value"'),
        ("ptx_syntax_error.cu", CompileFailure.PTX_SYNTAX, "Not a name of any known instruction: 'frobnicate'"),
        ("ptx_operand_mismatch.cu", CompileFailure.PTX_OPERAND, "Arguments mismatch for instruction 'add'"),
        ("too_much_shared.cu", CompileFailure.RESOURCE_LIMIT, "uses too much shared data"),
        ("unresolved_device_function.cu", CompileFailure.LINK_ERROR, "Unresolved extern function"),
    ],
)
def test_failure_classes(fixture: str, failure: CompileFailure, first_error: str) -> None:
    report = check_file(FIXTURES / fixture, Arch.SM_90A)
    assert not report.build.ok and report.static is None
    assert report.build.diagnosis is not None
    assert report.build.diagnosis.failure is failure
    assert first_error in report.build.diagnosis.first_error
    assert "/tmp/ptxbench-build" not in report.build.log, "logs name the candidate, not the staging folder"


def test_wgmma_on_plain_sm90_names_the_fix() -> None:
    report = check_file(FIXTURES / "wgmma_unguarded.cu", Arch.SM_90)
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.UNSUPPORTED_ON_TARGET
    assert "wgmma.mma_async" in diagnosis.summary and "sm_90" in diagnosis.summary
    assert "arch=compute_90a,code=sm_90a" in diagnosis.summary


def test_wgmma_on_blackwell_says_to_use_tcgen05() -> None:
    report = check_file(FIXTURES / "wgmma_unguarded.cu", Arch.SM_100A)
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.UNSUPPORTED_ON_TARGET
    assert "Blackwell has no wgmma" in diagnosis.summary and "tcgen05.mma" in diagnosis.summary
    assert diagnosis.summary.count("Blackwell has no wgmma") == 1


def test_same_source_builds_for_sm90a() -> None:
    report = check_file(FIXTURES / "wgmma_unguarded.cu", Arch.SM_90A)
    assert report.build.ok, report.build.log


def test_build_timeout_is_its_own_class(tmp_path) -> None:  # type: ignore[no-untyped-def]
    request = BuildRequest(source=(FIXTURES / "gemm_mma_sync.cu").read_text(), arch=Arch.SM_90A)
    result = build(request, cache_dir=tmp_path, timeout_s=0.05)
    assert not result.ok and result.diagnosis is not None
    assert result.diagnosis.failure is CompileFailure.TIMEOUT
    assert not (tmp_path / result.key[:2] / result.key / "build.json").exists(), "timeouts are never cached"


def test_missing_entry_point_is_reported_with_the_mismatch() -> None:
    report = check_file(FIXTURES / "rmsnorm_wrong_signature.cu", Arch.SM_90A, get_task("rmsnorm"))
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.MISSING_ENTRY_POINT
    assert 'no extern "C" function \'rmsnorm\'' in diagnosis.summary
    assert "parameters differ from the header's prototype" in diagnosis.summary


def test_conflicting_c_signature_is_a_compile_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "softmax.cu"
    source.write_text('extern "C" int softmax(const float* X, float* Y, int R, int C, cudaStream_t s) { return 0; }\n')
    report = check_file(source, Arch.SM_90A, get_task("softmax"))
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.CPP_ERROR
    assert "softmax" in report.build.log


def test_builds_are_cached_by_content(tmp_path) -> None:  # type: ignore[no-untyped-def]
    request = BuildRequest(source=(FIXTURES / "gemm_mma_sync.cu").read_text(), arch=Arch.SM_90A)
    first = build(request, cache_dir=tmp_path)
    second = build(request, cache_dir=tmp_path)
    assert first.ok and not first.cached and second.cached and second.key == first.key
    other = build(request.model_copy(update={"arch": Arch.SM_100A}), cache_dir=tmp_path)
    assert other.key != first.key and not other.cached
