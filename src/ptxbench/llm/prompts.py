"""Conversations for a task under a named context condition, and the feedback turns of refinement.

Conditions: ``none`` (the task alone), ``arch`` (plus a concise table of the target's features and
limits), ``full`` (plus the context pack: a guide to the architecture and our PTX wrapper header).
The task section is ``ptxbench.prompt.render_task_prompt``, so ``ptxbench prompt`` and a run send the
same words; held-out workloads never appear.
"""

from __future__ import annotations

from pydantic import BaseModel

from ptxbench.arch.registry import Arch
from ptxbench.errors import OptionError
from ptxbench.llm.types import Message
from ptxbench.prompt import PROMPT_VERSION, render_task_prompt
from ptxbench.records.trajectory import ContextCondition
from ptxbench.tasks.model import Task

CONVERSATION_VERSION = 1

SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer. You write complete, correct CUDA C++ files that use the "
    "architecture-specific PTX instructions a task asks for, through inline assembly, and you make them "
    "fast. You answer with the whole file in one fenced ```cuda block."
)


class OneShot(BaseModel):
    """A worked example shown before the task: another task's prompt and a solution to it."""

    task: Task
    source: str


def context_text(arch: Arch, condition: ContextCondition) -> str:
    if condition is ContextCondition.NONE:
        return ""
    from ptxbench.context.pack import arch_table, context_pack

    return arch_table(arch) if condition is ContextCondition.ARCH else context_pack(arch)


def prompt_version(condition: ContextCondition) -> str:
    """Recorded with every run, so a result names the exact words that produced it."""
    if condition is ContextCondition.NONE:
        return f"task-{PROMPT_VERSION}"
    from ptxbench.context.pack import CONTEXT_PACK_VERSION

    return f"task-{PROMPT_VERSION}+{condition.value}-{CONTEXT_PACK_VERSION}"


def build_conversation(task: Task, arch: Arch, condition: ContextCondition = ContextCondition.NONE,
                       one_shot: OneShot | None = None) -> list[Message]:
    """The opening messages for one sample."""
    messages = [Message(role="system", content=SYSTEM_PROMPT)]
    context = context_text(arch, condition)
    if one_shot is not None:
        if one_shot.task.id == task.id:
            raise OptionError(f"a one-shot example must come from another task than {task.id!r}")
        messages.append(Message(role="user", content=render_task_prompt(one_shot.task, arch)))
        messages.append(Message(role="assistant", content=f"```cuda\n{one_shot.source.rstrip()}\n```"))
    body = render_task_prompt(task, arch)
    if context:
        body = f"# Architecture reference\n\n{context.rstrip()}\n\n{body}"
    messages.append(Message(role="user", content=body))
    return messages


def feedback_message(feedback_text: str, turn: int, turns: int) -> Message:
    """The user turn that returns the evaluator's findings to the model."""
    left = turns - turn
    return Message(role="user", content=(
        f"The harness evaluated your file. Findings:\n\n{feedback_text.rstrip()}\n\n"
        f"Fix every problem above and reply with the complete corrected file in one ```cuda block "
        f"({left} attempt{'s' if left != 1 else ''} left, this one included)."))
