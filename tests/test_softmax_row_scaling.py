"""benchmarks/softmax_row_scaling.py: the library it builds is the reference softmax, exporting the
task's entry point, so a GPU run measures the committed kernel and nothing else."""

import ctypes
import importlib.util
from pathlib import Path

import pytest

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.discover import find_toolchain

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("softmax_row_scaling", REPO / "benchmarks" / "softmax_row_scaling.py")
assert _spec and _spec.loader
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_it_builds_the_reference_softmax_with_its_entry_point(tmp_path: Path) -> None:
    try:
        nvcc = find_toolchain().path("nvcc")
    except ToolchainMissing as missing:
        pytest.skip(str(missing))
    assert tool.KERNEL == REPO / "kernels" / "reference" / "sm_90a" / "softmax.cu"
    try:
        library = tool.build(nvcc, tmp_path)
    except OSError as error:  # built, but this machine cannot load CUDA libraries
        assert (tmp_path / "softmax.so").is_file(), error
        return
    assert isinstance(library.softmax, ctypes._CFuncPtr)


def test_the_default_rows_straddle_whole_waves_of_the_30_cluster_plan() -> None:
    waves = {rows / 30 for rows in tool.ROWS}
    assert 16.0 in waves and 18.0 in waves and any(not w.is_integer() for w in waves)
