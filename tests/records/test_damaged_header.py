"""A damaged run.json loses nothing: it is rebuilt from the items' own records, with a warning when the run is
read, written anew when the run is resumed with a configuration the items agree with, or by ``eval --repair``;
the damaged file is kept beside it. Without a GPU, as CI runs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.records.rundir import (
    HEADER_FILE,
    DamagedHeader,
    RunDir,
    RunDirError,
    read_header,
    rebuilt_header,
    repair_header,
)

from ..conftest import EXAMPLES

runner = CliRunner()


def _eval_run(tmp_path: Path) -> Path:
    out = tmp_path / "eval"
    done = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), str(EXAMPLES / "rmsnorm.cu"), "--out", str(out),
                               "--trials", "2"])
    assert done.exit_code == 0, done.output
    return out


def _truncate(out: Path) -> str:
    intact = (out / HEADER_FILE).read_text()
    (out / HEADER_FILE).write_text(intact[:len(intact) // 2])
    return intact


def test_a_truncated_header_is_rebuilt_to_read_the_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = _eval_run(tmp_path)
    intact = json.loads(_truncate(out))
    with pytest.raises(DamagedHeader):
        read_header(out / HEADER_FILE)
    with caplog.at_level(logging.WARNING):
        rundir = RunDir.load(out)
    assert "rebuilt from its 2 item(s)" in caplog.text and "eval --repair" in caplog.text
    assert rundir.header.kind == "eval" and rundir.header.environment["rebuilt_from_items"] == 2
    assert rundir.header.config == intact["config"], "arch and options are what every evaluation recorded"
    metrics = runner.invoke(app, ["metrics", str(out)])
    assert metrics.exit_code == 0, metrics.output
    regraded = runner.invoke(app, ["eval", str(out), "--regrade"])
    assert regraded.exit_code == 0, regraded.output


def test_resuming_with_the_same_configuration_writes_the_header_anew(tmp_path: Path) -> None:
    out = _eval_run(tmp_path)
    _truncate(out)
    resumed = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--trials", "2"])
    assert resumed.exit_code == 0, resumed.output
    assert "1 stored result reused" in resumed.output
    assert read_header(out / HEADER_FILE).config["options"]["trials"] == 2
    assert (out / (HEADER_FILE + ".damaged")).is_file(), "the damaged file is kept"


def test_resuming_with_another_configuration_over_a_damaged_header_is_refused(tmp_path: Path) -> None:
    out = _eval_run(tmp_path)
    _truncate(out)
    refused = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--trials", "3"])
    assert refused.exit_code != 0
    assert "differs from this one in: options" in str(refused.exception) + refused.output
    assert not (out / (HEADER_FILE + ".damaged")).exists(), "nothing is written when refused"


def test_eval_repair_rebuilds_the_header_and_says_what_it_holds(tmp_path: Path) -> None:
    out = _eval_run(tmp_path)
    intact = runner.invoke(app, ["eval", "--repair", str(out)])
    assert intact.exit_code == 0 and "intact: nothing to repair" in intact.output
    _truncate(out)
    repaired = runner.invoke(app, ["eval", "--repair", str(out)])
    assert repaired.exit_code == 0, repaired.output
    assert "rebuilt from 2 item(s): a eval run" in repaired.output and "run.json.damaged" in repaired.output
    assert read_header(out / HEADER_FILE).environment["rebuilt_from_items"] == 2
    assert runner.invoke(app, ["eval", "--repair", str(out), str(out)]).exit_code != 0


def test_a_header_with_no_item_to_rebuild_it_from_is_a_clear_error(tmp_path: Path) -> None:
    out = _eval_run(tmp_path)
    _truncate(out)
    shutil.rmtree(out / "items")
    with pytest.raises(RunDirError, match="no readable item to rebuild it from"):
        repair_header(out)
    assert (out / HEADER_FILE).is_file() and not (out / (HEADER_FILE + ".damaged")).exists()


def test_a_generation_runs_header_is_rebuilt_from_its_trajectories(tmp_path: Path) -> None:
    kernel = (EXAMPLES / "transpose.cu").read_text()
    replay = tmp_path / "completions.jsonl"
    replay.write_text("\n".join(json.dumps({"task": "transpose", "sample": s, "turn": 0,
                                            "completion": f"```cuda\n{kernel}\n```"}) for s in range(2)) + "\n")
    out = tmp_path / "run"
    done = runner.invoke(app, ["run", "--model", f"replay:{replay}", "--tasks", "transpose", "--samples", "2",
                               "--out", str(out)])
    assert done.exit_code == 0, done.output
    intact = read_header(out / HEADER_FILE)
    (out / HEADER_FILE).write_text("{")
    with pytest.raises(DamagedHeader) as damage:
        read_header(out / HEADER_FILE)
    rebuilt = rebuilt_header(out, damage.value)
    assert rebuilt.kind == "run"
    for key in ("model", "arch", "context", "tasks", "prompt_version"):
        assert rebuilt.config[key] == intact.config[key], key
    report = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
