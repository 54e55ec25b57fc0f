"""The report's plots: matplotlib figures drawn from its content, each returned as a base64 PNG.

matplotlib (the ``report`` extra) is imported only when a plot is drawn, so the light install still
writes every table; ``plots_available`` says beforehand whether the plots can be drawn. The figures use
the Agg renderer without pyplot's global state, and their PNGs carry no software tag, so the same
attempts give the same bytes.
"""

from __future__ import annotations

import base64
import io
import statistics
from typing import TYPE_CHECKING, Any, NamedTuple

from ptxbench.errors import PtxbenchError
from ptxbench.results.attempts import Attempt
from ptxbench.results.report.content import (
    FunnelStage,
    Measured,
    error_table,
    fast_bound_share,
    fast_share,
    funnel,
    groups,
    pct,
    plots_left_out,
    speedups,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Each taxonomy stage's colour (content.STAGES holds their order), and the funnel's bars from top to bottom.
STAGE_COLOURS = {
    "extraction": "#8e6bbf",
    "compile": "#e0883a",
    "runtime": "#d64545",
    "numerical": "#c8508f",
    "instruction": "#3a7fc8",
    "guard": "#8c6d3f",
    "infra": "#9aa0a6",
    "unevaluated": "#c4c8cc",
}
_FUNNEL_COLOURS = ("#9db9dc", "#7ba2d1", "#5c8cc6", "#3f76b8", "#2a8a5e", "#1f6e47")
_INK, _MUTED, _GRID = "#1f2328", "#6a737d", "#e4e7eb"


class ReportError(PtxbenchError):
    """The report cannot be made (a dependency missing, or no run directory)."""


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
            label = f"{stage.count}  ({pct(stage.count, stages[0].count)})"
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
    colours = [STAGE_COLOURS.get(stage, "#7a7f86") for stage, *_ in table.rows]
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
    figure.legend(handles=[Patch(color=STAGE_COLOURS.get(s, "#7a7f86"), label=s) for s in present],
                  loc="outside lower center", ncol=len(present), fontsize=8.5, columnspacing=1.2)
    return figure


class Plot(NamedTuple):
    title: str
    png_base64: str
    caption: str


def plots(attempts: list[Attempt], info: Measured) -> list[Plot]:
    """The figures of the page, for the counted ``attempts``: the funnel, fast_p, the speedups and the error
    taxonomy, less those ``content.plots_left_out`` names (an empty panel says nothing the page does not say
    in words); ``ReportError`` when matplotlib is missing."""
    matplotlib = _matplotlib()
    stages = funnel(attempts)
    skipped = {plot for plot, _ in plots_left_out(attempts, info)}
    with matplotlib.rc_context(_STYLE):
        made = [
            ("funnel", lambda: plot_funnel(stages), "Instruction funnel", funnel_caption(stages)),
            ("fast_p", lambda: plot_fast_p(attempts, info), "fast_p: correct, features executed, ≥ p× vendor speed",
             "Share of attempts that are correct, executed their required features, and at least p times the "
             "vendor baseline's speed."),
            ("speedup", lambda: plot_speedups(attempts, info), "Speedup over the vendor baseline",
             "Vendor time over candidate time for each correct, timed attempt (log scale); right of the dashed "
             "line is faster than the vendor."),
            ("error taxonomy", lambda: plot_errors(attempts), "Error taxonomy",
             "One class per failed attempt, grouped by the stage where it failed."),
        ]
        return [Plot(title, _png(draw()), caption) for key, draw, title, caption in made if key not in skipped]
