"""Damage stays local in reading (issue #43, item 4): one item's truncated or invalid ``result.json`` is named
with its reason, and ``report`` and ``metrics`` (and ``compare``, ``leaderboard``) still count every other item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.records.rundir import RunDirError
from ptxbench.results.attempts import attempts_from_run, read_attempts

from ..cli.newcomer import cli, one_line
from ..conftest import EXAMPLES

TASKS = ("rmsnorm", "softmax", "transpose")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An eval run of three candidates on the CPU, made once; each test damages its own copy."""
    out = tmp_path_factory.mktemp("damage") / "run"
    done = cli("eval", *(str(EXAMPLES / f"{task}.cu") for task in TASKS), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _damaged_copy(evaluated: Path, tmp_path: Path, how: str) -> tuple[Path, Path]:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(evaluated, run)
    result = run / "items" / "softmax" / "softmax" / "result.json"
    text = result.read_text()
    result.write_text({"truncated": text[: len(text) // 2], "invalid": json.dumps({"task": "softmax"}),
                       "empty": ""}[how])
    return run, result


@pytest.mark.parametrize("how", ["truncated", "invalid", "empty"])
def test_a_damaged_result_is_named_and_the_others_are_read(evaluated: Path, tmp_path: Path, how: str) -> None:
    run, result = _damaged_copy(evaluated, tmp_path, how)
    attempts, damaged = read_attempts(run)
    assert sorted(a.task for a in attempts) == ["rmsnorm", "transpose"]
    (item,) = damaged
    assert item.item == "softmax/softmax" and item.path == result
    assert item.reason.startswith("not an evaluation (") and str(result) not in item.reason
    with pytest.raises(RunDirError, match="softmax/result.json: not an evaluation"):
        attempts_from_run(run)  # the strict reader, for callers that must not go on without an item


def test_metrics_report_the_others_and_name_the_damaged_item(evaluated: Path, tmp_path: Path) -> None:
    run, result = _damaged_copy(evaluated, tmp_path, "truncated")
    text = cli("metrics", str(run), "--bootstrap", "0")
    assert text.returncode == 0, text.stderr
    assert "| rmsnorm |" in text.stdout and "| transpose |" in text.stdout and "| softmax |" not in text.stdout
    note = one_line(text.stdout.split("> Damaged item", 1)[1])
    assert note.startswith(f", left out of every count: {result}: not an evaluation (Invalid JSON")
    as_json = cli("metrics", str(run), "--bootstrap", "0", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [s["group"]["task"] for s in json.loads(as_json.stdout)] == ["rmsnorm", "transpose"]
    assert one_line(as_json.stderr).startswith(f"warning: {result}: not an evaluation (Invalid JSON")


def test_the_report_reports_the_others_and_names_the_damaged_item(evaluated: Path, tmp_path: Path) -> None:
    run, result = _damaged_copy(evaluated, tmp_path, "invalid")
    done = cli("report", str(run))
    assert done.returncode == 0, done.stderr
    assert one_line(done.stderr).startswith(f"warning: {result}: not an evaluation (missing field 'candidate'")
    markdown = (run / "report.md").read_text()
    assert "> **Damaged items.** Left out of every count, their result unreadable: softmax/softmax: not an " \
           "evaluation (missing field 'candidate'" in markdown
    assert "| rmsnorm |" in markdown and "| transpose |" in markdown and "**tasks:** 2" in markdown
    assert "Damaged items." in (run / "report.html").read_text()


def test_compare_and_leaderboard_name_the_damaged_item_too(evaluated: Path, tmp_path: Path) -> None:
    run, result = _damaged_copy(evaluated, tmp_path, "empty")
    compared = cli("compare", str(evaluated), str(run), "--metric", "compile")
    assert compared.returncode == 0, compared.stderr
    assert f"> Damaged item, left out: {result}: not an evaluation" in one_line(compared.stdout)
    board = cli("leaderboard", str(evaluated), str(run), "--metric", "compile")
    assert board.returncode == 0, board.stderr
    assert f"> Damaged item, left out: {result}: not an evaluation" in one_line(board.stdout)
