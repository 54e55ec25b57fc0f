"""benchmarks/evaluator_breakdown.py --session-of N: N profiled programs, each its own process with its own plan,
recorded by one ncu session, and that session's report read back."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from ptxbench.evaluate.proof import profiling
from ptxbench.tasks.loader import get_task
from ptxbench.toolchain import discover, tools

from .conftest import repo_script

breakdown = repo_script("benchmarks/evaluator_breakdown.py")


def test_a_session_of_four_runs_four_programs_one_after_another_under_one_ncu(monkeypatch: pytest.MonkeyPatch) -> None:
    toolchain = SimpleNamespace(path=lambda name: f"/opt/{name}")
    monkeypatch.setattr(discover, "find_toolchain", lambda: toolchain)
    monkeypatch.setattr(tools, "find_toolchain", lambda: toolchain)
    monkeypatch.setattr(profiling, "profiled_program",
                        lambda task, sizes, shared_object, folder, *a, **k: ["python3", "-I", "profile_one.py",
                                                                              str(Path(folder) / "plan.json")])
    ran: list[list[str]] = []

    def run(command: list[str], **_: object) -> subprocess.CompletedProcess:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(breakdown.subprocess, "run", run)
    timings = breakdown._ncu_pieces(get_task("gemm_bf16"), Path("/lib/candidate.so"), session_of=4)
    assert {"ncu_session_of_4_s", "ncu_import_session_of_4_s", "ncu_full_stage_s"} <= set(timings)
    session = next(c for c in ran if "--target-processes" in c)
    assert session[0] == "/opt/ncu" and session[-4:-1] == ["all", "bash", "-c"]
    programs = [shlex.split(part) for part in session[-1].split(" && ")]
    plans = {program[-1] for program in programs}
    assert len(programs) == 4 and len(plans) == 4, "four processes, each with a plan of its own"
    report = session[session.index("--export") + 1]
    assert any(c[:3] == ["/opt/ncu", "--import", report] for c in ran), "the session's own report is read back"
    assert len(ran) == 7  # the five single-program parts, the session, its import
