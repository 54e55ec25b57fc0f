"""Finding the toolchain, and a clear message when part of it is missing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain import discover

from ..conftest import FIXTURES


def test_finds_every_tool_here() -> None:
    toolchain = discover.find_toolchain()
    assert toolchain.missing() == []
    assert toolchain.tools["nvcc"].version and toolchain.tools["nvcc"].version.startswith("13.")
    assert "nvcc=" in toolchain.fingerprint()


def test_missing_tool_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    discover.find_toolchain()  # a search before the override is set does not answer for it
    monkeypatch.setenv("PTXBENCH_CUOBJDUMP", "/nonexistent/cuobjdump")
    with pytest.raises(ToolchainMissing, match="cuobjdump not found.*nvidia-cuda-cuobjdump"):
        discover.find_toolchain().path("cuobjdump")


def test_cli_reports_a_missing_compiler_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, PTXBENCH_NVCC="/nonexistent/nvcc", PTXBENCH_CACHE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "ptxbench", "check", str(FIXTURES / "gemm_mma_sync.cu")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "error: nvcc not found. Fix: install the CUDA toolkit" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_sanitizer_is_found_by_its_own_variable_and_its_absence_stops_nothing(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\necho 'Version 2025.3.1.0 (build 1)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PTXBENCH_COMPUTE_SANITIZER", str(fake))
    found = discover.find_toolchain().tools["compute-sanitizer"]
    assert (found.path, found.version, found.found_via) == (str(fake), "2025.3.1.0", "PTXBENCH_COMPUTE_SANITIZER")
    monkeypatch.setenv("PTXBENCH_COMPUTE_SANITIZER", str(tmp_path / "absent"))
    toolchain = discover.find_toolchain()
    assert not toolchain.has("compute-sanitizer") and "compute-sanitizer" not in toolchain.missing()
