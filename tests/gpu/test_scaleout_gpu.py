"""Scale-out on real GPUs: the bundled examples evaluated through the Ray backend (a local Ray cluster on
this machine) and through the local pool over every visible GPU. Run with ``pytest -m gpu``; the Ray
test needs ``ray`` (``pip install 'ptxbench[ray]'``, or the wheels of ``fetch_device_wheels.sh --ray``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions
from ptxbench.evaluate.fleet.run import PLACEMENT_FILE, candidate_from_file, evaluate_candidates
from ptxbench.records.evaluation import Status
from ptxbench.tasks.loader import bundled_suite, get_task

from ..conftest import EXAMPLES

pytestmark = pytest.mark.gpu
OPTIONS = EvalOptions(trials=1, timing_budget_ms=40, profile=False, call_timeout_s=60)


def _placements(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "items").glob(f"*/*/{PLACEMENT_FILE}")}


def test_examples_through_ray_on_this_machine(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="the Ray backend needs ray (fetch_device_wheels.sh --ray)")
    import torch

    ray.init(num_gpus=torch.cuda.device_count(), include_dashboard=False, log_to_driver=True,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                                       "PTXBENCH_CACHE": os.environ["PTXBENCH_CACHE"]}})
    try:
        candidates = [candidate_from_file(EXAMPLES / f"{task.id}.cu", task) for task in bundled_suite()]
        results = evaluate_candidates(candidates, Arch.SM_90A, tmp_path / "run", OPTIONS, backend="ray")
    finally:
        ray.shutdown()
    for evaluation in results:
        print(f"RAY {evaluation.task}: {evaluation.status} {evaluation.message}")
    assert all(e.status is Status.PASSED for e in results), [(e.task, e.message) for e in results]
    assert all(e.timings and e.timings[0].baseline_ms for e in results), "timed against the vendor baseline"
    placements = _placements(tmp_path / "run")
    assert len(placements) == len(candidates)
    assert {p["backend"] for p in placements.values()} == {"ray"}
    assert all(p["where"]["name"].startswith("NVIDIA") for p in placements.values())


def test_local_pool_spreads_over_every_gpu(tmp_path: Path) -> None:
    import torch

    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"needs 2 or more GPUs ({count} visible)")
    task = get_task("rmsnorm")
    source = (EXAMPLES / "rmsnorm.cu").read_text()
    candidates = [candidate_from_file(EXAMPLES / "rmsnorm.cu", task).model_copy(
        update={"item": f"copy_{i:02d}", "source": f"// copy {i}\n{source}"}) for i in range(3 * count)]
    results = evaluate_candidates(candidates, Arch.SM_90A, tmp_path / "run", OPTIONS)
    assert all(e.status is Status.PASSED for e in results), [e.message for e in results]
    placements = _placements(tmp_path / "run")
    assert {p["slot"] for p in placements.values()} == {str(i) for i in range(count)}, "every GPU took work"
    pins = {p["slot"]: p["where"]["cuda_visible_devices"] for p in placements.values()}
    assert len(set(pins.values())) == count, "each host saw its own GPU"


def test_local_pool_on_one_chosen_gpu(tmp_path: Path) -> None:
    candidates = [candidate_from_file(EXAMPLES / f"{name}.cu", get_task(name)) for name in ("softmax", "transpose")]
    results = evaluate_candidates(candidates, Arch.SM_90A, tmp_path / "run", OPTIONS, gpus=[0])
    assert all(e.status is Status.PASSED for e in results), [e.message for e in results]
    assert {p["slot"] for p in _placements(tmp_path / "run").values()} == {"0"}


def test_lanes_share_one_gpu_with_timing_alone(tmp_path: Path) -> None:
    """Three reference kernels in two lanes of GPU 0: both lanes work; each is timed, proven with ncu, and passes."""
    references = EXAMPLES.parents[0] / "reference" / "sm_90a"
    candidates = [candidate_from_file(references / f"{name}.cu", get_task(name)) for name in ("softmax", "transpose", "rmsnorm")]
    options = OPTIONS.model_copy(update={"lanes": 2, "profile": True})
    results = evaluate_candidates(candidates, Arch.SM_90A, tmp_path / "run", options, gpus=[0])
    for evaluation in results:
        print(f"LANES {evaluation.task}: {evaluation.status} {evaluation.durations_s}")
    assert all(e.status is Status.PASSED for e in results), [e.message for e in results]
    assert all(e.timings and e.timings[0].baseline_ms for e in results)
    assert {p["slot"] for p in _placements(tmp_path / "run").values()} == {"0.0", "0.1"}
