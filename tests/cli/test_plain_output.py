"""What the command line writes into a pipe, kept whole: `check`'s stage marks ('[source]', which rich took for
markup and dropped), progress lines longer than 80 columns (they were cut), and a reader that stops reading
(`ptxbench prompt TASK | head` under `set -o pipefail` exited 1; it now exits 0, quietly, for every command)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ptxbench.kernels import reference_folder
from ptxbench.results.terminal import ItemProgress

from ..conftest import REPO
from .newcomer import COLUMNS, cli, one_line

TRANSPOSE = reference_folder("sm_90a") / "transpose.cu"  # on plain sm_90 its guarded features compile away


def test_check_without_a_task_marks_every_feature_with_its_furthest_stage(tmp_path: Path) -> None:
    shutil.copy(TRANSPOSE, tmp_path)  # a short name: the title line holds it, and it is no part of what must fit
    shown = cli("check", "transpose.cu", "--arch", "sm_90", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    data = cli("check", "transpose.cu", "--arch", "sm_90", "--json", cwd=tmp_path)
    assert data.returncode == 0, data.stderr
    features = json.loads(data.stdout)["static"]["features"]
    stage = {f["feature"]: "SASS" if any(f["sass"].values()) else "PTX" if f["ptx"] else "source" for f in features}
    assert "source" in stage.values(), "the case of the issue: features written but compiled away"
    text = one_line(shown.stdout)
    listed = text[text.index("features: ") + len("features: "):text.index(" note: ")]
    assert listed.split(", ") == [f"{name}[{where}]" for name, where in stage.items()], shown.stdout
    assert max(len(line) for line in shown.stdout.splitlines()) <= COLUMNS, shown.stdout


def test_a_finished_items_line_in_a_pipe_is_whole_however_long() -> None:
    out = io.StringIO()
    console = Console(file=out, width=COLUMNS, force_terminal=False)
    reason = "mbarrier: not executed; tma.load: not executed (the kernel took the fallback path for this workload)"
    with ItemProgress(console, 12, "evaluating") as progress:
        progress.item_done("gemm_bf16/sample_012", "REJECTED", reason, seconds=12.3)
        progress.item_done("softmax.cu", "PASSED", "1.20x the vendor\nbaseline", seconds=3.0)
    assert out.getvalue().splitlines() == [f"[1/12] gemm_bf16/sample_012: REJECTED (12.3 s) {reason}",
                                           "[2/12] softmax.cu: PASSED (3.0 s) 1.20x the vendor baseline"]


def _closed_reader(*args: str, closed: str = "stdout") -> int:
    """The exit code of ``ptxbench ARGS`` writing into a pipe (stdout's or stderr's) whose reader is gone before
    the first write: the read end is closed here at once, as `head` closes it once it has its lines, so the
    writer meets it closed whatever the size of the pipe's buffer."""
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL} if closed == "stdout" else \
        {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    process = subprocess.Popen([sys.executable, "-m", "ptxbench", *args], stdin=subprocess.DEVNULL, cwd=REPO, **pipe)
    reader = process.stdout if closed == "stdout" else process.stderr
    assert reader is not None
    reader.close()
    return process.wait(timeout=300)


@pytest.mark.parametrize("args", [("prompt", "softmax", "--context", "full"),  # print()
                                  ("tasks", "list"),  # rich
                                  ("tasks", "show", "gemm_bf16"),
                                  ("check", str(TRANSPOSE))])
def test_a_command_whose_reader_left_exits_0_quietly(args: tuple[str, ...]) -> None:
    assert _closed_reader(*args) == 0


def test_a_bad_input_still_exits_2_when_nobody_reads_stderr() -> None:
    assert _closed_reader("prompt", "no_such_task", closed="stderr") == 2


def test_a_broken_pipe_of_the_commands_own_is_still_a_failure() -> None:
    """Only stdout's reader leaving ends a command quietly; a worker's pipe or a server's connection that broke
    under it (stdout open, here pytest's capture) is the error it is."""
    from ptxbench.cli.app import _reader_may_leave

    with pytest.raises(BrokenPipeError), _reader_may_leave():
        raise BrokenPipeError(32, "Broken pipe")


def test_prompt_into_head_under_pipefail_succeeds_with_nothing_on_stderr() -> None:
    # 81 KB of prompt, over a pipe's 64 KB buffer: the writer meets the closed pipe whenever head leaves
    shell = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m ptxbench prompt softmax "
                            "--context full | head -n 2"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert shell.returncode == 0, shell.stderr
    assert shell.stderr == ""
    assert re.fullmatch(r"===== system =====\n.+\n", shell.stdout), shell.stdout
