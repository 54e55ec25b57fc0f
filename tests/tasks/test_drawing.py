"""Drawing inputs: one allocation per tensor filled in bounded blocks, the same values from one seed
however many blocks a tensor takes, and references that keep no extra copies of the largest tensor.

Memory is measured in a fresh process from the kernel's peak resident set (VmHWM, reset through
/proc/self/clear_refs), so the count includes every temporary torch allocates, not only Python's.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tasks import reference  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.model import DType, InputInit, TensorSpec  # noqa: E402

MIB = 1 << 20


def _spec(init: InputInit, shape: list[str | int], dtype: DType = DType.BF16) -> TensorSpec:
    return TensorSpec(name="X", dtype=dtype, shape=shape, description="test input", init=init)


def _drawn(spec: TensorSpec, seed: int, chunk_bytes: int | None = None) -> "torch.Tensor":
    generator = torch.Generator().manual_seed(seed)
    return reference._draw(spec, {}, generator, "cpu", chunk_bytes=chunk_bytes)


OUTLIERS = InputInit(scale=2.0, outlier_fraction=0.01, outlier_scale=10.0)
OFFSET_ROWS = InputInit(scale=1.0, outlier_fraction=0.01, outlier_scale=4.0, row_offset=112.0,
                        row_offset_fraction=0.25)


@pytest.mark.parametrize(("shape", "chunk_bytes"), [([64, 1000], 16 * 1000 * 3), ([4, 10000], 16 * 999)],
                         ids=["whole-rows-per-block", "pieces-of-a-row"])
def test_a_tensor_of_many_blocks_is_drawn_the_same_from_one_seed_and_filled_everywhere(
        shape: list[int], chunk_bytes: int) -> None:
    """Blocks of three rows, and rows cut into eleven pieces: the same seed gives the same tensor, another
    seed another, every block is drawn (no element left as allocated), and the offset covers whole rows."""
    spec = _spec(OFFSET_ROWS, shape)
    first, again, other = _drawn(spec, 5, chunk_bytes), _drawn(spec, 5, chunk_bytes), _drawn(spec, 6, chunk_bytes)
    assert torch.equal(first, again) and not torch.equal(first, other)
    values = first.float()
    assert torch.isfinite(values).all()
    offsets = values.median(dim=1).values
    shifted = (offsets - 112).abs() < 1
    assert shifted.sum() == max(1, round(0.25 * shape[0])) and ((offsets.abs() < 1) | shifted).all()
    centred = values - torch.where(shifted, 112.0, 0.0)[:, None]
    pieces = centred.reshape(-1).split(chunk_bytes // 16)
    assert all(0.7 < float(piece.std()) < 1.6 for piece in pieces), "a block was not drawn from the distribution"
    share = float((centred.abs() > 4.5).float().mean())  # beyond 4.5 sigma: nearly all of them outliers
    assert 0.002 < share < 0.02


def test_a_tensor_of_one_block_is_drawn_as_the_whole_tensor_was() -> None:
    """The values for a seed did not change where a tensor fits in one block: the same draws, in the same
    order, as the whole-tensor formula (values, then the outlier mask, both in fp32, then the dtype)."""
    spec = _spec(OUTLIERS, [37, 128])
    generator = torch.Generator().manual_seed(9)
    values = torch.randn(37, 128, generator=generator) * 2.0
    mask = torch.rand(37, 128, generator=generator) < 0.01
    expected = torch.where(mask, values * 10.0, values).to(torch.bfloat16)
    assert torch.equal(_drawn(spec, 9), expected)
    for init, formula in ((InputInit(kind="uniform", scale=3.0), lambda u: (u * 2 - 1) * 3.0),
                          (InputInit(kind="positive", scale=0.05), lambda u: (0.5 + u) * 0.05)):
        generator = torch.Generator().manual_seed(9)
        wanted = formula(torch.rand(5, 64, generator=generator))
        assert torch.equal(_drawn(_spec(init, [5, 64], DType.F32), 9), wanted)


def test_row_offset_and_its_fraction_come_together() -> None:
    with pytest.raises(ValueError, match="set together"):
        InputInit(row_offset=100.0)
    with pytest.raises(ValueError, match="set together"):
        InputInit(row_offset_fraction=0.5)
    with pytest.raises(ValueError, match="derived"):
        InputInit(kind="derived", row_offset=1.0, row_offset_fraction=0.5)


def test_a_task_without_row_offsets_hashes_as_before_and_one_with_them_differs() -> None:
    """The new init fields enter a task's hash only where they are set (softmax), so other tasks' stored
    results still match their task."""
    task = get_task("rmsnorm")
    data = task.model_dump(mode="json", exclude={"content_hash"})
    assert data["inputs"][0]["init"]["row_offset"] == 0
    x = task.inputs[0]
    shifted = task.model_copy(update={"inputs": [x.model_copy(update={"init": x.init.model_copy(update={
        "row_offset": 100.0, "row_offset_fraction": 0.5})}), *task.inputs[1:]]})
    assert shifted.content_hash != task.content_hash
    assert type(task).model_validate_json(task.model_dump_json()).content_hash == task.content_hash


# ---- Memory, in a fresh process -------------------------------------------------------------------------

_MEASURE = r"""
import json, sys
import torch
from ptxbench.tasks import reference
from ptxbench.tasks.loader import get_task

def peak_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024

def reset():
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")

def resident_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

task = get_task("moe_grouped_gemm")
sizes = json.loads(sys.argv[1])
reference.DRAW_CHUNK_BYTES = int(sys.argv[2])
reference.make_inputs(task, {"T": 8, "E": 2, "N": 64, "K": 64}, seed=0)  # warm: first calls allocate lazily
reference.run_reference(task, dict(reference.make_inputs(task, {"T": 8, "E": 2, "N": 64, "K": 64}, seed=0)),
                        {"T": 8, "E": 2, "N": 64, "K": 64})
reset(); before = resident_mib()
inputs = dict(reference.make_inputs(task, sizes, seed=1))
drawn = peak_mib() - before
reset(); before = resident_mib()
reference.run_reference(task, inputs, sizes)
referenced = peak_mib() - before
print(json.dumps({"draw": drawn, "reference": referenced,
                  "inputs": sum(t.numel() * t.element_size() for t in inputs.values()) / 2 ** 20}))
"""


def _measured(sizes: dict[str, int], chunk_bytes: int) -> dict[str, float]:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pytest.skip("the peak resident set cannot be reset here (/proc/self/clear_refs)")
    done = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(sizes), str(chunk_bytes)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_moe_inputs_and_reference_need_little_beside_the_weights() -> None:
    """DeepSeek-V3's 256 experts scaled down to 64 MiB of weights and 8 MiB blocks: drawing takes the inputs
    and one block's temporaries (drawing W whole in fp32 took four times W's size: its fp32 values and
    their scaled copy), and the reference, expert by expert, far less than one fp32 copy of W (128 MiB)."""
    sizes = {"T": 256, "E": 64, "N": 512, "K": 1024}  # W: 64 x 512 x 1024 bf16 = 64 MiB
    measured = _measured(sizes, 8 * MIB)
    assert 64 < measured["inputs"] < 65
    assert measured["draw"] < measured["inputs"] + 8 + 16, measured  # + one block's temporaries + slack
    assert measured["reference"] < 32, measured
