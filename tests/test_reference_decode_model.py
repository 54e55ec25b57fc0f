"""A NumPy model of the decode_gqa_paged reference kernel (kernels/reference/sm_90a/decode_gqa_paged.cu), step for
step, checked against the task's reference under the task's tolerance: the logic no GPU is asked about here (the
host's split of the page-padded tiles into one wave of equal chunks, the tile walk over the page table that skips
slots past a last page's fill, the 32-way sequence search, segments and their workspace slots c + b, sequences
one CTA holds whole written straight to O, the merge of the rest) on mixed lengths, pages of 16 and 64, groups of
4, 8, 16 and 20 query heads (two head blocks), a single sequence, and chunks that hold more than 32 sequences.

It works in the kernel's register layouts: K and V land in shared memory as TMA writes a box with the 128-byte
swizzle, the consumers' ldmatrix / ldmatrix.trans addresses are the kernel's formulas, the fragments of
mma.m16n8k16 follow the PTX ISA's layouts, rows are reduced over quads of lanes, and the unused slots of every
last page hold NaN, so a slip in an address, a swizzle, a mask or a fragment shows as a wrong or non-finite
answer. A last model runs the producer and the four consumer warps against the mbarrier ring (no deadlock, no
aliased phase). What it cannot show: the tensor maps' encoding, the TMA unit itself, the speed."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np
import pytest

from ptxbench.kernels import reference_folder

from .kernel_models import kernel_constants

KERNEL = reference_folder("sm_90a") / "decode_gqa_paged.cu"
LN2 = np.float32(math.log(2.0))
SCALE_LOG2 = np.float32(np.float32(1.4426950408889634) * np.float32(0.08838834764831845))


C = kernel_constants(KERNEL, *("kDim", "kTile", "kRows", "kConsumerWarps", "kStages", "kCtasPerSm", "kMinChunkTiles"))
TILE, ROWS, WARPS, STAGES = C["kTile"], C["kRows"], C["kConsumerWarps"], C["kStages"]
BOX = TILE * 128  # bytes of one TMA box: 16 rows of 64 dims

_L = np.arange(32)
_G, _T = _L // 4, _L % 4  # the PTX ISA's groupID and thread-in-group of a lane


def test_the_model_runs_the_kernels_constants() -> None:
    assert (C["kDim"], TILE, ROWS, WARPS) == (128, 16, 16, 4), "the fragment code below assumes these"
    assert STAGES >= 2 and C["kMinChunkTiles"] >= 1


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest, ties to even) and back, as __floats2bfloat162_rn does (NaN stays NaN)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


# ---- the host and the walk ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Split:
    chunk: int
    splits: int


def choose_split(tiles: int, columns: int, resident: int) -> Split:
    want = max(resident // columns, 1)
    chunk = max(-(-tiles // want), C["kMinChunkTiles"])
    return Split(chunk, -(-tiles // chunk))


def find_sequence(indptr: list[int], B: int, p: int) -> int:
    """The kernel's 32-way warp search: the last b in [0, B) with indptr[b] <= p."""
    lo, hi = 0, B
    while hi - lo > 1:
        step = -(-(hi - lo) // 32)
        count = sum(1 for lane in range(32) if lo + lane * step < hi and indptr[lo + lane * step] <= p)
        assert count >= 1
        lo += (count - 1) * step
        hi = min(hi, lo + step)
    return lo


@dataclass(frozen=True)
class Tile:
    tile: int
    b: int
    p: int        # page-list position
    sub: int      # 16-slot block within the page
    key0: int     # first key in the sequence
    valid: int    # keys of the sequence in the tile
    ends_segment: bool
    whole_sequence: bool


def walk(indptr: list[int], last: list[int], P: int, t0: int, t1: int) -> list[Tile]:
    """TileWalk: the chunk's tiles that hold keys, in order (the producer and every consumer warp walk alike)."""
    B, per_page = len(last), P // TILE
    b = find_sequence(indptr, B, t0 // per_page)
    first_page, end_page = indptr[b], indptr[b + 1]
    n = (end_page - first_page - 1) * P + last[b]
    tiles = []
    for tile in range(t0, t1):
        p, sub = tile // per_page, tile % per_page
        while p >= end_page and b + 1 < B:
            b += 1
            first_page, end_page = end_page, indptr[b + 1]
            n = (end_page - first_page - 1) * P + last[b]
        key0 = (p - first_page) * P + sub * TILE
        if key0 >= n:
            continue
        last_of_sequence = key0 + TILE >= n
        tiles.append(Tile(tile, b, p, sub, key0, min(TILE, n - key0), last_of_sequence or tile + 1 == t1,
                          last_of_sequence and first_page * per_page >= t0))
    return tiles


def merge_range(indptr: list[int], last: list[int], P: int, b: int, chunk: int) -> tuple[int, int]:
    """The merge kernel's chunks c0 .. c1 of sequence b (its first tile's and its last key's)."""
    per_page = P // TILE
    n = (indptr[b + 1] - indptr[b] - 1) * P + last[b]
    first_tile = indptr[b] * per_page
    return first_tile // chunk, (first_tile + (n - 1) // TILE) // chunk


# ---- the kernel's register-level steps ------------------------------------------------------------------

def tma_stage(k_rows: np.ndarray, v_rows: np.ndarray) -> np.ndarray:
    """The stage as TMA leaves it: four boxes of 16 rows x 64 dims (K 0-63, K 64-127, V 0-63, V 64-127), each
    row's 16-byte chunk c at row * 128 + ((c ^ row % 8) << 4), as a flat array of bf16 elements (byte / 2)."""
    stage = np.full(4 * BOX // 2, np.nan, dtype=np.float32)
    rows, dims = np.meshgrid(np.arange(TILE), np.arange(64), indexing="ij")
    byte = rows * 128 + ((((2 * dims) >> 4) ^ (rows & 7)) << 4) + ((2 * dims) & 15)
    for box, (source, half) in enumerate([(k_rows, 0), (k_rows, 1), (v_rows, 0), (v_rows, 1)]):
        stage[(box * BOX + byte) // 2] = source[:, 64 * half:64 * half + 64]
    return stage


def ldmatrix_x4(stage: np.ndarray, addr: np.ndarray, trans: bool = False) -> np.ndarray:
    """[lane][register i][low, high]: lane l gives the address of row l % 8 of matrix l / 8; register i holds row
    l / 4, elements 2 (l % 4) and + 1 of matrix i (of its transpose with .trans)."""
    i, e = np.arange(4)[None, :, None], np.arange(2)[None, None, :]
    g, t = _G[:, None, None], _T[:, None, None]
    if trans:  # M_i[2t + e][g]
        return stage[addr[8 * i + 2 * t + e] // 2 + g]
    return stage[addr[8 * i + g] // 2 + 2 * t + e]  # M_i[g][2t + e]


# The PTX ISA's fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4): A register j holds row g + 8 (j & 1),
# columns 2t + 8 (j >> 1) and + 1; B register j rows 2t + 8 j and + 1 of column g; D register j row g + 8 (j >> 1),
# column 2t + (j & 1). As index arrays [lane][register][low, high].
_A_ROW = np.broadcast_to((_G[:, None] + 8 * (np.arange(4) & 1)[None, :])[:, :, None], (32, 4, 2))
_A_COL = (2 * _T[:, None, None] + 8 * (np.arange(4) >> 1)[None, :, None] + np.arange(2)[None, None, :])
_B_ROW = 2 * _T[:, None, None] + 8 * np.arange(2)[None, :, None] + np.arange(2)[None, None, :]
_B_COL = np.broadcast_to(_G[:, None, None], (32, 2, 2))
_D_ROW = _G[:, None] + 8 * (np.arange(4) >> 1)[None, :]
_D_COL = 2 * _T[:, None] + (np.arange(4) & 1)[None, :]


def mma(d: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``steps`` mma.m16n8k16 accumulating into d [lane][4]: a [lane][steps][4][2], b [lane][steps][2][2] (k-step s
    covers columns of A / rows of B 16 s .. 16 s + 15), placed by the ISA's layouts, multiplied in fp32."""
    steps = a.shape[1]
    A = np.zeros((16, 16 * steps), dtype=np.float32)
    Bm = np.zeros((16 * steps, 8), dtype=np.float32)
    for k in range(steps):
        A[_A_ROW, 16 * k + _A_COL] = a[:, k]
        Bm[16 * k + _B_ROW, _B_COL] = b[:, k]
    with np.errstate(invalid="ignore"):
        D = (A @ Bm).astype(np.float32)
    return d + D[_D_ROW, _D_COL]


def test_the_fragment_layouts_cover_their_matrices() -> None:
    """Every element of the A, B and D tiles is some lane's register exactly once (no gap, no double)."""
    assert len(set(zip(_A_ROW.ravel().tolist(), _A_COL.ravel().tolist()))) == 256
    assert len(set(zip(_B_ROW.ravel().tolist(), _B_COL.ravel().tolist()))) == 128
    assert len(set(zip(_D_ROW.ravel().tolist(), _D_COL.ravel().tolist()))) == 128


def load_q(Q: np.ndarray, b: int, head0: int, rows_active: int) -> np.ndarray:
    """load_q: [lane][ks][4][2], rows g and g + 8 of the CTA's heads, dims 16 ks + 2t (+ 8), rows past the group 0."""
    q = np.zeros((32, 8, 4, 2), dtype=np.float32)
    for reg, (row_off, dim_off) in enumerate([(0, 0), (8, 0), (0, 8), (8, 8)]):
        rows = _G + row_off
        use = rows < rows_active
        for ks in range(8):
            for e in range(2):
                dims = 16 * ks + dim_off + 2 * _T + e
                q[use, ks, reg, e] = Q[b, head0 + rows[use], dims[use]]
    return q


def k_address(j: int, kp: int, swizzled: bool = True) -> np.ndarray:
    """The consumers' ldmatrix address for keys 8 j .. + 7, dims 32 kp .. + 31 (kernel: k_lane, k_chunk)."""
    sw = _L & 7
    chunk = (_L >> 3) + 4 * (kp & 1)
    return (kp >> 1) * BOX + j * 8 * 128 + sw * 128 + (((chunk ^ sw) if swizzled else chunk) << 4)


def v_address(warp: int, dp: int) -> np.ndarray:
    """The consumers' ldmatrix.trans address for dims chunk 4 warp + 2 dp (+ 1), keys 0-15 (kernel: v_base)."""
    sw = _L & 7
    v_row = ((_L >> 3) & 1) * 8 + sw
    v_base = 2 * BOX + (warp >> 1) * BOX + v_row * 128
    v_chunk = 4 * (warp & 1) + (_L >> 4)
    return v_base + (((v_chunk + 2 * dp) ^ sw) << 4)


def quad(values: np.ndarray, reduce) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The butterfly over lanes 4q .. 4q + 3: every lane of a quad ends with the reduction."""
    return np.repeat(reduce(values.reshape(8, 4), axis=1), 4)


@dataclass
class Cache:
    """The inputs as float32 arrays (bf16 values), the cache viewed as [NP * P tokens][KH][128]."""
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    indptr: list[int]
    indices: list[int]
    last: list[int]
    P: int


def run_cta(cache: Cache, c: int, kv_head: int, hblock: int, split: Split, tiles_total: int, H: int, KH: int,
            O: np.ndarray, LSE: np.ndarray, part_o: np.ndarray, part_lse: np.ndarray, swizzled: bool = True) -> None:
    """One CTA of decode_split_kernel: the consumers' arithmetic on the stages the producer's walk fills."""
    group = H // KH
    head0, rows_active = kv_head * group + hblock * ROWS, min(ROWS, group - hblock * ROWS)
    t0, t1 = c * split.chunk, min((c + 1) * split.chunk, tiles_total)
    m = np.full((32, 2), -np.inf, dtype=np.float32)
    l = np.zeros((32, 2), dtype=np.float32)
    o = np.zeros((WARPS, 32, 4, 4), dtype=np.float32)
    q_seq, q = -1, None
    for tile in walk(cache.indptr, cache.last, cache.P, t0, t1):
        if tile.b != q_seq:
            q_seq, q = tile.b, load_q(cache.Q, tile.b, head0, rows_active)
        token = cache.indices[tile.p] * cache.P + tile.sub * TILE  # the producer's TMA coordinate
        stage = tma_stage(cache.K[token:token + TILE, kv_head], cache.V[token:token + TILE, kv_head])
        # S = Q K^T (every warp computes the same: modelled once)
        sc = np.zeros((32, 2, 4), dtype=np.float32)
        for j in range(2):  # k-steps 2 kp and 2 kp + 1 from registers 0-1 and 2-3 of ldmatrix (j, kp)
            regs = np.stack([ldmatrix_x4(stage, k_address(j, kp, swizzled)) for kp in range(4)], axis=1)
            sc[:, j] = mma(sc[:, j], q, regs.reshape(32, 8, 2, 2))
        v = np.stack([np.stack([ldmatrix_x4(stage, v_address(w, dp), trans=True) for dp in range(2)], axis=1)
                      for w in range(WARPS)])  # [warp][lane][dp][4][2]
        if tile.valid < TILE:
            keys = 8 * np.arange(2)[None, :, None] + 2 * _T[:, None, None] + (np.arange(4)[None, None, :] & 1)
            sc = np.where(keys >= tile.valid, np.float32(-np.inf), sc)
            lo_keys = 2 * _T[:, None] + np.arange(2)[None, :]  # [lane][low, high]: b0 / b2
            keep_lo, keep_hi = lo_keys < tile.valid, lo_keys + 8 < tile.valid
            v[:, :, :, 0] = np.where(keep_lo[None, :, None], v[:, :, :, 0], 0)
            v[:, :, :, 2] = np.where(keep_lo[None, :, None], v[:, :, :, 2], 0)
            v[:, :, :, 1] = np.where(keep_hi[None, :, None], v[:, :, :, 1], 0)
            v[:, :, :, 3] = np.where(keep_hi[None, :, None], v[:, :, :, 3], 0)
        alpha = np.empty((32, 2), dtype=np.float32)
        for h in range(2):
            row_max = np.maximum(np.maximum(sc[:, 0, 2 * h], sc[:, 0, 2 * h + 1]),
                                 np.maximum(sc[:, 1, 2 * h], sc[:, 1, 2 * h + 1]))
            m_new = np.maximum(m[:, h], quad(row_max, np.max) * SCALE_LOG2)
            assert np.isfinite(m_new).all(), "key 0 of a tile is valid: the running max is finite"
            alpha[:, h] = np.exp2(m[:, h] - m_new)
            m[:, h] = m_new
            p = np.exp2((sc[:, :, 2 * h:2 * h + 2] * SCALE_LOG2 - m_new[:, None, None]).astype(np.float32))
            sc[:, :, 2 * h:2 * h + 2] = p
            l[:, h] = l[:, h] * alpha[:, h] + p.sum(axis=(1, 2))
        o *= alpha[:, [0, 0, 1, 1]][None, :, None, :]
        pa = bf16(np.stack([sc[:, 0, 0:2], sc[:, 0, 2:4], sc[:, 1, 0:2], sc[:, 1, 2:4]], axis=1))  # [lane][4][2]
        for w in range(WARPS):
            for dp in range(2):
                o[w, :, 2 * dp] = mma(o[w, :, 2 * dp], pa[:, None], v[w, :, dp, None, 0:2])
                o[w, :, 2 * dp + 1] = mma(o[w, :, 2 * dp + 1], pa[:, None], v[w, :, dp, None, 2:4])
        if tile.ends_segment:
            write_segment(tile, o, m, l, head0, rows_active, c, H, O, LSE, part_o, part_lse)
            m[:], l[:], o[:] = -np.inf, 0, 0


def write_segment(tile: Tile, o: np.ndarray, m: np.ndarray, l: np.ndarray, head0: int, rows_active: int, c: int,
                  H: int, O: np.ndarray, LSE: np.ndarray, part_o: np.ndarray, part_lse: np.ndarray) -> None:
    for h in range(2):
        total = quad(l[:, h], np.sum)
        rows = _G + 8 * h
        use = rows < rows_active
        lse2 = m[:, h] + np.log2(total)
        heads = head0 + rows[use]
        for w in range(WARPS):
            for nt in range(4):
                for e in range(2):
                    dims = 32 * w + 8 * nt + 2 * _T[use] + e
                    value = o[w, use, nt, 2 * h + e] / total[use]
                    if tile.whole_sequence:
                        O[tile.b, heads, dims] = bf16(value)
                    else:
                        part_o[c + tile.b, heads, dims] = value
        writer = use & (_T == 0)
        if tile.whole_sequence:
            LSE[tile.b, head0 + rows[writer]] = lse2[writer] * LN2
        else:
            part_lse[c + tile.b, head0 + rows[writer]] = lse2[writer]


def merge(cache: Cache, split: Split, H: int, O: np.ndarray, LSE: np.ndarray, part_o: np.ndarray,
          part_lse: np.ndarray) -> None:
    """decode_merge_kernel: sequences whose pieces lie in several chunks."""
    for b in range(len(cache.last)):
        c0, c1 = merge_range(cache.indptr, cache.last, cache.P, b, split.chunk)
        if c0 == c1:
            continue
        slots = np.arange(c0, c1 + 1) + b
        lse2 = part_lse[slots]                   # [parts][H]
        top = lse2.max(axis=0)
        w = np.exp2(lse2 - top)
        total = w.sum(axis=0)
        O[b] = bf16((w[:, :, None] * part_o[slots]).sum(axis=0) / total[:, None])
        LSE[b] = (top + np.log2(total)) * LN2


def decode(cache: Cache, sizes: dict[str, int], resident: int, swizzled: bool = True,
           merged: bool = True) -> tuple[np.ndarray, np.ndarray, Split]:
    B, H, KH, P, NP = (sizes[k] for k in ("B", "H", "KH", "P", "NP"))
    group = H // KH
    head_blocks = -(-group // ROWS)
    tiles_total = NP * (P // TILE)
    split = choose_split(tiles_total, KH * head_blocks, resident)
    O = np.full((B, H, 128), np.nan, dtype=np.float32)  # the harness's outputs start as garbage
    LSE = np.full((B, H), np.nan, dtype=np.float32)
    slots = split.splits + B - 1
    part_o = np.full((slots, H, 128), np.nan, dtype=np.float32)
    part_lse = np.full((slots, H), np.nan, dtype=np.float32)
    for c in range(split.splits):
        for g in range(KH):
            for hb in range(head_blocks):
                run_cta(cache, c, g, hb, split, tiles_total, H, KH, O, LSE, part_o, part_lse, swizzled)
    if merged:
        merge(cache, split, H, O, LSE, part_o, part_lse)
    return O, LSE, split


# ---- the tests ------------------------------------------------------------------------------------------

# Small sizes of the task's structure (B <= NP, (NP - B) P + B <= L <= NP P): one token on a page of 64; group 1;
# one kv head for 32 query heads (two head blocks); mixed lengths over pages of 16 with group 4; pages of 64 with
# group 8; one sequence alone; group 16 (every row of the mma used) and group 20 (two head blocks); 70 short
# sequences, so that chunks hold more than 32 of them.
SMALL = {
    "one-token-p64": {"B": 1, "H": 8, "KH": 2, "P": 64, "NP": 1, "L": 1},
    "mha-p16": {"B": 3, "H": 4, "KH": 4, "P": 16, "NP": 20, "L": 300},
    "kh1-g32-p16": {"B": 2, "H": 32, "KH": 1, "P": 16, "NP": 30, "L": 460},
    "g4-p16": {"B": 5, "H": 16, "KH": 4, "P": 16, "NP": 120, "L": 1900},
    "g8-p64": {"B": 3, "H": 16, "KH": 2, "P": 64, "NP": 40, "L": 2500},
    "one-sequence": {"B": 1, "H": 16, "KH": 2, "P": 16, "NP": 60, "L": 950},
    "g16-p64": {"B": 4, "H": 32, "KH": 2, "P": 64, "NP": 20, "L": 1200},
    "g20-p64": {"B": 4, "H": 40, "KH": 2, "P": 64, "NP": 30, "L": 1800},
    "b70-p16": {"B": 70, "H": 8, "KH": 2, "P": 16, "NP": 150, "L": 2000},
}
# Resident CTAs the host may see: a full H100 / H200 (132 SMs x 3: chunks of 4 tiles, nearly every sequence merged),
# and a small count, so that chunks hold several sequences (b70: more than 32, its only case).
RESIDENT = (396, 6)


def _cache(sizes: dict[str, int], seed: int):  # type: ignore[no-untyped-def]
    """The task's inputs (drawn as the evaluator draws them) and the model's arrays, with every slot past a last
    page's fill set to NaN in both caches (the reference never reads them; the kernel loads them and must mask)."""
    torch = pytest.importorskip("torch")
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs

    task = get_task("decode_gqa_paged")
    inputs = make_inputs(task, sizes, seed)
    P, KH = sizes["P"], sizes["KH"]
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"].tolist()
    last = inputs["kv_last_page_len"].tolist()
    for b in range(sizes["B"]):
        page = indices[indptr[b + 1] - 1]
        for name in ("K_cache", "V_cache"):
            inputs[name][page, last[b]:] = float("nan")
    K, V = (inputs[n].float().numpy().reshape(sizes["NP"] * P, KH, 128) for n in ("K_cache", "V_cache"))
    cache = Cache(inputs["Q"].float().numpy(), K, V, indptr, indices, last, P)
    return task, inputs, cache, torch


def _judge(task, inputs, sizes, O, LSE, torch) -> tuple[bool, int]:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.reference import run_reference

    actual = {"O": torch.from_numpy(O).to(torch.bfloat16), "LSE": torch.from_numpy(LSE)}
    results = compare_outputs(task, actual, run_reference(task, dict(inputs), sizes))
    return all(r.passed for r in results), sum(r.mismatched + r.nonfinite for r in results)


CASES = [(name, resident) for name in sorted(SMALL) for resident in RESIDENT if name != "b70-p16" or resident < 100]


@pytest.mark.parametrize(("name", "resident"), CASES, ids=[f"{n}-r{r}" for n, r in CASES])
def test_the_kernels_steps_give_the_tasks_answer(name: str, resident: int) -> None:
    sizes = SMALL[name]
    task, inputs, cache, torch = _cache(sizes, seed=11)
    O, LSE, split = decode(cache, sizes, resident)
    assert np.isfinite(O).all() and np.isfinite(LSE).all(), "every output written, nothing from the NaN slots"
    merged = [b for b in range(sizes["B"]) if len(set(merge_range(cache.indptr, cache.last, sizes["P"], b,
                                                                  split.chunk))) > 1]
    if resident == RESIDENT[0] and sizes["L"] > 4 * TILE:  # chunks of 4 tiles: a sequence spans several
        assert merged, f"{name}: no sequence needs the merge at chunk {split.chunk}"
    passed, bad = _judge(task, inputs, sizes, O, LSE, torch)
    assert passed, f"{name}, chunk {split.chunk} tiles: {bad} elements out of tolerance"


def test_a_reader_that_ignores_the_swizzle_is_caught() -> None:
    """The model can fail: K read as if TMA had not swizzled it gives wrong scores."""
    sizes = SMALL["g4-p16"]
    task, inputs, cache, torch = _cache(sizes, seed=11)
    O, LSE, _ = decode(cache, sizes, RESIDENT[1], swizzled=False)
    passed, bad = _judge(task, inputs, sizes, O, LSE, torch)
    assert not passed and bad > 0


def test_without_the_merge_the_split_sequences_are_missing() -> None:
    sizes = SMALL["g8-p64"]
    _, _, cache, _ = _cache(sizes, seed=12)
    O, _, _ = decode(cache, sizes, RESIDENT[1], merged=False)
    assert np.isnan(O).any(), "the merge writes what the decode kernel leaves to it"


def _layout(sizes: dict[str, int], seed: int = 5) -> tuple[list[int], list[int], list[int]]:
    """A workload's page tables, drawn from its Q alone (derive_inputs reads neither cache)."""
    torch = pytest.importorskip("torch")
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import derive_inputs

    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(sizes["B"], sizes["H"], 128, generator=generator).to(torch.bfloat16)
    layout = derive_inputs(get_task("decode_gqa_paged"), {"Q": q, "K_cache": None, "V_cache": None}, sizes)
    return (layout["kv_indptr"].tolist(), layout["kv_indices"].tolist(), layout["kv_last_page_len"].tolist())


def _workloads():  # type: ignore[no-untyped-def]
    from ptxbench.tasks.loader import get_task

    return get_task("decode_gqa_paged").workloads


# The edge shapes tests/gpu/test_reference_gpu.py runs the kernel on (B, H, KH, P, NP, L).
EDGES = [(1, 32, 8, 16, 1, 1), (1, 32, 8, 64, 1, 1), (1, 32, 8, 64, 1, 64), (300, 8, 2, 16, 300, 300),
         (500, 16, 2, 64, 500, 16000), (3, 8, 8, 16, 50, 780), (5, 32, 2, 64, 40, 2400), (4, 40, 2, 64, 30, 1800),
         (2, 32, 1, 16, 100, 1590), (1, 64, 8, 64, 2000, 127950), (257, 32, 4, 16, 3000, 46000)]
SHAPES = {w.name: dict(w.sizes) for w in _workloads()} | {
    f"b{b}-h{h}-kh{kh}-p{p}-np{np_}-l{l}": {"B": b, "H": h, "KH": kh, "P": p, "NP": np_, "L": l}
    for b, h, kh, p, np_, l in EDGES}


@pytest.mark.parametrize("resident", (396, 264, 114 * 3))
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_workload_is_covered_once_by_the_walks_and_the_merge(name: str, resident: int) -> None:
    """On each of the task's workloads (held-out ones too) and the GPU test's edge shapes, for the GPUs' resident
    CTA counts (132 SMs x 3, x 2, and 114 SMs x 3): every key of every sequence is in exactly one walked tile (the
    keys past a last page's fill in none, no tile wholly past it loaded; with pages of 16 every tile is walked, as
    the producer's early first fill assumes); each (chunk, sequence) piece is one segment, ending once, in its own
    slot c + b; a sequence is written whole by a CTA exactly when the merge finds one chunk for it, and otherwise
    the merge's chunks are exactly the CTAs with a piece of it; the grid is one wave of equal chunks."""
    sizes = SHAPES[name]
    B, H, KH, P, NP = (sizes[k] for k in ("B", "H", "KH", "P", "NP"))
    indptr, _, last = _layout(sizes)
    n = [(indptr[b + 1] - indptr[b] - 1) * P + last[b] for b in range(B)]
    assert sum(n) == sizes["L"]
    columns = KH * -(-(H // KH) // ROWS)
    tiles_total = NP * (P // TILE)
    split = choose_split(tiles_total, columns, resident)
    assert split.splits * columns <= max(resident, columns), "one wave"
    assert (split.splits - 1) * split.chunk < tiles_total <= split.splits * split.chunk
    seen = [np.zeros(x, dtype=np.int64) for x in n]
    pieces: dict[int, set[int]] = {b: set() for b in range(B)}
    slots: set[int] = set()
    for c in range(split.splits):
        t0, t1 = c * split.chunk, min((c + 1) * split.chunk, tiles_total)
        tiles = walk(indptr, last, P, t0, t1)
        if P == TILE:  # the producer issues the first stages before its walk: every tile must hold keys
            assert [t.tile for t in tiles] == list(range(t0, t1))
        for i, tile in enumerate(tiles):
            assert 1 <= tile.valid <= TILE and tile.key0 % TILE == 0
            seen[tile.b][tile.key0:tile.key0 + tile.valid] += 1
            assert (i + 1 == len(tiles) or tiles[i + 1].b != tile.b) == tile.ends_segment
            if tile.ends_segment:
                assert c + tile.b not in slots
                slots.add(c + tile.b)
            pieces[tile.b].add(c)
    assert all((s == 1).all() for s in seen), "every key once"
    assert max(slots) < split.splits + B - 1
    for b in range(B):
        c0, c1 = merge_range(indptr, last, P, b, split.chunk)
        assert pieces[b] == set(range(c0, c1 + 1))
        whole = [t.whole_sequence for c in pieces[b]
                 for t in walk(indptr, last, P, c * split.chunk, min((c + 1) * split.chunk, tiles_total))
                 if t.b == b and t.ends_segment]
        assert whole == [c0 == c1] * len(pieces[b])


def test_the_sequence_search_matches_bisection() -> None:
    rng = np.random.default_rng(3)
    for B in (1, 2, 31, 32, 33, 100, 1023, 1025, 5000):
        indptr = np.concatenate([[0], np.cumsum(rng.integers(1, 5, size=B))]).tolist()
        for p in sorted(set(rng.integers(0, indptr[-1], size=40).tolist()) | {0, indptr[-1] - 1}):
            assert find_sequence(indptr, B, p) == bisect.bisect_right(indptr, p) - 1


def test_a_timed_workload_chunk_holds_several_sequences_and_equal_bytes() -> None:
    """On l8b-b64-p16 with 396 resident CTAs: 49 chunks per kv head of 85 tiles (the last shorter), so every CTA
    streams the same bytes and most sequences are split over two chunks."""
    workload = next(w for w in _workloads() if w.role.value == "timed")
    sizes = dict(workload.sizes)
    split = choose_split(sizes["NP"] * sizes["P"] // TILE, sizes["KH"], 396)
    assert split.splits * sizes["KH"] <= 396
    assert split.chunk * (split.splits - 1) < sizes["NP"] <= split.chunk * split.splits


# ---- the ring: the producer and the four consumer warps against the mbarriers ---------------------------

def parity_wait(completed: int, wanted: int) -> bool:
    """A parity wait for phase `wanted` (0-based) is only right when the barrier is one phase away or done."""
    assert completed in (wanted, wanted + 1), f"parity aliasing: waiting for phase {wanted} with {completed} done"
    return completed == wanted + 1


def run_ring(count: int, consumers_counted: int = WARPS) -> None:
    full, empty, arrivals = [0] * STAGES, [0] * STAGES, [0] * STAGES

    def producer():  # type: ignore[no-untyped-def]
        for j in range(count):
            stage, use = j % STAGES, j // STAGES
            while use > 0 and not parity_wait(empty[stage], use - 1):  # a fresh stage counts as released
                yield
            full[stage] += 1  # the four boxes land
            yield

    def consumer():  # type: ignore[no-untyped-def]
        for j in range(count):
            stage = j % STAGES
            while not parity_wait(full[stage], j // STAGES):
                yield
            arrivals[stage] += 1
            if arrivals[stage] == consumers_counted:
                arrivals[stage] = 0
                empty[stage] += 1
            yield

    ring = list(range(1 + WARPS))
    for order in [ring, ring[::-1], ring[1:] + ring[:1]] + [[a] * 3 + ring[a + 1:] + ring[:a] for a in ring]:
        full[:], empty[:], arrivals[:] = [0] * STAGES, [0] * STAGES, [0] * STAGES
        agents = [producer()] + [consumer() for _ in range(WARPS)]
        done = [False] * len(agents)
        for _ in range(100_000):
            for a in order:
                if not done[a]:
                    done[a] = next(agents[a], StopIteration) is StopIteration
            if all(done):
                break
        assert all(done), f"deadlock: order {order}, done {done}"
        assert sum(full) == count and empty == full


@pytest.mark.parametrize("count", [1, STAGES - 1, STAGES, STAGES + 1, 3 * STAGES + 5])
def test_the_ring_never_deadlocks_or_aliases_a_phase(count: int) -> None:
    run_ring(count)


def test_a_ring_that_counts_fewer_consumers_is_caught() -> None:
    with pytest.raises(AssertionError):
        run_ring(3 * STAGES + 5, consumers_counted=WARPS - 1)
