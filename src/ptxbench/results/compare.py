"""Two runs side by side (context ablation, base vs fine-tuned), and many runs ranked.

A comparison pairs the problems ((arch, task)) that both runs attempted, because tasks differ far more
from each other than two models on the same task do: pairing removes that variance. The difference is
B - A (positive: B is better), with a paired bootstrap interval over problems and a two-sided sign-flip
permutation test of the mean per-problem difference (exact when there are at most 16 problems with a
difference, Monte Carlo otherwise). It needs no distributional assumption and, unlike the Wilcoxon
test, no special case for the many ties (differences of exactly zero) that pass@k per task produces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pydantic import Field, computed_field

from ptxbench.errors import PtxbenchError
from ptxbench.records import Record
from ptxbench.results.attempts import Attempt, DamagedItem, read_attempts
from ptxbench.results.measured import NotMeasured, is_measured
from ptxbench.results.metrics import (
    CONFIDENCE, Estimate, MetricSummary, Problem, at_k, check_metric, format_rate, last_turns, one_profile, summarize,
    task_rates, threshold, unmeasured,
)

EXACT_LIMIT = 16
"""Up to this many non-zero differences the permutation test enumerates all 2^n sign flips."""


class NothingInCommon(PtxbenchError, ValueError):
    """The runs share no problem to pair them on (or one has no attempts there)."""


class TaskRow(Record):
    """One paired problem: each run's sample count and pass@k."""

    arch: str
    task: str
    n_a: int
    n_b: int
    rate_a: float
    rate_b: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def difference(self) -> float:
        """B - A on this problem."""
        return self.rate_b - self.rate_a


class Comparison(Record):
    """Run B against run A on the problems both attempted."""

    metric: str
    k: int
    label_a: str
    label_b: str
    n_tasks: int = Field(description="Paired problems")
    rate_a: Estimate = Field(description="A's pass@k averaged over the paired problems")
    rate_b: Estimate
    difference: Estimate = Field(description="B - A, with a paired bootstrap interval over problems")
    p_value: float = Field(description="Two-sided paired sign-flip permutation test over problems")
    test: str = Field(description="How p_value was computed")
    rows: list[TaskRow]
    only_in_a: list[str] = Field(default_factory=list, description="arch/task attempted by A only (left out)")
    only_in_b: list[str] = Field(default_factory=list)
    n_unmeasured_a: int = 0
    n_unmeasured_b: int = 0


def _label(attempts: Sequence[Attempt], fallback: str) -> str:
    runs = sorted({a.run for a in attempts})
    return runs[0] if len(runs) == 1 else fallback


def sign_flip_p_value(differences: Sequence[float], permutations: int = 10000, seed: int = 0) -> tuple[float, str]:
    """Two-sided p-value of mean(differences) == 0 under random signs, and a description of the test.

    Zero differences do not change the statistic under a flip and are left out of the enumeration.
    The Monte Carlo estimate counts the observed assignment, so it never returns 0.
    """
    import numpy as np

    d = np.asarray([x for x in differences if x != 0.0], dtype=float)
    if d.size == 0:
        return 1.0, "sign-flip permutation test (no problem differs)"
    observed = abs(d.sum())
    tolerance = 1e-12 * max(1.0, observed)
    if d.size <= EXACT_LIMIT:
        signs = 1 - 2 * ((np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1)
        extreme = np.abs(signs @ d) >= observed - tolerance
        return float(extreme.mean()), f"exact sign-flip permutation test ({2 ** d.size} assignments)"
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(permutations, d.size))
    extreme = int((np.abs(signs @ d) >= observed - tolerance).sum())
    return (extreme + 1) / (permutations + 1), f"Monte Carlo sign-flip permutation test ({permutations} draws)"


def compare_runs(a: list[Attempt], b: list[Attempt], metric: str = "correct", k: int = 1, *,
                 label_a: str | None = None, label_b: str | None = None, bootstrap: int = 1000,
                 permutations: int = 10000, seed: int = 0) -> Comparison:
    """Compare ``metric``@k of run B with run A over the problems both attempted."""
    import numpy as np

    check_metric(metric)
    one_profile([*a, *b])
    for label, attempts in ((label_a or _label(a, "A"), a), (label_b or _label(b, "B"), b)):
        if not is_measured(last_turns(attempts), metric):
            raise NotMeasured(f"{metric} was not measured in {label} (nothing in it reached that stage: a run "
                              "without a GPU measures no correctness, one that only sampled builds nothing)")
    rates_a, rates_b = task_rates(a, metric, k), task_rates(b, metric, k)
    paired: list[Problem] = sorted(set(rates_a) & set(rates_b))
    if not paired:
        raise NothingInCommon(f"{label_a or _label(a, 'A')} and {label_b or _label(b, 'B')} have no (arch, task) in "
                              "common: a comparison pairs the runs task by task")
    rows = [TaskRow(arch=arch, task=task, n_a=rates_a[(arch, task)].n, n_b=rates_b[(arch, task)].n,
                    rate_a=rates_a[(arch, task)].rate, rate_b=rates_b[(arch, task)].rate) for arch, task in paired]
    per_task = np.array([[row.rate_a, row.rate_b] for row in rows])
    point = per_task.mean(axis=0)

    def estimate(j: int, values: "np.ndarray | None") -> Estimate:
        value = float(point[1] - point[0]) if j == 2 else float(point[j])
        if values is None:
            return Estimate(value=value)
        tail = (1 - CONFIDENCE) / 2 * 100
        low, high = np.percentile(values, [tail, 100 - tail])
        return Estimate(value=value, low=float(low), high=float(high))

    replicates = None
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        means = per_task[rng.integers(0, len(rows), size=(bootstrap, len(rows)))].mean(axis=1)
        replicates = np.column_stack([means, means[:, 1] - means[:, 0]])
    p_value, test = sign_flip_p_value([row.difference for row in rows], permutations, seed)

    def column(j: int) -> "np.ndarray | None":
        return None if replicates is None else replicates[:, j]

    return Comparison(
        metric=metric, k=k, label_a=label_a or _label(a, "A"), label_b=label_b or _label(b, "B"),
        n_tasks=len(rows), rate_a=estimate(0, column(0)), rate_b=estimate(1, column(1)),
        difference=estimate(2, column(2)), p_value=p_value, test=test, rows=rows,
        only_in_a=[f"{arch}/{task}" for arch, task in sorted(set(rates_a) - set(rates_b))],
        only_in_b=[f"{arch}/{task}" for arch, task in sorted(set(rates_b) - set(rates_a))],
        n_unmeasured_a=sum(unmeasured(x) for x in last_turns(a)),
        n_unmeasured_b=sum(unmeasured(x) for x in last_turns(b)))


class LeaderboardRow(Record):
    """One run's place on a leaderboard."""

    rank: int
    name: str
    metric: str
    k: int
    rate: Estimate | None = Field(description="None: the run measured the metric for no attempt (ranked last)")
    n_tasks: int
    n_samples: int
    n_attempts: int = Field(default=0, description="Samples the provider answered (the rate's denominator)")
    n_unmeasured: int


def leaderboard(runs: dict[str, list[Attempt]], metric: str = "fast_1.0", k: int = 1, *, common_tasks: bool = True,
                bootstrap: int = 1000, seed: int = 0) -> list[LeaderboardRow]:
    """Runs ranked by ``metric``@k (best first, ties by name), each with its 95 % interval.

    With ``common_tasks`` (the default) every run is scored on the problems that all runs attempted,
    so a run that skipped the hard tasks cannot rank above one that did not.
    """
    check_metric(metric)
    one_profile([x for attempts in runs.values() for x in attempts])
    speed = threshold(metric)
    ps = (speed.p,) if speed is not None and speed.kind == "fast" else ()
    sol_ps = (speed.p,) if speed is not None and speed.kind == "sol" else ()
    metric = speed.name if speed is not None else metric
    keep: set[Problem] | None = None
    if common_tasks and runs:
        keep = set.intersection(*({(x.arch, x.task) for x in attempts} for attempts in runs.values()))
    scored = []
    for name, attempts in runs.items():
        chosen = [x for x in attempts if keep is None or (x.arch, x.task) in keep]
        if not chosen:
            where = " on the tasks common to all runs" if keep is not None else ""
            raise NothingInCommon(f"run {name!r} has no attempts{where}")
        (summary,) = summarize(chosen, by=(), k=k, ps=ps, sol_ps=sol_ps, bootstrap=bootstrap, seed=seed)
        scored.append((name, summary))
    def order(item: tuple[str, MetricSummary]) -> tuple[bool, float, str]:
        rate = item[1].rates[metric]
        return rate is None, -(rate.value if rate is not None else 0.0), item[0]

    scored.sort(key=order)
    return [LeaderboardRow(rank=i + 1, name=name, metric=metric, k=k, rate=summary.rates[metric],
                           n_tasks=summary.n_tasks, n_samples=summary.n_samples, n_attempts=summary.n_attempts,
                           n_unmeasured=summary.n_unmeasured)
            for i, (name, summary) in enumerate(scored)]


# ----------------------------------------------------------------------------------------- rendering


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def _points(estimate: Estimate) -> str:
    text = f"{estimate.value * 100:+.1f} pp"
    if estimate.low is not None and estimate.high is not None:
        text += f" [{estimate.low * 100:+.1f}, {estimate.high * 100:+.1f}]"
    return text


def _unmeasured_note(counts: dict[str, int]) -> list[str]:
    return [f"> {name}: {count} attempt(s) built but were never measured on a GPU; its correct and fast rates "
            "count them as failures and are not comparable with a GPU run." for name, count in counts.items() if count]


def _damage_notes(damaged: Sequence[DamagedItem]) -> list[str]:
    return [f"> Damaged item, left out: {d.path}: {d.reason}" for d in damaged]


def comparison_table(comparison: Comparison, damaged: Sequence[DamagedItem] = ()) -> str:
    """Markdown: what @k means, the headline (both rates, B - A, p-value), then one row per paired problem."""
    c = comparison
    name = f"{c.metric}@{c.k}"
    lines = [at_k(c.k), "", f"| run | {name} (%) |", "|---|---|",
             f"| A: {_cell(c.label_a)} | {format_rate(c.rate_a)} |",
             f"| B: {_cell(c.label_b)} | {format_rate(c.rate_b)} |",
             f"| B − A | {_points(c.difference)} |",
             f"| p-value | {c.p_value:.3g} ({c.test}, {c.n_tasks} paired tasks) |",
             "", "| arch | task | n A | n B | A (%) | B (%) | B − A (pp) |", "|---|---|---|---|---|---|---|"]
    for row in c.rows:
        lines.append(f"| {_cell(row.arch)} | {_cell(row.task)} | {row.n_a} | {row.n_b} | {row.rate_a * 100:.1f} | "
                     f"{row.rate_b * 100:.1f} | {row.difference * 100:+.1f} |")
    notes = _unmeasured_note({c.label_a: c.n_unmeasured_a, c.label_b: c.n_unmeasured_b})
    for label, only in ((c.label_a, c.only_in_a), (c.label_b, c.only_in_b)):
        if only:
            notes.append(f"> Only in {label} (left out): {', '.join(only)}")
    notes += _damage_notes(damaged)
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def leaderboard_table(rows: Sequence[LeaderboardRow], damaged: Sequence[DamagedItem] = ()) -> str:
    """Markdown: what @k means, then rank, run, rate in % with its 95 % interval, and what it was computed over."""
    if not rows:
        return "_no runs_\n"
    name = f"{rows[0].metric}@{rows[0].k}"
    lines = [at_k(rows[0].k), "", f"| rank | run | {name} (%) | tasks | attempts | not measured |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.rank} | {_cell(row.name)} | {format_rate(row.rate)} | {row.n_tasks} | {row.n_attempts} | "
                     f"{row.n_unmeasured} |")
    notes = _unmeasured_note({row.name: row.n_unmeasured for row in rows}) + _damage_notes(damaged)
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _names(paths: Sequence[Path]) -> list[str]:
    """Run directory names, or full paths where two runs share a name."""
    names = [Path(p).name for p in paths]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(paths, names)]


def compare_command(run_a: Path, run_b: Path, metric: str = "correct", k: int = 1) -> str:
    """What ``ptxbench compare`` prints: run B against run A, as Markdown."""
    label_a, label_b = _names([Path(run_a), Path(run_b)])
    (a, damaged_a), (b, damaged_b) = read_attempts(run_a), read_attempts(run_b)
    damaged = list({d.path: d for d in [*damaged_a, *damaged_b]}.values())  # a run compared with itself: once
    try:
        comparison = compare_runs(a, b, metric, k, label_a=label_a, label_b=label_b)
    except (NotMeasured, NothingInCommon) as refused:
        if not damaged:
            raise
        raise type(refused)(f"{refused}; left out as damaged: " + "; ".join(f"{d.path}: {d.reason}" for d in damaged)
                            ) from None
    return comparison_table(comparison, damaged)


def leaderboard_command(runs: list[Path], metric: str = "fast_1.0") -> str:
    """What ``ptxbench leaderboard`` prints: the runs ranked by ``metric``@1, as Markdown."""
    read = {name: read_attempts(path) for name, path in zip(_names([Path(p) for p in runs]), runs)}
    damaged = [item for run in read.values() for item in run.damaged]
    return leaderboard_table(leaderboard({name: run.attempts for name, run in read.items()}, metric), damaged)


__all__ = [
    "Comparison", "LeaderboardRow", "TaskRow", "compare_command", "compare_runs", "comparison_table",
    "leaderboard", "leaderboard_command", "leaderboard_table", "sign_flip_p_value",
]
