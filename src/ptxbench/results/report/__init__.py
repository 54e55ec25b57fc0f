"""A run's report: one Markdown file and one self-contained HTML page, made from its attempts alone.

Each module has one job: ``content`` counts what the report shows (the funnel, fast_p, speedups, the
error taxonomy, per-task and per-turn tables, and what the run did not measure) once, as typed data;
``plots`` draws it with matplotlib, imported only when drawing; ``markdown`` and ``html`` lay the same
content out and compute nothing. Without matplotlib the report keeps every table and says which extra
draws the plots.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ptxbench._io import write_atomic
from ptxbench.results.attempts import Attempt, DamagedItem, read_attempts
from ptxbench.results.report.content import FunnelStage, counted, funnel, report_content
from ptxbench.results.report.html import render_html
from ptxbench.results.report.markdown import render_markdown
from ptxbench.results.report.plots import PLOTS_NEED_MATPLOTLIB, ReportError, plots, plots_available
from ptxbench.records.rundir import RunDir, RunHeader

MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"


class Report(NamedTuple):
    markdown: str
    html: str


class ReportFiles(NamedTuple):
    markdown: Path
    html: Path


def render_report(attempts: list[Attempt], title: str, header: RunHeader | None = None,
                  damaged: list[DamagedItem] | None = None) -> Report:
    """The report of ``attempts`` as Markdown and as one self-contained HTML page.

    ``header`` (the run's header, when there is one) adds provenance: when, on which GPU, with which
    toolchain and revision; ``damaged`` names the items whose result could not be read (left out).
    """
    content = report_content(list(attempts), title, header, damaged)
    try:
        figures = plots(content.attempts, content.info) if content.attempts else []
    except ReportError as missing:  # the light install: the tables say everything, the plots only draw it
        figures = []
        content = content._replace(notices=[*content.notices, ("Plots left out.", f"{missing}.")])
    return Report(markdown=render_markdown(content), html=render_html(content, figures))


def write_report(run_dir: Path, out_dir: Path | None = None,
                 on_damaged: Callable[[DamagedItem], None] | None = None) -> ReportFiles:
    """Write ``report.md`` and ``report.html`` for the run in ``run_dir`` into ``out_dir`` (default: the run).
    An item whose result is damaged is named in the report (and given to ``on_damaged``), and the others are
    reported."""
    run_dir = Path(run_dir)
    rundir = RunDir.load(run_dir)
    attempts, damaged = read_attempts(run_dir)
    for item in damaged if on_damaged is not None else ():
        on_damaged(item)
    report = render_report(attempts, f"PTXBench report: {rundir.path.resolve().name}", header=rundir.header,
                           damaged=damaged)
    target = Path(out_dir) if out_dir is not None else run_dir
    files = ReportFiles(target / MARKDOWN_FILE, target / HTML_FILE)
    write_atomic(files.markdown, report.markdown)
    write_atomic(files.html, report.html)
    return files


__all__ = ["HTML_FILE", "MARKDOWN_FILE", "PLOTS_NEED_MATPLOTLIB", "Report", "ReportError", "ReportFiles", "FunnelStage",
           "counted", "funnel", "plots_available", "render_report", "write_report"]
