"""No prompt shows a held-out workload or a held-out variant: scanned for every name and size signature,
for every task, target and context condition, alone and after another task's one-shot example."""

from __future__ import annotations

import re

import pytest

from ptxbench.arch.registry import BENCHMARK_ARCHS
from ptxbench.prompts.conversation import ContextCondition, OneShot, build_conversation
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.model import Task
from ptxbench.tasks.visibility import hidden_mentions, hidden_names, hidden_signatures

_SHOWN_LINE = re.compile(r"^- `([^`]+)`[^:]*: ([A-Za-z_][A-Za-z0-9_]*=\d+(?:, [A-Za-z_][A-Za-z0-9_]*=\d+)*)", re.M)


def _workload_lines(text: str) -> dict[str, dict[str, int]]:
    """The workloads a prompt lists, parsed back to sizes."""
    return {name: {k: int(v) for k, v in (pair.split("=") for pair in sizes.split(", "))}
            for name, sizes in _SHOWN_LINE.findall(text)}


def _conversations(task: Task, other: Task) -> list[str]:
    texts = []
    for arch in BENCHMARK_ARCHS:
        for condition in ContextCondition:
            for one_shot in (None, OneShot(task=other, source="// a solution\n")):
                texts.append("\n".join(m.content for m in build_conversation(task, arch, condition, one_shot)))
    return texts


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_no_prompt_names_or_sizes_a_held_out_workload_or_variant(task: Task) -> None:
    assert hidden_names(task) and hidden_signatures(task)  # the scan has something to look for
    other = next(t for t in bundled_suite() if t.id != task.id)  # the one-shot example's task
    for text in _conversations(task, other):
        assert hidden_mentions(text, task) == [] and hidden_mentions(text, other) == []
        listed = _workload_lines(text.split(f"# Task `{task.id}`")[-1])
        assert listed == {w.name: w.sizes for w in task.shown()}  # the scan reads the real listing
        for sizes in listed.values():  # and no listed shape falls in a held-out variant
            assert not any(v.matches(sizes) for v in task.held_out_variants())


def test_the_scan_finds_a_held_out_workload_when_one_is_shown() -> None:
    task = next(t for t in bundled_suite() if t.id == "attention_fwd")
    leaky = task.model_copy(update={"workloads": [w.model_copy(update={"role": w.role.__class__.VISIBLE})
                                                  if w.name == "hd64-s640" else w for w in task.workloads]})
    text = "\n".join(m.content for m in build_conversation(leaky, BENCHMARK_ARCHS[0]))
    assert "hd64-s640" in hidden_mentions(text, task)
    assert "B=5, H=12, S=640, D=64, causal=0" in hidden_mentions(text, task)
