"""What a run's report shows, counted once from its attempts: the same content for every renderer.

The instruction funnel (how many attempts got how far: compiled, required features requested in the
PTX, present in the SASS, correct, executed), fast_p and sol_p, the speedups over the vendor baseline and
the SOL scores (the share of the speed of light: the verdict of a task whose best baseline is weak), the error
taxonomy, one row per task and, for a multi-turn run, one per turn. What a run did *not* measure is said
in words: a run without a GPU has no correctness, speed or executed-instruction numbers, and a run
without a profiler has correct kernels whose required instructions are unverified; those cells read
"not measured" or "unverified", never 0.

Counts here are simple and computed from the attempts directly; estimators with confidence intervals
(pass@k, bootstrap) live in ``metrics.py``, whose vocabulary this shares: an *attempt* is a sample scored
by its last answered turn (what the sample ended with), turns are counted apart (a per-turn table beside
the rest), and a sample the provider never answered is a *provider error*, said in a notice, a card and a
column of its own and in no share. The per-task table lists each task's candidates beside it (grouped by
their verdict and how far each required feature got), so a share such as "features in SASS 0 %" can be
read back to the kernels behind it. Items whose result is damaged are named with their reason and left
out. The cells are final text, so the Markdown and HTML renderers only lay them out and cannot disagree on
a number.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from ptxbench.results.attempts import Attempt, DamagedItem
from ptxbench.results.measured import State, is_measured, state, unknown
from ptxbench.results.metrics import (
    DEFAULT_PS, DEFAULT_SOL_PS, SOL_DEFINITION, SOL_P_DEFINITION, answered, cut_short, last_turns, provider_errors,
    sol_metric, taxonomy_counts,
)
from ptxbench.records.rundir import RunHeader

FAST_P_TABLE = DEFAULT_PS
"""The p values the text tables show, the same as ``metrics``'; the plot draws the whole curve from 0 to 2."""
SOL_P_TABLE = DEFAULT_SOL_PS
"""The sol_p values the fast_p table shows beside fast_p, the same as ``metrics``'."""

# The error taxonomy's stages in the order a candidate meets them (the plots give each its colour).
STAGES = {
    "extraction": "no usable code in the completion",
    "compile": "did not build",
    "runtime": "crashed or hung",
    "numerical": "wrong results",
    "instruction": "required instructions missing or idle",
    "guard": "rejected by a guard",
    "infra": "harness could not judge (not the candidate's fault)",
    "unevaluated": "sampled, never evaluated",
}


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
    notes: tuple[str, ...] = ()
    """Said below the table: what a mark in a cell refers to, kept out of the cell so the columns stay narrow."""


# ---------------------------------------------------------------------------------------------
# What the attempts say: plain counts
# ---------------------------------------------------------------------------------------------


def counted(attempts: list[Attempt]) -> list[Attempt]:
    """The attempts the report counts: each answered sample's outcome (its last answered turn), as the metrics
    count it; samples the provider never answered are ``provider_errors``, counted apart."""
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


def sol_share(attempts: list[Attempt], p: float) -> float:
    """sol_p: the share of attempts that are correct, executed their required features, and ≥ p of SOL."""
    return sum(a.at_sol(p) for a in attempts) / len(attempts) if attempts else 0.0


def sol_bound_share(attempts: list[Attempt], p: float) -> float:
    """sol_p if every *unverified* correct attempt had executed its features: sol_p's upper bound."""
    hits = sum(bool(a.correct) and a.features_executed is not False and a.sol is not None and a.sol >= p
               for a in attempts)
    return hits / len(attempts) if attempts else 0.0


def sols(attempts: Iterable[Attempt]) -> list[float]:
    """SOL scores of the correct attempts that were timed on a GPU whose roofline was measured."""
    return [a.sol for a in attempts if a.correct and a.sol is not None]


def failure_classes(attempts: Iterable[Attempt]) -> Counter[str]:
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
    unanswered: tuple[Attempt, ...] = ()
    """Samples the provider never answered (one provider-error turn each): no attempt, in no share."""
    cut_short: int = 0
    """Attempts whose refinement a provider failure ended early: counted by their last answered turn."""
    damaged: tuple[DamagedItem, ...] = ()
    """Items whose result could not be read: named, left out."""


def measured(attempts: list[Attempt], every_turn: list[Attempt] | None = None,
             damaged: list[DamagedItem] | None = None) -> Measured:
    """What the counted ``attempts`` measured; ``every_turn`` (all the run's attempts) adds the provider errors."""
    turns = attempts if every_turn is None else every_turn
    return Measured(
        built=is_measured(attempts, "compile"),
        gpu=any(a.correct is not None for a in attempts),
        profiled=any(a.features_executed is not None for a in attempts),
        unjudged=unknown(attempts, "correct"),
        unverified=sum(bool(a.correct) and a.features_executed is None for a in attempts),
        infra=Counter(a.error_class for a in attempts if stage_of(a.error_class) == "infra"),
        unanswered=tuple(provider_errors(turns)), cut_short=cut_short(turns), damaged=tuple(damaged or ()),
    )


def groups(attempts: list[Attempt]) -> dict[str, list[Attempt]]:
    """Attempts by (model, condition, arch), naming only the fields that differ within the run."""
    fields = _group_fields(attempts)
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


def pct(part: int | float, whole: int | float) -> str:
    """'42%' of ``whole``, or '—' when there is no whole (the plots label their bars with it too)."""
    return f"{100 * part / whole:.0f}%" if whole else "—"


def _n(count: int, noun: str) -> str:
    """'1 attempt', '2 attempts' (the noun's plural is noun + 's')."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _sol(value: float | None) -> str:
    """A SOL score as a fraction of the speed of light ('0.42'), the scale sol_p's thresholds are on."""
    return "—" if value is None else f"{value:.2f}"


def _median_sol_cell(rows: list[Attempt], scope: list[Attempt]) -> str:
    """The median SOL of the row's correct timed attempts; "not measured" where no attempt of the whole table
    could have one (no GPU, or no roofline measured), "—" where this row has none."""
    if not is_measured(rows, sol_metric(SOL_P_TABLE[0]), scope):
        return "not measured"
    scores = sols(rows)
    return _sol(statistics.median(scores) if scores else None)


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


def _task_row(label: str, family: str, rows: list[Attempt], scope: list[Attempt], lost: int | None,
              weak_baseline: bool = False) -> list[str]:
    """One row of the per-task table; ``lost``: its provider errors (None: the run has none, no such column)."""
    times = speedups(rows)
    speed = _times(statistics.median(times) if times else None) + (" ⚠" if weak_baseline else "")
    return [label, family, str(len(rows)), *([] if lost is None else [str(lost)]), _compiled_cell(rows, scope),
            _sass_cell(rows, scope), _correct_cell(rows, scope), _executed_cell(rows, scope), _fast_cell(rows, scope),
            speed, _median_sol_cell(rows, scope), _top_error(rows)]


def weak_baseline_warnings(task_ids: Iterable[str]) -> dict[str, str]:
    """The published weak-baseline warning of each bundled task among ``task_ids`` that has one: a
    speedup over a baseline far from its roofline flatters the candidate, so the reader is told."""
    from ptxbench.tasks.baseline_quality import load_baseline_quality, weak_baseline_warning
    from ptxbench.tasks.loader import bundled_suite

    wanted = set(task_ids)
    quality = load_baseline_quality()
    warnings = {task.id: weak_baseline_warning(task, quality) for task in bundled_suite() if task.id in wanted}
    return {task_id: text for task_id, text in warnings.items() if text is not None}


def weak_verdict(task: str, warning: str, rows: list[Attempt]) -> str:
    """The note under the per-task table for a task whose best baseline is weak: the warning, and that its speed
    verdict is SOL (with its median where one was measured), since a speedup over such a baseline flatters."""
    scores = sols(rows)
    median = f" (median {_sol(statistics.median(scores))})" if scores else ""
    return f"⚠ {task}: {warning}; its speed verdict is SOL{median}, not the speedup."


def task_table(attempts: list[Attempt], unanswered: Iterable[Attempt] = ()) -> Table:
    """One row per task, then the total. A task whose best baseline is weak has its speedup marked, and the
    warning and its verdict (SOL, not the speedup) said below the table, where it does not squeeze the columns. A task whose samples were all provider
    errors still has its row, with no attempt; the provider errors column is there only where there are some."""
    lost_by_task = Counter(a.task for a in unanswered)
    by_task: dict[str, list[Attempt]] = {task: [] for task in lost_by_task}
    for attempt in attempts:
        by_task.setdefault(attempt.task, []).append(attempt)
    warnings = weak_baseline_warnings(by_task)
    with_lost = bool(lost_by_task)
    rows, notes = [], []
    for task, rows_ in sorted(by_task.items()):
        family = next((a.family for a in [*rows_, *unanswered] if a.task == task and a.family), None) or "—"
        marked = task in warnings and bool(speedups(rows_))  # a warning about a speedup only where one is shown
        rows.append(_task_row(task, family, rows_, attempts, lost_by_task[task] if with_lost else None, marked))
        if marked:
            notes.append(weak_verdict(task, warnings[task], rows_))
    if len(by_task) > 1:
        rows.append(_task_row("all tasks", "", attempts, attempts, sum(lost_by_task.values()) if with_lost else None))
    headers = ["task", "family", "attempts", *(["provider errors"] if with_lost else []), "compiled", "in SASS",
               "correct", "executed", "fast_1.0", "median speedup", "median SOL", "top error class"]
    return Table(headers, rows, [False, False, True, *([True] if with_lost else []), True, True, True, True, True,
                                 True, True, False], tuple(notes))


def _features_cell(attempt: Attempt) -> str:
    """Each required feature and how far it got (absent | source | ptx | sass | unsupported), or why there is
    nothing to say: no code, no build, not recorded."""
    if attempt.requirements:
        return " · ".join(f"{label}: {stage}" for label, stage in attempt.requirements.items())
    if not answered(attempt):
        return "no answer"
    if stage_of(attempt.error_class) in ("extraction", "compile", "unevaluated") or not attempt.compiled:
        return "not built"
    return "not recorded"


def _named(attempts: list[Attempt], shown: int = 6) -> str:
    """'3: s0, s1 (turn 2), s2', the first ``shown`` named and the rest counted."""
    names = [a.sample + (f" (turn {a.turn})" if a.turn else "") for a in attempts]
    listed = ", ".join(names[:shown]) + (f", … (+{len(names) - shown})" if len(names) > shown else "")
    return f"{len(names)}: {listed}"


def _group_fields(attempts: list[Attempt]) -> list[str]:
    """The grouping fields that differ within the run (``groups`` labels its groups by them)."""
    return [f for f in ("model", "condition", "arch") if len({getattr(a, f) for a in attempts}) > 1]


def candidate_table(attempts: list[Attempt], unanswered: Iterable[Attempt] = ()) -> Table:
    """The candidates behind each task's row: grouped by verdict and by how far each required feature got, so
    a share of the per-task table (features in SASS 0 %) reads back to the kernels that make it. Where the run
    holds several groups (models, contexts, targets), a column says whose candidates a row lists."""
    every = [*attempts, *unanswered]
    fields = _group_fields(every)
    found: dict[tuple[str, str, str, str], list[Attempt]] = {}
    for attempt in sorted(every, key=lambda a: (a.task, a.sample, a.turn)):
        label = " · ".join(str(getattr(attempt, f) or "none") for f in fields)
        verdict = "no answer (provider error)" if not answered(attempt) else attempt.error_class
        found.setdefault((attempt.task, label, verdict, _features_cell(attempt)), []).append(attempt)
    ordered = sorted(found.items(), key=lambda item: (item[0][0], item[0][1], -len(item[1]), item[0]))
    rows = [[task, *([label] if fields else []), _named(kept), verdict, features]
            for (task, label, verdict, features), kept in ordered]
    headers = ["task", *(["group"] if fields else []), "candidates", "verdict", "required features: how far each got"]
    return Table(headers, rows, [False] * len(headers))


def funnel_table(stages: list[FunnelStage]) -> Table:
    total = stages[0].count
    rows = [[s.label, str(s.count) if s.measured else "—", pct(s.count, total) if s.measured else "—", s.note]
            for s in stages]
    return Table(["stage (and every one above)", "attempts", "share", "note"], rows, [False, True, True, False])


def _share_cell(strict: float, bound: float) -> str:
    return f"{pct(strict, 1)} (≤ {pct(bound, 1)})" if bound > strict else pct(strict, 1)


def fast_table(attempts: list[Attempt], info: Measured) -> Table:
    """fast_p per group, and sol_p beside it (not measured where no attempt had a SOL: a GPU whose roofline was
    not measured), each with its bound where executed features are unverified."""
    grouped = groups(attempts)
    if not is_measured(attempts, "fast_1.0"):
        why = "not measured: no GPU" if not info.gpu else "not measured: not timed"
        return Table(["group", "attempts", "fast_p"],
                     [[label, str(len(rows_)), why] for label, rows_ in grouped.items()],
                     [False, True, False])
    sol_measured = is_measured(attempts, sol_metric(SOL_P_TABLE[0]))
    rows = []
    for label, rows_ in grouped.items():
        cells = [_share_cell(fast_share(rows_, p), fast_bound_share(rows_, p)) for p in FAST_P_TABLE]
        cells += [_share_cell(sol_share(rows_, p), sol_bound_share(rows_, p)) if sol_measured else "not measured"
                  for p in SOL_P_TABLE]
        rows.append([label, str(len(rows_)), *cells])
    return Table(["group", "attempts", *(f"fast_{p:.1f}" for p in FAST_P_TABLE),
                  *(f"sol_{p:.1f}" for p in SOL_P_TABLE)], rows,
                 [False, True, *(True for _ in FAST_P_TABLE), *(True for _ in SOL_P_TABLE)])


def error_table(attempts: list[Attempt]) -> Table:
    classes = failure_classes(attempts)
    order = list(STAGES)
    ranked = sorted(classes.items(), key=lambda item: (order.index(stage_of(item[0])) if stage_of(item[0]) in order
                                                      else len(order), -item[1], item[0]))
    rows = [[stage_of(name), name, str(count), pct(count, len(attempts))] for name, count in ranked]
    return Table(["stage", "class", "attempts", "share of all"], rows, [False, False, True, True])


def turn_table(attempts: list[Attempt]) -> Table | None:
    """Per turn of a multi-turn run (every answered turn, not only the last); None for single-turn runs. Turns
    the provider never answered are a column of their own where there are some, and in no other cell."""
    turns = sorted({a.turn for a in attempts})
    if len(turns) < 2:
        return None
    from ptxbench.results.metrics import best_of_turns

    answers = [a for a in attempts if answered(a)]
    with_lost = len(answers) < len(attempts)
    measured = any(a.correct is not None for a in answers)
    correct_by = best_of_turns(answers, len(turns)) if measured else []
    fast_by = best_of_turns(answers, len(turns), metric="fast_1.0") if measured else []
    rows = []
    for index, turn in enumerate(turns):
        rows_ = [a for a in answers if a.turn == turn]
        lost = [str(sum(a.turn == turn for a in attempts if not answered(a)))] if with_lost else []
        best = (f"{correct_by[index].rate:.0%} / {fast_by[index].rate:.0%}" if measured else "not measured")
        rows.append([str(turn), str(len(rows_)), *lost, _compiled_cell(rows_, answers), _sass_cell(rows_, answers),
                     _correct_cell(rows_, answers), _fast_cell(rows_, answers), best])
    headers = ["turn", "samples", *(["provider errors"] if with_lost else []), "compiled", "in SASS", "correct",
               "fast_1.0", "best of turns so far (correct / fast_1.0)"]
    return Table(headers, rows, [True] * len(headers))


def speedup_summary(attempts: list[Attempt], info: Measured) -> str:
    times = speedups(attempts)
    if not info.gpu:
        return "Speed was not measured: no attempt ran on a GPU."
    if not times:
        return "No correct attempt was timed."
    faster = sum(t >= 1.0 for t in times)
    scores = sols(attempts)
    sol = (f" SOL: median {_sol(statistics.median(scores))} of the speed of light (range {_sol(min(scores))} to "
           f"{_sol(max(scores))}) over {_n(len(scores), 'correct attempt')} whose roofline was measured."
           if scores else " SOL was not measured: no roofline was measured for these attempts.")
    return (f"{_n(len(times), 'correct attempt')} timed: median {_times(statistics.median(times))} the vendor "
            f"baseline's speed (range {_times(min(times))} to {_times(max(times))}); {faster} of {len(times)} "
            f"at least as fast as the vendor.{sol}")


def _listed(names: list[str], shown: int = 8) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _damage_notices(info: Measured) -> list[tuple[str, str]]:
    if not info.damaged:
        return []
    listed = "; ".join(f"{d.item}: {d.reason}" for d in info.damaged)
    return [("Damaged items.", f"Left out of every count, their result unreadable: {listed}. Every other item "
                               "is counted.")]


def _provider_notices(info: Measured) -> list[tuple[str, str]]:
    out = []
    if info.unanswered:
        names = [f"{a.task}/{a.sample}" for a in info.unanswered]
        out.append(("Provider errors.",
                    f"{_n(len(names), 'sample')} never answered by the provider ({_listed(names)}): they have no "
                    "verdict, so they are in no count or share of this report, neither as the model's failures nor "
                    "as 0. If the provider failed on the harder tasks the shares are biased up: sample those items "
                    "again (remove their result.json and resume the run)."))
    if info.cut_short:
        out.append(("Refinement cut short.",
                    f"{_n(info.cut_short, 'attempt')} lost a later turn to a provider error: each is counted by its "
                    "last answered turn, with fewer turns of feedback than the run asked for."))
    return out


def notices(attempts: list[Attempt], info: Measured) -> list[tuple[str, str]]:
    """(headline, explanation) pairs for everything a reader could mistake for a measured number."""
    out = _damage_notices(info) + _provider_notices(info)
    if not attempts:
        if info.unanswered:
            return out + [("No answered attempts.", "The provider answered no sample of this run, so there is "
                                                    "nothing of the model's to count.")]
        return out + [("No finished attempts.", "No item of this run has a result yet, so there is nothing to count.")]
    if not info.built:
        out.append(("Nothing built.",
                    "No candidate in this run was built (a `generate` run samples only), so compilation, the "
                    "static instruction check, correctness and speed are all not measured: evaluate the run "
                    "(`ptxbench eval RUN`) to measure them."))
    elif not info.gpu:
        decided = is_measured(attempts, "fast_1.0")  # every attempt failed before a GPU could have judged it
        out.append(("Not measured on a GPU.",
                    "No attempt in this run was executed on a GPU, so correctness, speed and executed instructions "
                    "are not measured: only compilation and the static instruction check (required features "
                    "requested in the PTX, present in the SASS) are. " + (
                        "Every attempt failed before a GPU could judge it (no code, or no build), so its 0 for "
                        "correctness and fast_p is decided by that failure, not measured." if decided else
                        "fast_p is undefined here, not zero.")))
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
    if any(a.verified_on_gpu for a in attempts):  # what the GPU's evidence was gathered for (records.evidence)
        items.append(("evidence", ", ".join(sorted({a.evidence.value for a in attempts}))))
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
# The whole content of one report
# ---------------------------------------------------------------------------------------------


class ReportContent(NamedTuple):
    """Everything a report shows, as text and tables; ``attempts`` (the counted ones) and ``info`` feed the plots."""

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
    attempts: list[Attempt]
    info: Measured
    candidates: Table = Table([], [], [])
    left_out: tuple[tuple[str, str], ...] = ()
    """(plot, why) for each plot not drawn because it would be empty (no GPU, nothing timed, no failure)."""


def headline(attempts: list[Attempt], info: Measured, multi_turn: bool = False) -> list[tuple[str, str, str]]:
    """(label, value, detail) for the cards at the top of the page."""
    total = len(attempts)
    stages = {s.key: s for s in funnel(attempts)}
    correct = sum(bool(a.correct) for a in attempts)
    cards = [("attempts", str(total), _scope_short(multi_turn, bool(info.unanswered)))]
    if info.unanswered:
        cards.append(("provider errors", str(len(info.unanswered)), "samples never answered: in no share"))
    if info.built:
        cards += [("compiled", pct(stages["compiled"].count, total), f"{stages['compiled'].count} of {total}"),
                  ("features in SASS", pct(sum(a.features_in_sass for a in attempts), total),
                   f"{sum(a.features_in_sass for a in attempts)} of {total}")]
    else:
        why = "nothing built in this run" if attempts else "no answered attempt"
        cards += [("compiled", "not measured", why), ("features in SASS", "not measured", why)]
    why = ("no GPU in this run" if info.built else "nothing built in this run") if attempts else "no answered attempt"
    if is_measured(attempts, "correct"):
        cards.append(("correct", pct(correct, total), f"{correct} of {total}"))
    else:
        cards.append(("correct", "not measured", why))
    if is_measured(attempts, "fast_1.0"):
        strict, bound = fast_share(attempts, 1.0), fast_bound_share(attempts, 1.0)
        detail = "features unverified" if not info.profiled else f"{sum(a.fast(1.0) for a in attempts)} of {total}"
        cards.append(("fast_1.0", pct(strict, 1) if bound == strict else f"≤ {pct(bound, 1)}", detail))
    else:
        cards.append(("fast_1.0", "not measured", why if not info.gpu else "not timed"))
    if info.gpu:
        cards += speed_cards(attempts)
    return cards


def speed_cards(attempts: list[Attempt]) -> list[tuple[str, str, str]]:
    """The median speedup, over the tasks whose best baseline is not weak (a weak one's speed verdict is SOL:
    a speedup over it flatters), and the median SOL over every task."""
    weak = weak_baseline_warnings({a.task for a in attempts})
    times = speedups(a for a in attempts if a.task not in weak)
    left = len(speedups(a for a in attempts if a.task in weak))
    detail = f"over {len(times)} correct" if times else "no correct attempt timed"
    if left:
        detail = (f"{detail}; {left} on weak-baseline tasks judged by SOL" if times else
                  f"every timed task's baseline is weak: {left} judged by SOL")
    cards = [("median speedup", _times(statistics.median(times)) if times else "—", detail)]
    scores = sols(attempts)
    if is_measured(attempts, sol_metric(SOL_P_TABLE[0])):
        cards.append(("median SOL", _sol(statistics.median(scores)) if scores else "—",
                      f"over {len(scores)} correct" if scores else "no correct attempt timed"))
    else:
        cards.append(("median SOL", "not measured", "no roofline measured"))
    return cards


def _scope_short(multi_turn: bool, lost: bool) -> str:
    if multi_turn:
        return "last answered turn of each sample" if lost else "last turn of each sample"
    return "one per evaluated candidate"


def scope_sentence(attempts: list[Attempt], short: bool = False) -> str:
    """What the report counts, said once below the cards; ``attempts``: every turn of the run."""
    multi = any(a.turn > 0 for a in attempts)
    answers = [a for a in attempts if answered(a)]
    lost = len(answers) < len(attempts)
    if short:
        return _scope_short(multi, lost)
    if multi:
        which = "last answered turn" if lost else "last turn"
        return (f"Counted: the {which} of each sample ({len(counted(attempts))} attempts; {len(answers)} turns in "
                "all, by turn below).")
    return f"Counted: {len(counted(attempts))} attempts, one per evaluated candidate or sample."


def plots_left_out(attempts: list[Attempt], info: Measured) -> tuple[tuple[str, str], ...]:
    """(plot, why) for each plot that would be an empty panel: left out of the page, and the page says why."""
    out = []
    if not info.gpu:
        out += [("fast_p", "no attempt ran on a GPU"), ("speedup", "no attempt ran on a GPU")]
    elif not speedups(attempts):
        out.append(("speedup", "no correct attempt was timed"))
    if not failure_classes(attempts):
        out.append(("error taxonomy", "no failures"))
    return tuple(out)


def report_content(all_attempts: list[Attempt], title: str, header: RunHeader | None,
                   damaged: list[DamagedItem] | None = None) -> ReportContent:
    """The report of ``all_attempts`` (every turn); counts are over ``counted`` of them. ``damaged``: the items
    whose result could not be read, named in a notice."""
    attempts = counted(all_attempts)
    info = measured(attempts, all_attempts, damaged)
    multi = any(a.turn > 0 for a in all_attempts)
    return ReportContent(
        title=title, provenance=provenance(all_attempts, header), notices=notices(attempts, info),
        headline=headline(attempts, info, multi), funnel=funnel_table(funnel(attempts)),
        fast=fast_table(attempts, info), speed=speedup_summary(attempts, info),
        tasks=task_table(attempts, info.unanswered), errors=error_table(attempts), turns=turn_table(all_attempts),
        scope=scope_sentence(all_attempts), attempts=attempts, info=info,
        candidates=candidate_table(attempts, info.unanswered),
        left_out=plots_left_out(attempts, info) if attempts else ())


# What each column and card means, said once at the foot of both pages.
DEFINITIONS = [
    ("attempt", "a sample scored by its last answered turn (what it finally handed in); turns are counted apart"),
    ("provider error", "a sample the provider never answered: no verdict, in no count or share"),
    ("features in PTX", "every feature the task requires is requested in the PTX the build produced"),
    ("features in SASS", "every required feature survived compilation into the binary (SASS)"),
    ("absent · source · ptx · sass", "how far a required feature got: not written; written, gone before the PTX; "
                                     "in the PTX, gone from the SASS; in the binary (unsupported: the target has "
                                     "no such instruction)"),
    ("correct", "every correctness trial passed, visible and held-out shapes alike (measured on a GPU)"),
    ("features executed", "Nsight Compute counted the required instructions running in the candidate's own "
                          "kernels, doing the required share of the work"),
    ("fast_p", "correct, features executed, and at least p times the vendor baseline's speed"),
    ("sol_p", SOL_P_DEFINITION),
    ("speedup", "vendor median time over candidate median time on the timed workload, L2 flushed before each call"),
    ("SOL", f"{SOL_DEFINITION}; the speed verdict of a task whose best baseline is weak (⚠), where a speedup "
            "flatters"),
]
