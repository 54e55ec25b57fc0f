"""The serving-path tasks' references on the CPU at small sizes, each against an independent float64
computation written another way (explicit loops, per-group or per-element math), and their derived
inputs (routing offsets, positions) checked for the properties the statements promise."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.judgement.compare import compare  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.model import Tolerance  # noqa: E402
from ptxbench.tasks.reference import make_inputs, run_reference  # noqa: E402

CLOSE = Tolerance(rtol=1e-5, atol=1e-6)


def _assert_close(name, actual, expected, tol=CLOSE):  # type: ignore[no-untyped-def]
    result = compare(name, actual, expected, tol)
    assert result.passed, result


def test_blockscale_reference_scales_every_block_separately() -> None:
    task = get_task("gemm_fp8_blockscale")
    sizes = {"M": 3, "N": 192, "K": 256, "KB": 2, "NB": 2}  # the second weight block holds 64 rows
    inputs = make_inputs(task, sizes, seed=11)
    (d,) = run_reference(task, dict(inputs), sizes).values()
    a, b = inputs["A"].double(), inputs["B"].double()
    sa, sb = inputs["scale_a"].double(), inputs["scale_b"].double()
    expected = torch.zeros(3, 192, dtype=torch.float64)
    for m in range(3):
        for n in range(192):
            for j in range(2):  # per block: its dot product times the row's and the weight block's scales
                block = slice(128 * j, 128 * j + 128)
                expected[m, n] += torch.dot(a[m, block], b[n, block]) * sa[m, j] * sb[n // 128, j]
    _assert_close("D", d, expected)
    # one scale for the whole product is a different answer: the block scales matter
    flat = (a @ b.T) * sa.mean() * sb.mean()
    assert not compare("D", d, flat, task.tolerance_for("D")).passed


def test_blockscale_reference_refuses_inconsistent_block_counts() -> None:
    task = get_task("gemm_fp8_blockscale")
    sizes = {"M": 2, "N": 128, "K": 256, "KB": 2, "NB": 1}
    inputs = make_inputs(task, sizes, seed=12)
    with pytest.raises(ValueError, match="sizes disagree"):
        run_reference(task, dict(inputs), {**sizes, "K": 384})


def test_blockscale_workloads_bind_consistent_block_counts() -> None:
    for workload in get_task("gemm_fp8_blockscale").workloads:
        sizes = workload.sizes
        assert sizes["KB"] * 128 == sizes["K"] and sizes["NB"] == -(-sizes["N"] // 128), workload.name


def test_moe_offsets_vary_with_the_inputs_and_leave_experts_empty() -> None:
    task = get_task("moe_grouped_gemm")
    sizes = {"T": 48, "E": 8, "N": 64, "K": 64}
    offsets = [make_inputs(task, sizes, seed=s)["expert_offsets"] for s in (1, 2, 3)]
    for ends in offsets:
        counts = torch.diff(ends.long(), prepend=torch.zeros(1, dtype=torch.long))
        assert ends.dtype == torch.int32 and int(ends[-1]) == 48 and (counts >= 0).all()
        assert (counts == 0).any()  # an eighth of the experts (here one) receives nothing
    assert not torch.equal(offsets[0], offsets[1]) or not torch.equal(offsets[1], offsets[2])


def test_moe_reference_multiplies_each_group_by_its_expert() -> None:
    task = get_task("moe_grouped_gemm")
    sizes = {"T": 10, "E": 4, "N": 64, "K": 64}
    inputs = dict(make_inputs(task, sizes, seed=4))
    inputs["expert_offsets"] = torch.tensor([3, 3, 9, 10], dtype=torch.int32)  # expert 1 gets no tokens
    (y,) = run_reference(task, inputs, sizes).values()
    x, w = inputs["X"].double(), inputs["W"].double()
    owner = [0, 0, 0, 2, 2, 2, 2, 2, 2, 3]
    expected = torch.stack([torch.mv(w[owner[t]], x[t]) for t in range(10)])  # row by row, each its expert
    _assert_close("Y", y, expected)
    inputs["expert_offsets"] = torch.tensor([3, 2, 9, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="must rise"):
        run_reference(task, inputs, sizes)


def test_add_rmsnorm_reference() -> None:
    task = get_task("add_rmsnorm")
    sizes = {"T": 3, "Hd": 64}
    inputs = make_inputs(task, sizes, seed=5)
    result = run_reference(task, dict(inputs), sizes)
    x, r, w = (inputs[n].double() for n in ("X", "R", "W"))
    new_residual = []
    normalised = []
    for t in range(3):
        s = torch.tensor([float(torch.tensor(float(x[t, i] + r[t, i])).to(torch.bfloat16)) for i in range(64)],
                         dtype=torch.float64)
        new_residual.append(s)
        normalised.append(s / math.sqrt(sum(float(v) ** 2 for v in s) / 64 + 1e-6) * w)
    _assert_close("R_out", result["R_out"], torch.stack(new_residual), Tolerance(rtol=0, atol=0))
    _assert_close("Y", result["Y"], torch.stack(normalised))


def test_silu_mul_reference() -> None:
    task = get_task("silu_mul")
    sizes = {"T": 3, "N": 64}
    inputs = make_inputs(task, sizes, seed=6)
    (y,) = run_reference(task, dict(inputs), sizes).values()
    flat = inputs["X"].double().reshape(3, 128)  # the row-major [T, 2 N] layout the statement names
    expected = torch.tensor([[float(flat[t, i]) / (1 + math.exp(-float(flat[t, i]))) * float(flat[t, 64 + i])
                              for i in range(64)] for t in range(3)], dtype=torch.float64)
    _assert_close("Y", y, expected)


def test_rope_positions_are_runs_within_the_stated_range() -> None:
    task = get_task("rope")
    sizes = {"T": 300, "Hq": 1, "Hkv": 1, "D": 64, "theta": 10000}
    positions = make_inputs(task, sizes, seed=7)["positions"]
    assert positions.dtype == torch.int32 and int(positions[0]) == 0
    assert 0 <= int(positions.min()) and int(positions.max()) < 32768
    steps = torch.diff(positions.long())
    assert (steps == 1).any() and (steps != 1).any()  # runs of consecutive positions, and jumps between them


@pytest.mark.parametrize(("dim", "theta"), [(64, 10000), (128, 500000)])
def test_rope_reference_rotates_each_pair(dim: int, theta: int) -> None:
    task = get_task("rope")
    sizes = {"T": 5, "Hq": 2, "Hkv": 1, "D": dim, "theta": theta}
    inputs = dict(make_inputs(task, sizes, seed=8))
    inputs["positions"] = torch.tensor([0, 1, 2, 31000, 32767], dtype=torch.int32)
    result = run_reference(task, inputs, sizes)
    half = dim // 2
    for name, out in (("Q", result["Q_out"]), ("K", result["K_out"])):
        x = inputs[name].double()
        expected = torch.empty_like(x)
        for t, pos in enumerate(inputs["positions"].tolist()):
            for h in range(x.shape[1]):
                for i in range(half):
                    angle = pos / theta ** (2 * i / dim)
                    a, b = float(x[t, h, i]), float(x[t, h, i + half])
                    expected[t, h, i] = a * math.cos(angle) - b * math.sin(angle)
                    expected[t, h, i + half] = b * math.cos(angle) + a * math.sin(angle)
        _assert_close(f"{name}_out", out, expected)
    assert torch.equal(result["Q_out"][0], inputs["Q"][0].float())  # position 0 is the identity
