"""Issue #26, prompts under one version: a generation run records PROMPT_VERSION in its header and in
every item, and a run directory written under other prompts is not resumed into a mix of both.

Through the command line at 80 columns with no TTY; the model is a replay file (no network).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.prompts import PROMPT_VERSION

from ..conftest import EXAMPLES
from .newcomer import cli, one_line

GENERATE = ("generate", "--model", "replay:answers.jsonl", "--tasks", "transpose", "--out")


@pytest.fixture()
def generated(tmp_path: Path) -> Path:
    answer = f"```cuda\n{(EXAMPLES / 'transpose.cu').read_text()}\n```"
    (tmp_path / "answers.jsonl").write_text(json.dumps({"task": "transpose", "sample": 0, "completion": answer}) + "\n")
    done = cli(*GENERATE, "gen", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path


def test_a_generation_run_records_the_prompts_version(generated: Path) -> None:
    header = json.loads((generated / "gen" / "run.json").read_text())
    assert header["config"]["prompt_version"] == PROMPT_VERSION
    item = json.loads((generated / "gen" / "items" / "transpose" / "sample_000" / "result.json").read_text())
    assert item["prompt_version"] == str(PROMPT_VERSION)


@pytest.mark.parametrize("older", [PROMPT_VERSION - 1, None], ids=["older version", "before the version was recorded"])
def test_a_run_written_under_other_prompts_is_not_resumed(generated: Path, older: int | None) -> None:
    header_file = generated / "gen" / "run.json"
    header = json.loads(header_file.read_text())
    if older is None:
        del header["config"]["prompt_version"]
    else:
        header["config"]["prompt_version"] = older
    header_file.write_text(json.dumps(header))
    done = cli(*GENERATE, "gen", cwd=generated)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    was = "null" if older is None else older
    assert one_line(done.stderr) == ("error: gen holds a run with another configuration (differs in: prompt_version "
                                     f"({was} -> {PROMPT_VERSION})); choose a new --out directory")
    fresh = cli(*GENERATE, "gen2", cwd=generated)
    assert fresh.returncode == 0, fresh.stderr
