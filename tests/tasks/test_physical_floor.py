"""The physical-floor guard's bytes are a lower bound on what any correct kernel moves: an honest kernel that
skips what it may skip (an MoE expert without tokens) is never 'faster than the hardware'."""

from __future__ import annotations

import pytest

from ptxbench.evaluate.judgement.guards import PEAKS, physical_floor_guards
from ptxbench.tasks.loader import bundled_suite, get_task
from ptxbench.tasks.reference import derive_inputs

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_the_floor_never_counts_more_than_the_roofline(task) -> None:  # type: ignore[no-untyped-def]
    for workload in task.workloads:
        assert 0 < task.floor_bytes_for(workload.sizes) <= task.bytes_for(workload.sizes)


def test_moe_floor_is_below_what_every_drawn_routing_must_read() -> None:
    task = get_task("moe_grouped_gemm")
    for name in ("qwen3-moe-ep8-decode", "mixtral-up-decode", "dsv3-256e-decode"):
        sizes = task.workload(name).sizes
        T, E, N, K = (sizes[a] for a in "TENK")
        for seed in range(8):
            X = torch.randn(T, K, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
            ends = derive_inputs(task, {"X": X}, sizes)["expert_offsets"].tolist()  # routing needs no W
            used = sum(b > a for a, b in zip([0, *ends], ends))
            must_read = 2 * T * K + 2 * used * N * K + 4 * E + 2 * T * N
            assert task.floor_bytes_for(sizes) <= must_read < task.bytes_for(sizes)


def test_the_moe_reference_measured_on_an_h100_is_not_below_its_floor() -> None:
    """2026-12-07, H100 80GB HBM3: the reference kernel took 0.0233 ms at qwen3-moe-ep8-decode, which the floor
    of every expert's weights (0.0302 ms) rejected; the weights of the experts with tokens are what it reads."""
    task = get_task("moe_grouped_gemm")
    sizes = task.workload("qwen3-moe-ep8-decode").sizes
    flops = task.flops_for(sizes)
    assert not physical_floor_guards("qwen3-moe-ep8-decode", 0.0233, task.floor_bytes_for(sizes), flops,
                                     PEAKS["H100"], fp8=False)
    assert physical_floor_guards("qwen3-moe-ep8-decode", 0.0233, task.bytes_for(sizes), flops,
                                 PEAKS["H100"], fp8=False)  # the bytes of the roofline would have
    # a forged time far below any routing's reads is still caught
    assert physical_floor_guards("qwen3-moe-ep8-decode", 0.0005, task.floor_bytes_for(sizes), flops,
                                 PEAKS["H100"], fp8=False)
