"""Memory-aware evaluation on the CPU: each workload's estimated need (``memory_need``), admission of untimed stages
by the GPU's memory (``MemoryLedger``), workloads too large for the card not run with their reason, and the harness's
own out-of-memory never recorded as the candidate's failure nor as a lost item."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import ALONE_TOO, EvalOptions, GpuEvaluator
from ptxbench.evaluate.isolation.gpu_lock import TRACE_VARIABLE
from ptxbench.evaluate.isolation.memory_ledger import MemoryLedger
from ptxbench.evaluate.isolation.memory_need import (GIB, HEADROOM_BYTES, REFERENCE_SCRATCH_FLOOR_BYTES,
                                                     unfit_workloads, workload_need)
from ptxbench.records.evaluation import InfraFailure, Status
from ptxbench.tasks.loader import bundled_suite, get_task

from ..conftest import EXAMPLES
from .fake_runner import BEHAVIOUR, GPU_BYTES, OOM_MARK, RELEASES
from .test_evaluator_orchestration import HANDLER, _small_softmax

H100_80GB_BYTES = 85_520_809_984  # torch.cuda.get_device_properties(0).total_memory of an H100 80GB HBM3


@pytest.fixture(autouse=True)
def _own_lock_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Locks and the memory ledger of the fake GPU in this test's folder, never another test's."""
    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))


def _evaluate(monkeypatch: pytest.MonkeyPatch, behaviour: str, **options):  # type: ignore[no-untyped-def]
    monkeypatch.setenv(BEHAVIOUR, behaviour)
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20, **options), handler=HANDLER,
                             reference_device="cpu")
    try:
        return evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text(), "softmax.cu")
    finally:
        evaluator.close()


def _holds(trace: Path) -> list[tuple[str, str]]:
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    return [(h["mode"], h["purpose"]) for h in lines if h["released"] is not None and h["purpose"].startswith("trials")]


# -- the estimate ---------------------------------------------------------------------------------------------


def test_the_need_counts_each_process_that_holds_the_workloads_tensors() -> None:
    task = get_task("softmax")
    timed = task.timed()
    need = workload_need(task, timed)
    elements = timed.sizes["R"] * timed.sizes["C"]
    assert [spec.dtype.size for spec in (*task.inputs, *task.outputs)] == [2, 2]  # bf16 logits and probabilities
    # the candidate's inputs and outputs; the harness's inputs, expected outputs in fp32 and fp32 scratch (here
    # the largest tensor in fp32, 1 GiB, is under the scratch every reference is granted)
    assert 4 * elements < REFERENCE_SCRATCH_FLOOR_BYTES
    assert need.trials == (2 + 2) * elements + 2 * elements + 4 * elements + REFERENCE_SCRATCH_FLOOR_BYTES
    assert need.timing > 2 * 3 * 2 * elements  # three rotated input sets in each of the two timing processes
    held_out = task.held_out()[0]
    assert workload_need(task, held_out).timing == 0  # never timed


def test_every_bundled_workload_fits_an_80_gb_h100() -> None:
    too_large = {task.id: unfit for task in bundled_suite() if (unfit := unfit_workloads(task, H100_80GB_BYTES))}
    assert too_large == {}


def test_a_workload_larger_than_the_card_is_named_with_what_it_needs() -> None:
    task = get_task("moe_grouped_gemm")
    unfit = unfit_workloads(task, 24 * GIB)
    assert "dsv3-256e-decode" in unfit and task.timed().name not in unfit
    assert "GiB of GPU memory" in unfit["dsv3-256e-decode"] and "24 GiB" in unfit["dsv3-256e-decode"]


# -- the ledger -------------------------------------------------------------------------------------------------


def test_a_need_is_admitted_beside_others_only_while_it_fits(tmp_path: Path) -> None:
    ledger = MemoryLedger("GPU-test", usable_bytes=10 * GIB, folder=tmp_path)
    with ledger.admitted(6 * GIB) as first:
        assert first and ledger.reserved_bytes() == 6 * GIB
        with ledger.admitted(5 * GIB) as second:
            assert not second  # 11 GiB of 10: the second runs alone instead
            assert ledger.reserved_bytes() == 6 * GIB
        with ledger.admitted(4 * GIB) as third:
            assert third and ledger.reserved_bytes() == 10 * GIB
    assert ledger.reserved_bytes() == 0


def test_a_reservation_of_a_process_that_died_is_dropped(tmp_path: Path) -> None:
    code = ("import sys, os; from pathlib import Path; from ptxbench.evaluate.isolation.memory_ledger import MemoryLedger;"
            "ledger = MemoryLedger('GPU-test', 10 << 30, Path(sys.argv[1]));"
            "held = ledger.admitted(9 << 30); assert held.__enter__(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    ledger = MemoryLedger("GPU-test", usable_bytes=10 * GIB, folder=tmp_path)
    entries = json.loads((tmp_path / "GPU-test.memory.json").read_text())
    assert [entry["bytes"] for entry in entries.values()] == [9 * GIB]  # left behind by the killed process
    assert ledger.reserved_bytes() == 0
    with ledger.admitted(9 * GIB) as fits:
        assert fits


def test_a_torn_ledger_is_read_as_empty(tmp_path: Path) -> None:
    (tmp_path / "GPU-test.memory.json").write_text('{"12-ab": {"pid": ')
    ledger = MemoryLedger("GPU-test", usable_bytes=GIB, folder=tmp_path)
    with ledger.admitted(GIB // 2) as fits:
        assert fits


# -- the evaluator --------------------------------------------------------------------------------------------


def test_trials_run_alone_from_the_start_when_others_have_reserved_the_memory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(GPU_BYTES, str(HEADROOM_BYTES + 20 * GIB))
    monkeypatch.setenv(TRACE_VARIABLE, str(tmp_path / "lock.jsonl"))
    ledger = MemoryLedger("Fake H200-None", usable_bytes=20 * GIB, folder=tmp_path / "locks")  # the fake GPU's key
    with ledger.admitted(20 * GIB) as held:  # another run's trials hold all of it
        assert held
        evaluation = _evaluate(monkeypatch, "correct", time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert _holds(tmp_path / "lock.jsonl") == [("exclusive", "trials alone")]


def test_trials_share_the_gpu_when_the_need_fits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(GPU_BYTES, str(HEADROOM_BYTES + 20 * GIB))
    monkeypatch.setenv(TRACE_VARIABLE, str(tmp_path / "lock.jsonl"))
    evaluation = _evaluate(monkeypatch, "correct", time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert _holds(tmp_path / "lock.jsonl") == [("shared", "trials")]
    entries = json.loads((tmp_path / "locks" / "Fake_H200-None.memory.json").read_text())
    assert entries == {}  # the reservation ended with the trials


def test_a_workload_too_large_for_the_card_is_not_run_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    task = _small_softmax()
    largest = max(workload_need(task, w).trials for w in task.workloads if w.name != "small-heldout")
    monkeypatch.setenv(GPU_BYTES, str(HEADROOM_BYTES + largest))  # the held-out workload needs more
    evaluation = _evaluate(monkeypatch, "correct", time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert list(evaluation.not_run) == ["small-heldout"] and "GiB" in evaluation.not_run["small-heldout"]
    assert {t.workload for t in evaluation.trials} == {"small-timed", "small-visible"}
    assert "1 workload(s) not run: too large for this GPU: small-heldout" in evaluation.message


def test_a_timed_workload_too_large_for_the_card_is_the_harness_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GPU_BYTES, str(HEADROOM_BYTES + 1000))
    evaluation = _evaluate(monkeypatch, "correct", time=False)
    assert evaluation.status is None and evaluation.infra_failure is InfraFailure.HARNESS_ERROR
    assert "cannot be evaluated on this GPU" in evaluation.message and not evaluation.trials


def test_the_harness_short_of_memory_in_the_candidates_process_is_tried_again_alone(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(OOM_MARK, str(tmp_path / "ran-out"))
    monkeypatch.setenv(TRACE_VARIABLE, str(tmp_path / "lock.jsonl"))
    evaluation = _evaluate(monkeypatch, "oom-harness-once", time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert _holds(tmp_path / "lock.jsonl") == [("shared", "trials"), ("exclusive", "trials alone")]


def test_the_harness_short_of_memory_alone_too_is_never_the_candidates_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    evaluation = _evaluate(monkeypatch, "oom-harness", time=False)
    # on the CPU the harness cannot see the GPU's free memory, so it cannot say the candidate's process held it
    assert evaluation.status is None and evaluation.infra_failure is InfraFailure.HARNESS_ERROR, evaluation.message
    assert evaluation.message.startswith(ALONE_TOO) and "held outside this evaluation" in evaluation.message


def test_the_harness_short_of_memory_alone_with_memory_free_after_the_candidate_is_its_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(GpuEvaluator, "_free_bytes", lambda self: 40 * GIB)
    evaluation = _evaluate(monkeypatch, "oom-harness", time=False)
    assert evaluation.status is Status.RUNTIME_ERROR, evaluation.message
    assert "that process held the memory" in evaluation.message


def test_timing_short_of_memory_once_is_taken_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(OOM_MARK, str(tmp_path / "ran-out"))
    monkeypatch.setenv(RELEASES, str(tmp_path / "released"))
    monkeypatch.setattr("ptxbench.evaluate.evaluator.TIMING_SHORT_WAIT_S", 0.0)
    evaluation = _evaluate(monkeypatch, "timing-oom-once")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert [t.workload for t in evaluation.timings] == ["small-timed", "small-visible"]
    # the baseline process gave its buffers back after each timing, the failed one included
    assert len((tmp_path / "released").read_text().split()) == 2


def test_timing_short_of_memory_twice_is_the_harness_failure_where_nothing_shows_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ptxbench.evaluate.evaluator.TIMING_SHORT_WAIT_S", 0.0)
    evaluation = _evaluate(monkeypatch, "timing-oom")
    assert evaluation.status is None and evaluation.infra_failure is InfraFailure.HARNESS_ERROR, evaluation.message
    assert evaluation.message.startswith(ALONE_TOO) and evaluation.trials  # the trials' evidence is kept
    assert os.environ.get(BEHAVIOUR) == "timing-oom"


def test_the_harness_short_of_memory_comparing_outputs_is_tried_again_alone(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Seen on an H100 beside another run: the comparison of softmax's 256M-element output ran out of memory in the
    harness's process and the item was lost as the evaluator's exception."""
    from .test_evaluator_orchestration import AcceleratorError

    real_judge = GpuEvaluator._judge_trial
    failed: list[bool] = []

    def judge(self, *args):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(True)
            raise AcceleratorError("CUDA error: out of memory")
        return real_judge(self, *args)

    monkeypatch.setattr(GpuEvaluator, "_judge_trial", judge)
    monkeypatch.setenv(TRACE_VARIABLE, str(tmp_path / "lock.jsonl"))
    evaluation = _evaluate(monkeypatch, "correct", time=False)
    assert evaluation.status is Status.PASSED, evaluation.message
    assert _holds(tmp_path / "lock.jsonl") == [("shared", "trials"), ("exclusive", "trials alone")]
