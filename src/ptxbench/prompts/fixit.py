"""The words of Fixit: a teacher's repair of a failed kernel, its explanation, and the training records.

A repair shows the task, the failed file and the harness's findings and asks for the fixed file; a
training record shows the same and trains an explanation followed by the fixed file; an explanation
is asked for separately, from the diagnosis and the diff alone.
"""

from __future__ import annotations

import difflib

from ptxbench.arch.registry import Arch
from ptxbench.prompts.conversation import Message
from ptxbench.prompts.task import render_task_prompt
from ptxbench.tasks.model import Task

REPAIR_SYSTEM_PROMPT = (
    "You are an expert GPU kernel engineer. You are shown a task, a CUDA kernel that failed it, and what the "
    "evaluation harness found. Explain briefly and concretely why it failed and why your fix works, then give the "
    "complete corrected file in one ```cuda block."
)

EXPLAIN_PROMPT = (
    "A CUDA kernel failed and was then fixed. In a short paragraph (3-6 sentences), explain concretely why the "
    "failure happened and why the fix works, naming the instructions, variables or conditions involved. Do not "
    "repeat the code."
)


def repair_opening(task: Task, arch: Arch, source: str, feedback: str) -> list[Message]:
    """The opening of a teacher's repair of ``source``, which failed ``task`` with ``feedback``."""
    return [Message(role="system", content=REPAIR_SYSTEM_PROMPT),
            Message(role="user", content=(
                f"{render_task_prompt(task, arch)}\n\n## A previous attempt\n\n```cuda\n"
                f"{source.rstrip()}\n```\n\n## What the harness found\n\n{feedback.rstrip()}\n\n"
                "Fix it: reply with the complete corrected file in one ```cuda block."))]


def training_messages(task: Task, arch: Arch, source: str, feedback: str, explanation: str | None,
                      fixed_source: str) -> list[Message]:
    """A training record's conversation: the failure as the student sees it, then the answer it learns
    (the explanation, then the fixed file; the loss is on that last message only)."""
    user = (f"{render_task_prompt(task, arch)}\n\n## Your previous attempt\n\n```cuda\n"
            f"{source.rstrip()}\n```\n\n## What the harness found\n\n{feedback.rstrip()}\n\n"
            "Explain what went wrong and give the corrected file.")
    answer = f"{(explanation or '').strip()}\n\n```cuda\n{fixed_source.rstrip()}\n```".lstrip()
    return [Message(role="system", content=REPAIR_SYSTEM_PROMPT), Message(role="user", content=user),
            Message(role="assistant", content=answer)]


def explain_request(failed_source: str, fixed_source: str, feedback: str) -> str:
    """The question of why ``failed_source`` failed and why ``fixed_source`` works: the diagnosis and
    the diff, never the whole files."""
    diff = "\n".join(difflib.unified_diff(failed_source.splitlines(), fixed_source.splitlines(),
                                          "failed.cu", "fixed.cu", lineterm="", n=2))
    return f"{EXPLAIN_PROMPT}\n\n## Diagnosis\n\n{feedback}\n\n## Diff\n\n```diff\n{diff}\n```"
