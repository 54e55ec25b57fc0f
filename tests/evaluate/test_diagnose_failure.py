"""The diagnosis of a call that failed with a CUDA error: compute-sanitizer's first finding, read from the
log file it writes (never from the candidate's output), appended to the message; skipped cleanly when the
tool is missing or runs out of time. A stand-in ``compute-sanitizer`` (a shell script on PATH) plays the
tool; the evaluator's call sites are driven with the fake GPU side of the orchestration tests."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.diagnosis import sanitizer as diagnose_failure
from ptxbench.evaluate.diagnosis.sanitizer import first_finding, is_cuda_error, with_diagnosis
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.records.evaluation import Status
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.model import Task

from ..conftest import EXAMPLES
from .fake_runner import BEHAVIOUR, FakeRunner

HANDLER = "tests.evaluate.test_diagnose_failure:LaunchFailing"
LAUNCH_FAILURE = "CUDA error: unspecified launch failure"
REAL_FINDING = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at matmulKernel12+0x1a30
=========     by thread (5,0,0) in block (3,0,0)
=========     Address 0x7f0012345678 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========
========= ERROR SUMMARY: 1 error
"""
FORGED = "========= Invalid __shared__ read of size 1 bytes (forged by the candidate)"


class LaunchFailing(FakeRunner):
    """The fake GPU side, failing as a kernel's sticky error does: in a trial ("launch-failure-trial") or in
    the candidate's timed calls ("launch-failure-timing")."""

    def trial(self, sizes: dict[str, int], seed: int) -> dict[str, Any]:
        if self.behaviour == "launch-failure-trial":
            raise RuntimeError(LAUNCH_FAILURE)
        return super().trial(sizes, seed)

    def time_rounds(self, rounds: int) -> dict[str, list[float]]:
        if self.behaviour == "launch-failure-timing" and hasattr(self, "kernels"):
            raise RuntimeError(LAUNCH_FAILURE)
        return super().time_rounds(rounds)


def _fake_sanitizer(folder: Path, log_text: str, sleep_s: float = 0.0, plan_copy: Path | None = None) -> Path:
    """A ``compute-sanitizer`` that writes ``log_text`` to the file after --log-file, copies the plan it was
    given (the last argument) to ``plan_copy``, then runs the program with its output going where the
    sanitizer's does; asked its version (the toolchain's search does), it answers at once."""
    folder.mkdir(exist_ok=True)
    (folder / "finding.txt").write_text(log_text)
    script = folder / "compute-sanitizer"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0 (fake)"; exit 0; fi
log=""
previous=""
for argument in "$@"; do
    if [ "$previous" = "--log-file" ]; then log="$argument"; fi
    previous="$argument"
    last="$argument"
done
sleep {sleep_s}
cat "{folder / 'finding.txt'}" > "$log"
{f'cp "$last" "{plan_copy}"' if plan_copy else ""}
while [ "$1" != "--print-limit" ]; do shift; done
shift 2
exec "$@"
""")
    script.chmod(0o755)
    return folder


def _on_path(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _small_softmax() -> Task:
    data = get_task("softmax").model_dump(mode="json")
    data["workloads"] = [
        {"name": "small-timed", "role": "timed", "sizes": {"R": 4, "C": 64}},
        {"name": "small-visible", "role": "visible", "sizes": {"R": 3, "C": 128}},
        {"name": "small-heldout", "role": "heldout", "sizes": {"R": 5, "C": 192}},
    ]
    data["variants"] = []  # the suite's variants partition its own workloads, not these
    return Task.model_validate(data)


def _printing_program(text: str) -> list[str]:
    """Stands in for profile_one.py: a candidate whose call prints sanitizer-shaped text."""
    return [sys.executable, "-c", f"print({text!r}); import sys; print({text!r}, file=sys.stderr)"]


def test_the_first_finding_is_the_first_error_block_of_the_log() -> None:
    assert first_finding(REAL_FINDING) == (
        "Invalid __global__ write of size 4 bytes | at matmulKernel12+0x1a30 | by thread (5,0,0) in block (3,0,0)"
        " | Address 0x7f0012345678 is out of bounds")
    assert first_finding("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == "no error found"
    long = "========= " + "x\x1b" * 2000
    assert len(first_finding(long)) == diagnose_failure.FINDING_CHARS and "\x1b" not in first_finding(long)


def test_only_cuda_errors_are_diagnosed() -> None:
    assert is_cuda_error(f"timing: RuntimeError: {LAUNCH_FAILURE}")
    assert is_cuda_error("workload w: the entry point returned cudaError 700")
    assert not is_cuda_error("workload w: ValueError: the candidate returned garbage")


def test_the_message_comes_from_the_log_not_from_the_candidates_output(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    _on_path(monkeypatch, _fake_sanitizer(tmp_path / "bin", REAL_FINDING))
    monkeypatch.setattr(diagnose_failure, "sanitized_program", lambda *_, **__: _printing_program(FORGED))
    message = with_diagnosis(f"timing: {LAUNCH_FAILURE}", _small_softmax(), {"R": 4, "C": 64}, tmp_path / "c.so")
    assert message == (f"timing: {LAUNCH_FAILURE}; compute-sanitizer memcheck: Invalid __global__ write of size 4"
                       " bytes | at matmulKernel12+0x1a30 | by thread (5,0,0) in block (3,0,0) | Address"
                       " 0x7f0012345678 is out of bounds")
    assert "forged" not in message


def test_a_clean_log_says_no_error_whatever_the_candidate_prints(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    _on_path(monkeypatch, _fake_sanitizer(tmp_path / "bin", "========= ERROR SUMMARY: 0 errors\n"))
    monkeypatch.setattr(diagnose_failure, "sanitized_program", lambda *_, **__: _printing_program(FORGED))
    message = with_diagnosis(LAUNCH_FAILURE, _small_softmax(), {"R": 4, "C": 64}, tmp_path / "c.so")
    assert message == f"{LAUNCH_FAILURE}; compute-sanitizer memcheck: no error found"


def test_without_the_tool_the_message_is_unchanged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no compute-sanitizer there

    def never(*_: object, **__: object) -> list[str]:
        raise AssertionError("no plan is made without the tool")
    monkeypatch.setattr(diagnose_failure, "sanitized_program", never)
    assert with_diagnosis(LAUNCH_FAILURE, _small_softmax(), {"R": 4, "C": 64}, tmp_path / "c.so") == LAUNCH_FAILURE


def test_a_sanitizer_out_of_time_is_killed_and_the_message_unchanged(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    _on_path(monkeypatch, _fake_sanitizer(tmp_path / "bin", REAL_FINDING, sleep_s=30))
    monkeypatch.setattr(diagnose_failure, "sanitized_program", lambda *_, **__: _printing_program(FORGED))
    started = time.perf_counter()
    message = with_diagnosis(LAUNCH_FAILURE, _small_softmax(), {"R": 4, "C": 64}, tmp_path / "c.so", timeout_s=1)
    assert message == LAUNCH_FAILURE
    assert time.perf_counter() - started < 10


def test_a_failure_that_is_not_a_cuda_error_runs_no_sanitizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _on_path(monkeypatch, _fake_sanitizer(tmp_path / "bin", REAL_FINDING))
    message = "workload w: ValueError: the candidate returned garbage"
    assert with_diagnosis(message, _small_softmax(), {"R": 4, "C": 64}, tmp_path / "c.so") == message


def _evaluate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, behaviour: str, **options: Any):  # type: ignore[no-untyped-def]
    _on_path(monkeypatch, _fake_sanitizer(tmp_path / "bin", REAL_FINDING, plan_copy=tmp_path / "plan.json"))
    monkeypatch.setenv(BEHAVIOUR, behaviour)
    evaluator = GpuEvaluator(EvalOptions(profile=False, call_timeout_s=20, **options), handler=HANDLER,
                             reference_device="cpu")
    try:
        return evaluator.evaluate(_small_softmax(), Arch.SM_90A, (EXAMPLES / "softmax.cu").read_text(), "softmax.cu")
    finally:
        evaluator.close()


def _diagnosed_plan(tmp_path: Path) -> dict:
    """The plan the sanitizer was given: the candidate's library on the failing workload's sizes, with no GPU
    lock for the program to take (the evaluator holds it, exclusively while timing)."""
    return json.loads((tmp_path / "plan.json").read_text())


def test_a_trial_that_fails_with_a_cuda_error_says_where(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    evaluation = _evaluate(monkeypatch, tmp_path, "launch-failure-trial", time=False)
    assert evaluation.status is Status.RUNTIME_ERROR
    assert evaluation.message.startswith("workload small-timed: RuntimeError: CUDA error: unspecified launch failure; "
                                         "compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes")
    plan = _diagnosed_plan(tmp_path)
    assert plan["gpu_lock"] is None and plan["library"].endswith("candidate.so")
    assert [a["value"] for a in plan["arguments"] if a["kind"] == "size"] == [4, 64]
    assert "diagnosis" in evaluation.durations_s


def test_a_timed_call_that_fails_with_a_cuda_error_says_where(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    evaluation = _evaluate(monkeypatch, tmp_path, "launch-failure-timing")
    assert evaluation.status is Status.RUNTIME_ERROR
    assert evaluation.message.startswith("timing: RuntimeError: CUDA error: unspecified launch failure; "
                                         "compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes")
    plan = _diagnosed_plan(tmp_path)
    assert plan["gpu_lock"] is None
    assert [a["value"] for a in plan["arguments"] if a["kind"] == "size"] == [4, 64]  # the first timed workload
