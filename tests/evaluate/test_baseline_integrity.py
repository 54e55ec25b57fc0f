"""The evaluator against rewritten clean-baseline times (seen on the H200: a candidate made every cached
baseline slower): within the process the rewrite changes nothing; a later process finds the records
unsigned, deletes them and measures the baselines again."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ptxbench import integrity
from ptxbench.arch.registry import Arch
from ptxbench.evaluate.baselines import cache as baseline_cache
from ptxbench.evaluate.baselines.cache import BaselineCache, BaselineTiming
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.records.evaluation import Evaluation, Status

from ..conftest import EXAMPLES
from .fake_runner import BEHAVIOUR
from .scaleout import FAKE, small_softmax

HANDLER = f"{FAKE}:FakeRunner"


def _evaluate(cache_root: Path) -> Evaluation:
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20), handler=HANDLER, reference_device="cpu")
    evaluator.baseline_cache = BaselineCache(cache_root)
    try:
        return evaluator.evaluate(small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text(), "softmax.cu")
    finally:
        evaluator.close()


@pytest.mark.slow
def test_rewritten_baseline_times_are_ignored_in_the_run_and_measured_again_later(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(BEHAVIOUR, "correct")
    root = tmp_path / "baselines"
    first = _evaluate(root)
    assert first.status is Status.PASSED, first.message
    records = sorted(root.glob("*.json"))
    assert records, "the clean baseline was measured and cached"
    for path in records:  # ten times slower: the candidate's speedup ten times larger
        path.write_text(json.dumps({**json.loads(path.read_text()), "median_ms": 10.0}))

    during = _evaluate(root)
    assert [t.baseline_clean_ms for t in during.timings] == [1.0] * len(during.timings), "kept in memory"

    baseline_cache._memo.clear()  # a later process
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.baselines.cache"):
        later = _evaluate(root)
    assert later.status is Status.PASSED, later.message
    assert [t.baseline_clean_ms for t in later.timings] == [1.0] * len(later.timings), "measured again"
    assert all(str(path) in caplog.text for path in records), "each rewritten record is reported"
    for path in records:
        record = BaselineTiming.model_validate_json(path.read_text())
        assert record.median_ms == 1.0 and integrity.verify(record.signed_payload(), record.signature)
