"""The speed-of-light score (issue #37, item 2): SOL is the attainable time over the candidate's, derived from the
stored ``roofline_pct`` (no new field, so older records have it); sol_p beside fast_p in ``metrics`` (text and
JSON), ``compare`` and ``leaderboard``; "not measured" (null) where no roofline was measured, never 0. The
report's side is in test_report_sol.py."""

from __future__ import annotations

import json
from pathlib import Path
import pytest
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.cli import app
from ptxbench.records.evaluation import Comparison, Evaluation, Status, Timing, TrialResult
from ptxbench.records.rundir import RESULT_FILE, RunDir, RunHeader, write_model
from ptxbench.results.attempts import Attempt, attempts_from_run
from ptxbench.results.compare import compare_runs, leaderboard
from ptxbench.results.metrics import DEFAULT_SOL_PS, sol_metric, summarize, summary_table

from .test_metrics import failed, make, only

runner = CliRunner()


# -- the score itself ----------------------------------------------------------------------------


def test_sol_is_roofline_pct_as_a_fraction_and_older_records_have_it() -> None:
    timing = Timing(workload="w", candidate_ms=2.0, candidate_iqr_ms=0.1, samples=10, roofline_pct=42.0)
    assert timing.sol == pytest.approx(0.42)
    older = Timing.model_validate({"workload": "w", "candidate_ms": 2.0, "candidate_iqr_ms": 0.1, "samples": 10})
    assert older.sol is None, "a record timed without a roofline has no SOL, not 0"
    assert make(roofline_pct=80.0).sol == pytest.approx(0.8) and make(roofline_pct=None).sol is None
    assert "sol" not in Timing.model_fields and "sol" not in Attempt.model_fields  # derived, not stored twice


def test_sol_p_needs_correct_executed_and_the_share() -> None:
    assert make(roofline_pct=80.0).at_sol(0.8) and not make(roofline_pct=79.0).at_sol(0.8)
    assert not make(roofline_pct=95.0, features_executed=None).at_sol(0.5), "unverified features: as fast_p"
    assert not make(roofline_pct=95.0, features_executed=False).at_sol(0.5)
    assert not failed(roofline_pct=95.0).at_sol(0.5)


# -- metrics ---------------------------------------------------------------------------------------


def test_sol_p_is_a_share_of_all_attempts_beside_fast_p() -> None:
    attempts = [make("t0", 0, roofline_pct=90.0), make("t0", 1, roofline_pct=60.0), make("t0", 2, roofline_pct=30.0),
                make("t0", 3, roofline_pct=None),  # correct, timed without a roofline: does not reach it
                failed("t0", 4)]
    summary = only(summarize(attempts, by=(), bootstrap=0))
    assert [m for m in summary.rates if m.startswith("sol_")] == [sol_metric(p) for p in DEFAULT_SOL_PS]
    assert summary.rates["sol_0.5"].value == pytest.approx(2 / 5)
    assert summary.rates["sol_0.8"].value == pytest.approx(1 / 5)
    assert summary.rates["fast_1.0"].value == pytest.approx(4 / 5)  # every correct one is 1.5x its baseline
    assert summary.roofline_pct_mean is not None and summary.roofline_pct_mean.value == pytest.approx(60.0)
    table = summary_table([summary])
    header = next(line for line in table.splitlines() if line.startswith("| "))
    cells = [cell.strip() for cell in header.strip("|").split("|")]
    assert cells.index("sol_0.5@1") == cells.index("fast_2.0@1") + 1 and "sol_0.8@1" in cells
    assert "SOL (mean)" in cells and "| 0.60 |" in table  # the mean SOL on sol_p's scale
    assert "sol_p: correct, features executed, and at least p of the speed of light" in table


def test_sol_p_without_any_roofline_is_not_measured_never_0() -> None:
    summary = only(summarize([make("t0", 0, roofline_pct=None), failed("t0", 1)], by=(), bootstrap=0))
    assert summary.rates["fast_1.0"].value == pytest.approx(0.5)
    assert summary.rates["sol_0.5"] is None and summary.rates["sol_0.8"] is None
    assert json.loads(summary.model_dump_json())["rates"]["sol_0.8"] is None
    # every attempt failed on a GPU: 0 is decided by the failures, as for fast_p
    settled = only(summarize([failed("t0", 0), failed("t0", 1)], by=(), bootstrap=0))
    assert settled.rates["sol_0.5"].value == 0.0 and settled.rates["fast_1.0"].value == 0.0


def test_sol_p_has_bootstrap_intervals_resampling_tasks() -> None:
    attempts = [make(f"t{i}", 0, roofline_pct=pct) for i, pct in enumerate((90.0, 60.0, 40.0, 20.0))]
    summary = only(summarize(attempts, by=(), bootstrap=300, resample_tasks=True))
    rate = summary.rates["sol_0.5"]
    assert summary.interval == "tasks" and rate.value == pytest.approx(0.5)
    assert rate.low is not None and rate.high is not None and rate.low < 0.5 < rate.high


def test_compare_and_leaderboard_take_sol_p() -> None:
    a = [make("t0", i, run="a", roofline_pct=90.0) for i in range(3)]
    b = [make("t0", i, run="b", roofline_pct=40.0) for i in range(3)]
    rows = leaderboard({"a": a, "b": b}, metric="sol_0.7", bootstrap=0)
    assert [(row.name, row.metric, row.rate.value) for row in rows] == [("a", "sol_0.7", 1.0), ("b", "sol_0.7", 0.0)]
    assert compare_runs(a, b, metric="sol_0.5").metric == "sol_0.5"
    with pytest.raises(ValueError, match="sol_p needs a number"):
        leaderboard({"a": a}, metric="sol_x")


# -- ptxbench metrics RUN --------------------------------------------------------------------------


def _evaluation(task: str, roofline_pct: float | None, passed: bool = True) -> Evaluation:
    trial = TrialResult(workload="w", role="visible", seed=1, passed=passed, comparisons=[
        Comparison(output="out", passed=passed, elements=8, mismatched=0 if passed else 8, nonfinite=0,
                   max_abs_error=0.0, max_rel_error=0.0)])
    timings = [Timing(workload="w", candidate_ms=1.0, candidate_iqr_ms=0.01, baseline="torch", baseline_ms=1.5,
                      samples=20, roofline_pct=roofline_pct)] if passed else []
    return Evaluation(candidate="k.cu", task=task, task_hash="h", arch=Arch.SM_90A,
                      status=Status.PASSED if passed else Status.INCORRECT, trials=[trial], timings=timings,
                      features=[])


def _run(path: Path, evaluations: dict[tuple[str, str], Evaluation]) -> Path:
    rundir = RunDir.open(path, RunHeader(kind="eval", config={"arch": "sm_90a", "options": {}},
                                         environment={"name": "NVIDIA H100"}))
    for (task, item), evaluation in evaluations.items():
        write_model(rundir.item(task, item) / RESULT_FILE, evaluation)
    return path


def _first_row(markdown: str) -> dict[str, str]:
    """The header and first row of ``metrics``' table, cell by cell."""
    header, row = ([c.strip() for c in line.strip("|").split("|")]
                   for line in [line for line in markdown.splitlines() if line.startswith("| ")][:2])
    return dict(zip(header, row))


def test_metrics_prints_sol_p_for_half_and_four_fifths(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", {("softmax", "a"): _evaluation("softmax", 85.0),
                                  ("softmax", "b"): _evaluation("softmax", 55.0),
                                  ("softmax", "c"): _evaluation("softmax", None, passed=False),
                                  ("softmax", "d"): _evaluation("softmax", 20.0)})
    attempts = attempts_from_run(run)
    assert sorted(a.sol for a in attempts if a.sol is not None) == pytest.approx([0.2, 0.55, 0.85])
    text = runner.invoke(app, ["metrics", str(run), "--by", "", "--bootstrap", "0"])
    assert text.exit_code == 0, text.output
    values = _first_row(text.output)
    assert values["sol_0.5@1"] == "50.0" and values["sol_0.8@1"] == "25.0" and values["fast_1.0@1"] == "75.0"
    data = json.loads(runner.invoke(app, ["metrics", str(run), "--by", "", "--bootstrap", "0", "--json"]).output)
    assert data[0]["rates"]["sol_0.5"]["value"] == pytest.approx(0.5)
    assert data[0]["rates"]["sol_0.8"]["value"] == pytest.approx(0.25)


def test_metrics_of_a_run_without_a_roofline_says_not_measured(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", {("softmax", "a"): _evaluation("softmax", None)})
    data = json.loads(runner.invoke(app, ["metrics", str(run), "--by", "", "--bootstrap", "0", "--json"]).output)
    assert data[0]["rates"]["sol_0.5"] is None and data[0]["rates"]["sol_0.8"] is None
    assert data[0]["rates"]["fast_1.0"]["value"] == pytest.approx(1.0)
    values = _first_row(runner.invoke(app, ["metrics", str(run), "--by", "", "--bootstrap", "0"]).output)
    assert (values["sol_0.5@1"], values["sol_0.8@1"], values["SOL (mean)"]) == ("–", "–", "–")
    assert values["fast_1.0@1"] == "100.0"
