"""The launch gate on a GPU: a host delay inside the timed call is not timed (it is with the spin cover
alone), and a call that waits for the GPU makes its process drop the gate yet is still timed and passes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.records.evaluation import Status
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES

pytestmark = pytest.mark.gpu
HOST_DELAY_S = 0.005


@pytest.fixture(scope="module")
def runner():  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.child.gpu_side import CandidateRunner

    return CandidateRunner()


def _late_launch(torch: Any, x: Any) -> Any:
    """A call whose host stalls 5 ms before it launches its one small kernel."""
    def call(stream: Any) -> None:
        time.sleep(HOST_DELAY_S)
        with torch.cuda.stream(stream):
            x.add_(1)
    return call


def test_a_host_delay_inside_the_call_is_not_timed(runner) -> None:  # type: ignore[no-untyped-def]
    torch = runner.torch
    x = torch.zeros(1024, device="cuda")
    stream = torch.cuda.Stream()
    assert runner.launch_gate()["gated"], runner.gate_note
    gated = runner._time(_late_launch(torch, x), stream, 5)
    runner.use_launch_gate(False)
    try:
        covered = runner._time(_late_launch(torch, x), stream, 5)
    finally:
        runner.use_launch_gate(True)
    print(f"GATE gated ms {gated}, spin cover ms {covered}")
    assert max(gated) < 1.0
    assert min(covered) > 0.8 * HOST_DELAY_S * 1e3  # the measurement would show the delay without the gate
    assert runner.launch_gate()["gated"]


def test_a_call_that_waits_for_the_gpu_drops_the_gate() -> None:
    from ptxbench.evaluate.child.gpu_side import GATE_TIMEOUTS_TO_DROP, CandidateRunner

    runner = CandidateRunner()  # its own: dropping the gate is for the rest of a process
    torch = runner.torch
    x = torch.zeros(1024, device="cuda")
    stream = torch.cuda.Stream()

    def waiting(s: Any) -> None:
        with torch.cuda.stream(s):
            x.add_(1)
        s.synchronize()

    started = time.perf_counter()
    times = runner._time(waiting, stream, GATE_TIMEOUTS_TO_DROP + 3)
    spent = time.perf_counter() - started
    print(f"GATE waiting call ms {times}, {spent:.3f} s")
    assert not runner.launch_gate()["gated"] and "timed out" in (runner.gate_note or "")
    assert all(t < 1.0 for t in times)
    assert spent < 1.0  # each timed-out gate costs its deadline once, not the call's time limit


def test_an_evaluated_candidate_that_synchronizes_in_its_call_passes_ungated() -> None:
    task = get_task("rmsnorm")
    plain = (EXAMPLES / "rmsnorm.cu").read_text()
    launch = "rmsnorm_kernel<<<(unsigned)T, THREADS, 0, stream>>>(X, W, Y, Hd);"
    assert launch in plain
    waiting = plain.replace(launch, launch + "\n    cudaStreamSynchronize(stream);")
    gpu = GpuEvaluator(EvalOptions(trials=1, timing_budget_ms=20, profile=False, call_timeout_s=30))
    try:
        results = {name: gpu.evaluate(task, Arch.SM_90A, source, f"{name}.cu")
                   for name, source in (("plain", plain), ("waiting", waiting))}
    finally:
        gpu.close()
    for name, evaluation in results.items():
        print(f"GATE {name}: {evaluation.status} {[(t.workload, t.candidate_ms, t.launch_gated) for t in evaluation.timings]}")
        assert evaluation.status is Status.PASSED, evaluation.message
    assert all(t.launch_gated for t in results["plain"].timings)
    assert not any(t.launch_gated for t in results["waiting"].timings)
