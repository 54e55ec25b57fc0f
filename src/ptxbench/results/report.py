"""A run's report: one Markdown file and one self-contained HTML page, made from its attempts alone.

The page shows the instruction funnel (how many attempts got how far: compiled, required features
requested in the PTX, present in the SASS, correct, executed), fast_p curves, the distribution of
speedups over the vendor baseline, the error taxonomy, and one row per task. It is meant to be read
by a person, so it says in words what a run did *not* measure: a run without a GPU has no
correctness, speed or executed-instruction numbers, and a run without a profiler has correct kernels
whose required instructions are unverified; those show as "not measured" or "unverified", never as 0.

Counts here are simple and computed from the attempts directly; estimators with confidence intervals
(pass@k, bootstrap) live in ``metrics.py``. In a multi-turn run every count is over the *last* turn of
each sample (what the sample ended with), with a per-turn table beside it.

The HTML embeds its plots as base64 PNG and its style inline: one file, no network, opens anywhere.
matplotlib (the ``report`` extra) draws the plots with the Agg renderer, without pyplot's global state.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ptxbench._io import write_atomic
from ptxbench.errors import PtxbenchError
from ptxbench.records.rundir import RunDir, RunHeader
from ptxbench.results.attempts import Attempt, attempts_from_run
from ptxbench.results.measured import State, is_measured, state, unknown

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
FAST_P_TABLE = (0.0, 0.5, 1.0, 1.5, 2.0)
"""The p values the text tables show; the plot draws the whole curve from 0 to 2."""

# The error taxonomy's stages in the order a candidate meets them, each with its colour on the plots.
STAGES = {
    "extraction": ("#8e6bbf", "no usable code in the completion"),
    "compile": ("#e0883a", "did not build"),
    "runtime": ("#d64545", "crashed or hung"),
    "numerical": ("#c8508f", "wrong results"),
    "instruction": ("#3a7fc8", "required instructions missing or idle"),
    "guard": ("#8c6d3f", "rejected by a guard"),
    "infra": ("#9aa0a6", "harness could not judge (not the candidate's fault)"),
    "unevaluated": ("#c4c8cc", "sampled, never evaluated"),
}
_FUNNEL_COLOURS = ("#9db9dc", "#7ba2d1", "#5c8cc6", "#3f76b8", "#2a8a5e", "#1f6e47")
_INK, _MUTED, _GRID = "#1f2328", "#6a737d", "#e4e7eb"


class ReportError(PtxbenchError):
    """The report cannot be made (a dependency missing, or no run directory)."""


class Report(NamedTuple):
    markdown: str
    html: str


class ReportFiles(NamedTuple):
    markdown: Path
    html: Path


class FunnelStage(NamedTuple):
    """One bar of the funnel: attempts that passed this stage *and every stage before it*.

    ``judged`` is how many of the previous stage's attempts this stage was measured for (all of them
    for the static stages; on a run without a GPU, none for ``correct``); ``measured`` is False when
    the run measured the stage for no attempt at all.
    """

    key: str
    label: str
    count: int
    judged: int
    measured: bool
    note: str = ""


class Table(NamedTuple):
    headers: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    """Columns to right-align (counts and speedups)."""


# ---------------------------------------------------------------------------------------------
# What the attempts say: plain counts
# ---------------------------------------------------------------------------------------------


def counted(attempts: list[Attempt]) -> list[Attempt]:
    """The attempts the report counts: each sample's outcome (its last turn), as the metrics count it."""
    from ptxbench.results.metrics import last_turns

    return last_turns(attempts)


def funnel(attempts: list[Attempt]) -> list[FunnelStage]:
    """The instruction funnel; each stage keeps only the attempts that passed all before it. A stage is
    measured as ``measured.is_measured`` says, the rule ``metrics`` follows too."""
    any_gpu = any(a.correct is not None for a in attempts)
    no_gpu = "not measured: no attempt ran on a GPU"
    unbuilt = "not measured: nothing was built"
    checks: list[tuple[str, str, str, Callable[[Attempt], bool | None], str, str]] = [
        ("compiled", "compiled", "compile", lambda a: a.compiled, unbuilt, "built"),
        ("in_ptx", "features in PTX", "features_in_ptx", lambda a: a.features_in_ptx, unbuilt, "read"),
        ("in_sass", "features in SASS", "features_in_sass", lambda a: a.features_in_sass, unbuilt, "read"),
        ("correct", "correct", "correct", lambda a: a.correct, no_gpu, "judged"),
        ("executed", "features executed", "features_executed", lambda a: a.features_executed,
         "unverified: no profiler ran" if any_gpu else no_gpu, "verified"),
    ]
    stages = [FunnelStage("attempts", "attempts", len(attempts), len(attempts), True)]
    survivors = list(attempts)
    for key, label, metric, check, missing, verb in checks:
        was_measured = is_measured(attempts, metric)
        judged = sum(state(a, metric) is not State.UNKNOWN for a in survivors)
        note = missing if not was_measured else ""
        if was_measured and judged < len(survivors):
            note = f"{verb} for {judged} of {len(survivors)}"
        survivors = [a for a in survivors if check(a)]
        stages.append(FunnelStage(key, label, len(survivors), judged, was_measured, note))
    return stages


def fast_share(attempts: list[Attempt], p: float) -> float:
    """fast_p: the share of attempts that are correct, executed their required features, and ≥ p× vendor."""
    return sum(a.fast(p) for a in attempts) / len(attempts) if attempts else 0.0


def fast_bound_share(attempts: list[Attempt], p: float) -> float:
    """fast_p if every *unverified* correct attempt had executed its features: fast_p's upper bound."""
    hits = sum(bool(a.correct) and a.features_executed is not False and a.speedup is not None and a.speedup >= p
               for a in attempts)
    return hits / len(attempts) if attempts else 0.0


def speedups(attempts: Iterable[Attempt]) -> list[float]:
    """Speedups over the vendor baseline of the correct attempts that were timed."""
    return [a.speedup for a in attempts if a.correct and a.speedup is not None]


def failure_classes(attempts: Iterable[Attempt]) -> Counter[str]:
    from ptxbench.results.metrics import taxonomy_counts

    return Counter(taxonomy_counts(list(attempts)))


def stage_of(error_class: str) -> str:
    return error_class.split(".", 1)[0]


class Measured(NamedTuple):
    """What the run measured, for the notices and for the cells that would otherwise read 0."""

    built: bool
    """Some attempt was built (a ``generate`` run builds nothing)."""
    gpu: bool
    """Some attempt's correctness was measured on a GPU."""
    profiled: bool
    """Some attempt's executed instructions were counted (Nsight Compute)."""
    unjudged: int
    """Attempts whose correctness is unknown (``measured.unknown``): built, or never built, and not run."""
    unverified: int
    """Correct attempts whose executed instructions were not counted."""
    infra: Counter[str]


def measured(attempts: list[Attempt]) -> Measured:
    return Measured(
        built=is_measured(attempts, "compile"),
        gpu=any(a.correct is not None for a in attempts),
        profiled=any(a.features_executed is not None for a in attempts),
        unjudged=unknown(attempts, "correct"),
        unverified=sum(bool(a.correct) and a.features_executed is None for a in attempts),
        infra=Counter(a.error_class for a in attempts if stage_of(a.error_class) == "infra"),
    )


def groups(attempts: list[Attempt]) -> dict[str, list[Attempt]]:
    """Attempts by (model, condition, arch), naming only the fields that differ within the run."""
    fields = [f for f in ("model", "condition", "arch") if len({getattr(a, f) for a in attempts}) > 1]
    if not fields:
        return {"all attempts": list(attempts)}
    grouped: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        label = " · ".join(str(getattr(attempt, f) or "none") for f in fields)
        grouped.setdefault(label, []).append(attempt)
    return dict(sorted(grouped.items()))


# ---------------------------------------------------------------------------------------------
# Tables and notices: the same content for Markdown and HTML
# ---------------------------------------------------------------------------------------------


def _pct(part: int | float, whole: int | float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "—"


def _n(count: int, noun: str) -> str:
    """'1 attempt', '2 attempts' (the noun's plural is noun + 's')."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _count_cell(rows: list[Attempt], metric: str, scope: list[Attempt], count: int, unknown_word: str) -> str:
    """A count of ``rows``, or "not measured" where nothing measured it (``measured.is_measured``, with the
    whole table as ``scope``, the rule ``metrics`` follows); attempts left unknown are said beside the count."""
    if not is_measured(rows, metric, scope):
        return "not measured"
    left = unknown(rows, metric)
    return f"{count} ({left} {unknown_word})" if left else str(count)


def _compiled_cell(rows: list[Attempt], scope: list[Attempt]) -> str:
    return _count_cell(rows, "compile", scope, sum(a.compiled for a in rows), "not built")


def _sass_cell(rows: list[Attempt], scope: list[Attempt]) -> str:
    return _count_cell(rows, "features_in_sass", scope, sum(a.features_in_sass for a in rows), "not built")


def _correct_cell(rows: list[Attempt], scope: list[Attempt]) -> str:
    return _count_cell(rows, "correct", scope, sum(bool(a.correct) for a in rows), "not judged")


def _executed_cell(rows: list[Attempt], scope: list[Attempt]) -> str:
    if not is_measured(rows, "features_executed", scope):
        # Correct attempts whose execution no profiler counted: unverified; else nothing of the row ran.
        return "unverified" if any(a.correct for a in rows) else "not measured"
    count = sum(bool(a.features_executed) for a in rows)
    unverified = sum(bool(a.correct) and a.features_executed is None for a in rows)  # the rest: "not judged"
    return f"{count} ({unverified} unverified)" if unverified else str(count)


def _fast_cell(rows: list[Attempt], scope: list[Attempt], p: float = 1.0) -> str:
    if not is_measured(rows, "fast_1.0", scope):
        return "not measured"
    strict = sum(a.fast(p) for a in rows)
    bound = round(fast_bound_share(rows, p) * len(rows))
    return str(strict) if bound == strict else f"{strict} (≤ {bound}, unverified)"


def _top_error(rows: list[Attempt]) -> str:
    classes = failure_classes(rows)
    if not classes:
        return "—"
    name, count = min(classes.items(), key=lambda item: (-item[1], item[0]))
    return f"{name} ({count})"


def _task_row(label: str, family: str, rows: list[Attempt], scope: list[Attempt],
              baseline_warning: str | None = None) -> list[str]:
    times = speedups(rows)
    speed = _times(statistics.median(times) if times else None)
    if baseline_warning is not None:
        speed = f"{speed} (⚠ {baseline_warning})"
    return [label, family, str(len(rows)), _compiled_cell(rows, scope), _sass_cell(rows, scope),
            _correct_cell(rows, scope), _executed_cell(rows, scope), _fast_cell(rows, scope), speed, _top_error(rows)]


def weak_baseline_warnings(task_ids: Iterable[str]) -> dict[str, str]:
    """The published weak-baseline warning of each bundled task among ``task_ids`` that has one: a
    speedup over a baseline far from its roofline flatters the candidate, so the reader is told."""
    from ptxbench.evaluate.baselines import load_baseline_quality, weak_baseline_warning
    from ptxbench.tasks.loader import bundled_suite

    wanted = set(task_ids)
    quality = load_baseline_quality()
    warnings = {task.id: weak_baseline_warning(task, quality) for task in bundled_suite() if task.id in wanted}
    return {task_id: text for task_id, text in warnings.items() if text is not None}


def task_table(attempts: list[Attempt]) -> Table:
    """One row per task, then the total; a task whose best baseline is weak says so beside its speedup."""
    by_task: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_task.setdefault(attempt.task, []).append(attempt)
    warnings = weak_baseline_warnings(by_task)
    rows = [_task_row(task, rows[0].family or "—", rows, attempts, warnings.get(task))
            for task, rows in sorted(by_task.items())]
    if len(by_task) > 1:
        rows.append(_task_row("all tasks", "", attempts, attempts))
    return Table(["task", "family", "attempts", "compiled", "in SASS", "correct", "executed", "fast_1.0",
                  "median speedup", "top error class"], rows,
                 [False, False, True, True, True, True, True, True, True, False])


def funnel_table(stages: list[FunnelStage]) -> Table:
    total = stages[0].count
    rows = [[s.label, str(s.count) if s.measured else "—", _pct(s.count, total) if s.measured else "—", s.note]
            for s in stages]
    return Table(["stage (and every one above)", "attempts", "share", "note"], rows, [False, True, True, False])


def fast_table(attempts: list[Attempt], info: Measured) -> Table:
    grouped = groups(attempts)
    if not is_measured(attempts, "fast_1.0"):
        why = "not measured: no GPU" if not info.gpu else "not measured: not timed"
        return Table(["group", "attempts", "fast_p"],
                     [[label, str(len(rows_)), why] for label, rows_ in grouped.items()],
                     [False, True, False])
    rows = []
    for label, rows_ in grouped.items():
        cells = []
        for p in FAST_P_TABLE:
            strict, bound = fast_share(rows_, p), fast_bound_share(rows_, p)
            if bound > strict:
                cells.append(f"{_pct(strict, 1)} (≤ {_pct(bound, 1)})")
            else:
                cells.append(_pct(strict, 1))
        rows.append([label, str(len(rows_)), *cells])
    return Table(["group", "attempts", *(f"fast_{p:.1f}" for p in FAST_P_TABLE)], rows,
                 [False, True, *(True for _ in FAST_P_TABLE)])


def error_table(attempts: list[Attempt]) -> Table:
    classes = failure_classes(attempts)
    order = list(STAGES)
    ranked = sorted(classes.items(), key=lambda item: (order.index(stage_of(item[0])) if stage_of(item[0]) in order
                                                      else len(order), -item[1], item[0]))
    rows = [[stage_of(name), name, str(count), _pct(count, len(attempts))] for name, count in ranked]
    return Table(["stage", "class", "attempts", "share of all"], rows, [False, False, True, True])


def turn_table(attempts: list[Attempt]) -> Table | None:
    """Per turn of a multi-turn run (every turn's attempts, not only the last); None for single-turn runs."""
    turns = sorted({a.turn for a in attempts})
    if len(turns) < 2:
        return None
    from ptxbench.results.metrics import best_of_turns

    measured = any(a.correct is not None for a in attempts)
    correct_by = best_of_turns(attempts, len(turns)) if measured else []
    fast_by = best_of_turns(attempts, len(turns), metric="fast_1.0") if measured else []
    rows = []
    for index, turn in enumerate(turns):
        rows_ = [a for a in attempts if a.turn == turn]
        best = (f"{correct_by[index].rate:.0%} / {fast_by[index].rate:.0%}" if measured else "not measured")
        rows.append([str(turn), str(len(rows_)), _compiled_cell(rows_, attempts), _sass_cell(rows_, attempts),
                     _correct_cell(rows_, attempts), _fast_cell(rows_, attempts), best])
    return Table(["turn", "attempts", "compiled", "in SASS", "correct", "fast_1.0",
                  "best of turns so far (correct / fast_1.0)"], rows, [True] * 7)


def speedup_summary(attempts: list[Attempt], info: Measured) -> str:
    times = speedups(attempts)
    if not info.gpu:
        return "Speed was not measured: no attempt ran on a GPU."
    if not times:
        return "No correct attempt was timed."
    faster = sum(t >= 1.0 for t in times)
    return (f"{_n(len(times), 'correct attempt')} timed: median {_times(statistics.median(times))} the vendor "
            f"baseline's speed (range {_times(min(times))} to {_times(max(times))}); {faster} of {len(times)} "
            f"at least as fast as the vendor.")


def notices(attempts: list[Attempt], info: Measured) -> list[tuple[str, str]]:
    """(headline, explanation) pairs for everything a reader could mistake for a measured number."""
    out = []
    if not attempts:
        return [("No finished attempts.", "No item of this run has a result yet, so there is nothing to count.")]
    if not info.built:
        out.append(("Nothing built.",
                    "No candidate in this run was built (a `generate` run samples only), so compilation, the "
                    "static instruction check, correctness and speed are all not measured: evaluate the run "
                    "(`ptxbench eval RUN`) to measure them."))
    elif not info.gpu:
        out.append(("Not measured on a GPU.",
                    "No attempt in this run was executed on a GPU, so correctness, speed and executed instructions "
                    "are not measured: only compilation and the static instruction check (required features "
                    "requested in the PTX, present in the SASS) are. fast_p is undefined here, not zero."))
    elif info.unjudged:
        out.append(("Correctness partly measured.",
                    f"{_n(info.unjudged, 'attempt')} not judged for correctness (the GPU evaluation "
                    "did not run for them): counted as attempts, not as correct."))
    if info.gpu and not info.profiled:
        out.append(("Executed features unverified.",
                    "No profiler (Nsight Compute) counted executed instructions in this run: a kernel can hold the "
                    "required instructions in its SASS and never run them. fast_p needs verified execution, so it "
                    "is 0 for every attempt; the dashed curves and the '≤' figures show the bound if every "
                    "unverified correct attempt did run its features."))
    elif info.unverified:
        out.append(("Some executed features unverified.",
                    f"{_n(info.unverified, 'correct attempt')} without executed-instruction counts: fast_p does "
                    "not count them (the '≤' figures and dashed curves show the bound if they did)."))
    if info.infra:
        listed = ", ".join(f"{name} ×{count}" for name, count in sorted(info.infra.items()))
        out.append(("Infrastructure failures.",
                    f"{_n(sum(info.infra.values()), 'attempt')} the harness could not judge ({listed}); never "
                    "the candidate's fault. They count as attempts, not as errors of the model."))
    return out


def provenance(attempts: list[Attempt], header: RunHeader | None) -> list[tuple[str, str]]:
    """(label, value) pairs that say what was run, where and when."""
    def values(field: str) -> str:
        found = sorted({str(getattr(a, field)) for a in attempts if getattr(a, field) is not None})
        return ", ".join(found) or "—"

    items = [("run", values("run")), ("arch", values("arch"))]
    if any(a.model for a in attempts):
        items.append(("model", values("model")))
    if any(a.condition for a in attempts):
        items.append(("context", values("condition")))
    if header is not None:
        gpu = header.environment.get("name") or "none"
        items += [("kind", header.kind), ("created", header.created), ("GPU", str(gpu))]
        if header.environment.get("driver"):
            items.append(("driver", str(header.environment["driver"])))
        if header.toolchain.get("nvcc"):
            items.append(("nvcc", str(header.toolchain["nvcc"])))
        revision = (header.git_revision or "")[:10]
        items.append(("ptxbench", header.ptxbench + (f" ({revision})" if revision else "")))
    tasks = sorted({a.task for a in attempts})
    items.append(("tasks", str(len(tasks))))
    samples = {(a.task, a.sample, a.model, a.condition, a.arch) for a in attempts}
    items.append(("samples", str(len(samples))))
    return items


# ---------------------------------------------------------------------------------------------
# Plots (matplotlib, Agg renderer, no pyplot)
# ---------------------------------------------------------------------------------------------


PLOTS_NEED_MATPLOTLIB = ("the report's plots need matplotlib, which is not installed: "
                         "pip install 'ptxbench[report]' (or pip install 'matplotlib>=3.7')")


def plots_available() -> bool:
    """Whether matplotlib can be imported (the light install leaves it out)."""
    try:
        _matplotlib()
    except ReportError:
        return False
    return True


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as error:
        raise ReportError(PLOTS_NEED_MATPLOTLIB) from error
    return matplotlib


_STYLE = {
    "font.size": 10, "axes.titlesize": 11.5, "axes.titleweight": "bold", "axes.titlelocation": "left",
    "axes.edgecolor": "#b0b6bd", "axes.labelcolor": _INK, "xtick.color": _MUTED, "ytick.color": _INK,
    "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False, "text.color": _INK,
}


def _figure(width: float, height: float) -> "Figure":
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure: "Figure") -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, facecolor="white", metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _empty(axes: Any, text: str) -> None:
    axes.set_xticks([])
    axes.set_yticks([])
    for spine in axes.spines.values():
        spine.set_visible(False)
    axes.text(0.5, 0.5, text, ha="center", va="center", color=_MUTED, fontsize=10.5, style="italic",
              transform=axes.transAxes, wrap=True)


def funnel_outlines(stages: list[FunnelStage]) -> dict[int, int]:
    """The unmeasured stages the funnel plot outlines (dashed), by index: each as wide as the last measured
    stage above it. One below a measured stage of 0 has nothing to outline and only says "not measured"."""
    outlines, previous = {}, stages[0].count
    for index, stage in enumerate(stages):
        if stage.measured:
            previous = stage.count
        elif previous:
            outlines[index] = previous
    return outlines


def funnel_caption(stages: list[FunnelStage]) -> str:
    """The funnel plot's caption, naming only what the plot draws."""
    caption = "Each bar counts the attempts that passed that stage and every stage above it."
    if funnel_outlines(stages):
        return caption + " Dashed outlines mark stages this run did not measure."
    if not all(stage.measured for stage in stages):
        return caption + " A stage this run did not measure has no bar and says so."
    return caption


def plot_funnel(stages: list[FunnelStage]) -> "Figure":
    figure = _figure(6.4, 3.6)
    axes = figure.add_subplot()
    total = max(stages[0].count, 1)
    positions = list(range(len(stages)))[::-1]
    outlines = funnel_outlines(stages)
    for index, (y, stage, colour) in enumerate(zip(positions, stages, ("#c3d3e8", *_FUNNEL_COLOURS))):
        if stage.measured:
            axes.barh(y, stage.count, color=colour, height=0.7)
            label = f"{stage.count}  ({_pct(stage.count, stages[0].count)})"
            if stage.note:
                label += f"  · {stage.note}"
            axes.text(stage.count + total * 0.015, y, label, va="center", fontsize=9.5, color=_INK)
        else:
            if index in outlines:
                axes.barh(y, outlines[index], height=0.7, facecolor="none", edgecolor="#a9b0b8",
                          linestyle=(0, (4, 3)), linewidth=1.1)
            axes.text(total * 0.015, y, stage.note or "not measured", va="center", fontsize=9.5, color=_MUTED,
                      style="italic")
    axes.set_yticks(positions, [s.label for s in stages])
    # Every row's band, drawn or not: autoscaling sees only the bars, and a label in a row without one (the
    # last, when nothing below "features in SASS" was measured) would sit on the x axis.
    axes.set_ylim(-0.6, len(stages) - 0.4)
    axes.set_xlim(0, total * 1.55)
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set_xticks([t for t in axes.get_xticks() if 0 <= t <= total])
    axes.set_xlabel("attempts that passed this stage and every one above")
    axes.grid(axis="x", color=_GRID, linewidth=0.8)
    axes.set_axisbelow(True)
    axes.tick_params(axis="y", length=0)
    return figure


def plot_fast_p(attempts: list[Attempt], info: Measured) -> "Figure":
    import numpy as np

    figure = _figure(6.4, 3.6)
    axes = figure.add_subplot()
    if not info.gpu:
        _empty(axes, "not measured: no attempt ran on a GPU,\nso there is no correctness or speed to plot")
        return figure
    grid = np.linspace(0.0, 2.0, 201)
    colours = ("#2f6db5", "#d9822b", "#2a8a5e", "#b23b6b", "#6b5bb5", "#7a7f86")
    bounded = False
    for index, (label, rows) in enumerate(groups(attempts).items()):
        colour = colours[index % len(colours)]
        strict = [100 * fast_share(rows, p) for p in grid]
        bound = [100 * fast_bound_share(rows, p) for p in grid]
        axes.plot(grid, strict, color=colour, linewidth=2.0, label=label, drawstyle="steps-post")
        if any(b > s for b, s in zip(bound, strict)):
            bounded = True
            axes.plot(grid, bound, color=colour, linewidth=1.3, linestyle="--", drawstyle="steps-post",
                      label=f"{label}: bound if unverified ran" if len(groups(attempts)) > 1 else None)
    if bounded and len(groups(attempts)) == 1:
        axes.plot([], [], color=colours[0], linestyle="--", linewidth=1.3, label="bound if unverified features ran")
    axes.axvline(1.0, color=_MUTED, linewidth=1.0, linestyle=":", label="vendor speed (p = 1)")
    axes.set_xlim(0, 2)
    axes.set_ylim(0, 100)
    axes.set_xlabel("p (speed relative to the vendor baseline)")
    axes.set_ylabel("share of attempts (%)")
    axes.grid(color=_GRID, linewidth=0.8)
    axes.set_axisbelow(True)
    figure.legend(loc="outside lower center", ncol=3, fontsize=8.5)
    return figure


def plot_speedups(attempts: list[Attempt], info: Measured) -> "Figure":
    import numpy as np

    figure = _figure(6.4, 3.6)
    axes = figure.add_subplot()
    times = speedups(attempts)
    if not info.gpu or not times:
        _empty(axes, "not measured: no attempt ran on a GPU" if not info.gpu else "no correct attempt was timed")
        return figure
    low, high = min(min(times), 1.0) / 1.3, max(max(times), 1.0) * 1.3
    bins = np.geomspace(low, high, 18)
    kinds = [("features executed", True, "#2a8a5e"), ("features unverified", None, "#9db9dc"),
             ("features not executed", False, "#d64545")]
    data, labels, colours = [], [], []
    for label, value, colour in kinds:
        chosen = [a.speedup for a in attempts if a.correct and a.speedup is not None and a.features_executed is value]
        if chosen:
            data.append(chosen)
            labels.append(f"{label} ({len(chosen)})")
            colours.append(colour)
    axes.hist(data, bins=bins, stacked=True, color=colours, label=labels, edgecolor="white", linewidth=0.6)
    axes.set_xscale("log")
    axes.axvline(1.0, color=_INK, linewidth=1.2, linestyle="--", label="vendor speed (1×)")
    median = statistics.median(times)
    axes.axvline(median, color="#d9822b", linewidth=1.4, label=f"median {median:.2f}×")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axes.xaxis.set_major_locator(FixedLocator(_log_ticks(low, high)))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
    axes.set_xlim(low, high)
    axes.set_xlabel("speedup (vendor time / candidate time, log scale)")
    axes.set_ylabel("attempts")
    axes.yaxis.get_major_locator().set_params(integer=True)
    axes.set_ylim(0, axes.get_ylim()[1] * 1.12)
    axes.grid(axis="y", color=_GRID, linewidth=0.8)
    axes.set_axisbelow(True)
    figure.legend(loc="outside lower center", ncol=3, fontsize=8.5)
    return figure


def _log_ticks(low: float, high: float) -> list[float]:
    """Round speedups to label a log axis: fine steps for a narrow range, 1-2-5 for a wide one."""
    fine = [0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.2, 1.5, 2, 3, 4, 5, 7, 10, 20, 50, 100]
    coarse = [0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 1000]
    ticks = [t for t in fine if low <= t <= high]
    return ticks if len(ticks) <= 9 else [t for t in coarse if low <= t <= high]


def plot_errors(attempts: list[Attempt]) -> "Figure":
    from matplotlib.patches import Patch

    table = error_table(attempts)
    height = max(1.9, 1.3 + 0.3 * len(table.rows))
    figure = _figure(6.4, height)
    axes = figure.add_subplot()
    if not table.rows:
        _empty(axes, "no failures")
        return figure
    positions = list(range(len(table.rows)))[::-1]
    colours = [STAGES.get(stage, ("#7a7f86", ""))[0] for stage, *_ in table.rows]
    counts = [int(row[2]) for row in table.rows]
    axes.barh(positions, counts, color=colours, height=0.68)
    for y, count, row in zip(positions, counts, table.rows):
        axes.text(count + max(counts) * 0.015, y, f"{count}  ({row[3]})", va="center", fontsize=9)
    axes.set_yticks(positions, [row[1] for row in table.rows], fontsize=9)
    axes.set_xlim(0, max(counts) * 1.3)
    axes.xaxis.get_major_locator().set_params(integer=True)
    axes.set_xlabel("attempts")
    axes.grid(axis="x", color=_GRID, linewidth=0.8)
    axes.set_axisbelow(True)
    axes.tick_params(axis="y", length=0)
    present = list(dict.fromkeys(row[0] for row in table.rows))
    figure.legend(handles=[Patch(color=STAGES.get(s, ("#7a7f86", ""))[0], label=s) for s in present],
                  loc="outside lower center", ncol=len(present), fontsize=8.5, columnspacing=1.2)
    return figure


class Plot(NamedTuple):
    title: str
    png_base64: str
    caption: str


def plots(attempts: list[Attempt], info: Measured) -> list[Plot]:
    matplotlib = _matplotlib()
    stages = funnel(attempts)
    with matplotlib.rc_context(_STYLE):
        made = [
            (plot_funnel(stages), "Instruction funnel", funnel_caption(stages)),
            (plot_fast_p(attempts, info), "fast_p: correct, features executed, ≥ p× vendor speed",
             "Share of attempts that are correct, executed their required features, and at least p times the "
             "vendor baseline's speed."),
            (plot_speedups(attempts, info), "Speedup over the vendor baseline",
             "Vendor time over candidate time for each correct, timed attempt (log scale); right of the dashed "
             "line is faster than the vendor."),
            (plot_errors(attempts), "Error taxonomy",
             "One class per failed attempt, grouped by the stage where it failed."),
        ]
        return [Plot(title, _png(figure), caption) for figure, title, caption in made]


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _markdown_table(table: Table) -> str:
    def clean(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(table.headers) + " |",
             "|" + "|".join("---:" if right else "---" for right in table.numeric) + "|"]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def _html_table(table: Table, total_row: bool = False) -> str:
    head = "".join(f'<th class="{"num" if right else ""}">{html.escape(h)}</th>'
                   for h, right in zip(table.headers, table.numeric))
    body = []
    for index, row in enumerate(table.rows):
        css = ' class="total"' if total_row and index == len(table.rows) - 1 else ""
        cells = "".join(f'<td class="{_cell_class(cell, right)}">{html.escape(cell)}</td>'
                        for cell, right in zip(row, table.numeric))
        body.append(f"<tr{css}>{cells}</tr>")
    return f'<table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _cell_class(cell: str, numeric: bool) -> str:
    classes = ["num"] if numeric else []
    if cell == "—" or cell.startswith("not measured") or "unverified" in cell or "not judged" in cell:
        classes.append("muted")
    return " ".join(classes)


class _Content(NamedTuple):
    title: str
    provenance: list[tuple[str, str]]
    notices: list[tuple[str, str]]
    headline: list[tuple[str, str, str]]
    funnel: Table
    fast: Table
    speed: str
    tasks: Table
    errors: Table
    turns: Table | None
    scope: str


def _headline(attempts: list[Attempt], info: Measured) -> list[tuple[str, str, str]]:
    """(label, value, detail) for the cards at the top of the page."""
    total = len(attempts)
    stages = {s.key: s for s in funnel(attempts)}
    times = speedups(attempts)
    correct = sum(bool(a.correct) for a in attempts)
    cards = [("attempts", str(total), scope_sentence(attempts, short=True))]
    if info.built:
        cards += [("compiled", _pct(stages["compiled"].count, total), f"{stages['compiled'].count} of {total}"),
                  ("features in SASS", _pct(sum(a.features_in_sass for a in attempts), total),
                   f"{sum(a.features_in_sass for a in attempts)} of {total}")]
    else:
        cards += [("compiled", "not measured", "nothing built in this run"),
                  ("features in SASS", "not measured", "nothing built in this run")]
    why = "no GPU in this run" if info.built else "nothing built in this run"
    if is_measured(attempts, "correct"):
        cards.append(("correct", _pct(correct, total), f"{correct} of {total}"))
    else:
        cards.append(("correct", "not measured", why))
    if is_measured(attempts, "fast_1.0"):
        strict, bound = fast_share(attempts, 1.0), fast_bound_share(attempts, 1.0)
        detail = "features unverified" if not info.profiled else f"{sum(a.fast(1.0) for a in attempts)} of {total}"
        cards.append(("fast_1.0", _pct(strict, 1) if bound == strict else f"≤ {_pct(bound, 1)}", detail))
    else:
        cards.append(("fast_1.0", "not measured", why if not info.gpu else "not timed"))
    if info.gpu:
        cards.append(("median speedup", _times(statistics.median(times)) if times else "—",
                      f"over {len(times)} correct" if times else "no correct attempt timed"))
    return cards


def scope_sentence(attempts: list[Attempt], short: bool = False) -> str:
    multi = any(a.turn > 0 for a in attempts)
    if short:
        return "last turn of each sample" if multi else "one per evaluated candidate"
    if multi:
        return (f"Counted: the last turn of each sample ({len(counted(attempts))} attempts; {len(attempts)} turns in "
                "all, by turn below).")
    return f"Counted: {len(attempts)} attempts, one per evaluated candidate or sample."


def _content(all_attempts: list[Attempt], title: str, header: RunHeader | None) -> _Content:
    attempts = counted(all_attempts)
    info = measured(attempts)
    return _Content(
        title=title, provenance=provenance(all_attempts, header), notices=notices(attempts, info),
        headline=_headline(attempts, info), funnel=funnel_table(funnel(attempts)), fast=fast_table(attempts, info),
        speed=speedup_summary(attempts, info), tasks=task_table(attempts), errors=error_table(attempts),
        turns=turn_table(all_attempts), scope=scope_sentence(all_attempts))


_DEFINITIONS = [
    ("features in PTX", "every feature the task requires is requested in the PTX the build produced"),
    ("features in SASS", "every required feature survived compilation into the binary (SASS)"),
    ("correct", "every correctness trial passed, visible and held-out shapes alike (measured on a GPU)"),
    ("features executed", "Nsight Compute counted the required instructions running in the candidate's own "
                          "kernels, doing the required share of the work"),
    ("fast_p", "correct, features executed, and at least p times the vendor baseline's speed"),
    ("speedup", "vendor median time over candidate median time on the timed workload, L2 flushed before each call"),
]


def _render_markdown(content: _Content) -> str:
    parts = [f"# {content.title}", ""]
    parts.append(" · ".join(f"**{label}:** {value}" for label, value in content.provenance))
    parts.append("")
    for headline, text in content.notices:
        parts += [f"> **{headline}** {text}", ""]
    parts += [content.scope, "", "## Instruction funnel", "", _markdown_table(content.funnel), "",
              "## fast_p", "", _markdown_table(content.fast), "",
              "## Speedup", "", content.speed, "",
              "## Per task", "", _markdown_table(content.tasks), ""]
    if content.turns is not None:
        parts += ["## By turn", "", _markdown_table(content.turns), ""]
    parts += ["## Error taxonomy", ""]
    parts += [_markdown_table(content.errors) if content.errors.rows else "No failures.", ""]
    parts += ["## Definitions", ""] + [f"- **{term}**: {text}" for term, text in _DEFINITIONS]
    parts += ["", "Plots: see report.html beside this file.", ""]
    return "\n".join(parts)


_CSS = """
:root { --ink: #1f2328; --muted: #6a737d; --line: #e4e7eb; --soft: #f6f8fa; --accent: #2f6db5; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--ink);
  font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "DejaVu Sans", sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 28px 32px 40px; }
h1 { font-size: 26px; margin: 0 0 6px; letter-spacing: -0.01em; overflow-wrap: anywhere; }
h2 { font-size: 18px; margin: 30px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
.meta { color: var(--muted); font-size: 13px; margin: 0; }
.meta span { white-space: nowrap; margin-right: 14px; display: inline-block; max-width: 100%; overflow: hidden;
  text-overflow: ellipsis; vertical-align: bottom; }
.meta b { color: var(--ink); font-weight: 600; }
.notice { border: 1px solid #e6c86e; border-left: 5px solid #d4a017; background: #fff8e1; border-radius: 6px;
  padding: 10px 14px; margin: 12px 0; font-size: 14px; }
.notice.info { border-color: #c9d6e6; border-left-color: #7a8fa8; background: #f4f7fb; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: 12px; margin: 18px 0 6px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; background: var(--soft); }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: 0.04em; }
.card .value { font-size: 24px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
.card .value.na { font-size: 17px; color: var(--muted); font-weight: 500; padding: 5px 0 4px; }
.card .detail { color: var(--muted); font-size: 12px; }
.scope { color: var(--muted); font-size: 13px; margin: 6px 0 0; }
.plots { display: grid; grid-template-columns: 1fr 1fr; gap: 18px; margin-top: 8px; align-items: start; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 10px; background: #fff; }
figure h3 { font-size: 14.5px; margin: 2px 4px 6px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 12.5px; margin-top: 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13.5px; font-variant-numeric: tabular-nums; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
td { overflow-wrap: anywhere; }
th { background: var(--soft); font-weight: 600; font-size: 12.5px; color: #3a4149; white-space: nowrap; }
td.num, th.num { text-align: right; }
td.muted { color: var(--muted); font-style: italic; }
tr.total td { font-weight: 600; border-top: 2px solid #c9ced6; }
tbody tr:hover { background: #fafbfc; }
.two { display: grid; grid-template-columns: 1fr 1fr; gap: 24px; }
.speed { margin: 10px 0 0; font-size: 14px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; font-size: 13px; color: #3a4149; }
dt { font-weight: 600; }
dd { margin: 0; }
footer { color: var(--muted); font-size: 12px; margin-top: 28px; }
"""


def _render_html(content: _Content, figures: list[Plot]) -> str:
    esc = html.escape
    # A long value (a model path, many tasks) is cut with an ellipsis to the page's width; its title shows it whole.
    meta = "".join(f'<span title="{esc(label)}: {esc(value)}">{esc(label)} <b>{esc(value)}</b></span>'
                   for label, value in content.provenance)
    notes = "".join(
        f'<div class="notice{" info" if headline.startswith("Infrastructure") else ""}"><strong>{esc(headline)}'
        f"</strong> {esc(text)}</div>" for headline, text in content.notices)
    cards = "".join(
        f'<div class="card"><div class="label">{esc(label)}</div>'
        f'<div class="value{" na" if value == "not measured" else ""}">{esc(value)}</div>'
        f'<div class="detail">{esc(detail)}</div></div>' for label, value, detail in content.headline)
    images = "".join(
        f'<figure><h3>{esc(plot.title)}</h3><img alt="{esc(plot.title)}" src="data:image/png;base64,{plot.png_base64}">'
        f"<figcaption>{esc(plot.caption)}</figcaption></figure>" for plot in figures)
    turns = (f"<h2>By turn</h2>{_html_table(content.turns)}" if content.turns is not None else "")
    errors = _html_table(content.errors) if content.errors.rows else "<p>No failures.</p>"
    definitions = "".join(f"<dt>{esc(term)}</dt><dd>{esc(text)}</dd>" for term, text in _DEFINITIONS)
    made = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(content.title)}</title>
<style>{_CSS}</style>
</head>
<body>
<main>
<header>
<h1>{esc(content.title)}</h1>
<p class="meta">{meta}</p>
</header>
{notes}
<section class="cards">{cards}</section>
<p class="scope">{esc(content.scope)}</p>
<section class="plots">{images}</section>
<h2>Per task</h2>
{_html_table(content.tasks, total_row=len(content.tasks.rows) > 1 and content.tasks.rows[-1][0] == "all tasks")}
<div class="two">
<section><h2>fast_p</h2>{_html_table(content.fast)}<p class="speed">{esc(content.speed)}</p>
<h2>Instruction funnel</h2>{_html_table(content.funnel)}</section>
<section><h2>Error taxonomy</h2>{errors}{turns}</section>
</div>
<h2>Definitions</h2>
<dl>{definitions}</dl>
<footer>Made by ptxbench report on {esc(made)}. Counts are plain tallies over the attempts; estimates with
confidence intervals are in the metrics summary.</footer>
</main>
</body>
</html>
"""


def render_report(attempts: list[Attempt], title: str, header: RunHeader | None = None) -> Report:
    """The report of ``attempts`` as Markdown and as one self-contained HTML page.

    ``header`` (the run's header, when there is one) adds provenance: when, on which GPU, with which
    toolchain and revision.
    """
    content = _content(list(attempts), title, header)
    attempts_counted = counted(list(attempts))
    try:
        figures = plots(attempts_counted, measured(attempts_counted)) if attempts_counted else []
    except ReportError as missing:  # the light install: the tables say everything, the plots only draw it
        figures = []
        content.notices.append(("Plots left out.", f"{missing}."))
    return Report(markdown=_render_markdown(content), html=_render_html(content, figures))


def write_report(run_dir: Path, out_dir: Path | None = None) -> ReportFiles:
    """Write ``report.md`` and ``report.html`` for the run in ``run_dir`` into ``out_dir`` (default: the run)."""
    run_dir = Path(run_dir)
    rundir = RunDir.load(run_dir)
    attempts = attempts_from_run(run_dir)
    report = render_report(attempts, f"PTXBench report: {rundir.path.resolve().name}", header=rundir.header)
    target = Path(out_dir) if out_dir is not None else run_dir
    files = ReportFiles(target / MARKDOWN_FILE, target / HTML_FILE)
    write_atomic(files.markdown, report.markdown)
    write_atomic(files.html, report.html)
    return files


__all__ = ["PLOTS_NEED_MATPLOTLIB", "Report", "ReportError", "ReportFiles", "FunnelStage", "counted", "funnel",
           "plots_available", "render_report", "write_report"]
