"""report, metrics, compare and leaderboard from the command line, on runs made on the CPU."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ptxbench.cli import app

from ..conftest import EXAMPLES

runner = CliRunner()


def _eval_run(tmp_path: Path, name: str, *files: str) -> Path:
    out = tmp_path / name
    result = runner.invoke(app, ["eval", *(str(EXAMPLES / f) for f in files), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_report_metrics_compare_leaderboard(tmp_path: Path) -> None:
    first = _eval_run(tmp_path, "a", "rmsnorm.cu", "softmax.cu")
    second = _eval_run(tmp_path, "b", "rmsnorm.cu", "transpose.cu")
    written = runner.invoke(app, ["report", str(first)])
    assert written.exit_code == 0, written.output
    html = (first / "report.html").read_text()
    assert "Not measured on a GPU" in html and "data:image/png;base64," in html
    assert (first / "report.md").is_file()

    table = runner.invoke(app, ["metrics", str(first), "--by", "", "--bootstrap", "50"])
    assert table.exit_code == 0 and "compile@1" in table.output and "never measured on a GPU" in table.output

    compared = runner.invoke(app, ["compare", str(first), str(second), "--metric", "compile"])
    assert compared.exit_code == 0, compared.output
    assert "rmsnorm" in compared.output

    ranked = runner.invoke(app, ["leaderboard", str(first), str(second), "--metric", "compile"])
    assert ranked.exit_code == 0, ranked.output
    assert "a" in ranked.output and "b" in ranked.output
