"""One word per stage of a required feature (absent | source | ptx | sass, or unsupported) wherever it is shown:
``check``'s JSON and table, a stored evaluation, the serving API's events, the report's candidates; records
written with the old words (``not_written``, ``in_sass``, ...) still load, in today's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.check import check_file
from ptxbench.cli import app
from ptxbench.records.check import CheckReport
from ptxbench.records.evaluation import Evaluation
from ptxbench.serve.models import StageEvent
from ptxbench.static.report import LEGACY_STAGES, StaticReport, Stage
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES, FIXTURES

runner = CliRunner()
WORDS = {"absent", "source", "ptx", "sass", "unsupported"}


def test_the_stages_are_the_words_of_the_vocabulary() -> None:
    assert {stage.value for stage in Stage} == WORDS
    assert {stage.value for stage in LEGACY_STAGES.values()} == WORDS  # every old word has today's


@pytest.fixture(scope="module")
def mma_sync_check() -> CheckReport:
    """gemm_bf16 written with mma.sync: its wgmma requirement is absent, its other ones are not."""
    return check_file(FIXTURES / "gemm_mma_sync.cu", Arch.SM_90A, get_task("gemm_bf16"))


def _as_version_1(static: dict) -> dict:  # type: ignore[type-arg]
    old = {stage.value: word for word, stage in LEGACY_STAGES.items()}
    return {**static, "version": 1, "requirements": [{**r, "stage": old[r["stage"]]} for r in static["requirements"]]}


def test_a_static_report_of_version_1_reads_in_todays_words(mma_sync_check: CheckReport) -> None:
    today = json.loads(mma_sync_check.model_dump_json())
    assert today["static"]["version"] == 2 and "absent" in {r["stage"] for r in today["static"]["requirements"]}
    old = {**today, "static": _as_version_1(today["static"])}
    assert "not_written" in json.dumps(old)
    read = CheckReport.model_validate_json(json.dumps(old))
    assert read.static is not None and read.static.version == 2
    assert [r.stage for r in read.static.requirements] == [r.stage for r in mma_sync_check.static.requirements]


def test_a_stored_evaluation_with_the_old_words_still_loads(mma_sync_check: CheckReport) -> None:
    from ptxbench.evaluate.judgement.static_only import static_verdict

    evaluation = json.loads(static_verdict(mma_sync_check, task_hash="").model_dump_json())
    evaluation["static"] = _as_version_1(evaluation["static"])
    read = Evaluation.model_validate_json(json.dumps(evaluation))
    assert read.static is not None and Stage.NOT_WRITTEN in {r.stage for r in read.static.requirements}


def test_a_static_report_of_a_newer_version_is_refused(mma_sync_check: CheckReport) -> None:
    newer = {**json.loads(mma_sync_check.static.model_dump_json()), "version": 3}
    with pytest.raises(ValueError, match="static report version 3 .* upgrade ptxbench"):
        StaticReport.model_validate(newer)


def test_a_served_build_event_stored_with_the_old_words_reads_in_todays() -> None:
    stored = {"seq": 2, "stage": "build", "at": 0.0,
              "data": {"ok": True, "requirements": [{"requirement": "wgmma", "stage": "not_written"},
                                                    {"requirement": "tma", "stage": "in_sass"}]}}
    event = StageEvent.model_validate(stored)
    assert [r["stage"] for r in event.data["requirements"]] == ["absent", "sass"]
    assert StageEvent.model_validate({**stored, "stage": "trials", "data": {"passed": 3}}).data == {"passed": 3}


def test_check_says_the_same_word_in_its_table_and_its_json() -> None:
    table = runner.invoke(app, ["check", str(EXAMPLES / "transpose.cu"), "--task", "transpose"])
    as_json = runner.invoke(app, ["check", str(EXAMPLES / "transpose.cu"), "--task", "transpose", "--json"])
    stages = {r["stage"] for r in json.loads(as_json.stdout)["static"]["requirements"]}
    assert stages == {"absent"}
    assert "absent" in table.stdout and "not_written" not in table.stdout + as_json.stdout


def test_no_old_word_is_left_in_the_package() -> None:
    package = Path(__file__).resolve().parents[2] / "src" / "ptxbench"
    for path in package.rglob("*.py"):
        if path.name == "report.py" and path.parent.name == "static":
            continue  # where the old words are kept, to read old records
        text = path.read_text()
        for word in ("not_written", "eliminated_before_ptx", "not_in_sass"):
            assert word not in text, f"{path}: {word}"
