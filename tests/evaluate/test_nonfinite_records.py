"""NaN and infinities in a candidate's output survive every record they reach: the comparison, the host's
reply and result.json; a partly written output is an ordinary INCORRECT, not a harness failure."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.judgement.compare import compare
from ptxbench.evaluate.fleet.gpu_host import HostOutcome, parse_outcome
from ptxbench.evaluate.fleet.run import evaluate_candidates
from ptxbench.records.evaluation import Evaluation, Status, TrialResult
from ptxbench.records.rundir import write_model
from ptxbench.tasks.model import Tolerance

from .scaleout import FAKE, OPTIONS, candidates, small_softmax, stored

TASK = small_softmax()
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 3.4e38, 0.0, 5e-324])
VALUES = st.one_of(SPECIAL, st.floats(allow_nan=True, allow_infinity=True))


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN, through nested dicts and lists."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _evaluation(actual: list[float], expected: list[float]) -> Evaluation:
    comparison = compare("out", torch.tensor(actual, dtype=torch.float64), torch.tensor(expected, dtype=torch.float64),
                         Tolerance(rtol=1e-3, rms_atol=1e-3))
    trial = TrialResult(workload="w", role="timed", seed=1, comparisons=[comparison], passed=comparison.passed)
    return Evaluation(candidate="c", task=TASK.id, task_hash=TASK.content_hash, arch=Arch.SM_90A,
                      status=Status.PASSED if trial.passed else Status.INCORRECT, trials=[trial],
                      durations_s={"total": math.inf})


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=6).flatmap(
    lambda n: st.tuples(st.lists(VALUES, min_size=n, max_size=n), st.lists(VALUES, min_size=n, max_size=n))))
def test_nonfinite_values_round_trip_exactly_through_the_host_reply_and_result_file(pair: tuple[list[float], list[float]]) -> None:
    evaluation = _evaluation(*pair)
    wire = HostOutcome(evaluation=evaluation, where={"note": math.nan}).model_dump_json()
    received = parse_outcome(wire)
    assert received.harness_error is None and received.evaluation is not None
    assert same(received.evaluation.model_dump(), evaluation.model_dump())
    assert same(received.where, {"note": math.nan})
    text = received.evaluation.model_dump_json(indent=1)
    assert same(Evaluation.model_validate_json(text).model_dump(), evaluation.model_dump())
    assert same(json.loads(text), json.loads(evaluation.model_dump_json())), "the standard library reads it too"


def test_a_partly_unwritten_output_is_written_as_json_tokens_that_read_back(tmp_path: Path) -> None:
    evaluation = _evaluation([1.0, math.nan, 3.0], [1.0, 2.0, 3.0])
    assert evaluation.status is Status.INCORRECT
    comparison = evaluation.trials[0].comparisons[0]
    assert comparison.nonfinite == 1 and math.isinf(comparison.max_abs_error) and math.isnan(comparison.worst_value or 0)
    write_model(tmp_path / "result.json", evaluation)
    text = (tmp_path / "result.json").read_text()
    assert "NaN" in text and "Infinity" in text
    back = Evaluation.model_validate_json(text)
    assert same(back.model_dump(), evaluation.model_dump())
    assert math.isnan(json.loads(text)["trials"][0]["comparisons"][0]["worst_value"])


def test_an_unreadable_host_reply_is_the_harness_failure_on_that_item() -> None:
    outcome = parse_outcome('{"evaluation": {"candidate": 1}}')
    assert outcome.evaluation is None and outcome.fault is None
    assert outcome.harness_error is not None and "not a HostOutcome" in outcome.harness_error


@pytest.mark.parametrize("gpus", [(0,)])
def test_a_candidate_that_leaves_outputs_partly_unwritten_is_incorrect_through_the_pool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: tuple[int, ...]) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PTXBENCH_FAKE_STATE", str(tmp_path))
    out = tmp_path / "run"
    results = evaluate_candidates(candidates(2), Arch.SM_90A, out, OPTIONS, gpus=list(gpus),
                                  handler=f"{FAKE}:PartlyUnwritten", reference_device="cpu")
    assert [r.status for r in results] == [Status.INCORRECT, Status.INCORRECT], [r.message for r in results]
    for evaluation, placement, _ in stored(out).values():
        assert evaluation.status is Status.INCORRECT and evaluation.infra_failure is None
        assert placement is not None and placement["interrupted_by"] == []
        worst = [c for t in evaluation.trials for c in t.comparisons if c.nonfinite]
        assert worst and all(math.isinf(c.max_abs_error) for c in worst)
