"""The task section names the task's own baseline, and the prompts sit below everything that uses them."""

from __future__ import annotations

import ast
from pathlib import Path

import ptxbench
from ptxbench.arch.registry import Arch
from ptxbench.prompts.task import render_task_prompt
from ptxbench.tasks.loader import get_task

PACKAGE = Path(ptxbench.__file__).parent
# What the prompts may read: their own package and the floors below them (issue #26); never check, records,
# llm, evaluate, results, refine, fixit or the command line, which all use them.
BELOW_PROMPTS = {"errors", "_io", "_compat", "integrity", "arch", "tasks", "contract", "static", "context", "toolchain",
                 "prompts"}


def test_the_prompt_names_the_baseline_the_task_declares() -> None:
    task = get_task("rmsnorm")
    declared = task.model_copy(update={"baseline": task.baseline.model_copy(update={"call": "eager F.rms_norm"})})
    text = render_task_prompt(declared, Arch.SM_90A)
    assert "compared with eager F.rms_norm.\n" in text
    assert task.baseline.call not in text


def _imported_packages(file: Path) -> set[str]:
    """The ptxbench packages ``file`` imports, at the top or inside a function alike."""
    found = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ptxbench"):
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name.split(".")[1] for name in names if name.startswith("ptxbench.")}
    return found


def test_prompts_import_nothing_above_them() -> None:
    files = sorted((PACKAGE / "prompts").glob("*.py"))
    assert {f.stem for f in files} >= {"__init__", "task", "context", "conversation", "fixit"}
    upward = {f.name: sorted(_imported_packages(f) - BELOW_PROMPTS) for f in files}
    assert not any(upward.values()), upward
