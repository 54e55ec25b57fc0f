"""``eval``'s table and progress lines show the SOL score beside the speedup (issue #37, item 2), and mark the
speedup of a task whose best baseline is weak, whose speed verdict is SOL (item 3)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.cli import app
from ptxbench.records.evaluation import (
    Comparison, Evaluation, Guard, GuardFinding, InfraFailure, Status, Timing, TrialResult,
)
from ptxbench.results.terminal import EvalProgress, verdict_table

from ..conftest import EXAMPLES, published_weak_task

runner = CliRunner()
WEAK = published_weak_task()  # a task whose published best baseline is far below its roofline


def _evaluation(task: str, status: Status = Status.PASSED, roofline_pct: float | None = 42.0,
                **fields: Any) -> Evaluation:
    passed = status is not Status.INCORRECT
    trial = TrialResult(workload="w", role="visible", seed=1, passed=passed, comparisons=[
        Comparison(output="out", passed=passed, elements=8, mismatched=0 if passed else 8, nonfinite=0,
                   max_abs_error=0.0, max_rel_error=0.0)])
    timings = [Timing(workload="w", candidate_ms=1.0, candidate_iqr_ms=0.01, baseline="torch", baseline_ms=1.5,
                      samples=20, roofline_pct=roofline_pct)] if passed else []
    return Evaluation(candidate=f"{task}.cu", task=task, task_hash="h", arch=Arch.SM_90A, status=status,
                      trials=[trial], timings=timings, message="correct on every workload", **fields)


def _rows(results: list[Evaluation]) -> tuple[dict[str, list[str]], list[str]]:
    table, notes = verdict_table(results)
    columns = [[str(cell) for cell in column.cells] for column in table.columns]
    assert [c.header for c in table.columns] == ["candidate", "task", "status", "speedup", "SOL", "detail"]
    return {row[0]: row for row in zip(*columns)}, notes  # type: ignore[misc]


def test_the_table_shows_speedup_and_sol_of_honestly_timed_candidates() -> None:
    rows, notes = _rows([
        _evaluation("softmax"),
        _evaluation("rmsnorm", roofline_pct=None),  # timed where no roofline was measured
        _evaluation("transpose", Status.INCORRECT),
        _evaluation("gemm_bf16", Status.REJECTED,
                    guards=[GuardFinding(guard=Guard.TIMING_DISAGREES, detail="event times forged")]),
        _evaluation("silu_mul", Status.REJECTED,
                    guards=[GuardFinding(guard=Guard.FEATURE_NOT_EXECUTED, detail="TMA never ran")]),
    ])
    assert rows["softmax.cu"][3:5] == ("1.50×", "0.42")
    assert rows["rmsnorm.cu"][3:5] == ("1.50×", "—")
    assert rows["transpose.cu"][3:5] == ("—", "—")
    assert rows["gemm_bf16.cu"][3:5] == ("—", "—"), "a time the harness caught being forged is not shown"
    assert rows["silu_mul.cu"][3:5] == ("1.50×", "0.42"), "right but without its features: its times stand"
    assert notes == []


def test_a_weak_baselines_speedup_is_marked_and_its_verdict_is_sol() -> None:
    rows, notes = _rows([_evaluation(WEAK, roofline_pct=18.0), _evaluation("softmax")])
    assert rows[f"{WEAK}.cu"][3:5] == ("1.50× ⚠", "0.18") and rows["softmax.cu"][3] == "1.50×"
    (note,) = notes
    assert note.startswith(f"⚠ {WEAK}: best baseline reaches ") and note.endswith("its speed verdict is SOL, not "
                                                                                  "the speedup")


def test_the_progress_line_of_a_pass_gives_its_sol() -> None:
    out = io.StringIO()
    with EvalProgress(Console(file=out, width=200, force_terminal=False), 2, "eval") as progress:
        progress.done(_evaluation("softmax"))
        progress.done(_evaluation("rmsnorm", roofline_pct=None))
    assert out.getvalue().splitlines() == [
        "[1/2] softmax.cu: PASSED (0.0 s) 1.50x the vendor baseline, 0.42 of SOL",
        "[2/2] rmsnorm.cu: PASSED (0.0 s) 1.50x the vendor baseline"]


def test_a_pass_timed_against_an_imported_tasks_reference_says_so() -> None:
    """An imported task's baseline is its definition's own reference, not a vendor library."""
    from ptxbench.evaluate.judgement.verdict import summary

    imported = _evaluation("softmax")
    imported.timings[0] = imported.timings[0].model_copy(update={"baseline": "reference"})
    out = io.StringIO()
    with EvalProgress(Console(file=out, width=200, force_terminal=False), 1, "eval") as progress:
        progress.done(imported)
    assert out.getvalue().splitlines() == ["[1/1] softmax.cu: PASSED (0.0 s) 1.50x the task's reference, 0.42 of SOL"]
    assert "1.50x the task's reference" in summary(imported, Status.PASSED)
    assert "1.50x the vendor baseline" in summary(_evaluation("softmax"), Status.PASSED)


def test_eval_prints_the_table_with_sol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ptxbench.evaluate.fleet import run as fleet

    def evaluated(candidates: list[Any], *args: Any, **kwargs: Any) -> list[Evaluation]:
        return [_evaluation(c.task.id, roofline_pct=18.0 if c.task.id == WEAK else 42.0,
                            durations_s={"total": 1.0}).model_copy(update={"candidate": c.item})
                for c in candidates]

    monkeypatch.setattr(fleet, "evaluate_candidates", evaluated)
    for name in ("softmax.cu", f"{WEAK}.cu"):
        (tmp_path / name).write_text((EXAMPLES / "softmax.cu").read_text())
    done = runner.invoke(app, ["eval", str(tmp_path / "softmax.cu"), str(tmp_path / f"{WEAK}.cu"),
                               "--out", str(tmp_path / "out")], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    table = [line for line in done.output.splitlines() if "│" in line]
    assert any("softmax" in line and "1.50×" in line and "0.42" in line for line in table), done.output
    # the weak task's row (its name may be cut to the terminal's width; the note below names it whole)
    assert any("1.50× ⚠" in line and "0.18" in line for line in table), done.output
    assert f"⚠ {WEAK}: best baseline reaches" in done.output


def test_no_gpu_rows_still_say_what_the_binary_shows() -> None:
    from ptxbench.static.report import StaticReport

    static = StaticReport(arch=Arch.SM_90A, ptx={}, kernels=[], warnings=[], features=[], requirements=[])
    result = Evaluation(candidate="softmax.cu", task="softmax", task_hash="h", arch=Arch.SM_90A, static=static,
                        infra_failure=InfraFailure.NO_GPU, message="no GPU")
    rows, _ = _rows([result])
    assert rows["softmax.cu"][3:] == ("—", "—", "static only: ")
