import pytest

from ptxbench.tasks.formula import FormulaError, evaluate, names_in


def test_evaluates_arithmetic_over_axes() -> None:
    assert evaluate("2 * M * N * K", {"M": 3, "N": 4, "K": 5}) == 120
    assert evaluate("4 * S * S * D / (1 + causal)", {"S": 2, "D": 3, "causal": 1}) == 24
    assert evaluate("ceil_div(M, 128) * max(N, 2)", {"M": 129, "N": 1}) == 4
    assert names_in("ceil_div(M, 128) * N") == {"M", "N"}


@pytest.mark.parametrize("bad", ["__import__('os')", "M.real", "[M]", "M if N else K", "'x' * 3", "M +"])
def test_rejects_anything_but_arithmetic(bad: str) -> None:
    with pytest.raises(FormulaError):
        evaluate(bad, {"M": 1, "N": 1, "K": 1})


def test_unknown_name_is_an_error_not_zero() -> None:
    with pytest.raises(FormulaError, match="unknown name 'Q'"):
        evaluate("2 * Q", {"M": 1})
