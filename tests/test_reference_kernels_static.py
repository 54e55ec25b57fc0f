"""The expert reference kernels (kernels/reference/sm_90a, the gold set `ptxbench eval --gold` runs) build
for their target with every requirement traced to the SASS, and without spills, a stack frame or local
memory in the hot kernels: a regression in any of them would show here before a GPU run. Their
correctness and speed are measured on the H200 (benchmarks/reference_kernels.py, tests/gpu)."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import check_files
from ptxbench.kernels import reference_folder
from ptxbench.tasks.loader import get_task


REFERENCE = reference_folder("sm_90a")
FILES = sorted(REFERENCE.glob("*.cu"))


def test_attention_gemm_and_memory_bound_tasks_have_references() -> None:
    assert {p.stem for p in FILES} >= {"add_rmsnorm", "attention_bwd", "attention_fp8_fwd", "attention_fwd",
                                       "decode_gqa_paged", "gemm_bf16", "gemm_fp8", "gemm_fp8_blockscale",
                                       "mla_decode_paged", "moe_grouped_gemm",
                                       "prefill_gqa_ragged", "rmsnorm", "rope", "silu_mul", "softmax", "transpose"}


@pytest.fixture(scope="module")
def reports():  # type: ignore[no-untyped-def]
    return {r.task: r for r in check_files([(f, get_task(f.stem)) for f in FILES], Arch.SM_90A)}


@pytest.mark.parametrize("name", [f.stem for f in FILES])
def test_reference_builds_with_every_requirement_in_the_sass(reports, name: str) -> None:  # type: ignore[no-untyped-def]
    report = reports[name]
    assert report.build.ok, report.build.diagnosis
    assert report.static is not None and not report.static.policy_violations
    assert report.static.requirements and report.static.requirements_in_sass, [
        (r.requirement.label, r.stage.value) for r in report.static.requirements]
    assert "#pragma once in main file" not in report.build.log  # the inlined wrapper header stays quiet
    for kernel in report.static.kernels:
        resources = kernel.resources
        assert resources.spill_store_bytes == 0 and resources.stack_frame_bytes == 0, kernel.demangled
        assert not any(op.startswith(("LDL", "STL")) for op in kernel.sass), kernel.demangled
