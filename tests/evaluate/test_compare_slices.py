"""The comparison taken slice by slice (to bound the harness's memory on large outputs) gives what one pass over
the whole output gives: the counts, the maxima and the worst element."""

from __future__ import annotations

import pytest
import torch

from ptxbench.evaluate.judgement import compare as compare_module
from ptxbench.evaluate.judgement.compare import compare
from ptxbench.tasks.model import Tolerance


def _pair(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    want = torch.randn(37, 53, generator=generator, dtype=torch.float64)
    got = (want + 1e-3 * torch.randn(37, 53, generator=generator, dtype=torch.float64)).to(torch.bfloat16)
    got.view(-1)[100] = float("nan")
    got.view(-1)[1500] = want.view(-1)[1500] + 5.0
    got.view(-1)[1700] = want.view(-1)[1700] + 5.0  # ties the worst excess only roughly: the first largest wins
    return got, want


@pytest.mark.parametrize("slice_elements", [1, 7, 64, 1000, 1 << 24])
@pytest.mark.parametrize("tolerance", [Tolerance(rtol=1e-2, rms_atol=1e-2), Tolerance(atol=1e-3, rtol=0.0),
                                       Tolerance(rtol=1e-2, operand_rtol=1e-3)])
def test_slices_give_the_one_pass_result(monkeypatch: pytest.MonkeyPatch, slice_elements: int,
                                         tolerance: Tolerance) -> None:
    got, want = _pair(3)
    magnitude = want.abs() * 2
    monkeypatch.setattr(compare_module, "COMPARE_SLICE_ELEMENTS", 1 << 30)
    whole = compare("Y", got, want, tolerance, magnitude)
    monkeypatch.setattr(compare_module, "COMPARE_SLICE_ELEMENTS", slice_elements)
    sliced = compare("Y", got, want, tolerance, magnitude)
    one, other = whole.model_dump(), sliced.model_dump()
    assert one.keys() == other.keys()
    for key in one:
        if isinstance(one[key], float):
            assert other[key] == pytest.approx(one[key], rel=1e-12, nan_ok=True), key
        else:
            assert other[key] == one[key], key
    assert not sliced.passed and sliced.nonfinite == 1 and sliced.worst_index == [1, 47]  # the NaN at 100 = 1 * 53 + 47


def test_an_empty_output_compares_as_passed() -> None:
    empty = torch.zeros(0, 8)
    result = compare("Y", empty, empty.double(), Tolerance(rtol=1e-2))
    assert result.passed and result.elements == 0 and result.worst_index is None
