"""Persisted records: the version is checked on read (newer or unknown refused in one line, older migrated),
a round trip is exact, and a run's result is read as the type its header's kind says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench import __version__
from ptxbench.arch.registry import Arch
from ptxbench.check import check_file
from ptxbench.errors import PtxbenchError
from ptxbench.records.check import CheckReport
from ptxbench.records.completion import Completion, Extraction, ExtractionStatus, Usage
from ptxbench.records.evaluation import (
    EVALUATION_VERSION,
    Comparison,
    Evaluation,
    Generation,
    InfraFailure,
    Status,
    TrialResult,
)
from ptxbench.records.rundir import RESULT_FILE, RunDir, RunDirError, RunHeader, load_result, write_model
from ptxbench.prompts.conversation import ContextCondition
from ptxbench.records.trajectory import TRAJECTORY_VERSION, Feedback, ItemResult, Turn
from ptxbench.records.version import RecordVersionError
from ptxbench.results.attempts import attempts_from_run
from ptxbench.tasks.loader import get_task

from ..conftest import FIXTURES

TASK = get_task("transpose")


def _evaluation(**extra: object) -> Evaluation:
    comparison = Comparison(output="Y", passed=False, elements=4, mismatched=1, nonfinite=1, max_abs_error=float("inf"),
                            max_rel_error=float("nan"), worst_index=[0, 1], worst_value=float("nan"))
    return Evaluation(candidate="c.cu", task=TASK.id, task_hash=TASK.content_hash, arch=Arch.SM_90A,
                      status=Status.INCORRECT, message="wrong", trials=[TrialResult(
                          workload="w", role="visible", seed=1, comparisons=[comparison], passed=False)], **extra)


def _check_report() -> CheckReport:
    return check_file(FIXTURES / "cpp_syntax_error.cu", Arch.SM_90A)


def _item(feedback: Feedback | None) -> ItemResult:
    turn = Turn(turn=0, completion=Completion(model="m", text="```cuda\nx\n```", usage=Usage(input_tokens=3)),
                extraction=Extraction(status=ExtractionStatus.OK, source="x\n"), feedback=feedback)
    return ItemResult(task=TASK.id, task_hash=TASK.content_hash, sample=0, arch=Arch.SM_90A,
                      context=ContextCondition.NONE, prompt_version="task-1", turns=[turn], passed=False)


def _run(tmp_path: Path, kind: str, result: Evaluation | ItemResult | dict) -> Path:
    rundir = RunDir.open(tmp_path / kind, RunHeader(kind=kind, config={"model": "openai:m", "arch": "sm_90a"}))
    file = rundir.item(TASK.id, "sample_000") / RESULT_FILE
    if isinstance(result, dict):
        file.parent.mkdir(parents=True)
        file.write_text(json.dumps(result))
    else:
        write_model(file, result)
    return file


# -- round trips ------------------------------------------------------------------------------------------

def test_every_versioned_record_round_trips_exactly() -> None:
    report = _check_report()
    records = [_evaluation(generation=Generation(run="r", model="openai:m", sample=2)), report,
               _item(Feedback(passed=False, stage="compile", text="t", record=report)),
               _item(Feedback(passed=False, stage="gpu", text="t", verified_on_gpu=True, record=_evaluation())),
               RunHeader(kind="eval", config={"arch": "sm_90a"}), Completion(model="m", text="t", latency_s=1.5)]
    for record in records:
        text = record.model_dump_json()
        again = type(record).model_validate_json(text)
        assert again.model_dump_json() == text
        assert json.loads(text)["version"] == type(record).current_version()


def test_a_feedback_record_keeps_its_type() -> None:
    report, evaluation = _check_report(), _evaluation()
    for record in (report, evaluation):
        item = _item(Feedback(passed=False, stage="gpu", text="t", record=record))
        (turn,) = ItemResult.model_validate_json(item.model_dump_json()).turns
        assert type(turn.feedback.record) is type(record)
        assert turn.feedback.record.model_dump_json() == record.model_dump_json()  # NaN != NaN: compared as text


def test_a_feedback_record_without_its_kind_is_refused_not_guessed() -> None:
    data = json.loads(_item(Feedback(passed=False, stage="gpu", text="t", record=_evaluation())).model_dump_json())
    del data["turns"][0]["feedback"]["record"]["kind"]
    with pytest.raises(ValueError, match="discriminator 'kind'"):
        ItemResult.model_validate(data)


def test_a_feedback_stage_is_one_of_the_four() -> None:
    with pytest.raises(ValueError, match="stage"):
        Feedback(passed=False, stage="linking", text="t")


# -- versions checked on read -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["eval", "run"])
def test_a_result_of_a_future_version_is_refused_with_one_line(tmp_path: Path, kind: str) -> None:
    record = _evaluation() if kind == "eval" else _item(None)
    file = _run(tmp_path, kind, {**json.loads(record.model_dump_json()), "version": 99})
    name = "evaluation" if kind == "eval" else "trajectory"
    current = EVALUATION_VERSION if kind == "eval" else TRAJECTORY_VERSION
    with pytest.raises(RecordVersionError) as refused:
        load_result(file)
    assert isinstance(refused.value, PtxbenchError)
    assert str(refused.value) == (f"{file}: written with {name} version 99; this ptxbench ({__version__}) reads "
                                  f"version {current}; upgrade ptxbench to read it")


def test_a_nested_record_of_a_future_version_is_refused_too(tmp_path: Path) -> None:
    data = json.loads(_item(Feedback(passed=False, stage="gpu", text="t", record=_evaluation())).model_dump_json())
    data["turns"][0]["feedback"]["record"]["version"] = EVALUATION_VERSION + 1
    with pytest.raises(RecordVersionError, match=f"evaluation version {EVALUATION_VERSION + 1};"):
        load_result(_run(tmp_path, "run", data))


@pytest.mark.parametrize("version", [0, "2", None, True])
def test_a_result_of_an_unknown_version_is_refused_with_one_line(tmp_path: Path, version: object) -> None:
    file = _run(tmp_path, "eval", {**json.loads(_evaluation().model_dump_json()), "version": version})
    with pytest.raises(RecordVersionError) as refused:
        load_result(file)
    assert str(refused.value) == (f"{file}: evaluation version {version!r} is unknown; this ptxbench ({__version__}) "
                                  "reads version 1, 2, 3, 4")


def test_an_evaluation_of_version_1_is_migrated(tmp_path: Path) -> None:
    data = json.loads(_evaluation().model_dump_json())
    old = {key: value for key, value in data.items() if key not in ("kind", "extraction", "generation")}
    loaded = load_result(_run(tmp_path, "eval", {**old, "version": 1}))
    assert isinstance(loaded, Evaluation)
    assert loaded.version == EVALUATION_VERSION and loaded.generation is None
    assert loaded.model_dump_json() == _evaluation().model_dump_json()


def test_a_trajectory_of_version_1_is_migrated_to_typed_records(tmp_path: Path) -> None:
    """Version 1 kept the record as a dict: an extraction, an evaluation, or an old static turn's check report."""
    report, evaluation = _check_report(), _evaluation()
    item = _item(None)
    turn = item.turns[0].model_dump(mode="json")
    no_code = Extraction(status=ExtractionStatus.NO_CODE).model_dump(mode="json")
    records = {"extraction": no_code, "compile": report.model_dump(mode="json"),
               "gpu": evaluation.model_dump(mode="json")}
    turns = []
    for index, (stage, record) in enumerate(records.items()):
        record.pop("kind", None)
        turns.append({**turn, "turn": index, **({"extraction": no_code} if stage == "extraction" else {}),
                      "feedback": {"passed": False, "stage": stage, "text": "t", "verified_on_gpu": stage == "gpu",
                                   "record": record}})
    file = _run(tmp_path, "run", {**item.model_dump(mode="json"), "version": 1, "turns": turns})
    loaded = load_result(file)
    assert isinstance(loaded, ItemResult) and loaded.version == TRAJECTORY_VERSION
    kept = [t.feedback.record for t in loaded.turns]
    assert kept[0] is None and isinstance(kept[1], CheckReport) and isinstance(kept[2], Evaluation)
    assert [kept[1].model_dump_json(), kept[2].model_dump_json()] == [report.model_dump_json(),
                                                                      evaluation.model_dump_json()]
    assert [a.error_class for a in attempts_from_run(file.parents[3])] == [
        "extraction.no_code_block", "compile.cpp_error", "numerical.nan"]


def test_the_run_header_is_checked_as_every_record_is(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"version": 5, "kind": "eval", "config": {}}))
    with pytest.raises(RecordVersionError, match=r"run.json: written with run header version 5; .* reads version 2;"):
        RunDir.load(run)


# -- one load_result, typed by the header ----------------------------------------------------------------

def test_load_result_reads_the_type_the_run_header_names(tmp_path: Path) -> None:
    assert isinstance(load_result(_run(tmp_path, "eval", _evaluation())), Evaluation)
    for kind in ("run", "generate", "repair"):
        assert isinstance(load_result(_run(tmp_path, kind, _item(None))), ItemResult)


def test_a_result_of_another_kind_than_its_header_says_is_one_line_naming_the_file(tmp_path: Path) -> None:
    file = _run(tmp_path, "run", _evaluation())
    with pytest.raises(RunDirError, match=rf"^{file}: not the result of a generated item \(a record of kind 'evaluation'\)"):
        load_result(file)


def test_a_jsonl_record_of_a_newer_version_is_one_line_naming_the_file_and_line(tmp_path: Path) -> None:
    from ptxbench._io import read_jsonl, write_jsonl
    from ptxbench.fixit.mine import FailureCase
    from ptxbench.results.attempts import Attempt

    attempt = Attempt(run="r", arch="sm_90a", task=TASK.id, sample="s", error_class="compile.cpp_error")
    case = FailureCase(attempt=attempt, source="x", feedback="f")
    path = tmp_path / "failures.jsonl"
    write_jsonl(path, [case, case])
    assert read_jsonl(path, FailureCase) == [case, case]
    old = {**json.loads(case.model_dump_json()), "attempt": {**json.loads(attempt.model_dump_json()), "version": 1}}
    newer = {**json.loads(case.model_dump_json()), "version": 7}
    path.write_text(json.dumps(old) + "\n" + json.dumps(newer) + "\n")
    with pytest.raises(RecordVersionError) as refused:
        read_jsonl(path, FailureCase)
    assert str(refused.value) == (f"{path}:2: written with failure case version 7; this ptxbench ({__version__}) reads "
                                  "version 1; upgrade ptxbench to read it")
    path.write_text(json.dumps(old) + "\n")
    assert read_jsonl(path, FailureCase) == [case]
