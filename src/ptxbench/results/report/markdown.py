"""The report as Markdown: its content laid out as text and pipe tables, for a terminal or a repository.

Only layout: every number and word comes from ``content``. The plots are not in it; the page beside it
(``report.html``) draws them.
"""

from __future__ import annotations

from ptxbench.results.report.content import DEFINITIONS, ReportContent, Table


def _markdown_table(table: Table) -> str:
    def clean(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(table.headers) + " |",
             "|" + "|".join("---:" if right else "---" for right in table.numeric) + "|"]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in table.rows]
    if table.notes:
        lines += ["", *(f"{note}  " for note in table.notes[:-1]), table.notes[-1]]
    return "\n".join(lines)


def render_markdown(content: ReportContent) -> str:
    """``report.md``: the tables and notices of ``content`` in the order a reader wants them."""
    parts = [f"# {content.title}", ""]
    parts.append(" · ".join(f"**{label}:** {value}" for label, value in content.provenance))
    parts.append("")
    for headline, text in content.notices:
        parts += [f"> **{headline}** {text}", ""]
    parts += [content.scope, "", "## Instruction funnel", "", _markdown_table(content.funnel), "",
              "## fast_p and sol_p", "", _markdown_table(content.fast), "",
              "## Speedup and SOL", "", content.speed, "",
              "## Per task", "", _markdown_table(content.tasks), "",
              "## Candidates per task", "",
              _markdown_table(content.candidates) if content.candidates.rows else "None.", ""]
    if content.turns is not None:
        parts += ["## By turn", "", _markdown_table(content.turns), ""]
    parts += ["## Error taxonomy", ""]
    parts += [_markdown_table(content.errors) if content.errors.rows else "No failures.", ""]
    parts += ["## Definitions", ""] + [f"- **{term}**: {text}" for term, text in DEFINITIONS]
    drawn = "Plots: see report.html beside this file"
    if content.left_out:
        drawn += "; not drawn there, having nothing to show: " + "; ".join(
            f"{plot} ({why})" for plot, why in content.left_out)
    parts += ["", drawn + ".", ""]
    return "\n".join(parts)
