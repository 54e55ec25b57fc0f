"""Running the external tools that read a build or the machine: cuobjdump, c++filt, nvidia-smi and ncu.

The parsers of what they print live in ``static/`` (SASS, PTX, ptxas log, ELF) and ``evaluate/executed``
(ncu's CSV); this module only finds a tool, runs it and hands back its text, so every external program
PTXBench starts is found in one place. cuobjdump and ncu come from ``discover`` (their versions are in the
run header); c++filt and nvidia-smi are looked up on PATH, and their absence only costs readable names and
the driver version.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.discover import find_toolchain

DEMANGLERS = ("c++filt", "cu++filt")


def disassemble(cubin: Path, timeout_s: float = 60.0) -> str:
    """The cubin's SASS, as cuobjdump prints it (read with ``static.sass``)."""
    cuobjdump = find_toolchain().path("cuobjdump")
    proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise ToolchainMissing(f"cuobjdump could not read {cubin.name}: {proc.stderr.strip()} "
                               "(a cuobjdump older than the ptxas that built it? use nvidia-cuda-cuobjdump>=13.2)")
    return proc.stdout


def demangle(names: list[str]) -> dict[str, str]:
    """C++ names as a person reads them (via c++filt when present; else each name as it is)."""
    tool = next((found for name in DEMANGLERS if (found := shutil.which(name))), None)
    if not tool or not names:
        return {n: n for n in names}
    proc = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=30)
    lines = proc.stdout.splitlines()
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def query_gpus(fields: Sequence[str], timeout_s: float = 20.0) -> list[str] | None:
    """nvidia-smi's answer for ``fields`` (``name``, ``driver_version``, ...): one CSV line per GPU, or None
    where nvidia-smi is not installed. OSError or subprocess.TimeoutExpired when it cannot answer."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    out = subprocess.run([smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=timeout_s).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def driver_version() -> str | None:
    """The NVIDIA driver's version (for the run header), or None where nvidia-smi cannot tell."""
    try:
        rows = query_gpus(["driver_version"], timeout_s=30.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return rows[0] if rows else None


def ncu_record_command(program: list[str], report: Path, metrics: Sequence[str]) -> list[str]:
    """ncu recording ``metrics`` for the profiled range of ``program`` into ``report`` (nothing of its results
    goes to its output). Clocks are left alone; only the range the program opens with cuProfilerStart counts."""
    return [find_toolchain().path("ncu"), "--clock-control", "none", "--profile-from-start", "off",
            "--metrics", ",".join(metrics), "--export", str(report), "--force-overwrite", *program]


def ncu_import_command(report: Path, metrics: Sequence[str]) -> list[str]:
    """ncu printing the report's launches as the raw CSV page, values in base units (bytes, ns)."""
    return [find_toolchain().path("ncu"), "--import", str(report), "--csv", "--page", "raw",
            "--print-metric-instances", "details", "--print-units", "base", "--metrics", ",".join(metrics)]
