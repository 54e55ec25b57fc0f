"""The two evidence profiles through the evaluator on the CPU (the fake worker and the fake ncu): sweep checks
correctness exactly as publish does, times the timed workload alone, skips ncu for a candidate slower than the
funnel's factor (unverified, never REJECTED), measures a cached clean baseline again when it is old or drifted,
and records its profile in the result and the run header; a run of one profile is not resumed as the other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.baselines.cache import BaselineCache
from ptxbench.evaluate.baselines.freshness import CleanTimeAges
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.fleet.run import Candidate, evaluate_candidates
from ptxbench.evaluate.judgement.funnel import SWEEP_PROFILE_WITHIN, not_profiled
from ptxbench.records.evaluation import Evaluation, Guard, Status, Timing
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.rundir import RunDirError

from ..conftest import EXAMPLES
from .fake_ncu import recordings, use
from .fake_runner import BEHAVIOUR, PIDS
from .test_evaluator_orchestration import HANDLER, _small_softmax
from .test_profiled_evaluation import PLAIN_REPORT, PROBE_REPORT

SWEEP, PUBLISH = EvidenceProfile.SWEEP, EvidenceProfile.PUBLISH
SOURCE = (EXAMPLES / "softmax.cu").read_text()


def _evaluate(monkeypatch: pytest.MonkeyPatch, behaviour: str, evidence: EvidenceProfile, count: int = 1,
              ages: CleanTimeAges | None = None, **options: object) -> tuple[list[Evaluation], GpuEvaluator]:
    monkeypatch.setenv(BEHAVIOUR, behaviour)
    settings = {"profile": False, "call_timeout_s": 20, "timing_budget_ms": 20, **options}
    evaluator = GpuEvaluator(EvalOptions(evidence=evidence, **settings), handler=HANDLER,  # type: ignore[arg-type]
                             reference_device="cpu")
    if ages is not None:
        evaluator._clean_ages = ages
    try:
        return [evaluator.evaluate(_small_softmax(), Arch.SM_90A, SOURCE, "softmax.cu") for _ in range(count)], evaluator
    finally:
        evaluator.close()


def test_sweep_checks_every_workload_as_publish_does_and_times_the_timed_one_alone(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (publish,), _ = _evaluate(monkeypatch, "correct", PUBLISH)
    (sweep,), _ = _evaluate(monkeypatch, "correct", SWEEP)
    for evaluation in (publish, sweep):
        assert evaluation.status is Status.PASSED, evaluation.message
        assert sorted({t.workload for t in evaluation.trials}) == ["small-heldout", "small-timed", "small-visible"]
        assert len(evaluation.trials) == 9  # three trials on each workload, held-out included
    assert [t.workload for t in publish.timings] == ["small-timed", "small-visible"]
    assert [t.workload for t in sweep.timings] == ["small-timed"]
    assert publish.evidence is PUBLISH and sweep.evidence is SWEEP
    assert "timing.workload.small-visible" in publish.durations_s
    assert "timing.workload.small-visible" not in sweep.durations_s
    assert sweep.timings[0].speedup == publish.timings[0].speedup == 0.5  # the fake's 1 ms baseline, 2 ms candidate


def test_sweep_still_rejects_what_the_timed_workloads_guards_find(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The guards on the timed calls (launches, streams) cost no GPU time beyond sweep's own timing: kept."""
    (sweep,), _ = _evaluate(monkeypatch, "other-stream-when-timed", SWEEP)
    assert sweep.status is Status.REJECTED, sweep.message


def _profiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str, evidence: EvidenceProfile) -> Evaluation:
    use(tmp_path / "fake-ncu", monkeypatch, probe_report=PROBE_REPORT, candidate_report=PLAIN_REPORT)
    (evaluation,), _ = _evaluate(monkeypatch, behaviour, evidence, profile=True, profile_timeout_s=60)
    return evaluation


def test_sweep_profiles_no_candidate_slower_than_the_funnels_factor(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sweep = _profiled(tmp_path, monkeypatch, "slow-when-timed", SWEEP)  # 5 ms against the baseline's 1 ms
    assert sweep.status is Status.PASSED and sweep.features is None and not sweep.guards, sweep.message
    assert f"unverified, not profiled (sweep: slower than {SWEEP_PROFILE_WITHIN:g} x the baseline" in sweep.message
    assert recordings(tmp_path / "fake-ncu") == [], "neither the probe nor the candidate was profiled"


def test_publish_profiles_the_same_slow_candidate(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The plain example runs none of softmax's required features: publish proves it and REJECTS it. Sweep left
    it unverified above; either way it fails fast_p for every p above 1 / SWEEP_PROFILE_WITHIN (issue 40's funnel:
    its speed decided first)."""
    publish = _profiled(tmp_path, monkeypatch, "slow-when-timed", PUBLISH)
    assert [r["role"] for r in recordings(tmp_path / "fake-ncu")] == ["probe", "candidate"]
    assert publish.features is not None and "not profiled" not in publish.message
    assert publish.status is Status.REJECTED and {g.guard for g in publish.guards} == {Guard.FEATURE_NOT_EXECUTED}


def test_sweep_profiles_a_candidate_within_the_factor(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sweep = _profiled(tmp_path, monkeypatch, "correct", SWEEP)  # 2 ms against 1 ms: within 2x
    # alone in the queue for ncu: in a session of its own (proof.batching), as publish profiles it
    assert [r["role"] for r in recordings(tmp_path / "fake-ncu")] == ["probe", "candidate"]
    assert sweep.features is not None and sweep.status is Status.REJECTED, sweep.message  # as publish judges it
    assert {g.guard for g in sweep.guards} == {Guard.FEATURE_NOT_EXECUTED}


def test_the_funnel_reads_the_best_baseline_and_leaves_publish_alone() -> None:
    timing = Timing(workload="w", candidate_ms=3.0, candidate_iqr_ms=0.0, baseline_ms=2.0, samples=5,
                    baseline_variants={"a": 2.0, "b": 1.0, "c": "setup failed"})
    assert not_profiled(PUBLISH, timing) is None
    assert not_profiled(SWEEP, None) is None  # nothing timed: nothing says it is slow
    assert "3 ms against 1 ms" in (not_profiled(SWEEP, timing) or "")  # 3 > 2 x the best variant's 1 ms
    assert not_profiled(SWEEP, timing.model_copy(update={"baseline_variants": {}})) is None  # 3 <= 2 x 2


def test_clean_time_ages_say_when_a_cached_time_is_measured_again() -> None:
    ages, key = CleanTimeAges(every=2), {"task": "t", "workload": "w"}
    assert not ages.stale(key)
    ages.used(key, 1.0, 1.0, 0.02)
    assert not ages.stale(key)
    ages.used(key, 1.01, 1.0, 0.02)
    assert ages.stale(key), "two candidates compared against it: old"
    ages.measured(key)
    assert not ages.stale(key)
    ages.used(key, 0.9, 1.0, 0.02)  # the baseline beside the candidate ran 10 % faster: the GPU changed
    assert ages.stale(key)


def _puts(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    puts: list[dict] = []
    original = BaselineCache.put

    def counted(self: BaselineCache, key: dict, median_ms: float, iqr_ms: float) -> None:
        puts.append(key)
        original(self, key, median_ms, iqr_ms)

    monkeypatch.setattr(BaselineCache, "put", counted)
    return puts


def test_sweep_measures_an_old_clean_time_again_and_publish_keeps_it(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    puts = _puts(monkeypatch)
    _evaluate(monkeypatch, "correct", PUBLISH, count=2)
    assert len(puts) == 2, "publish: both workloads' clean times measured once, then read from the cache"
    puts.clear()
    _evaluate(monkeypatch, "correct", SWEEP, count=3, ages=CleanTimeAges(every=2))
    # the first sweep candidate reads the cached time (age 0 in this evaluator), the second too (age 1); the third
    # finds it compared twice and measures it again
    assert [k["workload"] for k in puts] == ["small-timed"]


def test_sweep_measures_a_drifted_clean_time_again(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The fake's baseline runs 1.5 ms beside a loaded candidate ("slowed-baseline") against its clean 1 ms: drift
    seen beside the first candidate, so the second measures the clean time again."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(PIDS, str(tmp_path / "candidate.pid"))  # how the fake knows a candidate is beside it
    puts = _puts(monkeypatch)
    (first, second), _ = _evaluate(monkeypatch, "slowed-baseline", SWEEP, count=2)
    assert first.timings[0].baseline_source == "clean"  # compared with clean + 2 %, as publish does
    assert [k["workload"] for k in puts] == ["small-timed", "small-timed"]


def test_a_run_records_its_profile_and_is_not_resumed_as_the_other(tmp_path: Path) -> None:
    task = _small_softmax()
    out = tmp_path / "run"
    candidate = Candidate(task=task, item="c0", source=SOURCE, origin="softmax.cu")
    options = EvalOptions(trials=1, time=False, profile=False, lanes=1, evidence=SWEEP)
    (result,) = evaluate_candidates([candidate], Arch.SM_90A, out, options, gpus=[])  # no GPU: built only
    assert result.evidence is SWEEP
    stored = Evaluation.model_validate_json((out / "items" / task.id / "c0" / "result.json").read_text())
    header = json.loads((out / "run.json").read_text())
    assert stored.evidence is SWEEP and header["evidence"] == "sweep"
    assert "evidence" not in header["config"]["options"] and "evidence" not in (stored.judged.options if stored.judged else {})
    with pytest.raises(RunDirError, match="holds a run of evidence profile sweep, not publish"):
        evaluate_candidates([candidate], Arch.SM_90A, out, options.model_copy(update={"evidence": PUBLISH}), gpus=[])
