"""The run report, from a synthetic eval run written to disk the way the evaluator writes one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.records.build import BuildResult, CompileFailure, Diagnosis
from ptxbench.records.evaluation import (
    Comparison,
    Evaluation,
    Guard,
    GuardFinding,
    InfraFailure,
    RequirementExecution,
    Status,
    Timing,
    TrialResult,
)
from ptxbench.records.rundir import RESULT_FILE, RunDir, RunHeader, write_model
from ptxbench.results.attempts import Attempt, attempts_from_run
from ptxbench.static.report import FeatureEvidence, RequirementCheck, Stage, StaticReport
from ptxbench.tasks.model import Requirement

pytest.importorskip("matplotlib")

from ptxbench.results.report import counted, funnel, render_report, write_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "scripts" / "report_screenshot.sh"
TMA = Requirement(any_of=["tma.load", "bulk.copy"])


# -- the synthetic run -------------------------------------------------------------------------

def _build(ok: bool = True, failure: CompileFailure | None = None) -> BuildResult:
    diagnosis = None if failure is None else Diagnosis(
        failure=failure, summary="ptxas rejected the inline PTX", first_error="ptxas error: syntax error")
    return BuildResult(ok=ok, arch=Arch.SM_90A, key="0" * 64, command=["nvcc"], log="", duration_s=1.0,
                       diagnosis=diagnosis, directory="")


def _static(in_ptx: bool = True, in_sass: bool = True) -> StaticReport:
    evidence = FeatureEvidence(feature="tma.load", in_source=True,
                               ptx={"cp.async.bulk.tensor.2d.shared::cluster.global": 2} if in_ptx else {},
                               sass={"kernel": {"UTMALDG.2D": 2}} if in_sass else {})
    stage = Stage.IN_SASS if in_sass else Stage.NOT_IN_SASS if in_ptx else Stage.NOT_WRITTEN
    check = RequirementCheck(requirement=TMA, stage=stage, message="", evidence=[evidence])
    return StaticReport(arch=Arch.SM_90A, ptx=evidence.ptx, kernels=[], warnings=[], features=[evidence],
                        requirements=[check])


def _trial(passed: bool = True, nonfinite: int = 0, role: str = "visible") -> TrialResult:
    comparison = Comparison(output="out", passed=passed, elements=100, mismatched=0 if passed else 7,
                            nonfinite=nonfinite, max_abs_error=0.0 if passed else 1.0, max_rel_error=0.0)
    return TrialResult(workload="w", role=role, seed=1, comparisons=[comparison], passed=passed)


def _trials(passed: bool = True, nonfinite: int = 0) -> list[TrialResult]:
    return [_trial(), _trial(passed, nonfinite, role="heldout")]


def _timing(speedup: float) -> list[Timing]:
    return [Timing(workload="w", candidate_ms=1.0, candidate_iqr_ms=0.01, baseline="torch",
                   baseline_ms=speedup, samples=50)]


def _executed(ran: bool) -> list[RequirementExecution]:
    return [RequirementExecution(requirement=TMA, executed={"UTMALDG.2D": 64} if ran else {}, satisfied=ran,
                                 message="")]


def _evaluations() -> dict[tuple[str, str], Evaluation]:
    def ev(task: str, **fields) -> Evaluation:
        return Evaluation(candidate="candidate.cu", task=task, task_hash="h", arch=Arch.SM_90A, **fields)

    return {
        # softmax: fast and verified; correct but unverified and slower; wrong; correct but its TMA never ran.
        ("softmax", "s0"): ev("softmax", status=Status.PASSED, build=_build(), static=_static(), trials=_trials(),
                              timings=_timing(1.5), features=_executed(True)),
        ("softmax", "s1"): ev("softmax", status=Status.PASSED, build=_build(), static=_static(), trials=_trials(),
                              timings=_timing(0.8)),
        ("softmax", "s2"): ev("softmax", status=Status.INCORRECT, build=_build(), static=_static(),
                              trials=_trials(False)),
        ("softmax", "s3"): ev("softmax", status=Status.REJECTED, build=_build(), static=_static(), trials=_trials(),
                              features=_executed(False),
                              guards=[GuardFinding(guard=Guard.FEATURE_NOT_EXECUTED, detail="TMA never ran")]),
        # gemm_bf16: a PTX syntax error; fast and verified; a library call; NaN with the feature lost in ptxas.
        ("gemm_bf16", "g0"): ev("gemm_bf16", status=Status.COMPILE_ERROR,
                                build=_build(False, CompileFailure.PTX_SYNTAX)),
        ("gemm_bf16", "g1"): ev("gemm_bf16", status=Status.PASSED, build=_build(), static=_static(),
                                trials=_trials(), timings=_timing(1.2), features=_executed(True)),
        ("gemm_bf16", "g2"): ev("gemm_bf16", status=Status.REJECTED, build=_build(), static=None, trials=_trials(),
                                guards=[GuardFinding(guard=Guard.LIBRARY_CALL, detail="calls cublasGemmEx")]),
        ("gemm_bf16", "g3"): ev("gemm_bf16", status=Status.INCORRECT, build=_build(),
                                static=_static(in_sass=False), trials=_trials(False, nonfinite=3)),
        # rmsnorm: compiled, but no GPU to judge it.
        ("rmsnorm", "r0"): ev("rmsnorm", infra_failure=InfraFailure.NO_GPU, message="no GPU", build=_build(),
                              static=_static()),
    }


def _write_run(path: Path, evaluations: dict[tuple[str, str], Evaluation]) -> Path:
    rundir = RunDir.open(path, RunHeader(kind="eval", config={"arch": "sm_90a", "options": {}},
                                         environment={"name": "NVIDIA H200", "driver": "580.00"}))
    for (task, item), evaluation in evaluations.items():
        write_model(rundir.item(task, item) / RESULT_FILE, evaluation)
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_run(tmp_path_factory.mktemp("report") / "synthetic", _evaluations())


@pytest.fixture(scope="module")
def written(run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_report(run, tmp_path_factory.mktemp("out"))


def _markdown_rows(markdown: str, section: str) -> dict[str, list[str]]:
    block = markdown.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in block.splitlines() if line.startswith("| ")][1:]
    return {row[0].strip(): [cell.strip() for cell in row[1:]] for row in rows}


# -- tests -------------------------------------------------------------------------------------

def test_funnel_counts_match_the_synthetic_run(run: Path) -> None:
    stages = {s.key: s for s in funnel(attempts_from_run(run))}
    assert {k: s.count for k, s in stages.items()} == {
        "attempts": 9, "compiled": 8,
        "in_ptx": 7,    # g2 has no static report, g0 did not build
        "in_sass": 6,   # g3's feature was lost in ptxas
        "correct": 4,   # s0, s1, s3 (correct, then rejected) and g1; r0 was never judged
        "executed": 2,  # s0 and g1; s1 unverified, s3 did not run its TMA
    }
    assert all(s.measured for s in stages.values())
    assert stages["correct"].judged == 5 and stages["correct"].note == "judged for 5 of 6"
    assert stages["executed"].judged == 3 and stages["executed"].note == "verified for 3 of 4"


def test_write_report_writes_both_files(written: tuple[Path, Path]) -> None:
    markdown, page = written
    assert markdown.name == "report.md" and page.name == "report.html"
    assert markdown.read_text().startswith("# PTXBench report: synthetic")
    assert page.read_text().startswith("<!doctype html>")


def test_write_report_defaults_to_the_run_directory(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "small", {k: v for k, v in _evaluations().items() if k[0] == "softmax"})
    markdown, page = write_report(run)
    assert markdown == run / "report.md" and page == run / "report.html" and page.is_file()


def test_html_is_self_contained(written: tuple[Path, Path]) -> None:
    page = written[1].read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<link" not in page and "<script" not in page and "@import" not in page and "url(" not in page
    sources = re.findall(r'<img[^>]*\ssrc="([^"]+)"', page)
    assert len(sources) == 4 and all(s.startswith("data:image/png;base64,") for s in sources)


def test_markdown_per_task_table(written: tuple[Path, Path]) -> None:
    rows = _markdown_rows(written[0].read_text(), "Per task")
    # task: family, attempts, compiled, in SASS, correct, executed, fast_1.0, median speedup, median SOL, top error
    # (no timing here measured a roofline, so SOL reads "not measured", not 0)
    assert rows["softmax"] == ["memory_bound", "4", "4", "4", "3", "1 (1 unverified)", "1", "1.15×", "not measured",
                               "instruction.not_executed (1)"]
    # The library-call candidate's answers were right, but a guard caught the cheat: not correct.
    assert rows["gemm_bf16"][:8] == ["gemm", "4", "3", "1", "1", "1", "1", "1.20×"]
    assert rows["gemm_bf16"][9] in {"compile.ptx_syntax (1)", "guard.library_call (1)", "numerical.nan (1)"}
    assert rows["rmsnorm"] == ["memory_bound", "1", "1", "1", "not measured", "not measured", "not measured", "—",
                               "not measured", "infra.no_gpu (1)"]
    assert rows["all tasks"][1:4] == ["9", "8", "6"]


def test_markdown_funnel_and_errors(written: tuple[Path, Path]) -> None:
    markdown = written[0].read_text()
    funnel_rows = _markdown_rows(markdown, "Instruction funnel")
    assert funnel_rows["compiled"][:2] == ["8", "89%"]
    assert funnel_rows["features executed"] == ["2", "22%", "verified for 3 of 4"]
    block = markdown.split("## Error taxonomy\n")[1].split("\n## ")[0]
    classes = [line.strip("| ").split(" | ")[1:3] for line in block.splitlines() if line.startswith("| ")][1:]
    assert classes == [["compile.ptx_syntax", "1"], ["numerical.nan", "1"], ["numerical.wrong_values", "1"],
                       ["instruction.not_executed", "1"], ["guard.library_call", "1"], ["infra.no_gpu", "1"]]
    assert "Infrastructure failures." in markdown and "infra.no_gpu ×1" in markdown
    assert "Some executed features unverified." in markdown


def test_a_static_only_run_says_it_was_not_measured(tmp_path: Path) -> None:
    no_gpu = {(task, item): Evaluation(candidate="c.cu", task=task, task_hash="h", arch=Arch.SM_90A,
                                       infra_failure=InfraFailure.NO_GPU, build=_build(), static=_static())
              for task, item in [("softmax", "a"), ("softmax", "b"), ("rmsnorm", "c")]}
    attempts = attempts_from_run(_write_run(tmp_path / "static", no_gpu))
    report = render_report(attempts, "static only")
    assert "Not measured on a GPU." in report.markdown and "Not measured on a GPU." in report.html
    stages = {s.key: s for s in funnel(attempts)}
    assert not stages["correct"].measured and not stages["executed"].measured
    assert stages["in_sass"].count == 3
    rows = _markdown_rows(report.markdown, "Instruction funnel")
    assert rows["correct"] == ["—", "—", "not measured: no attempt ran on a GPU"]
    assert _markdown_rows(report.markdown, "fast_p and sol_p")["all attempts"] == ["3", "not measured: no GPU"]


def test_features_unverified_is_said_plainly(tmp_path: Path) -> None:
    unprofiled = {("softmax", "a"): Evaluation(candidate="c.cu", task="softmax", task_hash="h", arch=Arch.SM_90A,
                                               status=Status.PASSED, build=_build(), static=_static(),
                                               trials=_trials(), timings=_timing(2.5))}
    report = render_report(attempts_from_run(_write_run(tmp_path / "unprofiled", unprofiled)), "unprofiled")
    assert "Executed features unverified." in report.markdown
    assert _markdown_rows(report.markdown, "Per task")["softmax"][5:7] == ["unverified", "0 (≤ 1, unverified)"]
    assert _markdown_rows(report.markdown, "fast_p and sol_p")["all attempts"][4] == "0% (≤ 100%)"


def test_multi_turn_runs_count_last_turns_and_compare_conditions() -> None:
    def attempt(condition: str, sample: int, turn: int, last: bool, **fields) -> Attempt:
        return Attempt(run="r", model="m", condition=condition, arch="sm_90a", task="softmax", sample=f"s{sample}",
                       turn=turn, last_turn=last, error_class=fields.pop("error_class", "ok"), **fields)

    good = {"compiled": True, "features_in_ptx": True, "features_in_sass": True, "correct": True,
            "features_executed": True, "speedup": 1.3, "verified_on_gpu": True}
    attempts = [
        attempt("none", 0, 0, False, error_class="compile.ptx_syntax"),
        attempt("none", 0, 1, True, **good),
        attempt("none", 1, 0, False, error_class="extraction.no_code_block"),
        attempt("none", 1, 1, True, error_class="compile.ptx_operand"),
        attempt("full", 2, 0, True, **good),
    ]
    report = render_report(attempts, "multi-turn")
    assert "the last turn of each sample (3 attempts; 5 turns in all" in report.markdown
    assert _markdown_rows(report.markdown, "Per task")["softmax"][1:3] == ["3", "2"]
    # The last column is the best-of-turns curve: samples correct (and fast) at any turn so far.
    assert _markdown_rows(report.markdown, "By turn") == {
        "0": ["3", "1", "1", "1", "1", "33% / 33%"], "1": ["2", "1", "1", "1", "1", "67% / 67%"]}
    fast = _markdown_rows(report.markdown, "fast_p and sol_p")
    assert fast["full"][:4] == ["1", "100%", "100%", "100%"] and fast["none"][:4] == ["2", "50%", "50%", "50%"]
    assert [s.count for s in funnel(counted(attempts))] == [3, 2, 2, 2, 2, 2]


def test_an_empty_run_still_reports(tmp_path: Path) -> None:
    RunDir.open(tmp_path / "empty", RunHeader(kind="eval", config={"arch": "sm_90a", "options": {}}))
    markdown, page = write_report(tmp_path / "empty")
    assert "No finished attempts." in markdown.read_text() and "<img" not in page.read_text()


def test_without_matplotlib_the_report_has_its_tables_and_says_which_extra_draws_the_plots(
        run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report = render_report(attempts_from_run(run), "no matplotlib")
    assert "Plots left out." in report.markdown and "pip install 'ptxbench[report]'" in report.markdown
    assert "<img" not in report.html and "Per task" in report.html


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs /usr/bin/chromium (apt-get install chromium)")
def test_report_renders_in_chromium(run: Path, tmp_path: Path) -> None:
    from PIL import Image

    out = tmp_path / "report.png"
    proc = subprocess.run(["bash", str(SCREENSHOT), str(run), str(out)], capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with Image.open(out) as image:
        assert image.size == (1400, 2400)
        grey = image.convert("L")
        histogram = grey.histogram()
    inked = sum(histogram[:200])
    assert inked > 0.02 * 1400 * 2400, "the screenshot is (nearly) blank"
