"""``ptxbench prompt``: exactly what a model is given for a task (held-out workloads never appear)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ptxbench.arch.registry import Arch
from ptxbench.cli.options import Context, OneShot, TargetArch, TaskRef, benchmark_arch


def prompt(task: TaskRef, arch: TargetArch = Arch.SM_90A, context: Context = "none", one_shot: OneShot = None,
           as_json: Annotated[bool, typer.Option("--json", help="The messages as JSON, exactly as sent")] = False
           ) -> None:
    """Print exactly what a model is given for TASK (the opening conversation of every sample)."""
    arch = benchmark_arch(arch)
    from ptxbench.prompts.conversation import ContextCondition, build_conversation
    from ptxbench.refine.loop import load_one_shot
    from ptxbench.tasks.loader import get_task

    messages = build_conversation(get_task(task), arch, ContextCondition(context), load_one_shot(one_shot))
    if as_json:
        print(json.dumps([m.model_dump() for m in messages], indent=2))
        return
    for message in messages:
        print(f"===== {message.role} =====")
        print(message.content)

