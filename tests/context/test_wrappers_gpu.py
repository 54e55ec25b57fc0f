"""Runs the wrappers on a Hopper GPU (``pytest -m gpu``): the layouts and encodings the sm_90a guide
states are checked numerically by gpu_wrappers_check.cu (all passed on the H200 when written)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ptxbench.toolchain.discover import find_toolchain

HERE = Path(__file__).resolve().parent
CONTEXT = HERE.parents[1] / "src" / "ptxbench" / "context"


@pytest.mark.gpu
def test_wrappers_compute_the_right_numbers_on_hopper(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    binary = tmp_path / "check"
    build = subprocess.run(
        [find_toolchain().path("nvcc"), "-std=c++17", "-O3", "-gencode", "arch=compute_90a,code=sm_90a",
         "-I", str(CONTEXT), str(HERE / "gpu_wrappers_check.cu"), "-o", str(binary)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    for part in ("shapes", "fp8", "gemm", "mnmn"):  # one process each, so a hang names its part
        run = subprocess.run([str(binary), part], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0 and "ALL PASS" in run.stdout, run.stdout + run.stderr
