"""On a GPU: tasks imported from a FlashInfer-Trace dataset are evaluated as ``ptxbench eval`` evaluates
them. A fixture dataset (a GEMM, a paged GQA decode and an fp8 block-scaled MoE, shaped like the dataset's
definitions) is imported with ``import_dataset`` (behind ``ptxbench tasks import``), and each task gets one
plain CUDA kernel (``imported/<task id>.cu``, written to the contract ``ptxbench prompt`` gives) through the
real CLI, ``python -m ptxbench eval --task TASK.toml KERNEL.cu --out RUN``, in a process of its own.

Each must get the candidate's verdict (no infrastructure failure), be correct on every trial, held-out
workloads included (INCORRECT would mean the kernel or the importer is wrong), and be timed against the
definition's own reference, the baseline ``reference``. The kernels use no tensor cores or copy engine: with
Nsight Compute on PATH the evaluator rejects them for not executing the required features, as it does the
bundled plain examples; without it the features stay unverified and they pass.

Run with ``pytest -m gpu`` on an NVIDIA GPU; skipped elsewhere."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxbench.records.evaluation import Evaluation, Guard, Status
from ptxbench.records.rundir import RunDir, load_result
from ptxbench.tasks.loader import load_task_file

from ..tasks.flashinfer_dataset import EVAL_DEFINITIONS, write_dataset

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).parent / "imported"


@pytest.fixture(scope="module")
def task_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each definition's imported task file, by definition name (the layouts from the traces' blobs, which
    need safetensors: the GPU machines have it, and a missing one fails here rather than skipping)."""
    from ptxbench.tasks.flashinfer import import_dataset

    root = write_dataset(tmp_path_factory.mktemp("trace"), list(EVAL_DEFINITIONS))
    out = tmp_path_factory.mktemp("tasks")
    summary = import_dataset(root, out)
    assert [o.refused for o in summary.outcomes] == [None] * len(EVAL_DEFINITIONS)
    return {o.definition: out / o.task_file for o in summary.outcomes if o.task_file is not None}


def _evaluate(task_file: Path, kernel: Path, run: Path) -> Evaluation:
    """``ptxbench eval`` of one file against one task file, in its own process; its one stored evaluation."""
    command = [sys.executable, "-m", "ptxbench", "eval", "--task", str(task_file), str(kernel), "--out", str(run),
               "--trials", "2", "--timing-budget-ms", "30"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    print(f"\n$ {' '.join(command[1:])}  ({time.monotonic() - started:.1f} s, rc {done.returncode})\n"
          f"{done.stdout[-2500:]}{done.stderr[-2500:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    rundir = RunDir.load(run)
    results = [load_result(f, rundir.header) for f in rundir.results()]
    assert len(results) == 1 and isinstance(results[0], Evaluation), results
    return results[0]


@pytest.mark.parametrize("definition", EVAL_DEFINITIONS, ids=lambda d: d["name"])
def test_a_plain_kernel_of_an_imported_task_is_judged_correct_and_timed_against_its_reference(
        task_files: dict[str, Path], definition: dict, tmp_path: Path) -> None:
    task_file = task_files[definition["name"]]
    task = load_task_file(task_file)
    evaluation = _evaluate(task_file, KERNELS / f"{task.id}.cu", tmp_path / "run")
    print(f"EVAL {task.id}: {evaluation.status} {evaluation.message}; stages (s): {evaluation.durations_s}")
    for timing in evaluation.timings:
        print(f"TIMING {task.id}/{timing.workload}: candidate {timing.candidate_ms:.4f} ms, baseline "
              f"{timing.baseline} {timing.baseline_ms} ms")
    assert evaluation.infra_failure is None, evaluation.message
    assert evaluation.task == task.id and evaluation.task_hash == task.content_hash
    # correct everywhere: every trial of every workload, the held-out ones included
    assert evaluation.trials and all(t.passed for t in evaluation.trials), evaluation.message
    assert {t.role for t in evaluation.trials} >= {"timed", "heldout"}
    assert {t.workload for t in evaluation.trials} == {w.name for w in task.workloads}
    # the only fault a correct plain kernel may have: the required features never execute (seen under ncu)
    assert evaluation.status in (Status.PASSED, Status.REJECTED), evaluation.message
    if evaluation.status is Status.REJECTED:
        assert evaluation.features is not None and not all(f.satisfied for f in evaluation.features)
        assert {g.guard for g in evaluation.guards} == {Guard.FEATURE_NOT_EXECUTED}, evaluation.guards
    else:
        assert evaluation.features is None, evaluation.features  # unverified (no profiler), never "used"
    # the baseline: the definition's own reference, timed on the timed workload
    assert evaluation.timings and evaluation.timings[0].workload == task.timed().name  # what the results read
    assert all(t.baseline == "reference" and t.baseline_ms and t.baseline_ms > 0 and t.candidate_ms > 0
               for t in evaluation.timings), evaluation.timings
