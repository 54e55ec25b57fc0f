"""The dq_workspace variant of attention_bwd (benchmarks/variants/attention_bwd.dq_workspace.cu) on the CPU: a NumPy
model of its dQ path, and what it builds to.

The model follows the dK/dV kernel's steps (tests/test_reference_attention_bwd_model.py) and adds what the variant
does with each step's dSᵀ: written as bf16 into the step's shared tile by the accumulator layout at the warpgroup's
key rows, multiplied by K per warpgroup (at D = 128 all 128 keys of the tile for its 64 columns, once both halves
are written; at D = 64 its own 64 keys for all columns), and added in fp32 into the workspace at rows < S, whose
final value times the scale is dQ. The atomics add in no set order, so the model's order is as good as any. What
it cannot show: the descriptors, the swizzle and the reductions on a GPU (`scripts/gpu_checks.sh variants_attention`
runs the variant on every workload)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.test_reference_attention_bwd_model import CASES, KEY, model_head, rows_of
from tests.test_reference_attention_model import acc_cols, acc_rows, bf16, to_acc

VARIANT = Path(__file__).resolve().parent.parent / "benchmarks" / "variants" / "attention_bwd.dq_workspace.cu"


def _shared_d() -> int:
    """The head dim at which both warpgroups' dSᵀ feed each one's dQ GEMM, as the variant spells it; the variant
    accumulates dQ wherever the warpgroups do not split the columns (not at D = 256)."""
    source = VARIANT.read_text()
    shared = re.search(r"bool DQ_SHARED = D == (\d+);", source)
    assert shared and "bool DQ = !SPLIT;" in source, "the variant's dQ plan changed form: update this model with it"
    return int(shared[1])


SHARED_D = _shared_d()


class DqWorkspace:
    """The variant's fp32 dQ workspace for one head (zeroed by the delta kernel)."""

    def __init__(self, k: np.ndarray, S: int, D: int, slab_of_half: tuple[int, int] = (0, 1)) -> None:
        self.k, self.S, self.D, self.slab_of_half = k, S, D, slab_of_half
        self.bn = KEY["bn"]
        self.accum = np.zeros((S, D), dtype=np.float32)
        self.tiles: dict[tuple[int, int], np.ndarray] = {}

    def step(self, k0: int, kw: int, q0: int, ds: np.ndarray) -> None:
        tile = self.tiles.setdefault((k0, q0), np.full((self.bn, 64), np.nan, dtype=np.float32))
        tile[kw + acc_rows(64), acc_cols(64)] = bf16(ds)  # the kernel's store of dsa: row kw + r, column c
        if self.D != SHARED_D:  # its own keys, every column
            self._add(q0, tile[kw:kw + 64].T @ rows_of(self.k, k0 + kw, 64), 0)

    def _add(self, q0: int, part: np.ndarray, col0: int) -> None:
        """red.global.add of a warpgroup's 64 x 64 part, from its accumulator registers, rows >= S skipped."""
        rows, cols, values = q0 + acc_rows(64), col0 + acc_cols(64), to_acc(part).astype(np.float32)
        keep = rows < self.S
        np.add.at(self.accum, (rows[keep], cols[keep]), values[keep])

    def result(self, scale: np.float32) -> np.ndarray:
        if self.D == SHARED_D:  # every key of the tile, this warpgroup's 64 columns
            for (k0, q0), tile in self.tiles.items():
                assert not np.isnan(tile).any(), "a warpgroup read dSᵀ rows the other had not written"
                keys = rows_of(self.k, k0, self.bn)
                for half in range(2):
                    slab = self.slab_of_half[half]
                    self._add(q0, tile.T @ keys[:, 64 * slab:64 * slab + 64], 64 * half)
        return bf16(self.accum * scale)


def _head(D: int, S: int, causal: int):  # type: ignore[no-untyped-def]
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs

    task = get_task("attention_bwd")
    sizes = {"B": 1, "H": 1, "S": S, "D": D, "causal": causal}
    inputs = make_inputs(task, sizes, seed=11)
    return task, sizes, inputs, [inputs[n].float().numpy()[0, 0] for n in ("Q", "K", "V", "O", "dO", "LSE")]


WORKSPACE_CASES = [case for case in CASES if case[0] != KEY["split_d"]]


@pytest.mark.parametrize(("D", "S", "causal"), WORKSPACE_CASES, ids=[f"d{d}-s{s}-c{c}" for d, s, c in WORKSPACE_CASES])
def test_the_variants_steps_give_the_tasks_answer(D: int, S: int, causal: int) -> None:
    torch = pytest.importorskip("torch")
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.reference import run_reference

    task, sizes, inputs, (q, k, v, o, do, lse) = _head(D, S, causal)
    dQ, dK, dV = model_head(q, k, v, o, do, lse, bool(causal), workspace=DqWorkspace(k, S, D))
    actual = {name: torch.from_numpy(x[None, None]).to(torch.bfloat16)
              for name, x in (("dQ", dQ), ("dK", dK), ("dV", dV))}
    for comparison in compare_outputs(task, actual, run_reference(task, dict(inputs), sizes)):
        assert comparison.passed, comparison


def test_a_warpgroup_multiplying_the_wrong_columns_of_k_is_caught() -> None:
    """The comparison above can fail: at D = 128 both warpgroups reading K's first 64 columns gives another dQ."""
    pytest.importorskip("torch")
    _, _, _, (q, k, v, o, do, lse) = _head(SHARED_D, 150, 0)
    right = model_head(q, k, v, o, do, lse, False, workspace=DqWorkspace(k, 150, SHARED_D))[0]
    wrong = model_head(q, k, v, o, do, lse, False, workspace=DqWorkspace(k, 150, SHARED_D, slab_of_half=(0, 0)))[0]
    assert np.abs(right - wrong).max() > 0.1


@pytest.mark.slow
def test_the_variant_builds_with_reductions_and_leaves_d256_as_it_was() -> None:
    """As the evaluator builds it: no spills and no ptxas warnings; at D = 64 and 128 the dK/dV kernel gains the dQ
    GEMM (D = 128: 8 more m64n64k16 steps over 128 keys; D = 64: 4 over 64) and 16 vector reductions, and no dQ
    kernel is built; at D = 256 the dK/dV kernel (one parameter more, its shared memory laid out around the dSᵀ
    tiles) and the dQ kernel issue the reference's tensor-core, TMA, barrier and exponential work (ptxas allots
    the rest of their instructions a little differently in this build: a handful of moves)."""
    from tests.test_kernel_variants import attention_bwd_static_kernels

    def kernels(spec: str) -> dict[str, dict[str, int]]:  # kernel name with its template argument -> SASS counts
        return {re.search(r"(attention_bwd_\w+(?:<\d+>)?)\(", k.demangled)[1]: k.sass  # type: ignore[index]
                for k in attention_bwd_static_kernels(spec)}

    reference, variant = kernels(""), kernels(f"@{VARIANT}")
    assert set(variant) == {"attention_bwd_delta<64>", "attention_bwd_delta<128>", "attention_bwd_delta<256>",
                            "attention_bwd_dkdv_sm90a<64>", "attention_bwd_dkdv_sm90a<128>",
                            "attention_bwd_dkdv_sm90a<256>", "attention_bwd_dq_sm90a<256>", "attention_bwd_dq_convert"}
    def pipeline(sass: dict[str, int]) -> dict[str, int]:  # the tensor-core, TMA, barrier and exponential work
        return {op: n for op, n in sass.items() if op.startswith(("HGMMA", "UTMA", "SYNCS", "BAR", "WARPGROUP", "MUFU",
                                                                  "RED"))}

    for name in ("attention_bwd_dkdv_sm90a<256>", "attention_bwd_dq_sm90a<256>"):
        assert pipeline(variant[name]) == pipeline(reference[name]), name
    hgmma, red = "HGMMA.64x64x16.F32.BF16", "REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU"
    for d, steps in ((64, 4), (128, 8)):
        name = f"attention_bwd_dkdv_sm90a<{d}>"
        assert variant[name][hgmma] == reference[name][hgmma] + steps, name
        assert variant[name][red] == 16 and red not in reference[name], name
