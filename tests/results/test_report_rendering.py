"""How the report draws what it counts: the funnel plot and its caption agree, no label is drawn over an
axis, and a long model name stays inside the page."""

from __future__ import annotations

import html
import re

import pytest

from ptxbench.results.attempts import Attempt

pytest.importorskip("matplotlib")

from ptxbench.results.report import funnel, render_report  # noqa: E402
from ptxbench.results.report.plots import funnel_caption, funnel_outlines, plot_funnel  # noqa: E402


def _attempt(index: int, *, sass: bool = True, correct: bool | None = None, executed: bool | None = None,
             model: str | None = None) -> Attempt:
    return Attempt(run="r", model=model, arch="sm_90a", task="softmax", sample=f"sample_{index:03d}", compiled=True,
                   features_in_ptx=sass, features_in_sass=sass, correct=correct, features_executed=executed,
                   error_class="ok" if correct and executed else "infra.no_gpu" if correct is None else "numerical.wrong")


# The bundled examples on a machine without a GPU: nothing past "features in SASS" is measured, and no attempt
# reaches it, so there is nothing to outline. With SASS features, the unmeasured stages are outlined. On a GPU
# with a profiler every stage is measured (one attempt not judged for correctness).
EXAMPLES_ON_CPU = [_attempt(i, sass=False) for i in range(7)]
SASS_ON_CPU = [_attempt(i, sass=i < 4) for i in range(7)]
ON_A_GPU = [_attempt(i, correct=i != 6 if i < 6 else None, executed=i < 3 if i < 6 else None) for i in range(7)]


@pytest.mark.parametrize("attempts", [EXAMPLES_ON_CPU, SASS_ON_CPU, ON_A_GPU], ids=["examples-cpu", "sass-cpu", "profiled"])
def test_the_funnel_caption_names_only_what_the_plot_draws(attempts: list[Attempt]) -> None:
    from matplotlib.patches import Rectangle

    stages = funnel(attempts)
    figure = plot_funnel(stages)
    axes = figure.axes[0]
    dashed = [p for p in axes.patches if isinstance(p, Rectangle) and p.get_linestyle() not in ("-", "solid")]
    caption = funnel_caption(stages)
    assert len(dashed) == len(funnel_outlines(stages))
    assert ("Dashed outlines" in caption) == bool(dashed), caption
    unmeasured = [s for s in stages if not s.measured]
    assert ("did not measure" in caption) == bool(unmeasured), caption


@pytest.mark.parametrize("attempts", [EXAMPLES_ON_CPU, SASS_ON_CPU, ON_A_GPU], ids=["examples-cpu", "sass-cpu", "profiled"])
def test_every_funnel_label_lies_inside_the_plot_clear_of_its_axes(attempts: list[Attempt]) -> None:
    figure = plot_funnel(funnel(attempts))
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    axes = figure.axes[0]
    box = axes.get_window_extent(renderer)
    for text in axes.texts:
        extent = text.get_window_extent(renderer)
        assert extent.y0 > box.y0 and extent.y1 < box.y1, f"{text.get_text()!r} drawn over the x axis or the top"
        assert extent.x0 > box.x0 and extent.x1 <= box.x1, f"{text.get_text()!r} runs out of the plot"


def test_a_long_model_name_is_cut_to_the_page_and_shown_whole_on_hover() -> None:
    model = "hf:/scratch/checkpoints/" + "qwen2.5-coder-32b-instruct-fixit-lora-r64-alpha128-" * 3 + "final"
    page = render_report([_attempt(0, model=model), _attempt(1, model=model)], "PTXBench report: run").html
    span = re.search(r'<span title="([^"]*)">model <b>([^<]*)</b></span>', page)
    assert span is not None and html.unescape(span.group(1)) == f"model: {model}" and html.unescape(span.group(2)) == model
    rule = re.search(r"\.meta span \{([^}]*)\}", page)
    assert rule is not None and all(p in rule.group(1) for p in ("max-width: 100%", "overflow: hidden",
                                                                  "text-overflow: ellipsis", "white-space: nowrap"))
    assert re.search(r"td \{[^}]*overflow-wrap: anywhere", page), "a long name in a table cell wraps inside it"
