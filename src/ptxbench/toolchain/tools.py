"""Running the external tools that read a build or the machine: cuobjdump, c++filt, nvidia-smi and ncu.

The parsers of what they print live in ``static/`` (SASS, PTX, ptxas log, ELF) and ``evaluate/proof/executed``
(ncu's CSV); this module only finds a tool, runs it and hands back its text, so every external program
PTXBench starts is found in one place. cuobjdump and ncu come from ``discover`` (their versions are in the
run header); c++filt and nvidia-smi are looked up on PATH, and their absence only costs readable names and
the driver version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.discover import find_toolchain

DEMANGLERS = ("c++filt", "cu++filt")


def disassemble(cubin: Path, timeout_s: float = 60.0) -> str:
    """The cubin's SASS, as cuobjdump prints it (read with ``static.sass``). A cubin this process has read
    before, byte for byte, with the same cuobjdump, is answered from memory (``_SassMemo``)."""
    cuobjdump = find_toolchain().path("cuobjdump")
    key = _sass_memo.key(cuobjdump, cubin)
    if key is not None and (known := _sass_memo.get(key)) is not None:
        return known
    proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise ToolchainMissing(f"cuobjdump could not read {cubin.name}: {proc.stderr.strip()} "
                               "(a cuobjdump older than the ptxas that built it? use nvidia-cuda-cuobjdump>=13.2)")
    if key is not None and _sass_memo.key(cuobjdump, cubin) == key:  # unchanged while cuobjdump read it
        _sass_memo.put(key, proc.stdout)
    return proc.stdout


class _SassMemo:
    """SASS listings by the digest of their cubin, the most recently used first, up to ``MAX_CHARS`` in all.
    cuobjdump costs about 0.4 s of CPU even for a small cubin (it starts nvdisasm), and one process reads one
    build's SASS many times: ``eval`` of several items of one source, the evaluator after the check before
    it, a server's jobs. The same bytes always give the same listing, so answering from memory changes
    nothing but the time."""

    MAX_CHARS = 64 * 2**20

    def __init__(self) -> None:
        self._listings: OrderedDict[tuple[str, int, str], str] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(cuobjdump: str, cubin: Path) -> tuple[str, int, str] | None:
        """(the tool, its modification time, the cubin's SHA-256); None where either cannot be read (cuobjdump
        then says why)."""
        try:
            return cuobjdump, os.stat(cuobjdump).st_mtime_ns, hashlib.sha256(cubin.read_bytes()).hexdigest()
        except OSError:
            return None

    def get(self, key: tuple[str, int, str]) -> str | None:
        with self._lock:
            listing = self._listings.get(key)
            if listing is not None:
                self._listings.move_to_end(key)
            return listing

    def put(self, key: tuple[str, int, str], listing: str) -> None:
        if len(listing) > self.MAX_CHARS:
            return
        with self._lock:
            if key in self._listings:
                return
            self._listings[key] = listing
            self._chars += len(listing)
            while self._chars > self.MAX_CHARS:
                _, dropped = self._listings.popitem(last=False)
                self._chars -= len(dropped)


_sass_memo = _SassMemo()


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


def ncu_record_command(program: list[str], report: Path, metrics: Sequence[str], every_process: bool = False) -> list[str]:
    """ncu recording ``metrics`` for the profiled range of ``program`` into ``report`` (nothing of its results
    goes to its output). Clocks are left alone; only the range the program opens with cuProfilerStart counts.
    ``every_process``: the program's child processes are profiled too, said outright (ncu's default) because a
    batched session (``proof.batching``) is nothing else."""
    processes = ["--target-processes", "all"] if every_process else []
    return [find_toolchain().path("ncu"), "--clock-control", "none", "--profile-from-start", "off", *processes,
            "--metrics", ",".join(metrics), "--export", str(report), "--force-overwrite", *program]


def ncu_import_command(report: Path, metrics: Sequence[str]) -> list[str]:
    """ncu printing the report's launches as the raw CSV page, values in base units (bytes, ns)."""
    return [find_toolchain().path("ncu"), "--import", str(report), "--csv", "--page", "raw",
            "--print-metric-instances", "details", "--print-units", "base", "--metrics", ",".join(metrics)]
