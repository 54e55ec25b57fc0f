"""benchmarks/softmax_row_scaling.py: the library it builds is the reference softmax, built by the
harness's own build step and exporting the task's entry point, so a GPU run measures the committed
kernel as the evaluator runs it."""

from pathlib import Path

import pytest

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.discover import find_toolchain
from ptxbench.kernels import reference_folder

from .conftest import repo_script

tool = repo_script("benchmarks/softmax_row_scaling.py")


def test_it_builds_the_reference_softmax_with_its_entry_point(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    try:
        find_toolchain().path("nvcc")
    except ToolchainMissing as missing:
        pytest.skip(str(missing))
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path))
    assert tool.KERNEL == reference_folder("sm_90a") / "softmax.cu"
    shared_object = tool.build()
    assert shared_object.is_file() and shared_object.is_relative_to(tmp_path)


def test_the_default_rows_straddle_whole_waves_of_the_30_cluster_plan() -> None:
    waves = {rows / 30 for rows in tool.ROWS}
    assert 16.0 in waves and 18.0 in waves and any(not w.is_integer() for w in waves)
