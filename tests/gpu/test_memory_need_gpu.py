"""The memory estimate holds on the GPU: for every workload of every bundled task, drawing its inputs and computing
its reference in the harness's process never takes more than ``memory_need.reference_bytes`` says (the part of the
estimate the shapes alone cannot give). Run with `-m gpu`; prints one line per workload with the measured peak."""

from __future__ import annotations

import pytest

from ptxbench.evaluate.isolation.memory_need import GIB, reference_bytes
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.reference import make_inputs, run_reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_drawing_and_the_reference_stay_within_the_estimate(task) -> None:  # type: ignore[no-untyped-def]
    import torch

    over = []
    for workload in task.workloads:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        inputs = dict(make_inputs(task, workload.sizes, seed=7, device="cuda"))
        expected = run_reference(task, inputs, workload.sizes)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        estimate = reference_bytes(task, workload.sizes)
        print(f"MEMORY {task.id} {workload.name}: peak {peak / GIB:.3f} GiB, estimate {estimate / GIB:.3f} GiB "
              f"({peak / max(estimate, 1):.2f})")
        if peak > estimate:
            over.append(f"{workload.name}: {peak / GIB:.3f} > {estimate / GIB:.3f} GiB")
        del inputs, expected
    assert not over, over
