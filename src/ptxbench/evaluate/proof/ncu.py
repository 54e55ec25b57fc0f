"""Nsight Compute as a process: one recording session to its end, and a report read back by a second ncu.

Shared by the one-candidate stage (``profiling``) and batched sessions (``batching``). What a profiled program
prints never counts as a result: the recording goes to a report file, which only ``import_report`` reads.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.isolation.gpu_lock import KEY_VARIABLE
from ptxbench.evaluate.proof.executed import NCU_METRICS, parse_ncu_csv_by_process
from ptxbench.records.evaluation import KernelProfile
from ptxbench.toolchain.tools import ncu_import_command

IMPORT_TIMEOUT_S = 120.0
# Run by its path with ``python -I``: it imports nothing of ptxbench (see its docstring).
PROFILED_PROGRAM = Path(__file__).parent.parent / "child" / "profile_one.py"
# Names in the harness's environment that candidate code must not see (used where confinement.py is absent).
_SECRET_NAME = re.compile(r"_API_KEY$|TOKEN|SECRET", re.IGNORECASE)


def profiled_program_command(plan: Path) -> list[str]:
    """The command that profiles the call ``plan`` describes: ``profile_one.py`` by its path, isolated."""
    return [sys.executable, "-I", str(PROFILED_PROGRAM), str(plan)]


def program_environment(home: Path) -> dict[str, str]:
    """The environment ncu and the profiled program run with: ``confinement.candidate_environment`` (HOME a
    private folder) where that module exists, else the harness's minus credentials and ptxbench's own
    settings (the GPU lock's key kept: the program takes the lock)."""
    try:
        from ptxbench.evaluate.isolation.confinement import candidate_environment
    except ImportError:
        environment = {name: value for name, value in os.environ.items()
                       if name == KEY_VARIABLE or not (_SECRET_NAME.search(name) or name.startswith("PTXBENCH_"))}
    else:
        environment = candidate_environment(os.environ, home=str(home))
    return {**environment, "PYTHONUNBUFFERED": "1"}


class ProfiledRunFailed(PtxbenchError):
    """The candidate's call failed or hung under ncu although it ran outside it, or ncu left no readable
    report of it. ``out_of_memory``: the GPU's memory ran out, possibly taken by another evaluation."""

    def __init__(self, message: str, out_of_memory: bool = False) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory


def output_tail(text: str, lines: int = 3, width: int = 200) -> str:
    """The last lines of the profiled program's output (and ncu's beside it), short: for messages only."""
    tail = [line[:width] for line in text.strip().splitlines()[-lines:]]
    return " | ".join(tail) if tail else "(none)"


def ncu_session(command: list[str], environment: dict[str, str], home: Path, timeout_s: float) -> tuple[int, str]:
    """``command`` (an ncu recording) to its end: exit code and output. In its own session, so a timeout ends
    the profiled process and what it started too; the caller holds the profiler turn."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          env=environment, cwd=home, start_new_session=True) as proc:
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ProfiledRunFailed(f"no end within {timeout_s:g} s under ncu; the process was killed") from None
        finally:
            with suppress(ProcessLookupError):  # whatever the candidate's code left running there ends too
                os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, output


def import_report(report: Path) -> list[tuple[int | None, KernelProfile]]:
    """The launches in ncu's report with the process id of each, read by a second ncu process; ValueError
    when that process fails or its output is no report."""
    try:
        done = subprocess.run(ncu_import_command(report, NCU_METRICS), capture_output=True, text=True,
                              errors="replace", timeout=IMPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ValueError(f"ncu did not read its report within {IMPORT_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        raise ValueError(f"ncu --import exited {done.returncode}: {output_tail(done.stderr or done.stdout)}")
    return parse_ncu_csv_by_process(done.stdout)


