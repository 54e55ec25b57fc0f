"""A run's report (being split into counting, plots and renderers; see ``content``)."""

from ptxbench.results.report.content import (
    PLOTS_NEED_MATPLOTLIB,
    FunnelStage,
    Report,
    ReportError,
    ReportFiles,
    counted,
    funnel,
    funnel_caption,
    funnel_outlines,
    plot_funnel,
    plots_available,
    render_report,
    write_report,
)

__all__ = ["PLOTS_NEED_MATPLOTLIB", "Report", "ReportError", "ReportFiles", "FunnelStage", "counted", "funnel",
           "funnel_caption", "funnel_outlines", "plot_funnel", "plots_available", "render_report", "write_report"]
