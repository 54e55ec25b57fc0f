"""``ptxbench tasks list|show|import``: the bundled task suite grouped by family, with each task's
weak-baseline warning, and tasks made from FlashInfer-Trace definitions (one, or a dataset folder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from ptxbench.cli.options import TaskRef
from ptxbench.cli.output import console, errors, fail
from ptxbench.errors import PtxbenchError

if TYPE_CHECKING:
    from ptxbench.tasks.flashinfer import ImportSummary
    from ptxbench.tasks.model import Task

app = typer.Typer(no_args_is_help=True, help="The bundled task suite.")

_WEAK_MARK = "*"  # beside a task id in `tasks list`; the legend says what it means


@app.command("list")
def tasks_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the bundled tasks, grouped by family."""
    from ptxbench.tasks.loader import bundled_suite, by_family

    suite = bundled_suite()
    if as_json:
        print(json.dumps([{"id": t.id, "family": t.family.value, "title": t.title, "hash": t.content_hash}
                          for t in suite], indent=2))
        return
    warned = {t.id for t in suite if _weak_baseline(t) is not None}
    table = Table("id", "family", "title")  # the title takes the width the short columns leave (80 in a pipe)
    table.add_column("workloads (timed / visible / held-out)", max_width=10)
    for family_tasks in by_family(suite).values():
        for task in family_tasks:
            visible = len(task.shown()) - 1
            marked = f"{task.id} {_WEAK_MARK}" if task.id in warned else task.id
            table.add_row(marked, task.family.value, task.title, f"1 / {visible} / {len(task.held_out())}")
        table.add_section()
    console.print(table)
    if warned:
        console.print(f"{_WEAK_MARK} weak baseline: the best vendor baseline is under {_weak_pct():.0f} % of its "
                      "roofline, so the speedup says little and the task's speed verdict is its SOL score (the share "
                      "of the speed of light; `ptxbench tasks show TASK` says where)", highlight=False)


@app.command("show")
def tasks_show(task: TaskRef, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show one task in full (held-out workloads included: this is the maintainer's view)."""
    from ptxbench.tasks.loader import get_task

    loaded = get_task(task)
    warning = _weak_baseline(loaded)
    if as_json:
        print(json.dumps({**loaded.model_dump(mode="json"), "baseline_warning": warning}, indent=2))
        return
    from ptxbench.results.terminal import render_task

    render_task(console, loaded, warning)


@app.command("import")
def tasks_import(
    source: Annotated[Path, typer.Argument(help="A FlashInfer-Trace dataset folder (definitions/, workloads/, blob/), "
                                           "or one definition (.json)")],
    workloads: Annotated[Optional[list[Path]], typer.Argument(help="Workload traces (.jsonl) of a lone definition")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="A dataset: the folder for the task files and "
                                                "import-summary.json (required). A definition: the task file "
                                                "(default: print it)")] = None,
    flops: Annotated[Optional[str], typer.Option("--flops", help="FLOP formula over the axes, where the op_type "
                                                 "has none")] = None,
) -> None:
    """Turn FlashInfer-Trace definitions and their workloads into PTXBench task files (each checked by loading it).

    A dataset folder as laid out on Hugging Face (downloaded beforehand; nothing is fetched) gives one task file
    per definition that imports and a table of what did and why the rest did not."""
    from ptxbench.tasks.flashinfer import import_dataset, import_definition
    from ptxbench.tasks.flashinfer.dataset import is_dataset

    if source.is_dir():
        if not is_dataset(source):
            fail(f"{source} has no definitions/ folder: give a FlashInfer-Trace dataset folder or a definition .json")
        if out is None:
            fail("importing a dataset folder needs --out FOLDER for the task files")
        try:
            summary = import_dataset(source, out, flops)
        except PtxbenchError as exc:
            fail(str(exc))
        _print_summary(summary, out)
        return
    try:
        task, text, api = import_definition(source, list(workloads or []), flops)
    except PtxbenchError as exc:
        fail(str(exc))
    if api.refused:
        errors.print(f"no FlashInfer baseline: {api.refused}", highlight=False)
    if out is None:
        print(text, end="")
        return
    out.write_text(text)
    fi = task.baseline.flashinfer
    errors.print(f"wrote {out}: task {task.id} ({task.family.value}), {len(task.workloads)} workloads "
                 f"({len(task.held_out())} held out), baseline: the reference{f' and {fi.api}' if fi else ''}",
                 highlight=False)


def _print_summary(summary: ImportSummary, out: Path) -> None:
    table = Table("op_type", "imported", "definitions")
    for op_type, (done, total) in summary.by_op_type().items():
        table.add_row(op_type, str(done), str(total))
    table.add_section()
    table.add_row("all", str(len(summary.imported)), str(len(summary.outcomes)))
    console.print(table)
    for counted, heading, reasons in (("definitions", "why they did not import", summary.reasons()),
                                      ("tasks", "why they have no FlashInfer baseline beside the reference",
                                       summary.flashinfer_refusals())):
        if reasons:
            why = Table(counted, heading)
            for reason, count in reasons:
                why.add_row(str(count), reason)
            console.print(why)
    for problem in summary.unreadable:
        errors.print(f"warning: {problem}", highlight=False)
    console.print(f"task files and {out / 'import-summary.json'} written under {out}", highlight=False)


def _weak_pct() -> float:
    from ptxbench.tasks.baseline_quality import WEAK_BASELINE_PCT

    return WEAK_BASELINE_PCT


def _weak_baseline(task: Task) -> str | None:
    """The published weak-baseline warning for the task, if its best baseline was measured weak."""
    from ptxbench.tasks.baseline_quality import load_baseline_quality, weak_baseline_warning

    return weak_baseline_warning(task, load_baseline_quality())
