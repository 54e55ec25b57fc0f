"""The Ray backend on a local Ray cluster on the CPU: two fake GPUs (Ray pins each actor to one through
CUDA_VISIBLE_DEVICES, which the stand-in GPU side reads), one result per item written by the driver,
resume across backends, and faulting GPUs retired with their candidates re-queued."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.fleet.run import GpusRetired, evaluate_candidates
from ptxbench.records.evaluation import InfraFailure, Status

from ..conftest import REPO
from .scaleout import FAKE, OPTIONS, candidates, stored


@pytest.fixture(scope="module", autouse=True)
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One small local cluster for the module: 2 fake GPUs; a CPU each for the actors and two for builds."""
    state = tmp_path_factory.mktemp("fake-gpu-state")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PTXBENCH_CACHE": os.environ["PTXBENCH_CACHE"], "PTXBENCH_FAKE_STATE": str(state)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # a test cluster reports nowhere
        ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, object_store_memory=80 * 1024**2,
                 runtime_env={"env_vars": env}, configure_logging=False, log_to_driver=False)
        yield
        ray.shutdown()


def _run(out: Path, count: int, handler: str = "FakeRunner", backend: str = "ray"):  # type: ignore[no-untyped-def]
    extra = {"gpus": [0, 1]} if backend == "local" else {}
    return evaluate_candidates(candidates(count), Arch.SM_90A, out, OPTIONS, backend=backend,  # type: ignore[arg-type]
                               handler=f"{FAKE}:{handler}", reference_device="cpu", **extra)


def test_every_item_gets_one_result_and_runs_resume_across_backends(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    results = _run(out, 3)
    assert [r.candidate for r in results] == ["copy 0", "copy 1", "copy 2"]
    first = stored(out)
    assert sorted(first) == ["c00", "c01", "c02"]
    assert all(evaluation.status is Status.PASSED for evaluation, _, _ in first.values())
    assert {placement["backend"] for _, placement, _ in first.values()} == {"ray"}
    assert {placement["where"]["cuda_visible_devices"] for _, placement, _ in first.values()} == {"0", "1"}, \
        "both GPU actors took work"

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _run(out, 4, backend="local")  # a ray run resumed locally: only the new item is evaluated
    second = stored(out)
    assert all(second[item][2] == first[item][2] for item in first)
    assert second["c03"][1]["backend"] == "local"

    _run(out, 5)  # and back under Ray
    third = stored(out)
    assert sorted(third) == [f"c{i:02d}" for i in range(5)]
    assert all(third[item][2] == second[item][2] for item in second)
    assert third["c04"][1]["backend"] == "ray"


def test_a_faulting_gpu_is_retired_and_its_candidates_go_to_another(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.fleet.scheduler"):
        results = _run(out, 4, handler="BreaksGpu1")  # two jobs per actor at once: GPU 1's second is re-queued too
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]
    found = stored(out)
    assert sorted(found) == ["c00", "c01", "c02", "c03"], "every item has exactly one result"
    assert {placement["where"]["cuda_visible_devices"] for _, placement, _ in found.values()} == {"0"}
    interrupted = [p["interrupted_by"] for _, p, _ in found.values() if p["interrupted_by"]]
    assert len(interrupted) == 1 and "uncorrectable ECC" in interrupted[0][0], "re-queued, not failed"
    assert "retired: failed the harness's health check" in caplog.text


def test_when_every_gpu_is_retired_the_rest_are_recorded_as_infrastructure_failures(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(GpusRetired, match="every GPU was retired"):
        _run(out, 4, handler="BreaksEveryGpu")
    found = stored(out)
    assert sorted(found) == ["c00", "c01", "c02", "c03"]
    assert all(evaluation.status is None for evaluation, _, _ in found.values())
    assert InfraFailure.NO_GPU in {evaluation.infra_failure for evaluation, _, _ in found.values()}
    assert ray.is_initialized(), "a cluster the caller started is left running"


def test_lanes_put_several_actors_on_each_gpu(tmp_path: Path) -> None:
    from ptxbench.records.rundir import RunDir

    out = tmp_path / "run"
    results = evaluate_candidates(candidates(4), Arch.SM_90A, out, OPTIONS.model_copy(update={"lanes": 2}),
                                  backend="ray", handler=f"{FAKE}:FakeRunner", reference_device="cpu")
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]
    started = RunDir.load(out).header.environment["gpus"]
    assert len(started) == 4, "two lanes on each of the two GPUs: four actors"
    pins = sorted(gpu["cuda_visible_devices"] for gpu in started)
    assert pins == ["0", "0", "1", "1"], "each GPU carries two actors with half of it each"
