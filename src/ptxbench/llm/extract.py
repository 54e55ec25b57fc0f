"""From a completion's text to one candidate source file, or a clear reason why there is none.

Models wrap code in fenced blocks with assorted language tags, split it over several blocks (a header
and a source, or kernel and launcher), forget the closing fence at the end of a long answer, or think
aloud before answering. Extraction takes the blocks in order, drops reasoning sections, keeps the
blocks that look like CUDA C++, and inlines a header block that the main block includes by name.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from ptxbench.records.completion import Extraction, ExtractionStatus

CODE_TAGS = {"cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "cuh", ""}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)
_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)
_CUDA_SIGNS = re.compile(r"__global__|__device__|extern\s+\"C\"|asm\s*(volatile)?\s*\(|#include\s*[<\"]cuda")


class _Block(BaseModel):
    tag: str
    name: str | None
    code: str


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in order; an unclosed last fence runs to the end of the text."""
    blocks: list[_Block] = []
    position = 0
    while True:
        opening = _FENCE.search(text, position)
        if opening is None:
            return blocks
        fence = opening.group("fence")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end = closing.search(text, opening.end())
        body = text[opening.end() + 1: end.start() if end else len(text)]
        info = opening.group("info").strip()
        tag, _, rest = info.partition(" ")
        name_match = re.search(r"([\w./-]+\.(?:cuh|cu|h|hpp|cpp))", info)
        blocks.append(_Block(tag=tag.lower().lstrip("{.").rstrip("}"), name=name_match.group(1) if name_match else None,
                             code=_dedent(body, opening.group("indent"))))
        if end is None:
            return blocks
        position = end.end()


def _dedent(code: str, indent: str) -> str:
    if not indent:
        return code
    return "\n".join(line[len(indent):] if line.startswith(indent) else line for line in code.splitlines())


def extract_candidate(text: str, entry_point: str) -> Extraction:
    """The candidate source for a task whose entry point is ``entry_point``."""
    cleaned = _THINKING.sub("", text.replace("\r\n", "\n")).strip()
    if not cleaned:
        return Extraction(status=ExtractionStatus.EMPTY)
    blocks = [b for b in _blocks(cleaned) if b.tag in CODE_TAGS or _CUDA_SIGNS.search(b.code)]
    notes: list[str] = []
    if not blocks:
        if _CUDA_SIGNS.search(cleaned) and re.search(rf"\b{re.escape(entry_point)}\s*\(", cleaned):
            notes.append("no fenced block: the whole answer was taken as the source")
            blocks = [_Block(tag="", name=None, code=cleaned)]
        else:
            return Extraction(status=ExtractionStatus.NO_CODE)
    defines_entry = re.compile(rf"\b{re.escape(entry_point)}\s*\(")
    main = next((b for b in reversed(blocks) if defines_entry.search(b.code) and "extern" in b.code), None) \
        or next((b for b in reversed(blocks) if defines_entry.search(b.code)), None)
    if main is None:
        return Extraction(status=ExtractionStatus.NO_ENTRY_POINT, blocks_found=len(blocks),
                          notes=[f"no code block mentions the entry point {entry_point}()"])
    source = _inline_headers(main, blocks, notes)
    if len(blocks) > 1:
        notes.append(f"{len(blocks)} code blocks: kept the one defining {entry_point}()")
    return Extraction(status=ExtractionStatus.OK, source=source.rstrip() + "\n", blocks_found=len(blocks), notes=notes)


def _inline_headers(main: _Block, blocks: list[_Block], notes: list[str]) -> str:
    """Replace ``#include "name"`` in the main block with a block named ``name``, when the answer has one."""
    by_name = {b.name: b for b in blocks if b.name and b is not main}

    def replace(match: re.Match[str]) -> str:
        header = by_name.get(match.group(1)) or by_name.get(match.group(1).rsplit("/", 1)[-1])
        if header is None:
            return match.group(0)
        notes.append(f"inlined {match.group(1)} from its own code block")
        return header.code
    return _INCLUDE.sub(replace, main.code)
