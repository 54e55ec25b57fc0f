"""Persisted records as a user meets them: a result written by a newer ptxbench is one line saying to
upgrade, in every command that reads it; a result of an older version is read as today's."""

from __future__ import annotations

import json
from pathlib import Path

from ptxbench import __version__
from ptxbench.records.evaluation import EVALUATION_VERSION

from ..conftest import EXAMPLES
from .newcomer import cli, one_line

ANSWER = "```cuda\n" + (EXAMPLES / "transpose.cu").read_text() + "\n```"


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    text = one_line(stderr)
    assert text.startswith("error: ") and text.count("error: ") == 1, stderr
    return text


def test_a_result_of_a_newer_ptxbench_is_one_line_in_every_reader(tmp_path: Path) -> None:
    done = cli("eval", str(EXAMPLES / "transpose.cu"), "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = tmp_path / "run" / "items" / "transpose" / "transpose" / "result.json"
    result.write_text(json.dumps({**json.loads(result.read_text()), "version": 9}))
    problem = (f"error: run/items/transpose/transpose/result.json: written with evaluation version 9; this ptxbench "
               f"({__version__}) reads version {EVALUATION_VERSION}; upgrade ptxbench to read it")
    for command in (["report", "run"], ["metrics", "run"], ["fixit", "mine", "run", "--out", "failures.jsonl"],
                    ["eval", "run", "--regrade"], ["eval", str(EXAMPLES / "transpose.cu"), "--out", "run"]):
        done = cli(*command, cwd=tmp_path)
        assert done.returncode == 2 and _error_line(done.stderr) == problem, command
        assert done.stdout == "" or command[-2:] == ["--out", "run"], command  # a resumed eval notes "no GPU" first


def test_a_trajectory_of_version_1_is_read_as_today(tmp_path: Path) -> None:
    """Version 1 kept each feedback's record as an untyped dict (no ``kind``): metrics read it as before."""
    replay = tmp_path / "answers.jsonl"
    replay.write_text(json.dumps({"task": "transpose", "sample": 0, "turn": 0, "completion": ANSWER}) + "\n")
    done = cli("run", "--model", f"replay:{replay}", "--tasks", "transpose", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    today = cli("metrics", "run", cwd=tmp_path)
    assert today.returncode == 0, today.stderr
    result = tmp_path / "run" / "items" / "transpose" / "sample_000" / "result.json"
    record = json.loads(result.read_text())
    assert record["version"] == 2 and record["turns"][0]["feedback"]["record"]["kind"] == "evaluation"
    del record["turns"][0]["feedback"]["record"]["kind"]
    result.write_text(json.dumps({**record, "version": 1}))
    old = cli("metrics", "run", cwd=tmp_path)
    assert old.returncode == 0, old.stderr
    assert old.stdout == today.stdout
