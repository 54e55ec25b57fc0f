"""The baseline-quality summary end to end: benchmarks/baselines.py writes it (never over the packaged file
in tests), and `ptxbench tasks show/list` and the report warn where the best baseline is weak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.evaluate.baselines import variants as baselines
from ptxbench.results.attempts import Attempt
from ptxbench.results.report import render_report
from ptxbench.tasks import baseline_quality
from ptxbench.tasks.loader import get_task

from ..conftest import repo_script

bench = repo_script("benchmarks/baselines.py", "baselines_benchmark")

runner = CliRunner()
PEAKS = {"bytes_per_s": 4.0e12, "bf16_flops": 8.0e14, "fp8_flops": 1.6e15}


def _fake_document() -> dict:
    """A result document as measure() builds it, from made-up timings of two tasks."""
    transpose, softmax = get_task("transpose"), get_task("softmax")
    tasks: dict = {"transpose": {}, "softmax": {}}
    for workload in transpose.shown():
        attainable = bench.attainable_s(transpose.bytes_for(workload.sizes), 0.0, PEAKS, fp8=False)
        # eager at 5x the roofline time (20 %), compile at 4x (25 %): weak either way
        tasks["transpose"][workload.name] = bench.workload_row(
            {"compile": {"ms": attainable * 4e3}, "torch": {"ms": attainable * 5e3}}, attainable)
    workload = softmax.timed()
    attainable = bench.attainable_s(softmax.bytes_for(workload.sizes), 0.0, PEAKS, fp8=False)
    tasks["softmax"][workload.name] = bench.workload_row(
        {"liger": {"skipped": "liger_kernel could not be imported"}, "torch": {"ms": attainable / 0.9 * 1e3}},
        attainable)
    return {"gpu": "NVIDIA H200", "date": "2026-12-03",
            "versions": {"torch": "2.13", "cuda": "13.0", "cudnn": "9", "triton": "3.5", "liger_kernel": None},
            "command": "python benchmarks/baselines.py --tasks transpose,softmax", "tasks": tasks}


def test_the_benchmark_writes_exactly_the_documented_shape(tmp_path: Path) -> None:
    packaged = baselines.QUALITY_PATH.read_bytes()
    quality_path = tmp_path / "baseline_quality.json"
    bench.write(_fake_document(), tmp_path / "out" / "baselines_h200", quality_path=quality_path)
    assert baselines.QUALITY_PATH.read_bytes() == packaged

    doc = json.loads((tmp_path / "out" / "baselines_h200.json").read_text())
    assert set(doc) == {"gpu", "date", "versions", "command", "tasks"}  # "measured" is added by _document
    assert set(doc["tasks"]) == {"transpose", "softmax"}
    for workloads in doc["tasks"].values():
        for row in workloads.values():
            assert set(row) == {"best", "best_ms", "best_pct_of_roofline", "variants"}
            for variant in row["variants"].values():
                assert set(variant) in ({"ms"}, {"skipped"})
    timed = get_task("transpose").timed().name
    transpose = doc["tasks"]["transpose"][timed]
    assert transpose["best"] == "compile" and transpose["best_ms"] == transpose["variants"]["compile"]["ms"]
    assert transpose["best_pct_of_roofline"] == pytest.approx(25.0)
    softmax = doc["tasks"]["softmax"][get_task("softmax").timed().name]
    assert softmax["best"] == "torch" and softmax["best_pct_of_roofline"] == pytest.approx(90.0)
    assert softmax["variants"]["liger"] == {"skipped": "liger_kernel could not be imported"}

    markdown = (tmp_path / "out" / "baselines_h200.md").read_text()
    assert f"| transpose | {timed} | compile |" in markdown and "liger: liger_kernel could not be imported" in markdown

    quality = baselines.load_baseline_quality(quality_path)
    assert (quality.gpu, quality.date) == ("NVIDIA H200", "2026-12-03")
    assert quality.tasks["transpose"][timed] == pytest.approx(25.0)
    assert baselines.weak_baseline_warning(get_task("transpose"), quality) is not None
    assert baselines.weak_baseline_warning(get_task("softmax"), quality) is None


def test_a_run_over_some_tasks_updates_the_results_and_keeps_the_others_provenance() -> None:
    previous = {**_fake_document(), "date": "2026-12-01", "command": "python benchmarks/baselines.py"}
    rerun = {**_fake_document(), "date": "2026-12-04", "command": "python benchmarks/baselines.py --tasks softmax",
             "tasks": {"softmax": {"w": {"best": None, "best_ms": None, "best_pct_of_roofline": None, "variants": {}}}}}
    rerun["measured"] = {"softmax": {"date": "2026-12-04", "command": rerun["command"], "versions": rerun["versions"]}}
    doc = bench.merged(previous, rerun)
    assert doc["tasks"]["softmax"] == rerun["tasks"]["softmax"] and doc["tasks"]["transpose"] == previous["tasks"]["transpose"]
    assert doc["measured"]["transpose"]["date"] == "2026-12-01" and doc["measured"]["softmax"]["date"] == "2026-12-04"
    assert list(doc["tasks"]) == ["softmax", "transpose"]  # the suite's order
    assert doc["date"] == "2026-12-04"
    with pytest.raises(SystemExit, match="B200"):
        bench.merged(previous, {**rerun, "gpu": "NVIDIA B200"})


def test_a_run_over_some_tasks_on_another_gpu_keeps_the_others_in_the_summary_with_their_own_gpu(
        tmp_path: Path) -> None:
    quality_path = tmp_path / "baseline_quality.json"
    bench.write(_fake_document(), tmp_path / "h200" / "baselines_h200", quality_path=quality_path)
    rerun = _fake_document()
    rerun = {**rerun, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-07", "tasks": {"softmax": rerun["tasks"]["softmax"]}}
    bench.write(rerun, tmp_path / "h100" / "baselines_h100", quality_path=quality_path, keep_others=True)
    quality = baselines.load_baseline_quality(quality_path)
    assert set(quality.tasks) == {"softmax", "transpose"}
    assert (quality.gpu, quality.date) == ("NVIDIA H100 80GB HBM3", "2026-12-07")
    assert tuple(quality.provenance("transpose")) == ("NVIDIA H200", "2026-12-03")
    assert tuple(quality.provenance("softmax")) == ("NVIDIA H100 80GB HBM3", "2026-12-07")
    warning = baselines.weak_baseline_warning(get_task("transpose"), quality)
    assert warning is not None and "(NVIDIA H200, 2026-12-03)" in warning
    # a run over every task replaces the summary: nothing of an earlier one is kept
    bench.write(rerun, tmp_path / "h100" / "baselines_h100", quality_path=quality_path)
    assert set(baselines.load_baseline_quality(quality_path).tasks) == {"softmax"}


def test_a_version_1_summary_reads_as_one_gpu_for_every_task(tmp_path: Path) -> None:
    path = tmp_path / "baseline_quality.json"
    path.write_text(json.dumps({"version": 1, "gpu": "NVIDIA H200", "date": "2026-12-04",
                                "tasks": {"transpose": {"w": 20.0}}}))
    quality = baselines.load_baseline_quality(path)
    assert quality.version == 2 and tuple(quality.provenance("transpose")) == ("NVIDIA H200", "2026-12-04")
    path.write_text(json.dumps({"version": 3, "tasks": {}}))
    with pytest.raises(ValueError, match="version"):
        baselines.load_baseline_quality(path)


@pytest.fixture
def weak_transpose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A quality file in which only transpose's best baseline is weak; the packaged one is left alone."""
    path = tmp_path / "baseline_quality.json"
    timed = get_task("transpose").timed().name
    quality = baselines.BaselineQuality(gpu="NVIDIA H200", date="2026-12-03",
                                        tasks={"transpose": {timed: 22.0}, "softmax": {"x": 95.0}})
    baselines.write_quality(quality, path)
    monkeypatch.setattr(baseline_quality, "QUALITY_PATH", path)
    warning = baselines.weak_baseline_warning(get_task("transpose"), quality)
    assert warning is not None
    return warning


def test_tasks_show_warns_under_the_title_and_in_json(weak_transpose: str) -> None:
    human = runner.invoke(app, ["tasks", "show", "transpose"])
    assert human.exit_code == 0, human.output
    flat = " ".join(human.output.split())
    assert "warning: best baseline reaches 22 % of its roofline" in flat
    lines = human.output.splitlines()
    assert lines[0].startswith("transpose") and lines[1].startswith("warning:")
    data = json.loads(runner.invoke(app, ["tasks", "show", "transpose", "--json"]).output)
    assert data["baseline_warning"] == weak_transpose and data["id"] == "transpose"
    strong = json.loads(runner.invoke(app, ["tasks", "show", "softmax", "--json"]).output)
    assert strong["baseline_warning"] is None
    assert "warning" not in runner.invoke(app, ["tasks", "show", "softmax"]).output


def test_tasks_list_marks_weak_baselines_with_a_legend(weak_transpose: str) -> None:
    result = runner.invoke(app, ["tasks", "list"])
    assert result.exit_code == 0, result.output
    marked = [line.split()[1] for line in result.output.splitlines() if line.startswith("│") and " * " in line]
    assert marked == ["transpose"]
    legend = " ".join(result.output.split())
    assert "* weak baseline: the best vendor baseline is under 70 % of its roofline" in legend
    assert "the task's speed verdict is its SOL score" in legend


def test_tasks_list_without_weak_baselines_has_no_legend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baseline_quality, "QUALITY_PATH", tmp_path / "absent.json")
    assert "weak baseline" not in runner.invoke(app, ["tasks", "list"]).output


def _timed(task: str, speedup: float) -> Attempt:
    return Attempt(run="r", model="m", condition="none", arch="sm_90a", task=task, sample="s0", error_class="ok",
                   compiled=True, features_in_ptx=True, features_in_sass=True, correct=True, features_executed=True,
                   speedup=speedup, verified_on_gpu=True)


def test_the_report_warns_beside_the_speedup_of_a_weak_baseline_only(weak_transpose: str) -> None:
    report = render_report([_timed("transpose", 3.0), _timed("softmax", 1.2)], "weak")
    lines = report.markdown.splitlines()
    speed_rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| ") and "×" in line}
    # the speedup cell carries a mark; the warning itself is a note under the table (task names never wrap)
    assert "3.00× ⚠" in speed_rows["transpose"] and weak_transpose not in speed_rows["transpose"]
    assert "⚠" not in speed_rows["softmax"] and "1.20×" in speed_rows["softmax"]
    assert f"⚠ transpose: {weak_transpose}; its speed verdict is SOL, not the speedup." in lines
    assert not any(line.startswith("⚠ softmax") for line in lines)
    assert weak_transpose in report.html
