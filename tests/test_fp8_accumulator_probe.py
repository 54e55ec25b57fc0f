"""benchmarks/fp8_accumulator_probe.py without a GPU: its exact sums are exact, its bit sweep reads the
retained bits of a known accumulator back, and its kernel compiles to the fp8 and bf16 tensor-core
instructions it claims to probe."""

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ptxbench.errors import ToolchainMissing
from ptxbench.toolchain.discover import find_toolchain

from .conftest import repo_script

tool = repo_script("benchmarks/fp8_accumulator_probe.py")


def test_the_e4m3_table_is_torchs_float8_e4m3fn() -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8_e4m3fn")
    theirs = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).double().numpy()
    assert np.array_equal(tool.E4M3, theirs, equal_nan=True)
    values = np.random.default_rng(0).standard_normal(4096) * 40
    ours = tool.E4M3[tool.to_e4m3(values)]
    assert np.array_equal(ours, torch.tensor(values).to(torch.float8_e4m3fn).double().numpy())


@pytest.mark.parametrize("name", tool.DATASETS)
def test_the_fp64_sums_are_the_exact_integer_sums(name: str) -> None:
    a, b = tool.dataset(name, 1024, np.random.default_rng(1))
    want, _ = tool.exact(a, b)
    scaled_a, scaled_b = (tool.E4M3[a] * 512).astype(np.int64), (tool.E4M3[b] * 512).astype(np.int64)
    assert np.array_equal(np.einsum("pmk,pnk->pmn", scaled_a, scaled_b).astype(np.float64) * 2.0 ** -18, want)


class EmulatedDriver:
    """The probe's driver with the model accumulator in place of the GPU."""

    def __init__(self, bits: int) -> None:
        self.bits = bits

    def run(self, kernel: str, a: np.ndarray, b: np.ndarray, k: int, promote: int) -> np.ndarray:
        if kernel == "probe_bf16":
            va, vb = ((x.astype(np.uint32) << 16).view(np.float32).astype(np.float64) for x in (a, b))
            step = 16
        else:
            va, vb, step = tool.E4M3[a], tool.E4M3[b], 32
        assert promote == 0
        return tool.emulate(va[:, :, None, :] * vb[:, None, :, :], step, self.bits)


@pytest.mark.parametrize(("mode", "bits"), [(tool.MODES[0], 14), (tool.MODES[0], 11), (tool.MODES[-1], 24)])
def test_the_bit_sweep_reads_back_the_model_accumulators_bits(mode: Any, bits: int) -> None:
    found = tool.sweep(EmulatedDriver(bits), mode)  # type: ignore[arg-type]
    assert {row["retained_bits"] for row in found.values()} == {bits}
    for placement in tool.PLACEMENTS:
        a, b, large, small = tool.sweep_inputs(placement, mode[3])
        assert np.array_equal(tool.exact(a, b)[0], large + small)


def test_the_model_fit_finds_the_accumulator_that_made_the_results() -> None:
    a, b = tool.dataset("task_normal", 128, np.random.default_rng(2))
    a, b = a[:1, :8], b[:1]
    got = tool.emulate(tool.E4M3[a][:, :, None, :] * tool.E4M3[b][:, None, :, :], 32, 13, "down", "rn", "sum")
    best = tool.fit_model([(a, b, got)], 32)[0]
    assert (best["bits"], best["truncation"], best["cut"], best["match"]) == (13, "down", "sum", 1.0)


def test_more_bits_give_smaller_attention_errors_on_every_workload() -> None:
    narrow, wide = tool.derive_attention(12, queries=2), tool.derive_attention(20, queries=2)
    assert [r["workload"] for r in narrow] == [w.name for w in tool_task().workloads]
    assert all(n["max_score_error"] > w["max_score_error"] for n, w in zip(narrow, wide))


def tool_task():  # type: ignore[no-untyped-def]
    from ptxbench.tasks.loader import get_task

    return get_task("attention_fp8_fwd")


def test_the_kernel_compiles_to_fp8_and_bf16_wgmma(tmp_path: Path) -> None:
    try:
        cuobjdump = find_toolchain().path("cuobjdump")
    except ToolchainMissing as missing:
        pytest.skip(str(missing))
    cubin = tmp_path / "probe.cubin"
    cubin.write_bytes(tool.build(tmp_path))
    sass = subprocess.run([str(cuobjdump), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
    assert "QGMMA.64x128x32.F32.E4M3.E4M3" in sass
    assert "HGMMA.64x128x16.F32.BF16" in sass


RESULTS = Path(tool.OUT) / "fp8_accumulator_h100_80gb_hbm3.json"


def test_the_committed_results_file_is_the_render_of_its_json() -> None:
    import json

    result = json.loads(RESULTS.read_text())  # as a GPU run writes it, or as --render does
    written = RESULTS.with_suffix(".md").read_text()
    assert written in (tool.markdown(result), tool.markdown(result, rendered_from=RESULTS.name))


def test_cancelled_sums_show_no_figures_relative_to_the_result() -> None:
    import json

    lines = tool.markdown(json.loads(RESULTS.read_text())).splitlines()
    cancelled = [line for line in lines if line.startswith("| task_normal |")]
    assert cancelled and all(line.endswith("| n/a | n/a | n/a | n/a |") for line in cancelled)
    dominated = [line for line in lines if line.startswith("| outlier_plus_small |")]
    assert dominated and not any("n/a" in line for line in dominated)


def test_fewer_bits_give_larger_single_score_errors() -> None:
    narrow, wide = (tool.derive_scores(bits, samples=400, chunk=200) for bits in (12, 20))
    assert narrow["dominated"] == wide["dominated"] > 0  # the same draws
    assert narrow["max_relative_dominant_error"] > 16 * wide["max_relative_dominant_error"]
    assert narrow["max_abs_score_error"] > 16 * wide["max_abs_score_error"]
