"""The text a model is given for a task: built only from the task, never from held-out workloads.

``ptxbench prompt TASK`` prints exactly this. The LLM harness adds context packs on top; the task
section below is the part every condition shares.
"""

from __future__ import annotations

from ptxbench.arch.registry import Arch, load_registry
from ptxbench.contract.signature import HEADER_NAME, header
from ptxbench.tasks.model import Task

PROMPT_VERSION = 2  # 2: the header says the entry point returns an int (a cudaError_t value)


def _sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def requirements_text(task: Task, arch: Arch) -> str:
    registry = load_registry()
    lines = []
    for requirement in task.requirements_for(arch):
        names = " or ".join(f"`{f}` ({registry.get(f).title})" for f in requirement.any_of)
        share = (f"; its instructions must perform at least {requirement.min_flop_share:.0%} of the task's FLOPs"
                 if requirement.min_flop_share else "")
        lines.append(f"- {names}{share}")
    return "\n".join(lines)


def _baseline(task: Task) -> str:
    """The baselines the evaluator really times, generated from its variants (never hand-written)."""
    from ptxbench.evaluate.baselines import baseline_text

    try:
        return baseline_text(task.id)
    except KeyError:  # a task outside the suite: no baseline is timed for it, and the prompt says so
        return "no vendor baseline (none is defined for this task, so no speedup is reported)"


def render_task_prompt(task: Task, arch: Arch) -> str:
    """The task section of a prompt, for one target."""
    shown = "\n".join(
        f"- `{w.name}`{' (timed)' if w.role.value == 'timed' else ''}: {_sizes(w.sizes)}"
        + (f" — {w.note}" if w.note else "")
        for w in task.shown()
    )
    return f"""# Task `{task.id}`: {task.title}

{task.statement}

## Target
NVIDIA {'Hopper (H100/H200)' if arch.family == 'hopper' else 'Blackwell (B200)'}, built by the harness with
`nvcc -gencode arch=compute_{arch.value[3:]},code={arch.value}` into a shared object; your file is the only
source. The harness owns the flags; link nothing but the CUDA runtime.

## Required hardware features (each must execute on the GPU, not merely appear in the code)
{requirements_text(task, arch)}

## Contract
Write one CUDA C++ file that defines the entry point below with C linkage. The harness force-includes
this header (`{HEADER_NAME}`) when it compiles your file:

```cpp
{header(task)}```

## Workloads
Correctness is checked on these shapes and on others of the same rules that are not shown; speed is
measured on the timed shape and compared with {_baseline(task)}.
{shown}

## Answer
Reply with the complete file in one ```cuda code block.
"""
