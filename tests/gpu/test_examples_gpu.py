"""On a GPU: every bundled example kernel is correct on every workload of its task, held-out ones
included, and the vendor baselines themselves pass each task's tolerance (so it is not too strict).

Run with ``pytest -m gpu`` on an NVIDIA GPU; skipped elsewhere.
"""

from __future__ import annotations

import zlib

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import build_request
from ptxbench.evaluate.judgement.compare import compare_outputs
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.reference import make_inputs, run_reference
from ptxbench.toolchain.compile import build

from ..conftest import EXAMPLES

pytestmark = pytest.mark.gpu

CASES = [(task, workload) for task in bundled_suite() for workload in task.workloads]
# The baselines are timed on the timed and visible workloads only (never on held-out ones): their tolerance there
TIMED_CASES = [(task, workload) for task in bundled_suite() for workload in task.shown()]


def _ids(value):  # type: ignore[no-untyped-def]
    return getattr(value, "id", None) or getattr(value, "name", str(value))


@pytest.fixture(scope="module")
def libraries():  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.child.library import CandidateLibrary

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


@pytest.mark.parametrize(("task", "workload"), TIMED_CASES, ids=_ids)
def test_vendor_baseline_passes_the_tolerance(task, workload) -> None:  # type: ignore[no-untyped-def]
    """A tolerance every library fails would make the task unsolvable the way it asks. A variant that
    cannot run the workload (cuDNN too old for head dim 256), or whose outputs miss the tolerance (FlashInfer's
    tensor-core decode's LSE on an H100), is skipped with its reason, as the evaluator skips it; at least one
    must run and pass."""
    from ptxbench.evaluate.baselines.variants import baseline_variants

    sizes = workload.sizes
    inputs = make_inputs(task, sizes, seed=99, device="cuda")
    expected = run_reference(task, dict(inputs), sizes)
    failures, ran = [], 0
    for variant, call in baseline_variants(task).items():
        try:
            outputs = call(inputs, sizes)
        except Exception as exc:  # noqa: BLE001 - the evaluator skips such a variant with this reason
            print(f"BASELINE {task.id}/{workload.name}/{variant}: skipped: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        ran += 1
        for verdict in compare_outputs(task, outputs, expected):
            print(f"BASELINE {task.id}/{workload.name}/{verdict.output}/{variant}: "
                  f"error/bound={verdict.max_error_ratio:.3f} max_abs={verdict.max_abs_error:.3e} "
                  f"mismatched={verdict.mismatched}")
            if not verdict.passed:
                failures.append((variant, verdict))
    assert ran, f"no baseline variant runs {task.id}/{workload.name}"
    assert ran > len({variant for variant, _ in failures}), f"no baseline variant passes the tolerance: {failures}"
