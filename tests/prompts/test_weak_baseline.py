"""Where the published baseline quality calls a task's best baseline weak, its prompt says the speed verdict is
SOL, right after the baseline line (issue #37, item 3); a held-out workload is never named there."""

from __future__ import annotations

from ptxbench.arch.registry import Arch
from ptxbench.prompts.task import render_task_prompt
from ptxbench.tasks.baseline_quality import BaselineQuality
from ptxbench.tasks.loader import get_task

from ..conftest import published_weak_task


def _quality(task: str, workload: str, pct: float) -> BaselineQuality:
    return BaselineQuality(gpu="NVIDIA H200", date="2026-12-04", tasks={task: {workload: pct}})


def test_a_weak_baseline_is_said_after_the_baseline_line() -> None:
    task = get_task("transpose")
    text = render_task_prompt(task, Arch.SM_90A, _quality("transpose", task.timed().name, 22.0))
    line = f"compared with {task.baseline.call}.\nThat baseline is weak here: its best reaches 22 % of the roofline"
    assert line in text
    assert "on the timed shape (NVIDIA H200), so speed on this task is judged by the SOL score" in text
    assert "not by the speedup." in text


def test_a_strong_or_unmeasured_baseline_adds_nothing() -> None:
    task = get_task("transpose")
    plain = render_task_prompt(task, Arch.SM_90A, BaselineQuality())
    assert f"compared with {task.baseline.call}.\n- `" in plain and "SOL" not in plain
    assert render_task_prompt(task, Arch.SM_90A, _quality("transpose", task.timed().name, 95.0)) == plain


def test_a_held_out_workload_is_never_named() -> None:
    task = get_task("transpose")
    hidden = task.held_out()[0].name
    text = render_task_prompt(task, Arch.SM_90A, _quality("transpose", hidden, 10.0))
    assert "on some of its shapes" in text and hidden not in text


def test_the_published_quality_is_the_default() -> None:
    # a task whose best baseline is published far below its roofline (src/ptxbench/tasks/baseline_quality.json)
    assert "judged by the SOL score" in render_task_prompt(get_task(published_weak_task()), Arch.SM_90A)
