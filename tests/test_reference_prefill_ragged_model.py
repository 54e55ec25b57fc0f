"""A NumPy model of the prefill_gqa_ragged reference kernel (kernels/reference/sm_90a/prefill_gqa_ragged.cu): its
work list from the device indptr (sequence-major, each sequence's tiles of the longest sequence's size from the
last down, head units innermost; blocks past a sequence's end exiting), the packing of 2^p query heads of one kv head into a tile's rows (row r = token r >> p, head r % 2^p),
the Q parts a producer loads, the KV tiles each warpgroup computes, where masks apply and which rows are stored.
Run on the task's own inputs and judged by the task's comparison, on ragged batches with sequences of length 1 and
on every packing. What it cannot show: descriptors, swizzles, TMA boxes and mbarrier phases (only a GPU run does)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ptxbench.kernels import reference_folder

KERNEL = reference_folder("sm_90a") / "prefill_gqa_ragged.cu"


def _constant(name: str) -> int:
    """A `constexpr int NAME = <literal>;` or `= <literal> * <constant>;` of the kernel."""
    found = re.search(rf"^constexpr int {name} = (\d+)(?: \* (\w+))?;", KERNEL.read_text(), re.MULTILINE)
    assert found, name
    return int(found.group(1)) * (_constant(found.group(2)) if found.group(2) else 1)


ROWS, BKV, MAX_PACK = _constant("ROWS"), _constant("BKV"), _constant("MAX_PACK")
SCALE_LOG2 = 1.4426950408889634 / math.sqrt(128)


def log_pack(group: int) -> int:
    """The host's choice: the largest power of two dividing the group, at most MAX_PACK."""
    p = 0
    while (1 << (p + 1)) <= MAX_PACK and group % (1 << (p + 1)) == 0:
        p += 1
    return p


def warpgroup(q: np.ndarray, K: np.ndarray, V: np.ndarray, start: int, length: int, t0: int, p: int,
              tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """One consumer warpgroup: 64 packed rows from token t0, `tiles` KV tiles with the kernel's masking rule and
    its online softmax in base 2. Returns O / l and LSE per row."""
    total = K.shape[0]
    token = t0 + (np.arange(64) >> p)
    m, l, o = np.full(64, -np.inf), np.zeros(64), np.zeros((64, 128))
    for j in range(tiles):
        rows = start + j * BKV + np.arange(BKV)
        inside = rows < total  # TMA's zero fill past T; rows past the sequence's end read the next one's keys
        k = np.where(inside[:, None], K[np.minimum(rows, total - 1)], 0.0)
        v = np.where(inside[:, None], V[np.minimum(rows, total - 1)], 0.0)
        s = q @ k.T
        key = j * BKV + np.arange(BKV)
        hidden = (key[None, :] > token[:, None]) | (key[None, :] >= length)
        if j * BKV + BKV > length or j * BKV + BKV - 1 > t0:  # the kernel's needs_mask
            s = np.where(hidden, -np.inf, s)
        else:
            assert not hidden.any(), "a tile the kernel leaves unmasked hides keys"
        m_new = np.maximum(m, s.max(axis=1) * SCALE_LOG2)
        m_use = np.where(m_new == -np.inf, 0.0, m_new)
        alpha = np.exp2(m - m_use)
        prob = np.exp2(s * SCALE_LOG2 - m_use[:, None])
        l, o, m = l * alpha + prob.sum(axis=1), o * alpha[:, None] + prob @ v, m_new
    return o / l[:, None], (m + np.log2(l)) * math.log(2.0)


def model(Q: np.ndarray, K: np.ndarray, V: np.ndarray, indptr: list[int], S: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole grid, block by block, as the kernel walks it; every (token, head) must be stored exactly once."""
    total, heads = Q.shape[:2]
    group = heads // K.shape[1]
    p = log_pack(group)
    tokens, units, batch = ROWS >> p, heads >> p, len(indptr) - 1
    n_tiles = -(-S // tokens)
    O, LSE = np.full(Q.shape, np.nan), np.full((total, heads), np.nan)
    writes = np.zeros((total, heads), dtype=int)
    for t in range(n_tiles * batch * units):
        unit, seq, tile = t % units, t // units // n_tiles, n_tiles - 1 - (t // units) % n_tiles
        start, length = indptr[seq], indptr[seq + 1] - indptr[seq]
        q0 = tile * tokens
        if q0 >= length:
            continue
        head0 = unit << p
        kvh = head0 // group
        kv_tiles = -(-min(length, q0 + tokens) // BKV)
        per_warpgroup = 64 >> p
        parts = min(2, -(-(length - q0) // per_warpgroup))
        for consumer in range(2):
            t0 = q0 + consumer * per_warpgroup
            assert (t0 < length) == (consumer < parts), "Q loaded exactly for the warpgroups that compute"
            if t0 >= length:
                continue
            rows = start + t0 + (np.arange(64) >> p)
            heads_of = head0 + (np.arange(64) & ((1 << p) - 1))
            q = np.where((rows < total)[:, None], Q[np.minimum(rows, total - 1), heads_of], 0.0)
            tiles = min(kv_tiles, -(-min(length, t0 + per_warpgroup) // BKV))
            o, lse = warpgroup(q, K[:, kvh], V[:, kvh], start, length, t0, p, tiles)
            keep = rows < start + length
            O[rows[keep], heads_of[keep]] = o[keep]
            LSE[rows[keep], heads_of[keep]] = lse[keep]
            np.add.at(writes, (rows[keep], heads_of[keep]), 1)
    assert (writes == 1).all(), "every (token, head) stored exactly once"
    return O, LSE


# (B, S, DS, H, KH): a length-1 sequence in ragged batches at packings 8, 4, 2 and 1, one token alone, a group of
# 16 (two head units per kv head), 16- and 32-token tiles' edges, and the 128-key tile's.
CASES = [(3, 129, 64, 32, 8), (1, 1, 0, 32, 8), (2, 2, 1, 8, 1), (4, 130, 43, 3, 3), (5, 257, 64, 12, 2),
         (3, 300, 149, 32, 2), (4, 129, 1, 32, 8), (3, 33, 1, 32, 8), (4, 17, 1, 64, 8)]


@pytest.mark.parametrize(("B", "S", "DS", "H", "KH"), CASES, ids=[f"b{c[0]}-s{c[1]}-ds{c[2]}-h{c[3]}-kh{c[4]}"
                                                                    for c in CASES])
def test_the_kernels_steps_give_the_tasks_answer(B: int, S: int, DS: int, H: int, KH: int) -> None:
    torch = pytest.importorskip("torch")
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs, run_reference

    task = get_task("prefill_gqa_ragged")
    sizes = {"B": B, "S": S, "DS": DS, "T": B * S - DS * B * (B - 1) // 2, "H": H, "KH": KH}
    inputs = make_inputs(task, sizes, seed=3)
    Q, K, V = (inputs[name].float().numpy().astype(np.float64) for name in ("Q", "K", "V"))
    O, LSE = model(Q, K, V, inputs["seq_indptr"].tolist(), S)
    actual = {"O": torch.from_numpy(O).to(torch.bfloat16), "LSE": torch.from_numpy(LSE).float()}
    for comparison in compare_outputs(task, actual, run_reference(task, dict(inputs), sizes)):
        assert comparison.passed, comparison


def test_a_top_left_mask_on_the_packed_rows_is_caught() -> None:
    """The comparison can fail: reading the packed row index as the token (no >> p) masks the wrong keys."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((64, 128)), rng.standard_normal((40, 128)), rng.standard_normal((40, 128))
    right, _ = warpgroup(q, k, v, start=0, length=40, t0=0, p=3, tiles=1)
    wrong, _ = warpgroup(q, k, v, start=0, length=40, t0=0, p=0, tiles=1)
    assert np.abs(right - wrong).max() > 0.1
