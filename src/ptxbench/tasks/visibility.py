"""What a model must never be told about a task: its held-out workloads and held-out variants.

Prompts show only the shown workloads, but text made *after* an evaluation — refinement feedback, the
evaluator's messages, the records Fixit trains on — may quote a failing workload by name or by its
sizes. ``redact`` takes every such mention out, so one function guards every path that turns results
into model input; ``hidden_mentions`` lets a test (or a data-set builder) prove none is left.
"""

from __future__ import annotations

import re
from functools import cache

from ptxbench.tasks.model import Task

HIDDEN_WORKLOAD = "a held-out workload"
HIDDEN_VARIANT = "a held-out variant"
HIDDEN_SIZES = "(held-out sizes)"


def size_signatures(sizes: dict[str, int]) -> list[str]:
    """The ways PTXBench writes a workload's sizes: the prompt's ``M=1, N=8``, the terminal's ``M=1 N=8``,
    and a Python dict's ``{'M': 1, 'N': 8}`` (as exception messages quote it)."""
    pairs = [f"{name}={value}" for name, value in sizes.items()]
    return [", ".join(pairs), " ".join(pairs), repr(dict(sizes))]


def hidden_names(task: Task) -> list[str]:
    """Names of held-out workloads and held-out variants."""
    return [w.name for w in task.held_out()] + [v.name for v in task.held_out_variants()]


def hidden_signatures(task: Task) -> list[str]:
    """Size signatures of held-out workloads that no shown workload has (a shown one is no secret)."""
    shown = {s for w in task.shown() for s in size_signatures(w.sizes)}
    return [s for w in task.held_out() for s in size_signatures(w.sizes) if s not in shown]


@cache
def _name_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    if not names:
        return None
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    # a name is a mention only as a whole token: `single-token` inside `single-tokens` or `my-single-token` is not
    return re.compile(rf"(?<![A-Za-z0-9_.-])(?:{alternatives})(?![A-Za-z0-9_-])")


def hidden_mentions(text: str, task: Task) -> list[str]:
    """Every held-out name or size signature that ``text`` mentions (empty: nothing leaks)."""
    pattern = _name_pattern(tuple(hidden_names(task)))
    found = pattern.findall(text) if pattern else []
    return found + [s for s in hidden_signatures(task) if s in text]


def redact(text: str, task: Task) -> str:
    """``text`` with every held-out workload or variant name and held-out size signature replaced."""
    variants = {v.name for v in task.held_out_variants()}
    pattern = _name_pattern(tuple(hidden_names(task)))
    if pattern is not None:
        text = pattern.sub(lambda m: HIDDEN_VARIANT if m.group(0) in variants else HIDDEN_WORKLOAD, text)
    for signature in sorted(hidden_signatures(task), key=len, reverse=True):
        text = text.replace(signature, HIDDEN_SIZES)
    return text
