"""A turn the provider could not answer is no verdict: issue #43, item 2.

``ptxbench run --model replay:FILE --turns 2`` with no turn-1 lines used to end every sample at
``extraction.provider_error``, wiping turn 0's verdicts; the report then showed ``correct 0%`` and
``fast_1.0 0%`` under its own "not measured" banner, and ``metrics`` printed ``correct@1 0.0 [0.0, 0.0]``.
A sample the provider never answered at all is counted apart, in no denominator.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.cli import app
from ptxbench.llm.types import CompletionRequest
from ptxbench.records.completion import Completion
from ptxbench.records.rundir import RunDir, RunHeader
from ptxbench.records.trajectory import Feedback, ItemResult
from ptxbench.refine.loop import RunConfig, run_item
from ptxbench.results.attempts import attempts_from_run
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES, FIXTURES

runner = CliRunner()
PLAIN = "```cuda\n" + (EXAMPLES / "transpose.cu").read_text() + "\n```"  # builds; TMA absent: fails statically


def broken(task: str) -> str:
    """An answer for ``task`` that names its entry point and fails to compile."""
    return f"```cuda\n{(FIXTURES / 'cpp_syntax_error.cu').read_text()}\nextern \"C\" int {task}();\n```"


def _replay(tmp_path: Path, lines: list[tuple[str, int, str]]) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps({"task": task, "sample": sample, "turn": 0, "completion": text}) + "\n"
                            for task, sample, text in lines))
    return path


def _run(tmp_path: Path, replay: Path, tasks: str, *extra: str) -> Path:
    out = tmp_path / "run"
    done = runner.invoke(app, ["run", "--model", f"replay:{replay}", "--tasks", tasks, "--turns", "2", "--out",
                               str(out), *extra])
    assert done.exit_code == 0, done.output
    return out


def _invoke(*args: str) -> str:
    done = runner.invoke(app, list(args))
    assert done.exit_code == 0, done.output
    return done.stdout


def _summary(run: Path, *extra: str) -> dict[str, Any]:
    (summary,) = json.loads(_invoke("metrics", str(run), "--by", "", "--bootstrap", "0", "--json", *extra))
    return summary


@pytest.fixture(scope="module")
def no_second_turn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's run: three tasks answered at turn 0 (built, a compile error, no code), none at turn 1."""
    tmp = tmp_path_factory.mktemp("provider")
    replay = _replay(tmp, [("transpose", 0, PLAIN), ("softmax", 0, broken("softmax")), ("rmsnorm", 0, "I cannot.")])
    return _run(tmp, replay, "transpose,softmax,rmsnorm")


def test_a_provider_failure_at_turn_1_keeps_turn_0s_verdict(no_second_turn: Path) -> None:
    record = ItemResult.model_validate_json((no_second_turn / "items/softmax/sample_000/result.json").read_text())
    assert [t.completion.error is None for t in record.turns] == [True, False]
    assert record.turns[1].feedback is None, "a turn nobody answered is graded by no one"
    assert not (no_second_turn / "items/softmax/sample_000/turn_1/feedback.json").exists()
    outcomes = {a.task: a.error_class for a in attempts_from_run(no_second_turn) if a.last_turn}
    assert outcomes == {"transpose": "infra.no_gpu", "softmax": "compile.cpp_error",
                        "rmsnorm": "extraction.no_code_block"}


def test_metrics_keep_turn_0s_verdicts_and_say_the_refinement_was_cut_short(no_second_turn: Path) -> None:
    summary = _summary(no_second_turn)
    assert summary["rates"]["compile"]["value"] == pytest.approx(1 / 3), "transpose built at turn 0"
    assert summary["rates"]["correct"] is None and summary["rates"]["fast_1.0"] is None, "no GPU: null, never 0"
    assert (summary["n_attempts"], summary["n_samples"], summary["n_turns"]) == (3, 3, 3)
    assert (summary["n_provider_errors"], summary["n_cut_short"]) == (0, 3)
    text = _invoke("metrics", str(no_second_turn), "--by", "", "--bootstrap", "0")
    assert "correct@1" in text and "0.0 [0.0, 0.0]" not in text
    assert "3 attempt(s) had their refinement ended early by a provider failure" in text


def test_the_report_shows_turn_0s_verdicts_and_no_0_for_what_it_did_not_measure(no_second_turn: Path) -> None:
    _invoke("report", str(no_second_turn))
    markdown = (no_second_turn / "report.md").read_text()
    page = (no_second_turn / "report.html").read_text()
    assert "extraction.provider_error" not in markdown.split("## Definitions")[0]
    assert "| transpose | memory_bound | 1 | 1 | 0 | not measured |" in markdown
    assert "fast_p is undefined here, not zero." in markdown
    assert '<div class="label">correct</div><div class="value na">not measured</div>' in page
    assert '<div class="label">fast_1.0</div><div class="value na">not measured</div>' in page
    assert "Refinement cut short." in markdown
    assert "| 1 | 0 | 3 | not measured |" in markdown  # by turn: turn 1, no sample answered, 3 provider errors


@pytest.fixture(scope="module")
def never_answered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transpose's two samples answered; softmax's one sample and transpose's third never answered."""
    tmp = tmp_path_factory.mktemp("unanswered")
    replay = _replay(tmp, [("transpose", 0, PLAIN), ("transpose", 1, broken("transpose"))])
    return _run(tmp, replay, "transpose,softmax", "--samples", "3")


def test_a_sample_never_answered_is_a_provider_error_in_no_denominator(never_answered: Path) -> None:
    summary = _summary(never_answered)
    assert (summary["n_samples"], summary["n_attempts"], summary["n_provider_errors"]) == (6, 2, 4)
    # Over the answered samples of the one task left with any: 1 of 2 built. Not 1 of 6, and not 1 of 3.
    assert summary["rates"]["compile"]["value"] == pytest.approx(1 / 2)
    assert summary["n_tasks"] == 1 and summary["tasks_without_attempts"] == ["sm_90a/softmax"]
    (lost,) = json.loads(_invoke("metrics", str(never_answered), "--bootstrap", "0", "--json"))[:1]
    assert lost["group"] == {"task": "softmax"} and set(lost["rates"].values()) == {None}
    text = _invoke("metrics", str(never_answered), "--bootstrap", "0")
    assert "| provider errors |" in text and "| softmax | – | – |" in text
    assert "4 sample(s) were never answered by the provider" in text
    assert "Tasks without any answered sample, in no average: sm_90a/softmax." in text


def test_the_report_counts_provider_errors_apart(never_answered: Path) -> None:
    _invoke("report", str(never_answered))
    markdown = (never_answered / "report.md").read_text()
    assert "**Provider errors.** 4 samples never answered by the provider" in markdown
    assert "Counted: the last answered turn of each sample (2 attempts; 2 turns in all" in markdown
    per_task = markdown.split("## Per task")[1].split("## Candidates per task")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in per_task.splitlines() if line.startswith("| ")}
    assert "| provider errors |" in rows["task"]
    assert rows["softmax"].startswith("| softmax | memory_bound | 0 | 3 | not measured | not measured |")
    assert rows["transpose"].startswith("| transpose | memory_bound | 2 | 1 | 1 | 0 |")
    assert "| softmax | 3: sample_000, sample_001, sample_002 | no answer (provider error) | no answer |" in markdown
    errors = markdown.split("## Error taxonomy")[1].split("## Definitions")[0]
    assert "provider_error" not in errors, "not a failure of the model's"
    assert '<div class="label">provider errors</div><div class="value">4</div>' in \
        (never_answered / "report.html").read_text()


class _GpuGrader:
    """Says a kernel ran on a GPU and was wrong, without a GPU."""

    def grade(self, task: Any, arch: Arch, source: str) -> Feedback:
        return Feedback(passed=False, stage="gpu", text="wrong values", verified_on_gpu=True)


def test_an_item_keeps_the_gpu_verdict_of_its_last_answered_turn(tmp_path: Path) -> None:
    """The item's own summary (``verified_on_gpu``) is the last answered turn's too, not the provider error's."""
    async def complete(request: CompletionRequest) -> Completion:
        if request.metadata["turn"] == 0:
            return Completion(model="m", text=PLAIN)
        return Completion(model="m", text="", error="rate limited")

    config = RunConfig(model="replay:x", tasks=["transpose"], turns=3)
    rundir = RunDir.open(tmp_path / "run", RunHeader(kind="run", config={"model": "replay:x"}))
    result = asyncio.run(run_item(get_task("transpose"), 0, config, complete, _GpuGrader(), rundir))
    assert len(result.turns) == 2 and result.turns[1].feedback is None
    assert result.verified_on_gpu and not result.passed
