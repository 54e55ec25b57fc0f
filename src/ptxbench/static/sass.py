"""Disassemble a cubin and count SASS instructions per kernel by full mnemonic.

The full mnemonic keeps every dot-modifier (``HGMMA.64x128x16.F32.BF16``, ``UTMALDG.2D.MULTICAST``):
the shape and the types live there, and the feature registry matches on it.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.discover import find_toolchain

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def disassemble(cubin: Path, timeout_s: float = 60.0) -> str:
    cuobjdump = find_toolchain().path("cuobjdump")
    proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise ToolchainMissing(f"cuobjdump could not read {cubin.name}: {proc.stderr.strip()} "
                               "(a cuobjdump older than the ptxas that built it? use nvidia-cuda-cuobjdump>=13.2)")
    return proc.stdout


def per_kernel_histogram(sass: str) -> dict[str, Counter[str]]:
    """{mangled kernel name: Counter of full SASS mnemonics}; NOPs are dropped."""
    kernels: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in sass.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = kernels.setdefault(function.group(1), Counter())
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None and instruction.group(1) != "NOP":
            current[instruction.group(1)] += 1
    return kernels
