"""The report's SOL (issue #37): sol_p beside fast_p, the median SOL per task and in a card, "not measured" where
no roofline was measured; a task whose best baseline is weak (item 3) has its speed verdict in SOL, and the
headline speedup leaves it out."""

from __future__ import annotations

from typing import Any

import pytest

from ptxbench.results.attempts import Attempt

from .test_metrics import make

pytest.importorskip("matplotlib")

from ptxbench.results.report import render_report  # noqa: E402
from ptxbench.results.report.content import report_content, speed_cards, weak_baseline_warnings  # noqa: E402
from ..conftest import published_weak_task  # noqa: E402

WEAK = published_weak_task()  # a task whose published best baseline is far below its roofline


def _timed(task: str, sample: str, speedup: float, roofline_pct: float | None, **fields: Any) -> Attempt:
    return make(task, sample, run="r", family="elementwise", speedup=speedup, roofline_pct=roofline_pct, **fields)


def _cells(table: Any, task: str) -> dict[str, str]:
    row = next(row for row in table.rows if row[0] == task)
    return dict(zip(table.headers, row))


def test_the_report_shows_sol_per_task_and_judges_a_weak_baseline_by_it() -> None:
    assert WEAK in weak_baseline_warnings([WEAK, "softmax"]) and "softmax" not in weak_baseline_warnings(["softmax"])
    attempts = [_timed(WEAK, "s0", 3.2, 30.0), _timed(WEAK, "s1", 2.8, 20.0),
                _timed("softmax", "s0", 1.1, 70.0), _timed("softmax", "s1", 0.9, 90.0)]
    content = report_content(attempts, "sol", None)
    weak, softmax = _cells(content.tasks, WEAK), _cells(content.tasks, "softmax")
    assert (weak["median speedup"], weak["median SOL"]) == ("3.00× ⚠", "0.25")
    assert (softmax["median speedup"], softmax["median SOL"]) == ("1.00×", "0.80")
    (note,) = content.tasks.notes
    assert note.startswith(f"⚠ {WEAK}: best baseline reaches ")
    assert note.endswith("its speed verdict is SOL (median 0.25), not the speedup.")
    # the headline speedup leaves out the weak baseline's task; the SOL card counts every task
    cards = {label: (value, detail) for label, value, detail in content.headline}
    assert cards["median speedup"] == ("1.00×", "over 2 correct; 2 on weak-baseline tasks judged by SOL")
    assert cards["median SOL"] == ("0.50", "over 4 correct")
    fast = dict(zip(content.fast.headers, content.fast.rows[0]))
    assert (fast["sol_0.5"], fast["sol_0.8"], fast["fast_1.0"]) == ("50%", "25%", "75%")
    report = render_report(attempts, "sol")
    assert "| median SOL |" in report.markdown and "its speed verdict is SOL (median 0.25)" in report.markdown
    assert "<th class=\"num\">sol_0.8</th>" in report.html and "median SOL" in report.html
    assert "**SOL**: the speed-of-light score" in report.markdown


def test_the_report_without_a_roofline_says_sol_was_not_measured() -> None:
    content = report_content([_timed("softmax", "s0", 1.2, None)], "untimed roofline", None)
    assert _cells(content.tasks, "softmax")["median SOL"] == "not measured"
    fast = dict(zip(content.fast.headers, content.fast.rows[0]))
    assert fast["sol_0.5"] == "not measured" and fast["fast_1.0"] == "100%"
    cards = {label: (value, detail) for label, value, detail in content.headline}
    assert cards["median SOL"] == ("not measured", "no roofline measured")
    assert "SOL was not measured" in content.speed


def test_every_task_weak_leaves_the_headline_speedup_to_sol() -> None:
    cards = {label: (value, detail) for label, value, detail in speed_cards([_timed(WEAK, "s0", 4.0, 10.0)])}
    assert cards["median speedup"] == ("—", "every timed task's baseline is weak: 1 judged by SOL")
    assert cards["median SOL"] == ("0.10", "over 1 correct")
