"""The GPU evaluator on the H200: the examples pass (and are rejected once ncu shows they never run the
required features), and every adversarial candidate gets its expected status. Run with `-m gpu`.

Cases that attack the harness itself (a manifest `check`: killing their parent or process group, writing
into inherited descriptors, leaving daemons) are evaluated in a child process of their own, so that a
broken guarantee fails their test instead of ending this pytest process and every test after it."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.paths import cache_root
from ptxbench.records.evaluation import Evaluation, Guard, Status
from ptxbench.tasks.loader import bundled_suite, get_task

from ..adversarial.cases import case_source, manifest_cases
from ..conftest import EXAMPLES, REPO

pytestmark = pytest.mark.gpu
ADVERSARIAL = REPO / "tests" / "adversarial"


@pytest.fixture(scope="module")
def evaluator():  # type: ignore[no-untyped-def]
    gpu = GpuEvaluator(EvalOptions(trials=2, timing_budget_ms=40, profile=False, call_timeout_s=30))
    yield gpu
    gpu.close()


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_examples_pass_with_timings(evaluator, task) -> None:  # type: ignore[no-untyped-def]
    evaluation = evaluator.evaluate(task, Arch.SM_90A, (EXAMPLES / f"{task.id}.cu").read_text(), f"{task.id}.cu")
    print(f"EVAL {task.id}: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    roles = {t.role for t in evaluation.trials}
    assert {"timed", "heldout"} <= roles
    assert evaluation.timings and all(t.baseline_ms and t.candidate_ms > 0 for t in evaluation.timings)
    assert evaluation.features is None  # no profiler in this fixture: unverified, never "used"


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute")
def test_plain_example_is_rejected_once_ncu_shows_no_wgmma() -> None:
    gpu = GpuEvaluator(EvalOptions(trials=1, time=False, profile=True))
    try:
        evaluation = gpu.evaluate(get_task("gemm_bf16"), Arch.SM_90A, (EXAMPLES / "gemm_bf16.cu").read_text())
    finally:
        gpu.close()
    print(f"EVAL gemm_bf16 with ncu: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.REJECTED
    assert evaluation.features is not None and not any(f.satisfied for f in evaluation.features)
    assert {g.guard for g in evaluation.guards} == {Guard.FEATURE_NOT_EXECUTED}


def _manifest() -> list[dict]:
    return manifest_cases()


PROFILED_GUARDS = ("dead_code_feature", "feature_not_executed", "profiler_evasion", "forged_timing")
CANDIDATE_STATUSES = {Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT, Status.INCORRECT, Status.REJECTED,
                      Status.PASSED}
DAEMON_NAME = "ptxb_daemon"  # what daemon_escape.cu names the process it leaves behind
_EVALUATE_IN_CHILD = """
import sys
from pathlib import Path
from ptxbench.arch.registry import Arch
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.paths import cache_root
from ptxbench.tasks.loader import get_task

candidate, task, options, out = sys.argv[1:]
gpu = GpuEvaluator(EvalOptions.model_validate_json(options))
try:
    evaluation = gpu.evaluate(get_task(task), Arch.SM_90A, Path(candidate).read_text(), Path(candidate).name)
finally:
    gpu.close()
Path(out).write_text(evaluation.model_dump_json())
"""


def _options_for(case: dict) -> EvalOptions:
    # judged on timing and ncu's durations together: a forgery must be caught, an honest control (one of several
    # kernels, split_kv_decode.cu) must not be accused, so both run the whole pipeline
    if case.get("guard") == "forged_timing" or case.get("expect") == "PASSED":
        return EvalOptions(trials=1, timing_budget_ms=40, profile=True, call_timeout_s=30)
    if case.get("guard") in PROFILED_GUARDS:
        return EvalOptions(trials=1, time=False, profile=True, call_timeout_s=30)
    return EvalOptions(trials=2, timing_budget_ms=40, profile=False, call_timeout_s=30)


def _evaluate_in_child(case: dict, folder: Path, extra_env: dict[str, str] | None = None) -> Evaluation:
    """One evaluation in a fresh Python process of its own session; the test survives whatever it does."""
    out = folder / f"{Path(case['file']).stem}.evaluation.json"
    environment = {**os.environ, **(extra_env or {})}
    done = subprocess.run([sys.executable, "-c", _EVALUATE_IN_CHILD, str(ADVERSARIAL / case["file"]), case["task"],
                           _options_for(case).model_dump_json(), str(out)],
                          env=environment, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert done.returncode == 0 and out.is_file(), (
        f"the evaluating process itself failed ({done.returncode}): {done.stderr[-3000:]}")
    return Evaluation.model_validate_json(out.read_text())


def daemons() -> set[int]:
    """Processes named like daemon_escape.cu's daemon."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == DAEMON_NAME:
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def assert_no_daemon_survives(before: set[int], grace_s: float = 10.0) -> None:
    """Waits out the evaluator's cleanup, then kills (by pid) and reports any daemon still there."""
    deadline = time.monotonic() + grace_s
    left = daemons() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = daemons() - before
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"{len(left)} process(es) of the candidate outlived its evaluation: {sorted(left)}"


TAMPER_MARK = "TAMPERED-BY-CANDIDATE"  # what tamper_harness.cu appends to the harness's code it can write
POISON_MARK = "POISONED-BY-CANDIDATE"  # what poison_compile_cache.cu appends to compiled code it can write


def assert_harness_unchanged() -> None:
    """No file of the package (code and task files), nor torch's or pydantic's entry module, carries the mark."""
    import pydantic
    import torch

    import ptxbench

    files = [*Path(ptxbench.__file__).parent.rglob("*.py"), *Path(ptxbench.__file__).parent.rglob("*.toml"),
             Path(torch.__file__), Path(pydantic.__file__)]
    marked = [str(f) for f in files if TAMPER_MARK in f.read_text(errors="replace")]
    assert not marked, f"a candidate rewrote the harness's code: {marked}"


def assert_compile_cache_unchanged(cache: Path | None = None) -> None:
    """No compiled-code file in the harness's compile cache (the baseline process's) carries the mark."""
    folder = (cache if cache is not None else cache_root()) / "compile"
    files = [f for f in folder.rglob("*.py") if f.is_file() and not f.is_symlink()] if folder.is_dir() else []
    marked = [str(f) for f in files if POISON_MARK in f.read_text(errors="replace")]
    print(f"COMPILE CACHE {folder}: {len(files)} generated file(s) checked")
    assert not marked, f"a candidate rewrote the baseline process's compiled code: {marked[:5]}"


def assert_expected(case: dict, evaluation: Evaluation) -> None:
    print(f"ADVERSARIAL {case['file']}: expected {case['expect']}, got {evaluation.status} — {evaluation.message[:200]}")
    assert evaluation.infra_failure is None, f"charged to the harness, not the candidate: {evaluation.infra_failure}"
    if case["expect"] == "any":
        assert evaluation.status in CANDIDATE_STATUSES, evaluation.message
    elif isinstance(case["expect"], list):
        assert evaluation.status in {Status(e) for e in case["expect"]}, evaluation.message
    else:
        assert evaluation.status is Status(case["expect"]), evaluation.message
    if "guard" in case and evaluation.status is Status.REJECTED:
        assert {g.guard for g in evaluation.guards} & GUARDS_FOR[case["guard"]], evaluation.guards


@pytest.mark.parametrize("case", [c for c in _manifest() if "secret_env" not in c], ids=lambda c: c["file"])
def test_adversarial_candidate_gets_its_status(evaluator, case, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if case.get("guard") in PROFILED_GUARDS and shutil.which("ncu") is None:
        pytest.skip("needs Nsight Compute")
    task = get_task(case["task"])
    source = case_source(case)
    before = daemons()
    if "check" in case:
        evaluation = _evaluate_in_child(case, tmp_path)
    elif case.get("guard") in PROFILED_GUARDS:
        gpu = GpuEvaluator(_options_for(case))
        try:
            evaluation = gpu.evaluate(task, Arch.SM_90A, source, case["file"])
        finally:
            gpu.close()
    else:
        evaluation = evaluator.evaluate(task, Arch.SM_90A, source, case["file"])
    assert_expected(case, evaluation)
    if case.get("check") == "no_survivors":
        assert_no_daemon_survives(before)
    if case.get("check") == "harness_unchanged":
        assert_harness_unchanged()
    if case.get("check") == "compile_cache_unchanged":
        assert_compile_cache_unchanged()


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Every case's secret variable, set (to a fresh random value) before any evaluator's workers start."""
    values = {c["secret_env"]: secrets.token_hex(16) for c in _manifest() if "secret_env" in c}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.mark.parametrize("case", [c for c in _manifest() if "secret_env" in c], ids=lambda c: c["file"])
def test_candidates_cannot_read_the_harness_secrets(secret_environment, case) -> None:  # type: ignore[no-untyped-def]
    assert os.environ[case["secret_env"]] == secret_environment[case["secret_env"]]
    gpu = GpuEvaluator(_options_for(case))  # built after the variable is set: its workers inherit what we have
    try:
        evaluation = gpu.evaluate(get_task(case["task"]), Arch.SM_90A, case_source(case),
                                  case["file"])
    finally:
        gpu.close()
    assert_expected(case, evaluation)
    assert secret_environment[case["secret_env"]] not in evaluation.model_dump_json()


# The manifest names each cheat; these are the evaluator's guards that may catch it.
GUARDS_FOR = {
    "library_call": {Guard.LIBRARY_CALL, Guard.FOREIGN_KERNELS, Guard.NO_OWN_KERNEL},
    "torch_fallback": {Guard.NO_OWN_KERNEL, Guard.FOREIGN_KERNELS},
    "other_stream": {Guard.OTHER_STREAM},
    "input_mutation": {Guard.INPUT_MUTATION},
    "dead_code_feature": {Guard.FEATURE_NOT_EXECUTED},
    "feature_not_executed": {Guard.FEATURE_NOT_EXECUTED},
    "out_of_bounds_write": {Guard.OUT_OF_BOUNDS_WRITE},
    "below_physical_floor": {Guard.BELOW_PHYSICAL_FLOOR},
    "host_transfer": {Guard.HOST_TRANSFER},
    "profiler_evasion": {Guard.LAUNCHES_DIFFER, Guard.FEATURE_NOT_EXECUTED},
    "timed_only_stream": {Guard.OTHER_STREAM, Guard.LAUNCHES_DIFFER},
    "timed_only_shortcut": {Guard.BELOW_PHYSICAL_FLOOR, Guard.LAUNCHES_DIFFER},
    "forged_timing": {Guard.TIMING_DISAGREES},
}
