"""The launch gate's PTX assembles for every benchmark target (the driver JIT-compiles the same text)."""

from __future__ import annotations

import subprocess

import pytest

from ptxbench.arch.registry import BENCHMARK_ARCHS
from ptxbench.evaluate.child.launch_gate import GATE_PTX, KERNEL_NAME
from ptxbench.toolchain.discover import find_toolchain


@pytest.mark.parametrize("arch", BENCHMARK_ARCHS, ids=lambda a: a.value)
def test_the_gate_kernel_assembles(arch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    toolchain = find_toolchain()
    if "ptxas" in toolchain.missing() or "cuobjdump" in toolchain.missing():
        pytest.skip("ptxas or cuobjdump is not installed")
    source, cubin = tmp_path / "gate.ptx", tmp_path / "gate.cubin"
    source.write_text(GATE_PTX)
    subprocess.run([toolchain.path("ptxas"), f"-arch={arch.value}", str(source), "-o", str(cubin)],
                   check=True, capture_output=True, text=True)
    sass = subprocess.run([toolchain.path("cuobjdump"), "-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout
    assert KERNEL_NAME in sass
    assert "GLOBALTIMER" in sass.upper()  # the deadline is read from the global timer
