"""Every reference, run on the CPU at small sizes, against an independent float64 computation."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.judgement.compare import compare, compare_outputs  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.model import Tolerance  # noqa: E402
from ptxbench.tasks.reference import make_inputs, run_reference  # noqa: E402

EXACT = Tolerance(rtol=1e-9, atol=1e-9)


def _naive_attention(q, k, v, causal):  # type: ignore[no-untyped-def]
    """Loop over queries in float64: the textbook definition, no fused ops."""
    q, k, v = q.double(), k.double(), v.double()
    batch, heads, seq, dim = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(batch, heads, seq, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(seq):
                keys = i + 1 if causal else seq
                scores = (k[b, h, :keys] @ q[b, h, i]) / math.sqrt(dim)
                top = scores.max()
                weights = torch.exp(scores - top)
                lse[b, h, i] = top + torch.log(weights.sum())
                out[b, h, i] = (weights / weights.sum()) @ v[b, h, :keys]
    return out, lse


def _assert_close(name, actual, expected, tol=EXACT):  # type: ignore[no-untyped-def]
    result = compare(name, actual, expected, tol)
    assert result.passed, result


def test_gemm_bf16_reference() -> None:
    task = get_task("gemm_bf16")
    sizes = {"M": 5, "N": 64, "K": 128}
    inputs = make_inputs(task, sizes, seed=1)
    (c,) = run_reference(task, dict(inputs), sizes).values()
    a, b = inputs["A"].double(), inputs["B"].double()
    expected = torch.tensor([[sum(a[m, kk] * b[n, kk] for kk in range(128)) for n in range(64)] for m in range(5)])
    _assert_close("C", c, expected, Tolerance(rtol=1e-5, atol=1e-5))
    assert c.dtype == torch.float32


def test_gemm_fp8_reference_applies_both_scales() -> None:
    task = get_task("gemm_fp8")
    sizes = {"M": 16, "N": 64, "K": 128}
    inputs = make_inputs(task, sizes, seed=2)
    assert inputs["A"].dtype == torch.float8_e4m3fn and inputs["scale_a"].shape == (1,)
    assert float(inputs["scale_a"]) > 0
    (c,) = run_reference(task, dict(inputs), sizes).values()
    expected = torch.einsum("mk,nk->mn", inputs["A"].double(), inputs["B"].double())
    expected *= float(inputs["scale_a"]) * float(inputs["scale_b"])
    _assert_close("C", c, expected, Tolerance(rtol=1e-5, atol=1e-6))


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize(("dim", "seq"), [(64, 64), (128, 64), (256, 64), (64, 1), (128, 37), (256, 70)])
def test_attention_forward_reference(causal: int, dim: int, seq: int) -> None:
    """Every head dim, and lengths that are no multiple of a tile (down to one query)."""
    task = get_task("attention_fwd")
    sizes = {"B": 1, "H": 2, "S": seq, "D": dim, "causal": causal}
    inputs = make_inputs(task, sizes, seed=3)
    result = run_reference(task, dict(inputs), sizes)
    out, lse = result["O"], result["LSE"]
    assert out.shape == (1, 2, seq, dim) and lse.shape == (1, 2, seq)
    scores = (inputs["Q"].double() @ inputs["K"].double().transpose(-1, -2)) / math.sqrt(dim)
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    _assert_close("O_magnitude", result["O_magnitude"], torch.softmax(scores, -1) @ inputs["V"].double().abs(),
                  Tolerance(rtol=1e-4, atol=1e-5))
    want_out, want_lse = _naive_attention(inputs["Q"], inputs["K"], inputs["V"], causal)
    _assert_close("O", out, want_out, Tolerance(rtol=1e-4, atol=1e-5))
    _assert_close("LSE", lse, want_lse, Tolerance(rtol=1e-5, atol=1e-5))


def test_attention_inputs_have_outliers() -> None:
    task = get_task("attention_fwd")
    q = make_inputs(task, {"B": 2, "H": 4, "S": 256, "D": 128, "causal": 0}, seed=4)["Q"].float()
    assert q.abs().max() > 6 * q.std()
    assert (q < 0).any() and (q > 0).any()


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize(("dim", "seq"), [(64, 64), (256, 64), (128, 37), (256, 70)])
def test_attention_backward_reference_is_the_gradient(causal: int, dim: int, seq: int) -> None:
    """Given the exact forward output, the reference equals float64 autograd of sum(dO * attention), for every
    head dim and for lengths that are no multiple of a tile."""
    task = get_task("attention_bwd")
    sizes = {"B": 1, "H": 2, "S": seq, "D": dim, "causal": causal}
    inputs = dict(make_inputs(task, sizes, seed=5))
    want_out, want_lse = _naive_attention(inputs["Q"], inputs["K"], inputs["V"], causal)
    # The derived inputs are the forward pass: bf16 O within its rounding, LSE in fp32.
    _assert_close("O", inputs["O"], want_out, Tolerance.for_dtype(task.inputs[3].dtype))
    _assert_close("LSE", inputs["LSE"], want_lse, Tolerance(rtol=1e-5, atol=1e-5))

    inputs["O"] = want_out.float()
    result = run_reference(task, inputs, sizes)
    dq, dk, dv = result["dQ"], result["dK"], result["dV"]
    assert all((result[f"{n}_magnitude"] >= result[n].abs() - 1e-5).all() for n in ("dQ", "dK", "dV"))
    q, k, v = (inputs[n].double().requires_grad_() for n in ("Q", "K", "V"))
    scores = q @ k.transpose(-1, -2) / math.sqrt(dim)
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    (torch.softmax(scores, dim=-1) @ v).backward(inputs["dO"].double())
    tol = Tolerance(rtol=1e-4, rms_atol=1e-4)
    _assert_close("dQ", dq, q.grad, tol)
    _assert_close("dK", dk, k.grad, tol)
    _assert_close("dV", dv, v.grad, tol)


def test_attention_backward_reference_uses_the_given_output() -> None:
    """The statement defines rowsum(dO * O) on the given O: changing O changes dQ, never dV."""
    task = get_task("attention_bwd")
    sizes = {"B": 1, "H": 1, "S": 64, "D": 64, "causal": 0}
    inputs = dict(make_inputs(task, sizes, seed=6))
    first = run_reference(task, inputs, sizes)
    inputs["O"] = inputs["O"] * 2
    second = run_reference(task, inputs, sizes)
    dq, dv, dq2, dv2 = first["dQ"], first["dV"], second["dQ"], second["dV"]
    assert torch.equal(dv, dv2) and not torch.allclose(dq, dq2)


def test_memory_bound_references() -> None:
    rms = get_task("rmsnorm")
    inputs = make_inputs(rms, {"T": 3, "Hd": 64}, seed=6)
    (y,) = run_reference(rms, dict(inputs), {"T": 3, "Hd": 64}).values()
    x, w = inputs["X"].double(), inputs["W"].double()
    want = torch.stack([x[t] / math.sqrt(float((x[t] ** 2).mean()) + 1e-6) * w for t in range(3)])
    _assert_close("Y", y, want, Tolerance(rtol=1e-5, atol=1e-6))

    soft = get_task("softmax")
    inputs = make_inputs(soft, {"R": 4, "C": 128}, seed=7)
    (y,) = run_reference(soft, dict(inputs), {"R": 4, "C": 128}).values()
    x = inputs["X"].double()
    e = torch.exp(x - x.max(dim=1, keepdim=True).values)
    _assert_close("Y", y, e / e.sum(dim=1, keepdim=True), Tolerance(rtol=1e-5, atol=1e-9))
    assert torch.allclose(y.sum(dim=1), torch.ones(4), atol=1e-5)

    tr = get_task("transpose")
    inputs = make_inputs(tr, {"R": 8, "C": 16}, seed=8)
    (y,) = run_reference(tr, dict(inputs), {"R": 8, "C": 16}).values()
    assert y.shape == (16, 8)
    assert all(y[c, r] == inputs["X"][r, c].float() for r in range(8) for c in range(16))


def test_inputs_differ_per_seed_and_repeat_per_seed() -> None:
    task = get_task("gemm_bf16")
    sizes = {"M": 4, "N": 64, "K": 64}
    a1, a2, b1 = (make_inputs(task, sizes, seed=s)["A"] for s in (10, 10, 11))
    assert torch.equal(a1, a2) and not torch.equal(a1, b1)


def test_comparison_catches_zero_outputs_where_values_are_small() -> None:
    """An all-zero attention output must fail although its values are near zero."""
    task = get_task("attention_fwd")
    sizes = {"B": 1, "H": 1, "S": 256, "D": 64, "causal": 0}
    expected = run_reference(task, dict(make_inputs(task, sizes, seed=9)), sizes)
    out = expected["O"]
    zeros = compare_outputs(task, {"O": torch.zeros_like(out), "LSE": expected["LSE"]}, expected)[0]
    assert not zeros.passed and zeros.mismatched > out.numel() // 2
    rounded = compare_outputs(task, {"O": out.to(torch.bfloat16), "LSE": expected["LSE"]}, expected)
    assert all(r.passed for r in rounded), rounded


def test_comparison_fails_nan_and_reports_where() -> None:
    expected = torch.ones(4, 4)
    actual = expected.clone()
    actual[2, 3] = float("nan")
    verdict = compare("Y", actual, expected, Tolerance(rtol=0.5))
    assert not verdict.passed and verdict.nonfinite == 1 and verdict.worst_index == [2, 3]
