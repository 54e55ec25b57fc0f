"""A NumPy model of the gemm_fp8_blockscale reference kernel's index logic (kernels/reference/sm_90a/
gemm_fp8_blockscale.cu), the part no build can check: the host's choice of tile width, cluster and A box; the
persistent CTAs' walk over the grouped tile order; the boxes of A and of the two halves of a shared B tile; each
consumer thread's accumulator registers (rows r and r + 8, 8-column groups) and the scales it reads for them
(its two rows of scale_a clamped to M - 1, the tile's one or two weight blocks of scale_b, the block picked per
register group by the split column); and the epilogue's mask. Each k-block's partial is promoted with exactly the
scales the kernel would pick, so a slip in a row, a block index or the split shows as a wrong value, and every
element of D is counted: stored exactly once.

What it cannot show: the tensor maps' encoding, the wgmma fragments and the mbarrier ring (gemm_fp8.cu's, the
same steps, GPU-proven), the speed."""

from __future__ import annotations


import numpy as np
import pytest

from ptxbench.kernels import reference_folder

from .kernel_models import grouped_tile, kernel_constants

KERNEL = reference_folder("sm_90a") / "gemm_fp8_blockscale.cu"
THREADS = 128  # one consumer warpgroup


BM, BN, DECODE_BN, DECODE_M, BK, SCALE_BLOCK, GROUP_M, CLUSTER_M = kernel_constants(
    KERNEL, "BM", "BN", "DECODE_BN", "DECODE_M", "BK", "SCALE_BLOCK", "GROUP_M", "CLUSTER_M").values()


def registers(tn_width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per thread of a warpgroup and accumulator register i: its row and column in the 64 x TN tile (ptx::
    wgmma_acc_row / wgmma_acc_col), whether it is the thread's second row (r + 8), and its 8-column group."""
    t = np.arange(THREADS)[:, None]
    i = np.arange(tn_width // 2)[None, :]
    warp, lane = t // 32, t % 32
    upper = (i >> 1) & 1
    rows = warp * 16 + lane // 4 + 8 * upper
    cols = (i >> 2) * 8 + (lane % 4) * 2 + (i & 1)
    shape = cols.shape
    return np.broadcast_to(rows, shape), cols, np.broadcast_to(upper, shape), np.broadcast_to(i >> 2, shape)


def model(A: np.ndarray, B: np.ndarray, sa: np.ndarray, sb: np.ndarray, resident_clusters: int,
          split_slip: int = 0) -> np.ndarray:
    """D as the kernel computes and stores it, NaN where nothing is stored; raises on a second store.
    ``split_slip`` moves the split column (a deliberate slip, to show the comparison sees one)."""
    M, K = A.shape
    N = B.shape[0]
    KB, NB = K // BK, -(-N // SCALE_BLOCK)
    tn_width = DECODE_BN if M <= DECODE_M else BN                   # gemm_fp8_blockscale(): the tile width
    cm = 2 if CLUSTER_M == 2 and M > BM else 1                      # launch(): pairs along M
    a_rows = 64 if M <= 64 else BM
    one_block = SCALE_BLOCK % tn_width == 0
    units = -(-M // (BM * cm)) * -(-N // tn_width)
    grid = min(units, resident_clusters) * cm
    tiles_m, tiles_n = -(-(-(-M // BM)) // cm), -(-N // tn_width)
    rows, cols, upper, group = registers(tn_width)
    D = np.full((M, N), np.nan)
    stored = np.zeros((M, N), dtype=int)

    def box(X: np.ndarray, first: int, count: int) -> np.ndarray:  # a TMA box of rows, zero past the end
        out = np.zeros((count, X.shape[1]))
        have = X[first:first + count]
        out[:len(have)] = have
        return out

    for cta in range(grid):
        rank = cta % cm
        for unit in range(cta // cm, tiles_m * tiles_n, grid // cm):
            um, tn = grouped_tile(unit, tiles_m, tiles_n, GROUP_M // cm)
            tm = um * cm + rank
            a_tile = box(A, tm * BM, a_rows)                        # producer_loop: this CTA's A box
            b_rows = tn_width // cm                                 # each CTA of the pair loads one half, to both
            b_tile = np.concatenate([box(B, tn * tn_width + r * b_rows, b_rows) for r in range(cm)])
            for half in range(2):
                row0 = tm * BM + half * 64                          # Consumer::locate
                if not (row0 < M and tn * tn_width < N):
                    continue
                assert half * 64 + 64 <= a_rows, "a consumer computes rows its A box does not hold"
                r = row0 + rows[:, 0:1]                             # Consumer::aim, per thread
                sa_lo, sa_hi = np.minimum(r, M - 1), np.minimum(r + 8, M - 1)
                n0 = tn * tn_width
                block = n0 // SCALE_BLOCK
                split = tn_width if one_block else (block + 1) * SCALE_BLOCK - n0 + split_slip
                second_block = min(block + 1, NB - 1)
                acc = np.zeros(rows.shape)
                for k in range(KB):                                 # every stage promoted with its fetch(k)
                    a = a_tile[half * 64 + rows, k * BK:(k + 1) * BK]
                    b = b_tile[cols, k * BK:(k + 1) * BK]
                    partial = np.einsum("tik,tik->ti", a, b)
                    a_scale = np.where(upper == 1, sa[sa_hi, k], sa[sa_lo, k])
                    b_scale = np.where((group * 8 >= split) & (not one_block), sb[second_block, k], sb[block, k])
                    acc += partial * (a_scale * b_scale)
                out_rows, out_cols = row0 + rows, n0 + cols         # epilogue: rows < M, columns < N
                keep = (out_rows < M) & (out_cols < N)
                D[out_rows[keep], out_cols[keep]] = acc[keep]
                np.add.at(stored, (out_rows[keep], out_cols[keep]), 1)
    assert stored.max() <= 1, "an element of D is stored twice"
    return D


def reference(A: np.ndarray, B: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """The task's PyTorch reference, in NumPy: each k-block's product times scale_a[m, j] · scale_b[n // 128, j]."""
    N = B.shape[0]
    rows_scale = np.repeat(sb, SCALE_BLOCK, axis=0)[:N]
    out = np.zeros((A.shape[0], N))
    for j in range(A.shape[1] // BK):
        cols = slice(j * BK, (j + 1) * BK)
        out += (A[:, cols] @ B[:, cols].T) * sa[:, j][:, None] * rows_scale[:, j][None, :]
    return out


@pytest.mark.parametrize(("M", "N", "K", "resident"), [
    (1, 64, 128, 66), (64, 192, 256, 66), (65, 320, 384, 66), (128, 2112, 256, 66), (129, 192, 128, 66),
    (300, 704, 512, 66), (1000, 2112, 256, 66), (257, 1088, 256, 3), (96, 1344, 384, 2)])
def test_every_element_is_stored_once_with_its_own_blocks_scales(M: int, N: int, K: int, resident: int) -> None:
    rng = np.random.default_rng(M * 7 + N + K)
    A = rng.integers(-3, 4, (M, K)).astype(float)
    B = rng.integers(-3, 4, (N, K)).astype(float)
    sa = 2.0 ** rng.integers(-4, 4, (M, K // BK))  # powers of two: every product is exact
    sb = 2.0 ** rng.integers(-4, 4, (-(-N // SCALE_BLOCK), K // BK))
    D = model(A, B, sa, sb, resident)
    assert not np.isnan(D).any(), "an element of D is never stored"
    np.testing.assert_array_equal(D, reference(A, B, sa, sb))


def test_a_split_one_register_group_off_is_seen() -> None:
    """The straddling 80-wide tiles' split moved by one 8-column group gives those columns the other weight
    block's scale: the comparison must fail, or it would pass a wrong block choice."""
    assert DECODE_BN < SCALE_BLOCK < 2 * DECODE_BN, "the second 80-wide tile straddles the first block boundary"
    rng = np.random.default_rng(1)
    M, N, K = 3, 192, 256
    A, B = rng.integers(-3, 4, (M, K)).astype(float), rng.integers(-3, 4, (N, K)).astype(float)
    sa, sb = np.ones((M, K // BK)), np.array([[1.0, 1.0], [2.0, 2.0]])
    right = reference(A, B, sa, sb)
    np.testing.assert_array_equal(model(A, B, sa, sb, 66), right)
    for slip in (-8, 8):
        assert not np.array_equal(model(A, B, sa, sb, 66, split_slip=slip), right), slip
