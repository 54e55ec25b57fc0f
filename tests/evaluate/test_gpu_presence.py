"""Whether this machine has a GPU: without NVIDIA's driver library the answer is no, known without importing
torch (seconds of CPU at every ``eval`` on a CPU machine); with it, torch decides as before."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from ptxbench.evaluate.fleet import pool, run


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_loads(), reason="NVIDIA's driver library is installed here")
def test_without_the_driver_library_there_is_no_gpu_and_torch_is_not_imported() -> None:
    probe = ("import sys; from ptxbench.evaluate.fleet.pool import visible_gpu_count; "
             "from ptxbench.evaluate.fleet.run import gpu_available; "
             "print(gpu_available(), visible_gpu_count(), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "0", "False"], done.stderr


def test_with_the_driver_library_torch_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(pool, "cuda_driver_present", lambda: True)
    for seen in (True, False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda seen=seen: seen)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        assert run.gpu_available() is seen
        assert pool.visible_gpu_count() == (2 if seen else 0)
