"""Metrics over synthetic attempts: pass@k, fast_p, pooled statistics, bootstrap intervals, turns, taxonomy."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any, Callable

import pytest

from ptxbench.results.attempts import Attempt
from ptxbench.results.metrics import (
    Estimate, best_of_turns, last_turns, pass_at_k, summarize, summary_table, task_rates, taxonomy_counts, unmeasured,
)


def make(task: str = "t0", sample: str | int = "s0", **fields: Any) -> Attempt:
    """A correct, fast (speedup 1.5), feature-verified last-turn attempt; ``fields`` override any of it."""
    base: dict[str, Any] = dict(
        run="run_a", model="m", condition="none", arch="sm_90a", task=task, sample=str(sample), turn=0,
        last_turn=True, compiled=True, features_in_ptx=True, features_in_sass=True, correct=True,
        visible_correct=True, heldout_correct=True, features_executed=True, speedup=1.5, roofline_pct=50.0,
        status="PASSED", error_class="ok", verified_on_gpu=True)
    base.update(fields)
    return Attempt(**base)


def failed(task: str = "t0", sample: str | int = "s0", **fields: Any) -> Attempt:
    """An attempt that built and ran but gave wrong values."""
    defaults: dict[str, Any] = dict(correct=False, visible_correct=False, heldout_correct=False, speedup=None,
                                    roofline_pct=None, status="INCORRECT", error_class="numerical.wrong_values")
    defaults.update(fields)
    return make(task, sample, **defaults)


def synthetic_run(passing: dict[str, int], n: int, name: str = "run_a",
                  good: Callable[..., Attempt] = make, bad: Callable[..., Attempt] = failed) -> list[Attempt]:
    """``n`` samples per task, the first ``passing[task]`` of them passing."""
    return [(good if i < c else bad)(task, i, run=name) for task, c in passing.items() for i in range(n)]


def _rows(table: str) -> list[str]:
    """The lines of a Markdown table, without the definitions above it and the notes below."""
    return [line for line in table.splitlines() if line.startswith("|")]


def only(summaries: list[Any]) -> Any:
    assert len(summaries) == 1
    return summaries[0]


# --------------------------------------------------------------------------------------------- pass@k


def test_pass_at_k_matches_brute_force_enumeration() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(outcomes, k))
                expected = sum(any(d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_for_large_n_and_checks_its_arguments() -> None:
    exact = 1 - Fraction(math.comb(497, 100), math.comb(500, 100))
    assert pass_at_k(500, 3, 100) == pytest.approx(float(exact), rel=1e-12)
    assert pass_at_k(10, 8, 3) == 1.0, "fewer than k failures: every draw holds a pass"
    assert pass_at_k(5, 0, 5) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 0)


# ------------------------------------------------------------------------------------------ summaries


def test_fast_p_counts_failures_in_the_denominator_and_never_unverified_features() -> None:
    attempts = [
        make("t0", 0, speedup=2.0),
        make("t0", 1, speedup=2.0, features_executed=None),  # unverified: never fast
        make("t0", 2, speedup=0.9),
        failed("t0", 3, compiled=False, correct=None, visible_correct=None, heldout_correct=None,
               features_executed=None, error_class="compile.ptx_syntax", status="COMPILE_ERROR"),
    ]
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert summary.rates["fast_1.0"].value == pytest.approx(0.25)
    assert summary.rates["fast_0.5"].value == pytest.approx(0.5)
    assert summary.rates["fast_1.5"].value == pytest.approx(0.25)
    assert summary.rates["fast_0.0"].value == pytest.approx(0.5)  # correct, executed, timed: the verified ones
    assert summary.rates["correct"].value == pytest.approx(0.75)
    assert summary.rates["compile"].value == pytest.approx(0.75)
    assert summary.rates["features_executed"].value == pytest.approx(0.5)
    assert summary.n_unverified == 1
    assert summary.n_unmeasured == 0, "a compile failure is a real failure, not a missing measurement"
    assert summary.comparable


def test_rates_average_tasks_not_samples() -> None:
    attempts = synthetic_run({"t0": 1}, n=1) + synthetic_run({"t1": 0}, n=9)
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert summary.rates["correct"].value == pytest.approx(0.5)
    assert (summary.n_tasks, summary.n_samples) == (2, 10)


def test_geometric_mean_speedup_and_roofline_over_correct_samples_only() -> None:
    attempts = [make("t0", 0, speedup=2.0, roofline_pct=40.0), make("t1", 0, speedup=8.0, roofline_pct=60.0),
                failed("t1", 1, speedup=100.0, roofline_pct=99.0)]
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert summary.speedup_geomean is not None and summary.speedup_geomean.value == pytest.approx(4.0)
    assert summary.roofline_pct_mean is not None and summary.roofline_pct_mean.value == pytest.approx(50.0)
    nothing = only(summarize([failed("t0", 0)], by=(), bootstrap=100))
    assert nothing.speedup_geomean is None and nothing.roofline_pct_mean is None


def test_generalization_is_heldout_given_visible_where_both_are_measured() -> None:
    attempts = [make("t0", i) for i in range(3)] + [
        failed("t0", 3, visible_correct=True, heldout_correct=False),
        failed("t0", 4), failed("t0", 5),  # visible wrong: outside the condition
        failed("t0", 6, visible_correct=True, heldout_correct=None),  # held-out not measured
    ]
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert summary.generalization is not None and summary.generalization.value == pytest.approx(0.75)
    assert only(summarize([failed("t0", 0)], by=(), bootstrap=0)).generalization is None


def test_variant_generalization_is_reported_beside_shape_generalization() -> None:
    attempts = [make("t0", i, heldout_variant_correct=True) for i in range(2)] + [
        # right on every shown setting and every held-out shape, wrong on a setting never shown
        make("t0", 2, correct=False, heldout_variant_correct=False, status="INCORRECT"),
        make("t0", 3, correct=False, heldout_variant_correct=False, status="INCORRECT"),
        failed("t0", 4, heldout_variant_correct=True),  # visible wrong: outside the condition
        make("t1", 0),  # a task without variants: counts for shapes only
    ]
    summary = only(summarize(attempts, by=(), bootstrap=200))
    assert summary.generalization is not None and summary.generalization.value == pytest.approx(1.0)
    assert summary.variant_generalization is not None and summary.variant_generalization.value == pytest.approx(0.5)
    low, high = summary.variant_generalization.low, summary.variant_generalization.high
    assert low is not None and high is not None and low <= 0.5 <= high
    table = summary_table([summary])
    assert "| held-out variants |" in _rows(table)[0] and "| 50.0 [" in table
    assert only(summarize([make("t1", 0)], by=(), bootstrap=0)).variant_generalization is None  # not measured


def test_the_last_turn_is_the_samples_outcome() -> None:
    attempts = [make("t0", 0, turn=0, last_turn=False), failed("t0", 0, turn=1, last_turn=True),
                failed("t0", 1, turn=0, last_turn=False), make("t0", 1, turn=1, last_turn=True)]
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert summary.rates["correct"].value == pytest.approx(0.5)
    assert (summary.n_attempts, summary.n_samples, summary.n_turns) == (2, 2, 4)  # attempts = samples; turns apart
    assert [(a.sample, a.turn) for a in last_turns(attempts)] == [("0", 1), ("1", 1)]


def test_groups_by_model_and_condition() -> None:
    attempts = (synthetic_run({"t0": 2}, n=4) + [make("t0", i, model="other") for i in range(4)]
                + [failed("t0", i, condition="full") for i in range(4)])
    summaries = summarize(attempts, by=("model", "condition"), bootstrap=0)
    assert [(s.group, s.rates["correct"].value) for s in summaries] == [
        ({"model": "m", "condition": "full"}, 0.0), ({"model": "m", "condition": "none"}, 0.5),
        ({"model": "other", "condition": "none"}, 1.0)]
    assert [s.group["task"] for s in summarize(attempts, bootstrap=0)] == ["t0"]
    with pytest.raises(ValueError, match="not a field"):
        summarize(attempts, by=("colour",))


def test_pass_at_k_in_summaries_and_too_few_samples() -> None:
    attempts = synthetic_run({"t0": 1, "t1": 0}, n=4)
    summary = only(summarize(attempts, by=(), k=2, bootstrap=0))
    assert summary.rates["correct"].value == pytest.approx((pass_at_k(4, 1, 2) + 0.0) / 2)
    with pytest.raises(ValueError, match="at least 5 attempts per task"):
        summarize(attempts, by=(), k=5)


def test_static_only_attempts_are_counted_as_unmeasured() -> None:
    static = [make("t0", i, correct=None, visible_correct=None, heldout_correct=None, features_executed=None,
                   speedup=None, roofline_pct=None, status=None, error_class="unevaluated", verified_on_gpu=False)
              for i in range(3)]
    no_code = make("t0", 3, compiled=False, correct=None, error_class="extraction.no_code_block")
    summary = only(summarize(static + [no_code], by=(), bootstrap=0))
    assert summary.n_unmeasured == 3 and not summary.comparable
    assert summary.rates["correct"] is None, "no attempt measured correctness: not measured, never 0"
    assert summary.rates["compile"].value == pytest.approx(0.75)
    assert not unmeasured(no_code)
    assert "never measured on a GPU" in summary_table([summary])


def test_a_rate_is_not_measured_only_where_nothing_could_have_measured_it() -> None:
    not_built = make("t1", 0, compiled=False, correct=None, visible_correct=None, heldout_correct=None,
                     features_executed=None, speedup=None, status="COMPILE_ERROR", error_class="compile.cpp_error")
    no_gpu = make("t0", 0, correct=None, visible_correct=None, heldout_correct=None, features_executed=None,
                  speedup=None, status=None, error_class="infra.no_gpu", verified_on_gpu=False)
    # Without a GPU, the task whose kernels all failed to build reads "not measured" like the other one: the
    # run measured no correctness at all, so its column does not mix 0 with "not measured".
    cpu = summarize([no_gpu, not_built], by=("task",), bootstrap=0)
    assert [s.rates["correct"] for s in cpu] == [None, None]
    assert [s.rates["compile"].value for s in cpu] == [1.0, 0.0]
    # On a GPU run the same failed task's 0 is a measurement: correctness was measured in the run.
    gpu = summarize([make("t0", 0), not_built], by=("task",), bootstrap=0)
    assert [s.rates["correct"].value for s in gpu] == [1.0, 0.0]
    # Correct but never timed (--no-time): fast_p is not measured, correctness is.
    untimed = only(summarize([make("t0", 0, speedup=None), failed("t0", 1)], by=(), bootstrap=0))
    assert untimed.rates["correct"].value == 0.5 and untimed.rates["fast_1.0"] is None
    # Correct and timed, features unverified (no profiler): fast_p is a lower bound, said by n_unverified.
    unprofiled = only(summarize([make("t0", 0, features_executed=None)], by=(), bootstrap=0))
    assert unprofiled.rates["fast_1.0"].value == 0.0 and unprofiled.n_unverified == 1
    assert unprofiled.rates["features_executed"] is None


# ------------------------------------------------------------------------------------------ bootstrap


def test_intervals_contain_the_estimate_and_shrink_with_more_samples() -> None:
    tasks = {f"t{i}": None for i in range(4)}
    small = only(summarize(synthetic_run({t: 5 for t in tasks}, n=10), by=(), bootstrap=500))
    large = only(summarize(synthetic_run({t: 100 for t in tasks}, n=200), by=(), bootstrap=500))
    for summary in (small, large):
        for name, rate in summary.rates.items():
            assert rate.low is not None and rate.high is not None
            assert rate.low - 1e-12 <= rate.value <= rate.high + 1e-12, name
    width = {s.n_samples: s.rates["correct"].high - s.rates["correct"].low for s in (small, large)}
    assert 0 < width[800] < width[40] / 2
    assert small.speedup_geomean is not None and small.speedup_geomean.low == pytest.approx(1.5)


def test_a_seed_gives_identical_intervals() -> None:
    attempts = synthetic_run({"t0": 3, "t1": 6}, n=10)
    first, second = (only(summarize(attempts, by=(), bootstrap=300, seed=7)) for _ in range(2))
    assert first == second
    other = only(summarize(attempts, by=(), bootstrap=300, seed=8))
    assert other.rates["correct"] != first.rates["correct"]
    assert other.rates["correct"].value == first.rates["correct"].value
    alone = only(summarize(attempts, by=("model",), bootstrap=300, seed=7))
    grouped = summarize(attempts + [make("t9", i, model="z") for i in range(3)], by=("model",), bootstrap=300, seed=7)
    assert grouped[0] == alone, "a group's interval does not depend on the other groups"


def test_with_one_sample_per_task_the_interval_resamples_tasks_and_says_so_or_there_is_none() -> None:
    attempts = synthetic_run({f"t{i}": int(i % 2 == 0) for i in range(20)}, n=1)
    chosen = only(summarize(attempts, by=(), bootstrap=300))
    asked = only(summarize(attempts, by=(), bootstrap=300, resample_tasks=True))
    assert chosen == asked and chosen.interval == "tasks"
    across = chosen.rates["correct"]
    assert across.low is not None and across.high is not None and across.low < 0.5 < across.high
    within = only(summarize(attempts, by=(), bootstrap=300, resample_tasks=False))
    assert within.interval is None and within.rates["correct"] == Estimate(value=0.5)  # never [50.0, 50.0]
    per_task = summarize(attempts, bootstrap=300)  # a row per task, one attempt each: nothing to resample
    assert {s.interval for s in per_task} == {None} and all(s.rates["correct"].low is None for s in per_task)
    assert "Intervals: no interval" in summary_table(per_task) and "Intervals: 95 % bootstrap intervals " \
        "resampling the tasks" in summary_table([chosen])


def test_with_several_samples_per_task_the_interval_resamples_them_unless_asked_otherwise() -> None:
    attempts = synthetic_run({"t0": 2, "t1": 1}, n=4)
    assert only(summarize(attempts, by=(), bootstrap=100)).interval == "samples"
    assert only(summarize(attempts, by=(), bootstrap=100, resample_tasks=True)).interval == "tasks"
    assert only(summarize(attempts, by=(), bootstrap=0)).interval is None
    mixed = attempts + [make("t2", 0)]  # one task with a single attempt: its samples alone would vary nothing
    assert only(summarize(mixed, by=(), bootstrap=100)).interval == "tasks"


# ---------------------------------------------------------------------------------- turns, taxonomy, render


def test_best_of_turns_carries_early_passes_forward() -> None:
    attempts = [
        make("t0", 0, turn=0),  # passed at once, stopped
        failed("t0", 1, turn=0, last_turn=False), make("t0", 1, turn=1, speedup=0.5),
        failed("t0", 2, turn=0, last_turn=False), failed("t0", 2, turn=1, last_turn=False), failed("t0", 2, turn=2),
    ]
    assert best_of_turns(attempts, 3) == [(1, pytest.approx(1 / 3)), (2, pytest.approx(2 / 3)),
                                          (3, pytest.approx(2 / 3))]
    assert [r.rate for r in best_of_turns(attempts, 3, metric="fast_1.0")] == pytest.approx([1 / 3] * 3)
    curve_end = best_of_turns(attempts, 3)[-1].rate
    assert curve_end == pytest.approx(only(summarize(attempts, by=(), bootstrap=0)).rates["correct"].value)
    assert best_of_turns([], 2) == []


def test_taxonomy_counts_failed_attempts_most_frequent_first() -> None:
    attempts = [make("t0", 0), failed("t0", 1), failed("t0", 2),
                failed("t0", 3, error_class="compile.ptx_syntax", turn=0, last_turn=False),
                failed("t0", 3, turn=1)]
    assert taxonomy_counts(attempts) == {"numerical.wrong_values": 3, "compile.ptx_syntax": 1}
    assert list(taxonomy_counts(attempts)) == ["numerical.wrong_values", "compile.ptx_syntax"]
    assert taxonomy_counts(attempts, last_turn_only=True) == {"numerical.wrong_values": 3}


def test_task_rates_and_summary_table() -> None:
    attempts = synthetic_run({"t0": 2, "t1": 4}, n=4)
    assert task_rates(attempts)[("sm_90a", "t0")] == (4, 2, 0.5)
    with pytest.raises(ValueError, match="unknown metric"):
        task_rates(attempts, "bogus")
    table = summary_table(summarize(attempts, by=("task",), bootstrap=100))
    assert table.startswith("@1: the unbiased pass@1 per task over its attempts, averaged over tasks; an attempt is "
                            "a sample scored by its last answered turn")
    lines = _rows(table)
    assert lines[0].startswith("| task | compile@1 |") and "fast_1.0@1" in lines[0]
    assert lines[0].endswith("| tasks | attempts | turns | not measured |")
    assert lines[2].startswith("| t0 |") and "| 50.0 [" in lines[2]
    assert all(line.count("|") == lines[0].count("|") for line in lines[:4])
    assert "never measured" not in table


# ------------------------------------------------------------------------------------- provider errors


def unanswered(task: str = "t0", sample: str | int = "s0", **fields: Any) -> Attempt:
    """A turn the provider never answered: what ``attempts.py`` makes of it."""
    defaults: dict[str, Any] = dict(compiled=False, features_in_ptx=False, features_in_sass=False, correct=None,
                                    visible_correct=None, heldout_correct=None, features_executed=None, speedup=None,
                                    roofline_pct=None, status=None, error_class="extraction.provider_error",
                                    verified_on_gpu=False)
    defaults.update(fields)
    return make(task, sample, **defaults)


def test_a_provider_error_never_overwrites_a_verdict_nor_counts_as_a_failure() -> None:
    from ptxbench.results.measured import State, state
    from ptxbench.results.metrics import cut_short, provider_errors

    attempts = [
        make("t0", 0, turn=0, last_turn=False), failed("t0", 0, turn=1, last_turn=True),
        failed("t0", 1, turn=0, last_turn=True), unanswered("t0", 1, turn=1, last_turn=False),
        # stored before the last answered turn was the outcome: the provider error marked last, still no verdict
        make("t0", 2, turn=0, last_turn=False), unanswered("t0", 2, turn=1, last_turn=True),
        unanswered("t0", 3), unanswered("t1", 0),
    ]
    assert [(a.sample, a.turn) for a in last_turns(attempts)] == [("0", 1), ("1", 0), ("2", 0)]
    assert [(a.task, a.sample) for a in provider_errors(attempts)] == [("t0", "3"), ("t1", "0")]
    assert cut_short(attempts) == 2
    assert {state(unanswered(), m) for m in ("compile", "correct", "fast_1.0")} == {State.UNKNOWN}
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert summary.rates["correct"].value == pytest.approx(1 / 3), "over the 3 answered samples of t0 only"
    assert (summary.n_samples, summary.n_attempts, summary.n_turns) == (5, 3, 4)
    assert (summary.n_provider_errors, summary.n_cut_short, summary.n_tasks) == (2, 2, 1)
    assert summary.tasks_without_attempts == ["sm_90a/t1"]
    assert "extraction.provider_error" not in taxonomy_counts(attempts)
    assert best_of_turns(attempts, 2) == [(1, pytest.approx(2 / 3)), (2, pytest.approx(2 / 3))]
    (t0, t1) = summarize(attempts, bootstrap=0)
    assert t1.n_attempts == 0 and set(t1.rates.values()) == {None} and t1.speedup_geomean is None
    table = summary_table([t0, t1])
    assert "| provider errors |" in _rows(table)[0] and "2 sample(s) were never answered by the provider" in table


def test_pass_at_k_counts_answered_samples_and_says_so_when_too_few() -> None:
    attempts = synthetic_run({"t0": 1}, n=3) + [unanswered("t0", 9)]
    assert only(summarize(attempts, by=(), k=3, bootstrap=0)).rates["correct"].value == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"at least 4 attempts per task; too few in: sm_90a/t0 \(3\) "
                                         r"\(provider errors are no attempts\)"):
        summarize(attempts, by=(), k=4)
