"""attention_bwd's tolerance judges every S the statement allows: at S = 1 dQ and dK are exactly zero (O = V, so
dS = P (dP - delta) cancels) and what an honest kernel returns there is rounding noise of the cancelled terms."""

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.judgement.compare import compare_outputs  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.reference import make_inputs, run_reference  # noqa: E402


def exact(inputs: dict, D: int, causal: int) -> dict:
    """The statement's formulas in float64 (another summation order than the reference's), rounded to bf16."""
    Q, K, V, O, dO, LSE = (inputs[name].double() for name in ("Q", "K", "V", "O", "dO", "LSE"))
    scale = 1 / math.sqrt(D)
    scores = Q @ K.transpose(-1, -2) * scale
    if causal:
        S = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(scores - LSE.unsqueeze(-1))
    ds = p * (dO @ V.transpose(-1, -2) - (dO * O).sum(-1, keepdim=True))
    return {"dQ": (ds @ K * scale).bfloat16(), "dK": (ds.transpose(-1, -2) @ Q * scale).bfloat16(),
            "dV": (p.transpose(-1, -2) @ dO).bfloat16()}


@pytest.mark.parametrize(("D", "S", "causal"), [(64, 1, 0), (256, 1, 1), (64, 2, 1), (128, 17, 0)])
def test_an_exact_answer_passes_and_a_wrong_one_fails(D: int, S: int, causal: int) -> None:
    task = get_task("attention_bwd")
    sizes = {"B": 1, "H": 2, "S": S, "D": D, "causal": causal}
    inputs = make_inputs(task, sizes, seed=3)
    expected = run_reference(task, inputs, sizes)
    answer = exact(inputs, D, causal)
    assert all(c.passed for c in compare_outputs(task, answer, expected))
    wrong = {**answer, "dQ": (answer["dQ"].float() * 1.05 + 0.01).bfloat16()}
    assert not next(c for c in compare_outputs(task, wrong, expected) if c.output == "dQ").passed
    if S > 1:  # the cancellation term buys no lazy kernel anything: zeros (right only at S = 1) still fail
        lazy = {**answer, "dQ": torch.zeros_like(answer["dQ"]), "dK": torch.zeros_like(answer["dK"])}
        judged = {c.output: c.passed for c in compare_outputs(task, lazy, expected)}
        assert not judged["dQ"] and not judged["dK"]
