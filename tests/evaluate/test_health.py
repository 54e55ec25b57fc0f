"""The harness's own health check decides whether a GPU is retired: the parent's verdict on the check's raw
report, and a slot whose host died restarting and checking its GPU at once."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.fleet.gpu_host import HostJob, HostOutcome, health_problem
from ptxbench.evaluate.fleet.scheduler import HostFailed, Job, SerialSlot

from .fake_runner import FakeRunner, SickGpu
from .scaleout import small_softmax


def test_a_sound_report_passes_and_wrong_or_nonfinite_ones_fail() -> None:
    assert health_problem(FakeRunner().health_check()) is None
    assert "known-good matmul is wrong" in (health_problem(SickGpu().health_check()) or "")
    assert "non-finite" in (health_problem({"max_abs_error": math.nan, "reference_max_abs": 10.0}) or "")
    assert "non-finite" in (health_problem({"max_abs_error": 0.0, "reference_max_abs": 0.0}) or "")
    assert "unreadable" in (health_problem({"name": "H200"}) or "")


class DyingHostSlot(SerialSlot):
    """A slot whose host dies (or raises) on every job; ``healthy`` says what the check after it finds."""

    def __init__(self, healthy: bool, alive: bool = False, opens: bool = True) -> None:
        super().__init__("x")
        self.healthy, self.alive, self.opens = healthy, alive, opens
        self.opened = 0
        self.checked = 0

    def _open(self) -> dict[str, Any]:
        if not self.opens and self.opened:
            raise RuntimeError("no device")
        self.opened += 1
        return {}

    def _run(self, job: Job, prepared: Any) -> HostOutcome:
        raise HostFailed("the GPU's host process failed: it exited", alive=self.alive)

    def _health_check(self) -> str | None:
        self.checked += 1
        return None if self.healthy else "CUDA error: uncorrectable ECC error encountered"

    def _stop(self, graceful: bool) -> None:
        pass

    def _interrupt(self) -> None:
        pass


def _job() -> Job:
    return Job(0, HostJob(task=small_softmax(), arch=Arch.SM_90A, source="", origin="c"))


@pytest.mark.parametrize("healthy", [True, False])
def test_a_dead_host_is_restarted_and_its_gpu_checked_at_once(healthy: bool) -> None:
    slot = DyingHostSlot(healthy)
    slot.start().result()
    outcome = slot.submit(_job()).result()
    slot.close()
    assert outcome.fault is not None and outcome.gpu_healthy is healthy
    assert slot.opened == 2 and slot.checked == 1, "restarted and checked right after the fault"
    assert ("ECC" in outcome.fault) is not healthy


def test_a_gpu_that_cannot_reopen_after_a_fault_fails_its_check() -> None:
    slot = DyingHostSlot(True, opens=False)
    slot.start().result()
    outcome = slot.submit(_job()).result()
    slot.close()
    assert outcome.gpu_healthy is False and outcome.fault is not None and "could not be reopened" in outcome.fault


def test_a_host_that_raised_is_the_harness_failure_and_no_check_runs() -> None:
    slot = DyingHostSlot(False, alive=True)
    slot.start().result()
    outcome = slot.submit(_job()).result()
    slot.close()
    assert outcome.harness_error is not None and outcome.fault is None and slot.checked == 0
