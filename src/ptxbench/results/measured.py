"""What a run measured: one rule for ``metrics`` (text and JSON) and the report, so that a rate is a number
only where something was measured, and "not measured" (null in JSON) otherwise, never 0.

For each metric an attempt is in one of three states:

- ``judged``: the metric's own stage measured it (a build for ``compile``; a successful build, read, for
  the features in PTX and SASS; correctness trials on a GPU for ``correct``; Nsight Compute for
  ``features_executed``; a timing for ``fast_p``; a timing on a GPU whose roofline was measured for
  ``sol_p``);
- ``settled``: not measured, but decided: the attempt failed an earlier stage (no code, no build, a
  verdict the build decided, wrong results), so it fails the metric on any machine;
- ``unknown``: neither (never built, never run without a GPU, a harness failure, a correct kernel whose
  speed was not timed, or for ``sol_p`` timed without a measured roofline).

A group's rate is measured when an attempt of the group was judged, or when every attempt is settled (0 is
then decided, not missing). A group with an unknown attempt and none judged is not measured, and so is a group
without attempts (a task whose every sample the provider never answered). And where the whole table
(``scope``) judged no attempt and left one unknown, the stage was not measured in it at all: every row reads
"not measured", so one column never mixes 0 and "not measured" for the same missing stage.

A turn the provider never answered (``taxonomy.PROVIDER_ERROR``) is no attempt of the model's and is counted
apart before any of this; should one reach ``state`` it is unknown for every metric, never a settled failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from ptxbench.errors import PtxbenchError
from ptxbench.results.attempts import Attempt
from ptxbench.results.taxonomy import is_provider_error


class NotMeasured(PtxbenchError, ValueError):
    """A comparison asked for a metric that a run did not measure."""


class State(str, Enum):
    JUDGED = "judged"
    SETTLED = "settled"
    UNKNOWN = "unknown"


def _without_code(attempt: Attempt) -> bool:
    """The model answered without a usable candidate (a provider's failure to answer is no answer)."""
    return attempt.error_class.startswith("extraction.") and not is_provider_error(attempt.error_class)


def _build_failed(attempt: Attempt) -> bool:
    return _without_code(attempt) or attempt.error_class.startswith("compile.")


def _has_verdict(attempt: Attempt) -> bool:
    """The candidate's own outcome is decided (a status, no code, no build), not left open by the harness."""
    return attempt.status is not None or _build_failed(attempt)


def state(attempt: Attempt, metric: str) -> State:
    """Whether ``metric`` was measured for ``attempt``, decided without measuring, or unknown."""
    if metric == "compile":
        if attempt.compiled or attempt.error_class.startswith("compile."):
            return State.JUDGED
        return State.SETTLED if _without_code(attempt) else State.UNKNOWN
    if metric in ("features_in_ptx", "features_in_sass"):
        if attempt.compiled:
            return State.JUDGED
        return State.SETTLED if _build_failed(attempt) else State.UNKNOWN
    if metric == "correct":
        if attempt.correct is not None:
            return State.JUDGED
        return State.SETTLED if _has_verdict(attempt) else State.UNKNOWN
    if metric == "features_executed":
        if attempt.features_executed is not None:
            return State.JUDGED
        return State.SETTLED if _has_verdict(attempt) and not attempt.correct else State.UNKNOWN
    if metric.startswith(("fast_", "sol_")):
        timed = attempt.speedup if metric.startswith("fast_") else attempt.roofline_pct
        if attempt.correct and timed is not None:
            return State.JUDGED  # a lower bound where the features are unverified (MetricSummary.n_unverified)
        failed = attempt.correct is not True or attempt.features_executed is False
        return State.SETTLED if _has_verdict(attempt) and failed else State.UNKNOWN
    raise ValueError(f"unknown metric {metric!r}")


def _stage_measured(states: set[State]) -> bool:
    return State.JUDGED in states or State.UNKNOWN not in states


def is_measured(group: Sequence[Attempt], metric: str, scope: Sequence[Attempt] | None = None) -> bool:
    """Whether ``metric`` over ``group`` is a measurement; ``scope`` is the whole table the group is a row of.
    A group without attempts measured nothing."""
    if not group:
        return False
    states = {state(a, metric) for a in group}
    if State.JUDGED in states:
        return True
    if State.UNKNOWN in states:
        return False
    return scope is None or _stage_measured({state(a, metric) for a in scope})


def unknown(attempts: Sequence[Attempt], metric: str) -> int:
    """How many attempts have an unknown outcome for ``metric`` (counted as failures where a rate is shown)."""
    return sum(state(a, metric) is State.UNKNOWN for a in attempts)


__all__ = ["NotMeasured", "State", "is_measured", "state", "unknown"]
