"""``ptxbench metrics|compare|leaderboard``: the numbers of finished runs, alone, paired or ranked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

_K = Annotated[int, typer.Option("-k", min=1)]


_RESAMPLE = {"auto": None, "samples": False, "tasks": True}


def metrics(runs: Annotated[list[Path], typer.Argument(help="Run directories")],
            by: Annotated[str, typer.Option("--by", help="Comma-separated grouping fields, e.g. model,condition; "
                                            "'' for all")] = "task",
            k: _K = 1, bootstrap: Annotated[int, typer.Option("--bootstrap", min=0)] = 1000,
            resample: Annotated[str, typer.Option("--resample", help=(
                "What the intervals resample: samples (within each task), tasks (then their samples), or auto "
                "(tasks where a task has a single attempt)"))] = "auto",
            as_json: Annotated[bool, typer.Option("--json", help="The summaries as JSON (a rate not measured is "
                                                  "null)")] = False
            ) -> None:
    """Metrics with 95 % bootstrap intervals (pass@k, fast_p, sol_p, speedup, SOL, generalization) as Markdown; a
    rate that nothing measured reads – (null in JSON), never 0. A damaged item is named and left out."""
    from ptxbench.cli.output import errors
    from ptxbench.errors import OptionError
    from ptxbench.results.attempts import read_attempts
    from ptxbench.results.metrics import summarize, summary_table

    if resample not in _RESAMPLE:
        raise OptionError(f"--resample takes auto, samples or tasks, not {resample!r}")
    read = [read_attempts(run_dir) for run_dir in runs]
    attempts = [a for run in read for a in run.attempts]
    damaged = [d for run in read for d in run.damaged]
    groups = tuple(field for field in by.split(",") if field)
    summaries = summarize(attempts, by=groups, k=k, bootstrap=bootstrap, resample_tasks=_RESAMPLE[resample])
    if as_json:
        for item in damaged:
            errors.print(f"warning: {item.path}: {item.reason}; left out", markup=False, highlight=False,
                         soft_wrap=True)
        print(json.dumps([json.loads(s.model_dump_json()) for s in summaries], indent=2))
        return
    print(summary_table(summaries, damaged))


def compare(run_a: Annotated[Path, typer.Argument()], run_b: Annotated[Path, typer.Argument()],
            metric: Annotated[str, typer.Option("--metric", help="compile | correct | features_executed | "
                                                "fast_1.0 | sol_0.8 ...")] = "correct",
            k: _K = 1) -> None:
    """Compare two runs task by task (context ablation, base vs fine-tuned) with a paired test."""
    from ptxbench.results.compare import compare_command

    print(compare_command(run_a, run_b, metric, k))


def leaderboard(runs: Annotated[list[Path], typer.Argument()],
                metric: Annotated[str, typer.Option("--metric")] = "fast_1.0") -> None:
    """Rank runs (models or conditions) on the tasks they all attempted."""
    from ptxbench.results.compare import leaderboard_command

    print(leaderboard_command(runs, metric))
