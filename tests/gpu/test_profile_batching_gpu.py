"""On a GPU with ncu (issue 40): several candidates profiled in one Nsight Compute session judge each exactly as a
session of its own does. The GEMM reference (wgmma, TMA, mbarriers), a plain softmax and a plain RMSNorm wait for
the ncu turn together and are profiled as one batch; each one's launches, the features found executed and their
verdicts match its own solo profile, and a candidate that starts a child process launching kernels sends the
batch back to solo sessions instead of lending its launches to anyone. The seconds of both ways are printed.

Run with ``pytest -m gpu -s tests/gpu/test_profile_batching_gpu.py`` on an NVIDIA GPU with ncu; skipped elsewhere.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.kernels import reference_folder
from ptxbench.tasks.loader import get_task

from ..conftest import EXAMPLES

pytestmark = pytest.mark.gpu

CANDIDATES = [("gemm_bf16", reference_folder("sm_90a") / "gemm_bf16.cu"), ("softmax", EXAMPLES / "softmax.cu"),
              ("rmsnorm", EXAMPLES / "rmsnorm.cu")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[object, Path]]:
    from ptxbench.check import check_source
    from ptxbench.toolchain.discover import find_toolchain

    if not find_toolchain().has("ncu"):
        pytest.skip("ncu is not installed")
    found = []
    for task_id, path in CANDIDATES:
        task = get_task(task_id)
        report = check_source(path.read_text(), Arch.SM_90A, task, path.name)
        shared_object = report.build.artifact(".so")
        assert report.build.ok and shared_object is not None, report.build.log
        found.append((task, shared_object))
    return found


def _summary(features: list, launches: list) -> tuple:
    return (sorted({launch.name for launch in launches}),
            sorted((f.requirement.any_of[0], f.satisfied, f.verified) for f in features))


def _together(built: list[tuple[object, Path]], monkeypatch: pytest.MonkeyPatch) -> tuple[list, list[int]]:
    """Every candidate's ``profile_requirements(batched=True)`` from its own thread, released at once from behind the
    ncu turn so they meet in one session; their results and the sizes of the sessions that ran."""
    from ptxbench.evaluate.isolation.gpu_lock import profiler_turn
    from ptxbench.evaluate.proof import batching
    from ptxbench.evaluate.proof.profiling import profile_requirements

    sizes: list[int] = []
    real = batching.run_batch

    def counted(batch, spool):  # type: ignore[no-untyped-def]
        sizes.append(len(batch))
        return real(batch, spool)

    monkeypatch.setattr(batching, "run_batch", counted)
    results: list = [None] * len(built)

    def profile(i: int) -> None:
        task, shared_object = built[i]
        results[i] = profile_requirements(task, Arch.SM_90A, shared_object, 180, batched=True)

    spool = batching.default_spool()
    (spool.root / "paused.json").unlink(missing_ok=True)  # a pause left by an earlier run on this machine
    threads = [threading.Thread(target=profile, args=(i,)) for i in range(len(built))]
    with profiler_turn():
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60  # the inputs are drawn and written before each request is
        while len(list(spool.requests.glob("*.json"))) < len(built) and time.monotonic() < deadline:
            time.sleep(0.05)
    for thread in threads:
        thread.join(600)
    return results, sizes


def test_one_session_judges_each_candidate_as_its_own_session_does(built, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.proof.profiling import profile_requirements

    started = time.perf_counter()
    alone = [profile_requirements(task, Arch.SM_90A, so, 180) for task, so in built]
    solo_s = time.perf_counter() - started
    started = time.perf_counter()
    together, sizes = _together(built, monkeypatch)
    batch_s = time.perf_counter() - started
    print(f"\n{len(built)} candidates: {solo_s:.2f} s in sessions of their own, {batch_s:.2f} s batched "
          f"(sessions of {sizes})")
    assert sizes == [len(built)]
    for (task, _), mine, theirs in zip(built, together, alone):
        assert mine is not None
        assert _summary(*mine) == _summary(*theirs), task.id
    gemm_features = together[0][0]
    assert any(f.satisfied for f in gemm_features), "the GEMM reference's wgmma ran"


def test_a_launch_of_a_process_that_is_no_candidate_sends_the_batch_to_solo_sessions(tmp_path: Path) -> None:
    """The report of a batched session holding a launch of any other process says nothing of any one candidate."""
    from ptxbench.evaluate.proof import batching
    from ptxbench.evaluate.proof.profiling import Folders

    # A stand-in program starting a child process that opens a profiled range and launches a kernel in it.
    grandchild = ("import torch; torch.cuda.profiler.start(); torch.ones(4, device='cuda').sum().item(); "
                  "torch.cuda.synchronize(); torch.cuda.profiler.stop()")
    child = [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"]
    with Folders() as one, Folders() as two:
        (one.plan / "plan.json").write_text("{}")
        (two.plan / "plan.json").write_text("{}")
        batch = [batching.new_request(child, one.plan / "plan.json", one.home, 120),
                 batching.new_request([sys.executable, "-c", "pass"], two.plan / "plan.json", two.home, 60)]
        outcomes = batching.run_batch(batch, batching.Spool(tmp_path / "spool"))
    assert all(o.solo for o in outcomes), [o.solo for o in outcomes]
