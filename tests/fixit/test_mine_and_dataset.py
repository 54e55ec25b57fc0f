"""Fixit's data path on the CPU: mine failures from a run directory, harvest a model's own repairs,
filter explanations, deduplicate, balance, split by task and export."""

from __future__ import annotations

import json
from pathlib import Path

from ptxbench.arch.registry import Arch
from ptxbench.check import check_file
from ptxbench.fixit.dataset import build_dataset, explanation_problem, export, normalized
from ptxbench.fixit.mine import harvest_own_repairs, mine_failures
from ptxbench.prompts import PROMPT_VERSION
from ptxbench.prompts.conversation import ContextCondition
from ptxbench.records.completion import Completion, Extraction, ExtractionStatus
from ptxbench.records.evaluation import Comparison, Evaluation, Status, TrialResult
from ptxbench.records.rundir import RESULT_FILE, RunDir, RunHeader, write_model
from ptxbench.records.trajectory import Feedback, ItemResult, Turn
from ptxbench.refine.graders import render_check_feedback
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES, FIXTURES

BROKEN = (FIXTURES / "cpp_syntax_error.cu").read_text()
FIXED = (EXAMPLES / "transpose.cu").read_text()


def _failed_turn(turn: int) -> Turn:
    report = check_file(FIXTURES / "cpp_syntax_error.cu", Arch.SM_90A)
    passed, stage, text = render_check_feedback(report)
    return Turn(turn=turn, completion=Completion(model="m", text=f"```cuda\n{BROKEN}\n```"),
                extraction=Extraction(status=ExtractionStatus.OK, source=BROKEN),
                feedback=Feedback(passed=passed, stage=stage, text=text, record=report))


def _passed_turn(turn: int) -> Turn:
    task = get_task("transpose")
    comparison = Comparison(output="Y", passed=True, elements=4, mismatched=0, nonfinite=0, max_abs_error=0.0,
                            max_rel_error=0.0)
    evaluation = Evaluation(candidate="c.cu", task=task.id, task_hash=task.content_hash, arch=Arch.SM_90A,
                            status=Status.PASSED, trials=[TrialResult(workload="w", role="timed", seed=1,
                                                                      comparisons=[comparison], passed=True)])
    return Turn(turn=turn, completion=Completion(model="m", text=f"```cuda\n{FIXED}\n```"),
                extraction=Extraction(status=ExtractionStatus.OK, source=FIXED),
                feedback=Feedback(passed=True, stage="gpu", text="Status: PASSED.", verified_on_gpu=True,
                                  record=evaluation))


def _run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    rundir = RunDir.open(out, RunHeader(kind="run", config={"model": "openai:m"}))
    task = get_task("transpose")
    samples = {0: [_failed_turn(0), _passed_turn(1)], 1: [_failed_turn(0), _failed_turn(1)]}
    for sample, turns in samples.items():
        result = ItemResult(task=task.id, task_hash=task.content_hash, sample=sample, arch=Arch.SM_90A,
                            context=ContextCondition.NONE, prompt_version="t", turns=turns,
                            passed=turns[-1].feedback.passed, verified_on_gpu=turns[-1].feedback.verified_on_gpu)
        write_model(rundir.item(task.id, f"sample_{sample:03d}") / RESULT_FILE, result)
    return out


def test_mining_caps_and_harvest(tmp_path: Path) -> None:
    run = _run(tmp_path)
    failures = mine_failures([run])
    assert len(failures) == 3 and {f.attempt.error_class for f in failures} == {"compile.cpp_error"}
    assert all("undeclared_value" in f.feedback for f in failures)
    assert len(mine_failures([run], per_class=2)) == 2
    assert mine_failures([run], per_task=2, seed=1) == mine_failures([run], per_task=2, seed=1)
    (pair,) = harvest_own_repairs([run])
    assert pair.verified and pair.origin == "own_later_turn"
    assert pair.failure.source == BROKEN and pair.fixed_source == FIXED


def test_explanations_must_be_grounded() -> None:
    failed, fixed, feedback = "int x = undeclared_value", "int x = 0;", "identifier undeclared_value is undefined"
    assert explanation_problem("", failed, fixed, feedback) == "too short"
    assert explanation_problem("Fixed the bug.", failed, fixed, feedback) == "too short"
    assert explanation_problem("```cuda\n" + "int x = 0;\n" * 10 + "```", failed, fixed, feedback) == "mostly code"
    vague = "The kernel had a problem that made the harness unhappy, so I rewrote it carefully and now it works fine."
    assert explanation_problem(vague, failed, fixed, feedback) == "not grounded in the diff or the diagnosis"
    good = ("The status was read from undeclared_value, a name that exists nowhere, so the front end stopped; "
            "the fix returns the launch's cudaGetLastError() instead.")
    assert explanation_problem(good, failed, fixed, feedback) is None


def test_dataset_dedups_balances_splits_and_exports(tmp_path: Path) -> None:
    (pair,) = harvest_own_repairs([_run(tmp_path)])
    explained = pair.model_copy(update={"explanation": (
        "The launcher returned undeclared_value, which is not declared anywhere, so the build failed; the fix "
        "computes the transpose in tiles and returns cudaGetLastError().")})
    twin = explained.model_copy(update={"fixed_source": "// same kernel, other comments\n" + FIXED})
    unverified = explained.model_copy(update={"verified": False})
    records, card = build_dataset([explained, twin, unverified, pair], holdout_tasks=("transpose",))
    assert len(records) == 1 and records[0].split == "test"
    assert card.dropped == {"duplicate": 1, "fix not verified on a GPU": 1, "explanation too short": 1}
    messages = records[0].messages
    assert [m.role for m in messages] == ["system", "user", "assistant"]
    assert "Your previous attempt" in messages[1].content and "undeclared_value" in messages[1].content
    assert messages[2].content.startswith("The launcher returned") and "```cuda" in messages[2].content
    assert normalized("a /* x */ b // y\n c") == "abc"
    written = export(records, card, tmp_path / "data")
    line = json.loads((tmp_path / "data" / "test.jsonl").read_text().splitlines()[0])
    assert line["messages"][-1]["role"] == "assistant"
    assert line["prompt_version"] == card.prompt_version == PROMPT_VERSION  # the words' version, with the words
    data_card = (tmp_path / "data" / "DATA_CARD.md").read_text()
    assert data_card.startswith(f"# Fixit data card (v2, prompts v{PROMPT_VERSION})\n")
    assert "| memory_bound × compile.cpp_error | 1 |" in data_card
    assert len(written) == 2
