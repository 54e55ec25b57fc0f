"""Count the SASS instructions per kernel by full mnemonic, in cuobjdump's listing (``toolchain.tools.disassemble``).

The full mnemonic keeps every dot-modifier (``HGMMA.64x128x16.F32.BF16``, ``UTMALDG.2D.MULTICAST``):
the shape and the types live there, and the feature registry matches on it.
"""

from __future__ import annotations

import re
from collections import Counter

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


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


def kernel_names(sass: str) -> list[str]:
    """The mangled name of every kernel in the listing, once each, in order (the keys of ``per_kernel_histogram``)."""
    return list(dict.fromkeys(match.group(1) for line in sass.splitlines() if (match := _FUNCTION.match(line))))
