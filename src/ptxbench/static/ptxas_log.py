"""Read ptxas's verbose report (-v) and the warnings that change what a kernel really does."""

from __future__ import annotations

import re

from pydantic import BaseModel

_FUNCTION = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
# ptxas prints most warnings as "warning :", but some performance diagnostics as "info : (C7508) ...".
_WARNING = re.compile(r"ptxas[^\n]*?(?:warning\s*:|info\s*:\s*(?=\(C\d{4}\)))\s*(.*)", re.IGNORECASE)
_CODE = re.compile(r"\b(C\d{4})\b")

_WGMMA_SERIALIZED = ("wgmma serialized: ptxas inserted waits between wgmma instructions, so the matrix pipeline "
                     "is not asynchronous (the warning text names the cause)")

_WGMMA_WAITED = ("a wgmma wait was injected: ptxas could not tell whether registers an in-flight wgmma writes are "
                 "in use (paths that meet with a wgmma group in flight on one only), so it waits for the group "
                 "right after issuing it and nothing overlaps the matrix pipeline there")

# Warnings with consequences: the feature is written but does not do its job.
SIGNIFICANT_WARNINGS = {
    "C7508": "setmaxnreg is ignored: the kernel has no register cap at entry; add __launch_bounds__(threads, 1)",
    "C7511": _WGMMA_SERIALIZED,
    "C7514": _WGMMA_SERIALIZED,
    "C7515": _WGMMA_SERIALIZED,
    "C7517": _WGMMA_WAITED,
    "C7518": _WGMMA_SERIALIZED,
}


class KernelResources(BaseModel):
    registers: int | None = None
    barriers: int | None = None
    shared_bytes: int | None = None
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


class PtxasWarning(BaseModel):
    code: str | None
    text: str
    meaning: str | None = None


def resources(log: str) -> dict[str, KernelResources]:
    """Per mangled function name, what ptxas allocated."""
    found: dict[str, KernelResources] = {}
    current: str | None = None
    for line in log.splitlines():
        function = _FUNCTION.search(line)
        if function:
            current = function.group(1)
            found.setdefault(current, KernelResources())
            continue
        if current is None:
            continue
        used = _USED.search(line)
        if used:
            found[current] = found[current].model_copy(update={
                "registers": int(used.group(1)),
                "barriers": int(used.group(2)) if used.group(2) else 0,
                "shared_bytes": int(used.group(3)) if used.group(3) else 0,
            })
        frame = _FRAME.search(line)
        if frame:
            found[current] = found[current].model_copy(update={
                "stack_frame_bytes": int(frame.group(1)),
                "spill_store_bytes": int(frame.group(2)),
                "spill_load_bytes": int(frame.group(3)),
            })
    return found


def warnings(log: str) -> list[PtxasWarning]:
    result: list[PtxasWarning] = []
    for line in log.splitlines():
        match = _WARNING.search(line)
        if not match:
            continue
        code_match = _CODE.search(line)
        code = code_match.group(1) if code_match else None
        text = match.group(1).strip()
        meaning = SIGNIFICANT_WARNINGS.get(code or "")
        if meaning is None and "wgmma" in text and "serializ" in text:
            meaning = _WGMMA_SERIALIZED
        result.append(PtxasWarning(code=code, text=text, meaning=meaning))
    return result
