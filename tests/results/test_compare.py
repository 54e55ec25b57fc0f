"""Paired comparisons and leaderboards over synthetic runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.results import compare as compare_module
from ptxbench.results.attempts import Attempt, RunAttempts
from ptxbench.results.compare import (
    compare_command, compare_runs, comparison_table, leaderboard, leaderboard_command, leaderboard_table,
    sign_flip_p_value,
)
from ptxbench.results.measured import NotMeasured

from .test_metrics import failed, make, synthetic_run

TASKS = [f"t{i}" for i in range(12)]


def slow(task: str, sample: int | str, **fields: object) -> Attempt:
    """Correct and verified, but slower than the vendor baseline."""
    return make(task, sample, speedup=0.7, **fields)


def test_a_clearly_better_run_has_a_positive_significant_difference() -> None:
    a = synthetic_run({t: 2 for t in TASKS}, n=10, name="base")
    b = synthetic_run({t: 8 for t in TASKS}, n=10, name="tuned")
    comparison = compare_runs(a, b)
    assert (comparison.label_a, comparison.label_b, comparison.n_tasks) == ("base", "tuned", 12)
    assert comparison.rate_a.value == pytest.approx(0.2) and comparison.rate_b.value == pytest.approx(0.8)
    assert comparison.difference.value == pytest.approx(0.6)
    assert comparison.difference.low is not None and comparison.difference.low > 0
    assert comparison.p_value < 0.05
    assert "exact" in comparison.test
    assert [row.difference for row in comparison.rows] == pytest.approx([0.6] * 12)


def test_equal_runs_are_not_significant() -> None:
    a = synthetic_run({t: 5 for t in TASKS}, n=10, name="a")
    identical = compare_runs(a, synthetic_run({t: 5 for t in TASKS}, n=10, name="b"))
    assert identical.p_value == 1.0 and identical.difference.value == 0.0
    # B wins by one sample on half the tasks and loses by one on the other half.
    b = synthetic_run({t: 5 + (1 if i % 2 else -1) for i, t in enumerate(TASKS)}, n=10, name="b")
    balanced = compare_runs(a, b)
    assert balanced.difference.value == pytest.approx(0.0)
    assert balanced.p_value > 0.2
    assert balanced.difference.low is not None and balanced.difference.low < 0 < balanced.difference.high


def test_compare_pairs_common_tasks_on_any_metric() -> None:
    a = synthetic_run({"t0": 4, "t1": 4, "only_a": 4}, n=4, name="a")
    b = synthetic_run({"t0": 4, "t1": 4, "only_b": 0}, n=4, name="b", good=slow)
    comparison = compare_runs(a, b, metric="fast_1.0", bootstrap=200)
    assert comparison.n_tasks == 2 and comparison.rate_a.value == 1.0 and comparison.rate_b.value == 0.0
    assert comparison.only_in_a == ["sm_90a/only_a"] and comparison.only_in_b == ["sm_90a/only_b"]
    assert compare_runs(a, b, metric="correct", bootstrap=200).difference.value == 0.0
    with pytest.raises(ValueError, match="unknown metric"):
        compare_runs(a, b, metric="speed")
    with pytest.raises(ValueError, match="in common"):
        compare_runs(synthetic_run({"x": 1}, n=1), synthetic_run({"y": 1}, n=1))
    table = comparison_table(comparison)
    assert "| A: a |" in table and "| B − A | -100.0 pp" in table and "Only in a (left out): sm_90a/only_a" in table
    assert comparison.model_dump()["rows"][0]["difference"] == -1.0


def test_sign_flip_test_exact_and_monte_carlo() -> None:
    assert sign_flip_p_value([0.5] * 5)[0] == pytest.approx(2 / 32)
    assert sign_flip_p_value([0.0, 0.0])[0] == 1.0
    p, test = sign_flip_p_value([0.1] * 30, permutations=2000, seed=1)
    assert "Monte Carlo" in test and p == pytest.approx(1 / 2001)
    p_balanced, _ = sign_flip_p_value([0.1, -0.1] * 15, permutations=2000)
    assert p_balanced > 0.9


def test_leaderboard_ranks_by_the_metric_with_intervals() -> None:
    runs = {
        "low": synthetic_run({"t0": 1, "t1": 1}, n=5, name="low"),
        "high": synthetic_run({"t0": 4, "t1": 4}, n=5, name="high"),
        "mid": synthetic_run({"t0": 2, "t1": 3}, n=5, name="mid"),
        "also_mid": synthetic_run({"t0": 3, "t1": 2}, n=5, name="also_mid"),
    }
    rows = leaderboard(runs, bootstrap=200)
    assert [(r.rank, r.name) for r in rows] == [(1, "high"), (2, "also_mid"), (3, "mid"), (4, "low")]
    assert rows[0].rate.value == pytest.approx(0.8) and rows[0].metric == "fast_1.0"
    assert all(r.rate.low is not None and r.rate.low <= r.rate.value <= r.rate.high for r in rows)
    nobody = leaderboard(runs, metric="fast_2", bootstrap=0)
    assert [(r.name, r.metric, r.rate.value) for r in nobody] == [
        (name, "fast_2.0", 0.0) for name in ("also_mid", "high", "low", "mid")], "ties rank by name"
    table = leaderboard_table(rows)
    assert table.splitlines()[0].startswith("@1: the unbiased pass@1 per task")  # what @k means, said first
    assert table.splitlines()[2].startswith("| rank | run | fast_1.0@1 (%) | tasks | attempts |")
    assert "| 1 | high | 80.0 [" in table


def test_leaderboard_scores_every_run_on_the_common_tasks() -> None:
    runs = {
        "skips_hard": synthetic_run({"easy": 5}, n=5, name="skips_hard"),
        "does_all": synthetic_run({"easy": 5, "hard": 0}, n=5, name="does_all"),
    }
    common = leaderboard(runs, metric="correct", bootstrap=0)
    assert [(r.name, r.rate.value, r.n_tasks) for r in common] == [("does_all", 1.0, 1), ("skips_hard", 1.0, 1)]
    every = leaderboard(runs, metric="correct", bootstrap=0, common_tasks=False)
    assert [(r.name, r.rate.value) for r in every] == [("skips_hard", 1.0), ("does_all", 0.5)]


def test_unmeasured_runs_are_flagged_in_tables() -> None:
    static = [make(t, i, run="static", correct=None, features_executed=None, speedup=None, status=None,
                   error_class="infra.no_gpu", verified_on_gpu=False) for t in ("t0", "t1") for i in range(3)]
    gpu = synthetic_run({"t0": 3, "t1": 3}, n=3, name="gpu")
    comparison = compare_runs(static, gpu, "compile", bootstrap=100)
    assert (comparison.n_unmeasured_a, comparison.n_unmeasured_b) == (6, 0)
    assert "static: 6 attempt(s) built but were never measured" in comparison_table(comparison)
    with pytest.raises(NotMeasured, match="correct was not measured in static"):
        compare_runs(static, gpu, "correct", bootstrap=0)
    rows = leaderboard({"static": static, "gpu": gpu}, bootstrap=0)
    assert [(r.name, r.rate) for r in rows] == [("gpu", rows[0].rate), ("static", None)], "not measured: ranked last"
    assert rows[-1].n_unmeasured == 6 and "never measured" in leaderboard_table(rows)
    assert "| 2 | static | – |" in leaderboard_table(rows)


def test_commands_load_run_directories(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stored = {
        tmp_path / "x" / "base": synthetic_run({t: 2 for t in TASKS}, n=4, name="base"),
        tmp_path / "y" / "tuned": synthetic_run({t: 4 for t in TASKS}, n=4, name="tuned", bad=failed),
    }
    monkeypatch.setattr(compare_module, "read_attempts", lambda path: RunAttempts(stored[Path(path)], []))
    base, tuned = stored
    text = compare_command(base, tuned, "correct", 1)
    assert "| A: base |" in text and "| B: tuned |" in text and "+50.0 pp" in text
    board = leaderboard_command([base, tuned], "correct")
    assert board.index("| 1 | tuned |") < board.index("| 2 | base |")
