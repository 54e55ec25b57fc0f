"""A NumPy model of the moe_grouped_gemm reference kernel's tile logic (kernels/reference/sm_90a/moe_grouped_gemm.cu),
the part no build can check: the warp-wide walker that reads the device offsets 32 experts at a time, sums their
tile counts by shuffles and finds each tile's expert by a ballot; the grouped order inside an expert; the persistent
CTAs' strides; the TMA boxes (X from the tile's first row in a box of 128, 64 or 16 rows, zeros past T, the stage's
rows past a short box left as NaN here; W as one [E * N, K] map, zeros past E * N) that may read other experts'
rows; and the epilogue's choice per consumer (skip, TMA store clipped at N, or stores masked to the expert's rows).
Each tile's 128 x BN product is formed from exactly the boxes the kernel loads, so a slip in a row or column base
shows as a wrong value, and every element of Y is counted: stored exactly once.

What it cannot show: the tensor maps' encoding, the wgmma fragments and the mbarrier ring (gemm_bf16.cu's, unchanged
and GPU-proven), the speed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from ptxbench.kernels import reference_folder

from .kernel_models import grouped_tile, kernel_constants

KERNEL = reference_folder("sm_90a") / "moe_grouped_gemm.cu"
LANES = 32


BM, GROUP_M, X_BOX_MID, X_BOX_SMALL = kernel_constants(KERNEL, "BM", "GROUP_M", "X_BOX_MID", "X_BOX_SMALL").values()


@dataclass
class Tile:
    expert: int
    end: int
    row0: int
    tn: int


class ExpertWalker:
    """The kernel's ExpertWalker, its 32 lanes as lists."""

    def __init__(self, offsets: list[int], experts: int, rows: int, tiles_n: int) -> None:
        self.offsets, self.experts, self.rows, self.tiles_n = offsets, experts, rows, tiles_n
        self.base = 0
        self.loads = 0
        self.load(0)

    def load(self, first_expert: int) -> None:
        self.loads += 1
        self.e0 = first_expert
        self.start, self.end, self.count = [0] * LANES, [0] * LANES, [0] * LANES
        for lane in range(LANES):
            e = self.e0 + lane
            if e < self.experts:
                self.end[lane] = min(self.offsets[e], self.rows)
                self.start[lane] = min(self.offsets[e - 1], self.rows) if e > 0 else 0
            span = self.end[lane] - self.start[lane]
            self.count[lane] = ((span + BM - 1) // BM if span > 0 else 0) * self.tiles_n
        inclusive = list(self.count)
        step = 1
        while step < LANES:  # __shfl_up_sync: every lane reads the value before this step's additions
            below = list(inclusive)
            for lane in range(step, LANES):
                inclusive[lane] += below[lane - step]
            step *= 2
        self.first = [inclusive[lane] - self.count[lane] for lane in range(LANES)]
        self.chunk_tiles = inclusive[LANES - 1]

    def find(self, t: int) -> Tile | None:
        while t >= self.base + self.chunk_tiles:
            if self.e0 + LANES >= self.experts:
                return None
            self.base += self.chunk_tiles
            self.load(self.e0 + LANES)
        local = t - self.base
        owners = [lane for lane in range(LANES) if self.first[lane] <= local < self.first[lane] + self.count[lane]]
        assert len(owners) == 1, owners
        src = owners[0]
        tm, tn = grouped_tile(local - self.first[src], self.count[src] // self.tiles_n, self.tiles_n, GROUP_M)
        return Tile(self.e0 + src, self.end[src], self.start[src] + tm * BM, tn)


def choose_bn(T: int, E: int, N: int, sms: int) -> int:
    """The host's choose_bn."""
    groups = min(E, T)
    tile_rows = max((T + BM - 1) // BM + groups // 2, groups)
    best, best_cost = 256, 0.0
    for i, (width, efficiency) in enumerate(zip((256, 128, 64), (1.0, 1.1, 1.3))):
        tiles = tile_rows * ((N + width - 1) // width)
        cost = float((tiles + sms - 1) // sms) * width * efficiency
        if i == 0 or cost < best_cost:
            best, best_cost = width, cost
    return best


def box(matrix: np.ndarray, row: int, rows: int) -> np.ndarray:
    """A TMA box of `rows` whole rows from `row`: rows past the end read as zeros."""
    out = np.zeros((rows, matrix.shape[1]), dtype=matrix.dtype)
    have = matrix[row:row + rows]
    out[:len(have)] = have
    return out


def run_model(counts: list[int], N: int, K: int, sms: int = 132, bn: int | None = None,
              seed: int = 0) -> tuple[dict[str, int], list[list[Tile]]]:
    """Y by the kernel's logic against the per-expert products; returns statistics and every CTA's tiles."""
    T, E = sum(counts), len(counts)
    offsets = np.cumsum(counts).tolist()
    rng = np.random.default_rng(seed)
    X = rng.integers(-4, 5, size=(T, K)).astype(np.float64)
    W = rng.integers(-4, 5, size=(E, N, K)).astype(np.float64)
    W2d = W.reshape(E * N, K)
    BN = bn or choose_bn(T, E, N, sms)
    tiles_n = (N + BN - 1) // BN
    grid = min(sms, (T // BM + min(E, T)) * tiles_n)
    Y = np.full((T, N), np.nan)
    stores = np.zeros((T, N), dtype=np.int64)
    stats = {"tiles": 0, "skipped": 0, "tma": 0, "masked": 0, "loads": 0}
    walks = []
    for cta in range(grid):
        producer = ExpertWalker(offsets, E, T, tiles_n)
        consumer = ExpertWalker(offsets, E, T, tiles_n)
        walk, t = [], cta
        while (tile := producer.find(t)) is not None:
            assert consumer.find(t) == tile  # producer and consumers agree without talking
            walk.append(tile)
            rows_here = tile.end - tile.row0
            x_rows = BM if rows_here > X_BOX_MID else X_BOX_MID if rows_here > X_BOX_SMALL else X_BOX_SMALL
            stage = np.full((BM, K), np.nan)  # the stage's rows past a short box: an earlier stage's bytes
            stage[:x_rows] = box(X, tile.row0, x_rows)
            stats[f"x{x_rows}"] = stats.get(f"x{x_rows}", 0) + 1
            product = stage @ box(W2d, tile.expert * N + tile.tn * BN, BN).T  # [BM, BN]
            for half in range(2):
                row0 = tile.row0 + half * 64
                if row0 >= tile.end:
                    stats["skipped"] += 1
                    continue
                part = product[half * 64:half * 64 + 64]
                col0 = tile.tn * BN
                if row0 + 64 <= tile.end:  # TMA stores: whole rows, columns clipped at N (and at T)
                    stats["tma"] += 1
                    rows, cols = min(64, T - row0), min(BN, N - col0)
                else:  # masked stores
                    stats["masked"] += 1
                    rows, cols = tile.end - row0, min(BN, N - col0)
                Y[row0:row0 + rows, col0:col0 + cols] = part[:rows, :cols]
                stores[row0:row0 + rows, col0:col0 + cols] += 1
            t += grid
        assert consumer.find(t) is None
        stats["tiles"] += len(walk)
        stats["loads"] = max(stats["loads"], producer.loads)
        walks.append(walk)
    expected = np.zeros((T, N))
    start = 0
    for e, end in enumerate(offsets):
        expected[start:end] = X[start:end] @ W[e].T
        start = end
    assert (stores == 1).all(), np.argwhere(stores != 1)[:8]
    np.testing.assert_array_equal(Y, expected)
    assert stats["tiles"] == sum((c + BM - 1) // BM for c in counts) * tiles_n
    return stats, walks


def skewed_counts(T: int, E: int, seed: int) -> list[int]:
    """Routing like the task's derive_inputs: skewed loads, an eighth of the experts (at least one) empty."""
    rng = np.random.default_rng(seed)
    weights = rng.random(E) ** 3 + 1e-3
    weights[rng.permutation(E)[:max(1, E // 8)]] = 0.0
    experts = rng.choice(E, size=T, p=weights / weights.sum())
    return np.bincount(experts, minlength=E).tolist()


@pytest.mark.parametrize("counts, N, K, bn", [
    ([1], 64, 64, None),                                    # one token
    ([0, 0, 5, 0], 128, 64, 128),                           # empty experts around one small group
    ([64, 0, 65, 127, 128, 129, 0, 300], 192, 128, 128),    # groups around one and two tile-rows; N past BN
    ([3000, 1], 320, 64, 256),                              # N = 320: the last tile-column holds 64 columns
    ([0] * 40 + [7], 64, 64, 64),                           # the only group in the second chunk of 32 experts
])
def test_every_row_is_stored_once_from_its_own_expert(counts: list[int], N: int, K: int, bn: int | None) -> None:
    stats, _ = run_model(counts, N, K, bn=bn)
    assert stats["tiles"] > 0


def test_many_small_experts_as_in_the_dsv3_decode_workload() -> None:
    """256 experts over 1024 rows (dsv3-256e-decode, scaled down in N and K): most tiles hold one partial tile-row,
    the second consumer skips them, and each walker reads the offsets once (8 chunks of 32)."""
    counts = skewed_counts(1024, 256, seed=1)
    assert counts.count(0) >= 32
    stats, walks = run_model(counts, 128, 64, bn=64)
    assert stats["loads"] <= 256 // LANES
    assert stats["masked"] > stats["tma"] and stats["skipped"] > 0
    assert stats["x16"] > stats.get("x64", 0) > 0  # most groups take the 16-row box of X
    assert all(len(walk) > 0 for walk in walks)


@pytest.mark.parametrize("T, E", [(300, 8), (3001, 32), (64, 16), (2048, 32)])
def test_skewed_routing_with_few_ctas(T: int, E: int) -> None:
    """Few persistent CTAs: each walks many tiles over many experts, its tile index only increasing."""
    stats, walks = run_model(skewed_counts(T, E, seed=T), 128, 64, sms=3, bn=64)
    for walk in walks:
        experts = [tile.expert for tile in walk]
        assert experts == sorted(experts)  # expert after expert: each walker reads every offset once


def test_tile_width_choice_on_the_tasks_workloads() -> None:
    """The host's width choice from T, E and N on 132 SMs (the group sizes are not read back)."""
    assert choose_bn(8192, 8, 14336, 132) == 256     # mixtral-up-prefill (timed)
    assert choose_bn(1024, 256, 7168, 132) == 256    # dsv3-256e-decode
    assert choose_bn(64, 16, 1536, 132) == 64        # qwen3-moe-ep8-decode
    assert choose_bn(128, 8, 14336, 132) == 128      # mixtral-up-decode
