"""A NumPy model of the attention_bwd reference kernel (kernels/reference/sm_90a/attention_bwd.cu), step for
step, checked against the task's reference under the task's tolerance: the logic the GPU cannot be asked about
here (which query tiles a dK/dV CTA walks and which key tiles a dQ warpgroup computes, where the causal and
length masks apply, LSE = +inf and delta = 0 standing in for queries past S, the scale folded into base-2
exponentials, P and dS rounded to bf16 as register A operands, the split of dK/dV columns between the two
warpgroups at D = 256, rows >= S never written) is exercised on partial tiles, causal or not, at every head
dimension.

It works in the kernel's register layouts (the forward model's helpers): scores and accumulators live as
[128 threads][N / 2 registers] placed by the wgmma accumulator layout, and P and dS reach their products through
the documented A-fragment layout, so a slip in the index formulas (a query's LSE read by row instead of column)
shows as a wrong answer. A second model runs the producers and both consumer warpgroups of each kernel against
their mbarrier rings and checks that they finish. What it cannot show: descriptors, swizzles and TMA boxes,
which only a GPU run checks (`ptxbench eval --gold`)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ptxbench.kernels import reference_folder
from tests.test_reference_attention_model import Ring, a_fragment_matrix, acc_cols, acc_rows, bf16, parity_wait, \
    to_acc

KERNEL = reference_folder("sm_90a") / "attention_bwd.cu"
LOG2E = np.float32(1.4426950408889634)


def _per_d(source: str, name: str) -> dict[int, int]:
    """A constant spelled `NAME = D == a ? x : y` or `NAME = D == a ? x : (D == b ? y : z)`, per head dim."""
    two = re.search(rf"int {name} = D == (\d+) \? (\d+) : \(D == (\d+) \? (\d+) : (\d+)\);", source)
    if two:
        a, x, b, y, z = (int(g) for g in two.groups())
        return {d: x if d == a else (y if d == b else z) for d in (64, 128, 256)}
    one = re.search(rf"int {name} = D == (\d+) \? (\d+) : (\d+);", source)
    assert one, f"the kernel's {name} changed form: update this model with it"
    a, x, y = (int(g) for g in one.groups())
    return {d: x if d == a else y for d in (64, 128, 256)}


def _tiling() -> tuple[dict[str, object], dict[str, object]]:
    """The dK/dV and dQ kernels' tile constants as the kernel's source spells them."""
    source = KERNEL.read_text()
    key_part = source[source.index("struct KeyConfig"):source.index("struct KeyShared")]
    query_part = source[source.index("struct QueryConfig"):source.index("struct QueryShared")]
    key_bn = re.search(r"int BN = SPLIT \? (\d+) : (\d+);", key_part)
    split = re.search(r"bool SPLIT = D == (\d+);", key_part)
    bq = re.search(r"int BQ = (\d+);", key_part)
    bm = re.search(r"constexpr int BM = (\d+);", source)
    assert key_bn and split and bq and bm, "the kernel's tile constants changed form: update this model with them"
    key = {"split_d": int(split[1]), "bn_split": int(key_bn[1]), "bn": int(key_bn[2]), "bq": int(bq[1]),
           "stages": _per_d(key_part, "STAGES")}
    query = {"bm": int(bm[1]), "bn": _per_d(query_part, "BN"), "stages": _per_d(query_part, "STAGES")}
    return key, query


KEY, QUERY = _tiling()


def pack(acc: np.ndarray) -> np.ndarray:
    """Registers 8k .. 8k+7 of an accumulator, pairwise to bf16, are k16 block k of an A operand."""
    return bf16(acc).reshape(128, acc.shape[1] // 8, 4, 2)


def rows_of(x: np.ndarray, first: int, count: int) -> np.ndarray:
    """A TMA box of `count` rows from `first`: zeros past the end of the head."""
    box = np.zeros((count, x.shape[1]), dtype=np.float32)
    box[: max(0, min(count, x.shape[0] - first))] = x[first:first + count]
    return box


def key_tiles(D: int) -> tuple[bool, int, int]:
    split = D == KEY["split_d"]
    bn = KEY["bn_split"] if split else KEY["bn"]
    return split, bn, (D // 2 if split else D)


def model_head(q, k, v, o, do, lse, causal: bool, workspace=None):  # type: ignore[no-untyped-def]
    """dQ, dK, dV (bf16 values as float32) of one head, following the kernel's three launches. ``workspace``: a
    model of a dQ accumulated by the dK/dV kernel (``step(k0, kw, q0, ds)`` with each step's dSᵀ accumulator,
    then ``result(scale)``), which stands in for the dQ kernel."""
    S, D = q.shape
    scale_log2 = np.float32(1.4426950408889634 / math.sqrt(D))
    scale = np.float32(1.0 / math.sqrt(D))
    # 1. delta per query row, in fp32.
    delta = (do.astype(np.float32) * o.astype(np.float32)).sum(axis=1, dtype=np.float32)

    # 2. dK and dV. Queries past S: LSE = +inf (P = 0) and delta = 0, from the row warp.
    split, bn, cols = key_tiles(D)
    bq = KEY["bq"]
    dK = np.full((S, D), np.nan, dtype=np.float32)  # the harness's outputs start as garbage
    dV = np.full((S, D), np.nan, dtype=np.float32)
    for k_tile in range(-(-S // bn)):
        k0 = k_tile * bn
        q_first = k0 // bq if causal else 0
        q_tiles = -(-S // bq) - q_first
        assert q_tiles >= 1
        for half in range(2):
            kw = 0 if split else 64 * half
            col0 = half * cols if split else 0
            kw0 = k0 + kw
            k_w, v_w = rows_of(k, kw0, 64), rows_of(v, kw0, 64)
            dv = np.zeros((128, cols // 2), dtype=np.float32)
            dk = np.zeros((128, cols // 2), dtype=np.float32)
            for t in range(q_tiles):
                q0 = (q_first + t) * bq
                q_t, do_t = rows_of(q, q0, bq), rows_of(do, q0, bq)
                row_ids = q0 + np.arange(bq)
                lse2 = np.where(row_ids < S, np.pad(lse, (0, bq))[row_ids] * LOG2E, np.float32(np.inf))
                dlt = np.where(row_ids < S, np.pad(delta, (0, bq))[row_ids], np.float32(0))
                sacc = to_acc(k_w @ q_t.T).astype(np.float32)      # Sᵀ: key rows, query columns
                dpacc = to_acc(v_w @ do_t.T).astype(np.float32)    # dPᵀ
                col = acc_cols(bq)
                x = sacc * scale_log2 - lse2[col]
                if causal and q0 < kw0 + 63:  # the tile crosses this warpgroup's diagonal
                    x = np.where(kw0 + acc_rows(bq) > q0 + col, np.float32(-np.inf), x)
                p = np.exp2(x).astype(np.float32)
                dv += to_acc(a_fragment_matrix(pack(p)) @ do_t[:, col0:col0 + cols]).astype(np.float32)
                ds = (p * (dpacc - dlt[col])).astype(np.float32)
                dk += to_acc(a_fragment_matrix(pack(ds)) @ q_t[:, col0:col0 + cols]).astype(np.float32)
                if workspace is not None:
                    workspace.step(k0, kw, q0, ds)
            if kw0 >= S:  # a warpgroup whose keys all lie past S stores nothing
                continue
            out_rows = kw0 + acc_rows(cols)
            keep = out_rows < S  # the TMA store clips rows >= S
            out_cols = col0 + acc_cols(cols)
            dK[out_rows[keep], out_cols[keep]] = bf16(dk * scale)[keep]
            dV[out_rows[keep], out_cols[keep]] = bf16(dv)[keep]
    if workspace is not None:
        return workspace.result(scale), dK, dV

    # 3. dQ, each warpgroup's rows' delta recomputed from O and dO (the parked values are being overwritten).
    bm, bnq = QUERY["bm"], QUERY["bn"][D]
    dQ = np.full((S, D), np.nan, dtype=np.float32)
    for q_tile in range(-(-S // bm)):
        q0 = q_tile * bm
        kv_tiles = -(-(min(S, q0 + bm) if causal else S) // bnq)
        for half in range(2):
            q0w = q0 + 64 * half
            if q0w >= S:
                continue
            tiles = min(kv_tiles, -(-min(S, q0w + 64) // bnq)) if causal else kv_tiles
            assert 1 <= tiles <= kv_tiles
            row = q0w + acc_rows(bnq)
            lse2 = np.where(row < S, np.pad(lse, (0, bm))[row] * LOG2E, np.float32(np.inf))
            dlt = np.where(row < S, np.pad(delta, (0, bm))[row], np.float32(0))
            q_h, do_h = rows_of(q, q0w, 64), rows_of(do, q0w, 64)
            dq = np.zeros((128, D // 2), dtype=np.float32)
            for j in range(tiles):
                k0 = j * bnq
                k_j, v_j = rows_of(k, k0, bnq), rows_of(v, k0, bnq)
                sacc = to_acc(q_h @ k_j.T).astype(np.float32)
                dpacc = to_acc(do_h @ v_j.T).astype(np.float32)
                x = sacc * scale_log2 - lse2
                if k0 + bnq > S or (causal and k0 + bnq - 1 > q0w):
                    key = k0 + acc_cols(bnq)
                    x = np.where((key >= S) | (causal & (key > row)), np.float32(-np.inf), x)
                p = np.exp2(x).astype(np.float32)
                ds = (p * (dpacc - dlt)).astype(np.float32)
                dq += to_acc(a_fragment_matrix(pack(ds)) @ k_j).astype(np.float32)
            out_rows = q0w + acc_rows(D)
            keep = out_rows < S
            dQ[out_rows[keep], acc_cols(D)[keep]] = bf16(dq * scale)[keep]
    return dQ, dK, dV


# S = 1 too: there every dS is dO·V − dO·O with O = V, zero but for rounding (the task's tolerance has a term for
# that cancellation). Each length (one, shorter than a tile, one short of a tile, one tile, one past, ragged) at
# each head dim, causal or not, but not every combination: the suite stays fast.
CASES = [(64, 1, 0), (64, 2, 1), (64, 17, 1), (64, 63, 0), (64, 65, 1), (64, 200, 0), (128, 2, 0), (128, 64, 1),
         (128, 127, 0), (128, 200, 1), (256, 1, 1), (256, 63, 1), (256, 65, 0), (256, 127, 1), (256, 200, 0)]


@pytest.mark.parametrize(("D", "S", "causal"), CASES, ids=[f"d{d}-s{s}-c{c}" for d, s, c in CASES])
def test_the_kernels_steps_give_the_tasks_answer(D: int, S: int, causal: int) -> None:
    torch = pytest.importorskip("torch")
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs, run_reference

    task = get_task("attention_bwd")
    sizes = {"B": 1, "H": 1, "S": S, "D": D, "causal": causal}
    inputs = make_inputs(task, sizes, seed=11)
    q, k, v, o, do = (inputs[name].float().numpy()[0, 0] for name in ("Q", "K", "V", "O", "dO"))
    lse = inputs["LSE"].float().numpy()[0, 0]
    dQ, dK, dV = model_head(q, k, v, o, do, lse, bool(causal))
    actual = {name: torch.from_numpy(x[None, None]).to(torch.bfloat16)
              for name, x in (("dQ", dQ), ("dK", dK), ("dV", dV))}
    for comparison in compare_outputs(task, actual, run_reference(task, dict(inputs), sizes)):
        assert comparison.passed, comparison


def test_a_wrong_mask_is_caught() -> None:
    """The comparison above can fail: the model without the causal mask differs from the one with it."""
    rng = np.random.default_rng(0)
    q, k, v, o, do = (bf16(rng.standard_normal((100, 64)).astype(np.float32)) for _ in range(5))
    lse = np.full(100, 3.0, dtype=np.float32)
    masked = model_head(q, k, v, o, do, lse, causal=True)
    unmasked = model_head(q, k, v, o, do, lse, causal=False)
    for a, b in zip(masked, unmasked):
        assert not np.isnan(a).any() and not np.isnan(b).any()
        assert np.abs(a - b).max() > 0.1


# ---- the rings: producers and consumers against the mbarriers ---------------------------------------


def fill(ring: Ring, steps: int):  # type: ignore[no-untyped-def]
    """A producer (TMA thread or the row warp): wait for each stage's release, then complete its full phase."""
    for j in range(steps):
        stage, use = j % ring.stages, j // ring.stages
        while use > 0 and not parity_wait(ring.empty[stage], use - 1):  # a fresh stage counts as released
            yield
        ring.full[stage] += 1


def drain(rings: list[Ring], steps: int):  # type: ignore[no-untyped-def]
    """A consumer warpgroup: each step waits for every ring's stage in turn, then releases them all."""
    for j in range(steps):
        stage = j % rings[0].stages
        for ring in rings:
            while not parity_wait(ring.full[stage], j // ring.stages):
                yield
        for ring in rings:
            ring.release(stage)


def run_agents(agents: list, order: list[int]) -> list[bool]:  # type: ignore[type-arg]
    done = [False] * len(agents)
    for _ in range(100_000):
        for a in order:
            if not done[a]:
                done[a] = next(agents[a], StopIteration) is StopIteration
        if all(done):
            break
    return done


ORDERS = ([0, 1, 2, 3], [3, 2, 1, 0], [1, 2, 3, 0], [0, 0, 0, 1, 2, 3], [2, 2, 2, 3, 0, 1], [3, 3, 3, 1, 0, 2])


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("S", [2, 64, 200, 1000])
@pytest.mark.parametrize("causal", [0, 1])
def test_the_rings_never_deadlock_or_alias_a_phase(D: int, S: int, causal: int) -> None:
    _, bn, _ = key_tiles(D)
    bq, stages = KEY["bq"], KEY["stages"][D]
    for k_tile in range(-(-S // bn)):  # dK/dV: the TMA thread, the row warp, two consumers walking every tile
        q_tiles = -(-S // bq) - ((k_tile * bn) // bq if causal else 0)
        for order in ORDERS:
            qdo, row = Ring(stages, 2), Ring(stages, 2)
            done = run_agents([fill(qdo, q_tiles), fill(row, q_tiles), drain([qdo, row], q_tiles),
                               drain([qdo, row], q_tiles)], order)
            assert all(done), f"dK/dV deadlock: key tile {k_tile}, order {order}, done {done}"
            assert qdo.empty == qdo.full == row.full == row.empty and sum(qdo.full) == q_tiles
    bm, bnq, stages = QUERY["bm"], QUERY["bn"][D], QUERY["stages"][D]
    for q_tile in range(-(-S // bm)):  # dQ: the TMA thread and two consumers, each its own tiles then the rest
        q0 = q_tile * bm
        kv_tiles = -(-(min(S, q0 + bm) if causal else S) // bnq)
        for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 0, 0, 1, 2], [2, 2, 2, 0, 1]):
            kv = Ring(stages, 2)
            # Own tiles and skipped ones wait and release alike: the ring sees kv_tiles steps from each.
            done = run_agents([fill(kv, kv_tiles), drain([kv], kv_tiles), drain([kv], kv_tiles)], order)
            assert all(done), f"dQ deadlock: query tile {q_tile}, order {order}, done {done}"
            assert kv.empty == kv.full and sum(kv.full) == kv_tiles
