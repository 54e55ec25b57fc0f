"""On a GPU: every bundled example kernel is correct on every workload of its task, held-out ones
included, and the vendor baselines themselves pass each task's tolerance (so it is not too strict).

Run with ``pytest -m gpu`` on an NVIDIA GPU; skipped elsewhere.
"""

from __future__ import annotations

import zlib

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import build_request
from ptxbench.evaluate.compare import compare_outputs
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.reference import make_inputs, run_reference
from ptxbench.toolchain.compile import build

from ..conftest import EXAMPLES

pytestmark = pytest.mark.gpu

CASES = [(task, workload) for task in bundled_suite() for workload in task.workloads]


def _ids(value):  # type: ignore[no-untyped-def]
    return getattr(value, "id", None) or getattr(value, "name", str(value))


@pytest.fixture(scope="module")
def libraries():  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.library import CandidateLibrary

    loaded = {}
    for task in bundled_suite():
        result = build(build_request((EXAMPLES / f"{task.id}.cu").read_text(), Arch.SM_90A, task))
        assert result.ok, result.log
        loaded[task.id] = CandidateLibrary(result.artifact(".so"), task)
    return loaded


@pytest.mark.parametrize(("task", "workload"), CASES, ids=_ids)
def test_example_is_correct(libraries, task, workload) -> None:  # type: ignore[no-untyped-def]
    import torch

    sizes = workload.sizes
    inputs = make_inputs(task, sizes, seed=zlib.crc32(workload.name.encode()), device="cuda")
    pristine = {name: t.clone() for name, t in inputs.items()}
    outputs = {o.name: torch.full(o.concrete_shape(sizes), float("nan"), device="cuda",
                                  dtype=getattr(torch, o.dtype.value)) for o in task.outputs}
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()  # inputs and NaN fills were made on the default stream; the candidate's is another
    status = libraries[task.id](inputs, outputs, sizes, stream)
    stream.synchronize()
    assert status == 0
    expected = run_reference(task, dict(inputs), sizes)
    for name, tensor in inputs.items():
        assert torch.equal(tensor, pristine[name]), f"input {name} was modified"
    for verdict in compare_outputs(task, outputs, expected):
        print(f"EXAMPLE {task.id}/{workload.name}/{verdict.output}: error/bound={verdict.max_error_ratio:.3f}")
        assert verdict.passed, verdict


def _baseline(task, inputs, sizes):  # type: ignore[no-untyped-def]
    """The vendor call each task names, returning outputs by name."""
    import torch
    import torch.nn.functional as F

    if task.id == "gemm_bf16":
        return {"C": torch.matmul(inputs["A"], inputs["B"].T)}
    if task.id == "gemm_fp8":
        return {"C": torch._scaled_mm(inputs["A"], inputs["B"].T, inputs["scale_a"], inputs["scale_b"],
                                      out_dtype=torch.bfloat16)}
    if task.id == "attention_fwd":
        q, k, v = inputs["Q"], inputs["K"], inputs["V"]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(sizes["causal"]))
        scores = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
        if sizes["causal"]:
            S = scores.shape[-1]
            scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
        return {"O": out, "LSE": torch.logsumexp(scores, dim=-1)}
    if task.id == "attention_bwd":
        # The flash backward kernel on the task's own inputs (the given O and LSE, not a recomputed
        # forward, whose O differs in its last bit and so moves rowsum(dO * O) where P is one-hot).
        q, k, v = inputs["Q"], inputs["K"], inputs["V"]
        causal = bool(sizes["causal"])
        _, _, cum_q, cum_k, max_q, max_k, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            inputs["dO"], q, k, v, inputs["O"], inputs["LSE"], cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset)
        return {"dQ": dq, "dK": dk, "dV": dv}
    if task.id == "rmsnorm":
        return {"Y": F.rms_norm(inputs["X"], (sizes["Hd"],), inputs["W"], eps=1e-6)}
    if task.id == "softmax":
        return {"Y": torch.softmax(inputs["X"], dim=-1)}
    if task.id == "transpose":
        return {"Y": inputs["X"].T.contiguous()}
    raise AssertionError(f"no baseline for {task.id}")


ATTENTION_BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION")


@pytest.mark.parametrize(("task", "workload"), [(t, t.timed()) for t in bundled_suite()] +
                         [(t, w) for t in bundled_suite() for w in t.held_out()], ids=_ids)
def test_vendor_baseline_passes_the_tolerance(task, workload) -> None:  # type: ignore[no-untyped-def]
    """A tolerance the best library fails would make the task unsolvable the way it asks."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sizes = workload.sizes
    inputs = make_inputs(task, sizes, seed=99, device="cuda")
    expected = run_reference(task, dict(inputs), sizes)
    backends = ATTENTION_BACKENDS if task.id == "attention_fwd" else ("default",)
    failures = []
    for backend in backends:
        if backend == "default":
            produced = _baseline(task, inputs, sizes)
        else:
            with sdpa_kernel([getattr(SDPBackend, backend)]):
                produced = _baseline(task, inputs, sizes)
        for verdict in compare_outputs(task, produced, expected):
            print(f"BASELINE {task.id}/{workload.name}/{verdict.output}/{backend}: "
                  f"error/bound={verdict.max_error_ratio:.3f} max_abs={verdict.max_abs_error:.3e} "
                  f"mismatched={verdict.mismatched}")
            if not verdict.passed:
                failures.append(verdict)
    assert not failures, failures
