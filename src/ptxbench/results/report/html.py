"""The report as one self-contained HTML page: its content and plots, with the style inline.

Only layout: every number and word comes from ``content``, every figure from ``plots``. The page embeds
its plots as base64 PNG and needs no network, so it opens anywhere as one file.
"""

from __future__ import annotations

import datetime
import html

from ptxbench.results.report.content import DEFINITIONS, ReportContent, Table
from ptxbench.results.report.plots import Plot


def _html_table(table: Table, total_row: bool = False, names: bool = False) -> str:
    """The table, then its notes; ``names``: its first column holds names (tasks) that must never wrap."""
    head = "".join(f'<th class="{"num" if right else ""}">{html.escape(h)}</th>'
                   for h, right in zip(table.headers, table.numeric))
    body = []
    for index, row in enumerate(table.rows):
        css = ' class="total"' if total_row and index == len(table.rows) - 1 else ""
        cells = "".join(f'<td class="{_cell_class(cell, right)}">{html.escape(cell)}</td>'
                        for cell, right in zip(row, table.numeric))
        body.append(f"<tr{css}>{cells}</tr>")
    notes = "".join(f'<p class="note">{html.escape(note)}</p>' for note in table.notes)
    css = ' class="names"' if names else ""
    return f'<table{css}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{notes}'


def _cell_class(cell: str, numeric: bool) -> str:
    classes = ["num"] if numeric else []
    if cell == "—" or cell.startswith("not measured") or "unverified" in cell or "not judged" in cell:
        classes.append("muted")
    return " ".join(classes)


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
table.names td:first-child { white-space: nowrap; overflow-wrap: normal; }
p.note { color: var(--muted); font-size: 12.5px; margin: 6px 0 0; }
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


def render_html(content: ReportContent, figures: list[Plot]) -> str:
    """``report.html``: ``content`` and ``figures`` as one page, stamped with the time it was made."""
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
    left_out = ('<p class="scope">Not drawn, having nothing to show: ' + esc("; ".join(
        f"{plot} ({why})" for plot, why in content.left_out)) + ".</p>") if content.left_out else ""
    turns = (f"<h2>By turn</h2>{_html_table(content.turns)}" if content.turns is not None else "")
    candidates = _html_table(content.candidates, names=True) if content.candidates.rows else "<p>None.</p>"
    errors = _html_table(content.errors) if content.errors.rows else "<p>No failures.</p>"
    definitions = "".join(f"<dt>{esc(term)}</dt><dd>{esc(text)}</dd>" for term, text in DEFINITIONS)
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
<section class="plots">{images}</section>{left_out}
<h2>Per task</h2>
{_html_table(content.tasks, total_row=len(content.tasks.rows) > 1 and content.tasks.rows[-1][0] == "all tasks",
             names=True)}
<h2>Candidates per task</h2>
{candidates}
<div class="two">
<section><h2>fast_p and sol_p</h2>{_html_table(content.fast)}<p class="speed">{esc(content.speed)}</p>
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
