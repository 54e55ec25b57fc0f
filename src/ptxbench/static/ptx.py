"""Parse PTX text into an instruction histogram (full mnemonics: opcode plus every modifier)."""

from __future__ import annotations

import re
from collections import Counter

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)")
_PREDICATE = re.compile(r"^@!?%?\w+\s+")
_MNEMONIC = re.compile(r"^([a-z][a-z0-9_]*(?:\.[A-Za-z0-9_:]+)*)")  # modifiers may be upper case (.L2)
_LABEL = re.compile(r"^[\w$]+:\s*")


def instructions(ptx: str) -> list[str]:
    """Every instruction mnemonic in order, directives and labels skipped (inline asm included)."""
    text = _COMMENT.sub("", ptx)
    found: list[str] = []
    for statement in re.split(r"[;\n{}]", text):
        statement = _LABEL.sub("", statement.strip())
        if not statement or statement.startswith((".", "}", ")")):
            continue
        statement = _PREDICATE.sub("", statement)
        match = _MNEMONIC.match(statement)
        if match:
            found.append(match.group(1))
    return found


def histogram(ptx: str) -> Counter[str]:
    return Counter(instructions(ptx))


def entry_names(ptx: str) -> list[str]:
    return _ENTRY.findall(_COMMENT.sub("", ptx))
