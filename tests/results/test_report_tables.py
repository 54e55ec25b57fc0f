"""The report's per-task table and what stands beside it (issue #43, item 7): a weak baseline's warning in a note,
not in the speedup column; task names never broken; no empty plot panel on a CPU run; each task's candidates
listed with how far each required feature got, so "features in SASS 0 %" can be read back to its kernels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptxbench.records.evaluation import InfraFailure
from ptxbench.results.attempts import Attempt, attempts_from_run
from ptxbench.results.metrics import DEFAULT_PS, DEFAULT_SOL_PS, fast_metric, sol_metric, summarize
from ptxbench.results.report.content import FAST_P_TABLE, SOL_P_TABLE, candidate_table, task_table

pytest.importorskip("matplotlib")

from ptxbench.results.report import render_report  # noqa: E402
from ..conftest import published_weak_task  # noqa: E402

from .test_report import _evaluations, _write_run  # noqa: E402

WEAK = published_weak_task()  # a task whose published best baseline is far below its roofline


def _timed(task: str, sample: str, speedup: float, **fields: object) -> Attempt:
    return Attempt(run="r", arch="sm_90a", task=task, family="elementwise", sample=sample, compiled=True,
                   features_in_ptx=True, features_in_sass=True, correct=True, features_executed=True, speedup=speedup,
                   status="PASSED", error_class="ok", verified_on_gpu=True, **fields)


def _section(markdown: str, title: str) -> str:
    return markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_a_weak_baseline_is_marked_in_the_speedup_column_and_explained_below_the_table() -> None:
    attempts = [_timed(WEAK, "s0", 2.4), _timed("softmax", "s0", 1.1)]
    table = task_table(attempts)
    speed = {row[0]: row[table.headers.index("median speedup")] for row in table.rows}
    assert speed == {WEAK: "2.40× ⚠", "softmax": "1.10×", "all tasks": "1.75×"}
    (note,) = table.notes
    assert note.startswith(f"⚠ {WEAK}: best baseline reaches ") and "roofline" in note
    report = render_report(attempts, "weak")
    per_task = _section(report.markdown, "Per task")
    assert "best baseline reaches" not in "".join(line for line in per_task.splitlines() if line.startswith("|"))
    assert f"\n\n⚠ {WEAK}: best baseline reaches" in per_task
    assert re.search(rf'</table><p class="note">⚠ {re.escape(WEAK)}: best baseline reaches', report.html)


def test_a_weak_baseline_without_a_speedup_says_nothing() -> None:
    untimed = _timed(WEAK, "s0", 1.0).model_copy(update={"speedup": None, "correct": None, "status": None,
                                                         "error_class": "infra.no_gpu", "verified_on_gpu": False})
    table = task_table([untimed])
    assert table.notes == () and table.rows[0][table.headers.index("median speedup")] == "—"


def test_task_names_never_wrap_in_the_page() -> None:
    page = render_report([_timed("add_rmsnorm", "s0", 1.2), _timed(WEAK, "s0", 2.0)], "names").html
    assert "table.names td:first-child { white-space: nowrap; overflow-wrap: normal; }" in page
    per_task = page.split("<h2>Per task</h2>", 1)[1]
    assert per_task.lstrip().startswith('<table class="names">')
    assert page.split("<h2>Candidates per task</h2>", 1)[1].lstrip().startswith('<table class="names">')


def test_a_cpu_run_draws_no_empty_panel_and_says_why(tmp_path: Path) -> None:
    evaluations = {key: ev.model_copy(update={"status": None, "trials": [], "timings": [], "features": None,
                                              "guards": [], "infra_failure": InfraFailure.NO_GPU})
                   for key, ev in _evaluations().items() if ev.build is not None and ev.build.ok}
    report = render_report(attempts_from_run(_write_run(tmp_path / "cpu", evaluations)), "cpu")
    titles = re.findall(r"<figure><h3>([^<]+)</h3>", report.html)
    assert titles == ["Instruction funnel", "Error taxonomy"]
    assert ("Not drawn, having nothing to show: fast_p (no attempt ran on a GPU); speedup (no attempt ran on a "
            "GPU).") in report.html
    assert "not drawn there, having nothing to show: fast_p (no attempt ran on a GPU)" in report.markdown


def test_the_candidates_of_each_task_say_how_far_each_required_feature_got(tmp_path: Path) -> None:
    attempts = attempts_from_run(_write_run(tmp_path / "run", _evaluations()))
    rows = {(row[0], row[2]): row for row in candidate_table(attempts).rows}
    # gemm_bf16: g3's TMA was requested in the PTX and lost in ptxas; g0 never built; g2 kept no static report.
    assert rows[("gemm_bf16", "numerical.nan")][1:] == ["1: g3", "numerical.nan", "tma.load | bulk.copy: ptx"]
    assert rows[("gemm_bf16", "compile.ptx_syntax")][3] == "not built"
    assert rows[("softmax", "ok")][1:] == ["2: s0, s1", "ok", "tma.load | bulk.copy: sass"]
    markdown = render_report(attempts, "candidates").markdown
    assert "| gemm_bf16 | 1: g3 | numerical.nan | tma.load \\| bulk.copy: ptx |" in _section(markdown,
                                                                                           "Candidates per task")


def test_report_and_metrics_show_the_same_fast_p_and_sol_p_thresholds() -> None:
    assert FAST_P_TABLE == DEFAULT_PS and SOL_P_TABLE == DEFAULT_SOL_PS
    (summary,) = summarize([_timed("softmax", "s0", 1.1)], by=(), bootstrap=0)
    section = _section(render_report([_timed("softmax", "s0", 1.1)], "p").markdown, "fast_p and sol_p")
    fast_rates = [metric for metric in summary.rates if metric.startswith("fast_")]
    assert fast_rates == re.findall(r"\| (fast_[\d.]+)", section) == [fast_metric(p) for p in DEFAULT_PS]
    sol_rates = [metric for metric in summary.rates if metric.startswith("sol_")]
    assert sol_rates == re.findall(r"\| (sol_[\d.]+)", section) == [sol_metric(p) for p in DEFAULT_SOL_PS]


def test_an_empty_group_is_not_measured_and_an_empty_report_prints_no_0() -> None:
    from ptxbench.results.measured import is_measured

    assert not is_measured([], "compile"), "a group without attempts measured nothing"
    funnel = _section(render_report([], "empty").markdown, "Instruction funnel")
    assert "| compiled | — | — | not measured: nothing was built |" in funnel
    assert "| 0 |" not in funnel.split("| attempts | 0 |", 1)[1]
