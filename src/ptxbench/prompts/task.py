"""The text a model is given for a task: built only from the task, never from held-out workloads.

``ptxbench prompt TASK`` prints exactly this. The conversations add context packs on top; the task
section below is the part every condition shares.
"""

from __future__ import annotations

from ptxbench.arch.registry import Arch, load_registry
from ptxbench.contract.signature import HEADER_NAME, header
from ptxbench.tasks.baseline_quality import BaselineQuality, load_baseline_quality, weak_baseline
from ptxbench.tasks.model import Task


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


def weak_baseline_text(task: Task, quality: BaselineQuality | None = None) -> str:
    """The sentence after the baseline where its best measured share of the roofline is weak (``quality``: the
    published one by default): the speedup would flatter, so the model is told it is judged by SOL instead. A
    held-out workload is never named: the timed shape, or "some of its shapes"."""
    weak = weak_baseline(task, load_baseline_quality() if quality is None else quality)
    if weak is None:
        return ""
    where = "the timed shape" if weak.workload == task.timed().name else "some of its shapes"
    return (f"\nThat baseline is weak here: its best reaches {weak.pct:.0f} % of the roofline on {where} "
            f"({weak.gpu}), so speed on this task is judged by the SOL score (the time the task's bytes and FLOPs "
            "need at the GPU's measured copy bandwidth and matmul rate, over your kernel's time), not by the speedup.")


def render_task_prompt(task: Task, arch: Arch, quality: BaselineQuality | None = None) -> str:
    """The task section of a prompt, for one target.

    The baseline it names is the task's ``baseline.call``: the timing refuses a task whose text is not
    the one its variants generate, so the prompt cannot promise a baseline that is not run. Where that
    baseline is weak (``quality``, the published one by default), the prompt says the verdict is SOL."""
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
measured on the timed shape and compared with {task.baseline.call}.{weak_baseline_text(task, quality)}
{shown}

## Answer
Reply with the complete file in one ```cuda code block.
"""
