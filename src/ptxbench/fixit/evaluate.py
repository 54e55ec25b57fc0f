"""Fixit, the last step: the benchmark with the base model and with the trained adapter, side by side.

Both go through the local Hugging Face provider with the same tasks, samples, turns and context, into
two run directories; ``ptxbench compare`` (run here) shows the change with a paired test. Pass the
held-out tasks of the data set to measure generalisation, the training tasks for in-distribution.
"""

from __future__ import annotations

from pathlib import Path

from ptxbench.refine.graders import Grader
from ptxbench.refine.loop import RunConfig, execute
from ptxbench.tasks.loader import get_task


def evaluate_adapter(base: str, adapter: Path, tasks: list[str], out: Path, *, samples: int = 1, turns: int = 1,
                     grader: Grader | None = None, max_tokens: int = 4096,
                     temperature: float = 0.0) -> tuple[Path, Path, str]:
    """Runs base and adapter into ``out/base`` and ``out/adapter``; returns both and the comparison table."""
    from ptxbench.llm.types import SamplingParams
    from ptxbench.results.compare import compare_command

    chosen = [get_task(task) for task in tasks]
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    common = {"model": f"hf:{base}", "tasks": tasks, "samples": samples, "turns": turns, "params": params,
              "concurrency": 1}
    runs = {"base": RunConfig(**common), "adapter": RunConfig(**common, adapter=str(adapter))}
    for name, config in runs.items():
        execute(chosen, config, out / name, grader=grader)
    return out / "base", out / "adapter", compare_command(out / "base", out / "adapter", "correct", 1)
