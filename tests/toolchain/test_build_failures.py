"""Real failing builds, each classified and explained (nvcc 13.0 diagnostics)."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import check_file
from ptxbench.records.build import CompileFailure
from ptxbench.tasks.loader import get_task
from ptxbench.toolchain.compile import BuildRequest, build

from ..conftest import FIXTURES


@pytest.mark.parametrize(
    ("fixture", "failure", "first_error"),
    [
        ("cpp_syntax_error.cu", CompileFailure.CPP_ERROR, 'cpp_syntax_error.cu(3): error: identifier "undeclared_value"'),
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
    assert "candidate.cu" not in report.build.log + report.build.diagnosis.first_error, "the user's file is named"


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
    assert "found the C++ function rmsnorm(" in diagnosis.summary and "_Z7rmsnorm" not in diagnosis.summary
    assert "parameters differ from the header's prototype" in diagnosis.summary


def test_extern_c_entry_point_under_another_name_is_a_wrong_name() -> None:
    report = check_file(FIXTURES / "softmax_misnamed.cu", Arch.SM_90A, get_task("softmax"))
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.MISSING_ENTRY_POINT
    assert diagnosis.summary == ("no entry point 'softmax': found extern \"C\" 'my_softmax' instead; rename it to "
                                 "'softmax' (declared in ptxbench_task.h)")


@pytest.mark.parametrize(
    ("symbols", "says"),
    [
        ({"_Z10my_softmaxPKfPfll"}, "found the C++ function my_softmax(float const*, float*, long, long) instead; "
                                    "rename it to 'softmax'"),
        ({"_ZN2ns7softmaxEPKfPfll"}, "found ns::softmax(float const*, float*, long, long) inside a namespace; "
                                     "define the entry point at global scope"),
        ({"launch_all", "helper"}, "no entry point 'softmax' (the extern \"C\" functions exported are 'helper', "
                                   "'launch_all')"),
        ({"_Z6launchv"}, "no extern \"C\" function 'softmax' is defined"),  # an unrelated C++ helper is not named
        (set(), "no extern \"C\" function 'softmax' is defined"),
    ],
)
def test_missing_entry_point_names_what_was_exported(symbols: set[str], says: str) -> None:
    from ptxbench.toolchain.entry_point import missing_entry_point

    diagnosis = missing_entry_point("softmax", symbols)
    assert diagnosis.failure is CompileFailure.MISSING_ENTRY_POINT and says in diagnosis.summary
    assert "mangled" not in diagnosis.summary


def test_an_error_after_the_wrapper_include_is_at_the_users_line_in_the_users_file() -> None:
    path = FIXTURES / "error_after_wrappers.cu"
    report = check_file(path, Arch.SM_90A)
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.CPP_ERROR
    assert diagnosis.first_error.startswith(f'{path}(10): error: identifier "undeclared_after_header"')
    assert "candidate.cu" not in report.build.log


def test_the_same_build_names_each_file_that_has_its_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The build cache is shared by content: a second file with the same text gets its own name back."""
    copy = tmp_path / "mine.cu"
    copy.write_text((FIXTURES / "cpp_syntax_error.cu").read_text())
    first, second = check_file(FIXTURES / "cpp_syntax_error.cu", Arch.SM_90A), check_file(copy, Arch.SM_90A)
    assert second.build.cached and second.build.diagnosis is not None
    assert second.build.diagnosis.first_error.startswith(f"{copy}(3): error")
    assert str(FIXTURES) not in second.build.log and str(copy) not in first.build.log


def test_wrapper_wgmma_on_plain_sm90_is_the_target_and_names_the_fix() -> None:
    report = check_file(FIXTURES / "wgmma_wrappers.cu", Arch.SM_90)
    diagnosis = report.build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.UNSUPPORTED_ON_TARGET
    assert diagnosis.summary.startswith("ptx::wgmma_fence, ptx::wgmma_commit and 1 more not available on sm_90 "
                                        "(ptx_wrappers.cuh defines wgmma for sm_90a only).")
    assert "--arch sm_90a" in diagnosis.summary
    assert diagnosis.first_error.endswith('wgmma_wrappers.cu(8): error: namespace "ptx" has no member "wgmma_fence"')
    assert check_file(FIXTURES / "wgmma_wrappers.cu", Arch.SM_90A).build.ok


def test_wrapper_wgmma_on_blackwell_says_to_use_tcgen05() -> None:
    diagnosis = check_file(FIXTURES / "wgmma_wrappers.cu", Arch.SM_100A).build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.UNSUPPORTED_ON_TARGET
    assert "Blackwell has no wgmma" in diagnosis.summary


def test_an_error_naming_sm90a_on_plain_sm90_gets_the_hint() -> None:
    diagnosis = check_file(FIXTURES / "needs_sm90a.cu", Arch.SM_90).build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.UNSUPPORTED_ON_TARGET
    assert "needs sm_90a" in diagnosis.first_error and "ptxbench check --arch sm_90a" in diagnosis.summary


def test_a_plain_cpp_error_on_sm90_stays_a_cpp_error() -> None:
    diagnosis = check_file(FIXTURES / "error_after_wrappers.cu", Arch.SM_90).build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.CPP_ERROR
    assert "sm_90a" not in diagnosis.summary


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


def test_a_one_line_verdict_carries_the_first_error_where_the_summary_is_generic_advice() -> None:
    from ptxbench.records.build import Diagnosis

    cpp = Diagnosis(failure=CompileFailure.CPP_ERROR, summary="the C++/CUDA source does not compile.",
                    first_error='k.cu(3): error: identifier "x" is undefined')
    assert cpp.message == 'the C++/CUDA source does not compile. First error: k.cu(3): error: identifier "x" is undefined'
    named = Diagnosis(failure=CompileFailure.MISSING_ENTRY_POINT, summary="no entry point 'softmax': ...",
                      first_error="missing entry point softmax")
    assert named.message == named.summary


def test_a_ptxas_error_names_the_users_source_line() -> None:
    path = FIXTURES / "ptx_syntax_error.cu"
    diagnosis = check_file(path, Arch.SM_90A).build.diagnosis
    assert diagnosis is not None and diagnosis.failure is CompileFailure.PTX_SYNTAX
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "frobnicate" in text)
    assert diagnosis.first_error.endswith(f"instruction: 'frobnicate' (source: {path}({line}))")


def test_a_ptxas_error_in_an_inlined_wrapper_names_the_call_site() -> None:
    from ptxbench.toolchain.diagnose import _with_source_line

    ptx = ("\t.loc\t1 7 0\n\t.loc\t2 402 72, function_name $L__info_string0, inlined_at 1 8 5\n"
           "\t// begin inline asm\n\twgmma.fence.sync.aligned;\n"
           '\t.file\t1 "/build/x/candidate.cu"\n\t.file\t2 "/build/x/ptx_wrappers.cuh"\n')
    error = "ptxas candidate.ptx, line 4; error   : Instruction 'wgmma.fence' not supported on .target 'sm_90'"
    assert _with_source_line(error, ptx) == f"{error} (source: ptx_wrappers.cuh(402), inlined at candidate.cu(8))"
    assert _with_source_line(error, None) == error and _with_source_line("no ptx line", ptx) == "no ptx line"
