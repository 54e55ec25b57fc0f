"""One status model along every path (newcomer issue, items 2-4), through the command line at 80 columns.

A replayed model answers three samples of ``transpose``: a plain CUDA kernel (builds, lacks the Hopper
features), a kernel that does not build, and an answer without code. The same answers go through
``generate`` then ``eval``, and through ``run``; the machine has no GPU, as in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, FIXTURES
from .newcomer import cli, one_line

PLAIN = (EXAMPLES / "transpose.cu").read_text()
BROKEN = (FIXTURES / "cpp_syntax_error.cu").read_text() + '\nextern "C" int transpose();\n'
ANSWERS = [f"```cuda\n{PLAIN}\n```", f"```cuda\n{BROKEN}\n```", "I would use TMA here, but I am not sure how."]
TAXONOMY = [["extraction", "extraction.no_code_block", "1", "33%"], ["compile", "compile.cpp_error", "1", "33%"],
            ["infra", "infra.no_gpu", "1", "33%"]]


def _ok(*args: str) -> str:
    result = cli(*args)
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def _section(markdown: str, title: str) -> list[list[str]]:
    """The rows of the Markdown table under ``## title`` (header row left out)."""
    block = markdown.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split(" | ") for line in block.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows[1:]]


def _table(metrics: str) -> list[str]:
    """The lines of ``metrics``' table, without what @k and the intervals mean above it and the notes below."""
    return [line for line in metrics.splitlines() if line.startswith("|")]


def _report(run: Path) -> str:
    assert one_line(_ok("report", str(run))) == f"wrote {run}/report.md and {run}/report.html"
    return (run / "report.md").read_text()


def _summary(*runs: Path, by: str = "") -> list[dict]:
    return json.loads(_ok("metrics", *map(str, runs), "--by", by, "--bootstrap", "0", "--json"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Generation runs in each context condition, each evaluated, and a `run` of the same answers."""
    root = tmp_path_factory.mktemp("paths")
    replay = root / "answers.jsonl"
    replay.write_text("".join(json.dumps({"task": "transpose", "sample": i, "turn": 0, "completion": text}) + "\n"
                              for i, text in enumerate(ANSWERS)))
    made = {"replay": replay}
    for context in ("none", "arch", "full"):
        generated = root / f"gen-{context}"
        shown = _ok("generate", "--model", f"replay:{replay}", "--tasks", "transpose", "--samples", "3",
                    "--context", context, "--out", str(generated))
        assert shown.splitlines()[-2:] == ["3 items sampled; provider errors: 0; cost unknown",
                                           f"run directory: {generated}"]
        made[f"gen-{context}"] = generated
        made[f"eval-{context}"] = root / f"eval-{context}"
        _ok("eval", str(generated), "--out", str(made[f"eval-{context}"]))
    made["run"] = root / "run-full"
    _ok("run", "--model", f"replay:{replay}", "--tasks", "transpose", "--samples", "3", "--context", "full",
        "--out", str(made["run"]))
    return made


# -- item 2: one verdict and one error class per candidate, every sample in every denominator ------------------


def test_eval_of_a_generate_run_counts_the_answer_without_code_as_run_does(runs: dict[str, Path]) -> None:
    shown = _ok("eval", str(runs["gen-full"]), "--out", str(runs["eval-full"]))  # resumed: nothing is redone
    progress = [line for line in shown.splitlines() if line.startswith("[")]  # one line per candidate, piped
    assert len(progress) == 3 and sum("sample_00" in line for line in progress) == 3
    table = "\n".join(line for line in shown.splitlines() if not line.startswith("["))
    assert table.count("sample_00") == 3 and "no_code_block" in table
    for run in (runs["eval-full"], runs["run"]):
        (summary,) = _summary(run)
        assert (summary["n_samples"], summary["rates"]["compile"]["value"]) == (3, pytest.approx(1 / 3)), run
        assert _section(_report(run), "Error taxonomy") == TAXONOMY, run


def test_the_same_kernel_gets_the_same_verdict_from_eval_of_a_file(runs: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "transpose.cu").write_text(PLAIN)
    _ok("eval", str(tmp_path / "transpose.cu"), "--out", str(tmp_path / "file"))
    file_row = _section(_report(tmp_path / "file"), "Per task")[0]
    run_rows = {row[0]: row for row in _section(_report(runs["run"]), "Error taxonomy")}
    assert file_row[-1] == "infra.no_gpu (1)" and "infra.no_gpu" in run_rows["infra"]
    assert "instruction" not in run_rows, "run grades a kernel as eval does, not by a class of its own"


def test_fixit_mines_the_same_failures_from_eval_and_from_run(runs: dict[str, Path], tmp_path: Path) -> None:
    mined = {}
    for name in ("eval-full", "run"):
        out = tmp_path / f"{name}.jsonl"
        assert one_line(_ok("fixit", "mine", str(runs[name]), "--out", str(out))) == f"1 failures → {out}"
        (case,) = [json.loads(line) for line in out.read_text().splitlines()]
        mined[name] = (case["attempt"]["sample"], case["attempt"]["error_class"], case["attempt"]["condition"])
    assert mined["eval-full"] == mined["run"] == ("sample_001", "compile.cpp_error", "full")


def test_two_runs_into_one_run_directory_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "both"
    result = cli("eval", str(runs["gen-none"]), str(runs["gen-arch"]), "--out", str(out))
    item = "items/transpose/sample_000"
    assert result.returncode == 2 and result.stdout.startswith("note: no CUDA GPU is visible")
    assert one_line(result.stderr) == (f"error: {runs['gen-none']}/{item} and {runs['gen-arch']}/{item} would both "
                                       f"be stored as {item}: evaluate them into separate --out directories")
    assert not out.exists(), "nothing is written, nothing silently left out"


# -- item 3: the generation run's labels reach the evaluation ---------------------------------------------------


def test_the_context_ablation_keeps_its_labels_through_eval(runs: dict[str, Path]) -> None:
    evaluated = [runs[f"eval-{c}"] for c in ("none", "arch", "full")]
    by_condition = _table(_ok("metrics", *map(str, evaluated), "--by", "condition", "--bootstrap", "0"))
    assert [line.split(" | ")[0] for line in by_condition[2:5]] == ["| arch", "| full", "| none"]
    assert [(s["group"], s["n_samples"]) for s in _summary(*evaluated, by="model,provider")] == [
        ({"model": f"replay:{runs['replay']}", "provider": "replay"}, 9)]
    header = _report(runs["eval-arch"]).splitlines()[2]
    assert f"**model:** replay:{runs['replay']} · **context:** arch · **kind:** eval" in header


# -- item 4: a metric nothing measured is not measured, never 0 -------------------------------------------------


def test_a_generate_only_run_measured_nothing(runs: dict[str, Path]) -> None:
    table = _table(_ok("metrics", str(runs["gen-full"]), "--by", "", "--bootstrap", "0"))
    assert table[2] == "| – | – | – | – | – | – | – | – | – | – | – | – | – | – | – | – | 1 | 3 | 3 | 2 |"
    (summary,) = _summary(runs["gen-full"])
    assert set(summary["rates"].values()) == {None}
    markdown = _report(runs["gen-full"])
    assert "> **Nothing built.**" in markdown
    assert _section(markdown, "Per task") == [["transpose", "memory_bound", "3", "not measured", "not measured",
                                               "not measured", "not measured", "not measured", "—",
                                               "not measured", "unevaluated (2)"]]


def test_a_cpu_run_prints_correctness_as_not_measured_in_metrics_and_report(tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "softmax.cu").write_text((EXAMPLES / "softmax.cu").read_text())
    (folder / "rmsnorm.cu").write_text(BROKEN)
    _ok("eval", str(folder), "--out", str(tmp_path / "cpu"))
    table = _table(_ok("metrics", str(tmp_path / "cpu"), "--by", "", "--bootstrap", "0"))
    assert table[2] == "| 50.0 | 0.0 | 0.0 | – | – | – | – | – | – | – | – | – | – | – | – | – | 2 | 2 | 2 | 1 |"
    (summary,) = _summary(tmp_path / "cpu")
    assert summary["rates"]["compile"] == {"value": 0.5, "low": None, "high": None}
    assert summary["rates"]["correct"] is None and summary["rates"]["fast_1.0"] is None
    rows = _section(_report(tmp_path / "cpu"), "Per task")
    # One column, one answer: the task whose file did not build reads "not measured" like the other, not 0.
    assert [row[5:8] for row in rows] == [["not measured"] * 3] * 3
    assert [row[3] for row in rows] == ["0", "1", "1"]
