"""Attempts and their error classes, read from real run directories made on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.records.evaluation import Evaluation, Status, TrialResult
from ptxbench.results.attempts import attempts_from_run
from ptxbench.results.taxonomy import CLASSES

from ..conftest import EXAMPLES, FIXTURES

runner = CliRunner()


def _replay_file(tmp_path: Path) -> Path:
    broken = (FIXTURES / "cpp_syntax_error.cu").read_text() + "\nextern \"C\" int transpose();\n"
    plain = (EXAMPLES / "transpose.cu").read_text()
    lines = [
        {"task": "transpose", "sample": 0, "turn": 0, "completion": f"```cuda\n{broken}\n```"},
        {"task": "transpose", "sample": 0, "turn": 1, "completion": f"```cuda\n{plain}\n```"},
        {"task": "transpose", "sample": 1, "turn": 0, "completion": "No idea."},
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_attempts_of_a_multi_turn_run(tmp_path: Path) -> None:
    replay = _replay_file(tmp_path)
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", "--model", f"replay:{replay}", "--tasks", "transpose", "--samples", "2",
                                 "--turns", "2", "--context", "arch", "--out", str(out)])
    assert result.exit_code == 0, result.output
    attempts = sorted(attempts_from_run(out), key=lambda a: (a.sample, a.turn))
    # sample_001's turn 1 has no replayed line: a provider error, which is no verdict, so its turn 0 stays its outcome.
    assert [(a.sample, a.turn, a.last_turn) for a in attempts] == [
        ("sample_000", 0, False), ("sample_000", 1, True), ("sample_001", 0, True), ("sample_001", 1, False)]
    first, fixed, lost, unanswered = attempts
    assert first.error_class == "compile.cpp_error" and not first.compiled
    # Built, features missing from the SASS, not run: what `eval` records for the same file without a GPU.
    assert fixed.compiled and not fixed.features_in_sass and fixed.error_class == "infra.no_gpu"
    assert fixed.correct is None and not fixed.verified_on_gpu, "static-only runs measure no correctness"
    assert fixed.requirements == {"tma.load": "absent", "tma.store": "absent", "mbarrier": "absent"}
    assert lost.error_class == "extraction.no_code_block" and lost.requirements == {}
    assert unanswered.error_class == "extraction.provider_error"
    assert {a.condition for a in attempts} == {"arch"} and {a.family for a in attempts} == {"memory_bound"}
    assert all(a.error_class in CLASSES for a in attempts)


def test_attempts_of_an_eval_run_without_gpu(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", str(EXAMPLES / "rmsnorm.cu"), str(EXAMPLES / "softmax.cu"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    attempts = attempts_from_run(out)
    assert {a.task for a in attempts} == {"rmsnorm", "softmax"}
    assert all(a.error_class == "infra.no_gpu" and a.compiled and a.correct is None for a in attempts)


def test_a_static_turn_recorded_before_the_one_status_model_is_judged_as_today(tmp_path: Path) -> None:
    """Old `run` directories hold a check report as a static turn's record: read by today's rule, so the same
    kernel has the same class in an old run, a new run and an eval run."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_file
    from ptxbench.records.completion import Completion, Extraction, ExtractionStatus
    from ptxbench.records.trajectory import Feedback, Turn
    from ptxbench.refine.graders import render_check_feedback
    from ptxbench.results.attempts import turn_attempt
    from ptxbench.tasks.loader import get_task

    def old_turn(path: Path, task: str | None) -> Turn:
        report = check_file(path, Arch.SM_90A, get_task(task) if task else None)
        passed, stage, text = render_check_feedback(report)
        return Turn(turn=0, completion=Completion(model="m", text=""),
                    extraction=Extraction(status=ExtractionStatus.OK, source=path.read_text()),
                    feedback=Feedback(passed=passed, stage=stage, text=text, record=report))

    base = {"run": "old", "arch": "sm_90a", "task": "transpose", "sample": "sample_000"}
    plain = turn_attempt(old_turn(EXAMPLES / "transpose.cu", "transpose"), base)
    assert (plain.error_class, plain.compiled, plain.features_in_sass, plain.correct) == (
        "infra.no_gpu", True, False, None)
    broken = turn_attempt(old_turn(FIXTURES / "cpp_syntax_error.cu", None), base)
    assert (broken.error_class, broken.status, broken.verified_on_gpu) == ("compile.cpp_error", "COMPILE_ERROR", False)


def _gemm_evaluation(failing: set[str]) -> Evaluation:
    from ptxbench.arch.registry import Arch
    from ptxbench.tasks.loader import get_task

    task = get_task("gemm_bf16")
    trials = [TrialResult(workload=w.name, role=w.role.value, seed=1, passed=w.name not in failing)
              for w in task.workloads]
    status = Status.INCORRECT if failing else Status.PASSED
    return Evaluation(candidate="c.cu", task=task.id, task_hash=task.content_hash, arch=Arch.SM_90A, status=status,
                      trials=trials)


@pytest.mark.parametrize(("failing", "shapes", "variants"), [
    (set(), True, True),
    ({"single-token"}, True, False),  # right on every shape it could have been shown, wrong on a ragged M
    ({"qwen-odd-tokens"}, False, True),  # a held-out shape of a shown variant
    ({"single-token", "qwen-odd-tokens"}, False, False),
])
def test_held_out_variants_are_judged_apart_from_held_out_shapes(failing: set[str], shapes: bool,
                                                                 variants: bool) -> None:
    from ptxbench.results.attempts import _from_evaluation

    base = {"run": "r", "arch": "sm_90a", "task": "gemm_bf16", "sample": "s"}
    attempt = _from_evaluation(_gemm_evaluation(failing), base)
    assert attempt.visible_correct is True
    assert (attempt.heldout_correct, attempt.heldout_variant_correct) == (shapes, variants)
    assert attempt.correct is (not failing)


def test_a_task_without_variants_has_no_variant_verdict() -> None:
    """Every bundled task declares variants; a task file of one's own need not (it is judged by roles only)."""
    from ptxbench.arch.registry import Arch
    from ptxbench.results.attempts import _from_evaluation
    from ptxbench.tasks.loader import get_task

    task = get_task("softmax").model_copy(update={"id": "my_softmax", "variants": []})
    trials = [TrialResult(workload=w.name, role=w.role.value, seed=1, passed=w.role.value != "heldout")
              for w in task.workloads]
    record = Evaluation(candidate="c.cu", task=task.id, task_hash=task.content_hash, arch=Arch.SM_90A,
                        status=Status.INCORRECT, trials=trials)
    attempt = _from_evaluation(record, {"run": "r", "arch": "sm_90a", "task": task.id, "sample": "s"})
    assert attempt.heldout_correct is False and attempt.heldout_variant_correct is None


def test_an_attempt_of_version_2_reads_with_no_variant_verdict_and_its_held_out_verdict_kept() -> None:
    from ptxbench.results.attempts import ATTEMPT_VERSION, Attempt

    old = {"version": 2, "run": "r", "arch": "sm_90a", "task": "gemm_bf16", "sample": "s", "error_class": "ok",
           "visible_correct": True, "heldout_correct": False}
    attempt = Attempt.model_validate(old)
    assert attempt.version == ATTEMPT_VERSION == 4
    assert (attempt.heldout_correct, attempt.heldout_variant_correct) == (False, None)
    assert attempt.requirements == {}  # version 3 and before recorded no stages
