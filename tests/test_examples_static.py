"""The bundled examples: one per task, each builds for both targets against its generated header.

They are plain CUDA by design, so the static report must show the matrix features as absent; what
they prove is that the whole static path runs on real candidates. Their correctness is checked on a
GPU by tests/gpu/test_examples_gpu.py.
"""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch
from ptxbench.check import check_files
from ptxbench.static.report import Stage
from ptxbench.tasks.loader import bundled_suite, get_task

from .conftest import EXAMPLES


def test_every_task_has_an_example() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.cu")) == sorted(t.id for t in bundled_suite())


@pytest.mark.slow
@pytest.mark.parametrize("arch", BENCHMARK_ARCHS, ids=lambda a: a.value)
def test_examples_build_and_report(arch: Arch) -> None:
    items = [(EXAMPLES / f"{t.id}.cu", t) for t in bundled_suite()]
    reports = check_files(items, arch)
    for report in reports:
        assert report.build.ok, f"{report.candidate}: {report.build.diagnosis}"
        static = report.static
        assert static is not None and static.kernels, report.candidate
        assert static.task_hash == get_task(report.task).content_hash
        assert not static.policy_violations
        for kernel in static.kernels:
            assert kernel.resources.registers, kernel.name
            assert kernel.resources.spill_store_bytes == 0, f"{report.candidate}:{kernel.demangled} spills"
        matrix = [r for r in static.requirements if r.requirement.min_flop_share]
        assert all(r.stage is Stage.NOT_WRITTEN for r in matrix), "examples are plain CUDA"
        assert not report.ok
