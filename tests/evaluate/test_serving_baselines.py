"""The serving-path tasks' eager baselines, run on the CPU at small sizes, pass their task's own
tolerance against the reference: a baseline that computes something else would time the wrong work.
(cuBLAS's block-scaled GEMM and the Triton variants need a GPU; tests/gpu and benchmarks/ cover them.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.baselines.variants import variant_specs  # noqa: E402
from ptxbench.evaluate.judgement.compare import compare  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.reference import make_inputs, run_reference  # noqa: E402

CASES = [
    ("gemm_fp8_blockscale", "dequant", {"M": 33, "N": 192, "K": 384, "KB": 3, "NB": 2}),
    ("moe_grouped_gemm", "grouped", {"T": 70, "E": 8, "N": 64, "K": 128}),
    ("moe_grouped_gemm", "loop", {"T": 70, "E": 8, "N": 64, "K": 128}),
    ("add_rmsnorm", "torch", {"T": 5, "Hd": 256}),
    ("silu_mul", "torch", {"T": 5, "N": 128}),
    ("rope", "torch", {"T": 40, "Hq": 4, "Hkv": 2, "D": 128, "theta": 500000}),
]


@pytest.mark.parametrize(("task_id", "variant", "sizes"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_eager_baseline_passes_the_task_tolerance(task_id: str, variant: str, sizes: dict[str, int]) -> None:
    task = get_task(task_id)
    inputs = make_inputs(task, sizes, seed=21)
    outputs = variant_specs(task)[variant].setup(inputs, sizes)()
    expected = run_reference(task, dict(inputs), sizes)
    assert set(outputs) == {o.name for o in task.outputs}
    for spec in task.outputs:
        assert outputs[spec.name].dtype == getattr(torch, spec.dtype.value)
        result = compare(spec.name, outputs[spec.name], expected[spec.name], task.tolerance_for(spec.name))
        assert result.passed, result


def test_moe_loop_baseline_skips_empty_experts() -> None:
    task = get_task("moe_grouped_gemm")
    sizes = {"T": 6, "E": 4, "N": 64, "K": 64}
    inputs = dict(make_inputs(task, sizes, seed=3))
    inputs["expert_offsets"] = torch.tensor([0, 4, 4, 6], dtype=torch.int32)
    out = variant_specs(task)["loop"].setup(inputs, sizes)()["Y"]
    want = run_reference(task, inputs, sizes)["Y"]
    assert compare("Y", out, want, task.tolerance_for("Y")).passed
