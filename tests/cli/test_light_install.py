"""The light install (`pip install -e '.[gpu,cuda-tools]'`, README): checking, prompting, evaluating and
reporting work without the LLM, training, Ray and plotting stacks that the `dev` extra pulls in.

Shown without a second install: each command runs in a real process in which importing any of those
packages fails, as it would where they are not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, FIXTURES
from .newcomer import COLUMNS, one_line

HEAVY = ("ray", "transformers", "trl", "datasets", "pyarrow", "pandas", "peft", "accelerate", "openai", "anthropic",
         "matplotlib", "hypothesis")

_WITHOUT_HEAVY = """
import importlib.abc, sys
heavy = set(sys.argv[1].split(","))
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in heavy:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
sys.argv = ["ptxbench", *sys.argv[2:]]
from ptxbench.cli import main
main()
"""


def light(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WITHOUT_HEAVY, ",".join(HEAVY), *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": str(COLUMNS)})


def test_the_blocker_really_blocks() -> None:
    done = subprocess.run([sys.executable, "-c", _WITHOUT_HEAVY.replace("from ptxbench.cli import main\nmain()",
                                                                         "import matplotlib"), ",".join(HEAVY)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "No module named 'matplotlib'" in done.stderr


@pytest.mark.parametrize("args", [("tasks", "list"), ("tasks", "show", "rmsnorm"), ("prompt", "softmax"),
                                  ("doctor",)], ids=lambda a: " ".join(a))
def test_reading_commands_work_without_the_heavy_extras(args: tuple[str, ...]) -> None:
    done = light(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_check_eval_and_report_work_without_the_heavy_extras(tmp_path: Path) -> None:
    checked = light("check", str(FIXTURES / "wgmma_unguarded.cu"), "--json")
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert json.loads(checked.stdout)["build"]["ok"]

    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "softmax.cu").write_text((EXAMPLES / "softmax.cu").read_text())
    evaluated = light("eval", str(folder), "--out", str(tmp_path / "run"))
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert (tmp_path / "run" / "items" / "softmax" / "softmax" / "result.json").is_file()

    reported = light("report", str(tmp_path / "run"), "--out", str(tmp_path / "report"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    assert "Traceback" not in reported.stderr
    assert (tmp_path / "report" / "report.md").is_file()
    # Without matplotlib the plots are left out, the tables are written, and the note names the extra.
    note = one_line(reported.stderr)
    assert "note: the report's plots need matplotlib, which is not installed: pip install 'ptxbench[report]'" in note
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Plots left out." in markdown and "| softmax |" in markdown
    assert "<img" not in (tmp_path / "report" / "report.html").read_text()
