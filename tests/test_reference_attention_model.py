"""A NumPy model of the attention_fwd reference kernel (kernels/reference/sm_90a/attention_fwd.cu), step for
step, checked against the task's reference under the task's tolerance: the logic the GPU cannot be asked about
here (which KV tiles a CTA loads and a warpgroup computes, where masks apply, the online softmax with the scale
folded into base-2 exponentials, P·V one tile behind S, the tail tiles handed back, LSE's change of base, rows
>= S never written) is exercised on partial tiles, causal or not, at every head dimension.

It works in the kernel's register layouts: scores and outputs live as [128 threads][N / 2 registers] placed by
the wgmma accumulator layout, rows are reduced over quads of lanes, and P goes to P·V through the documented
A-fragment layout, so a slip in those index formulas shows as a wrong answer. A second model runs the producer
and the consumer warpgroups (two per CTA, three at D = 64) against the mbarrier rings and checks that they finish
(no deadlock) and that every wait is on a phase its parity names unambiguously. What it cannot show:
descriptors, swizzles and TMA boxes, which only a GPU run checks (`ptxbench eval --gold`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from ptxbench.kernels import reference_folder

KERNEL = reference_folder("sm_90a") / "attention_fwd.cu"
LN2 = math.log(2.0)


@dataclass(frozen=True)
class Tiles:
    """One head dimension's tiling: keys per tile, ring stages, consumer warpgroups of 64 query rows per CTA."""
    bkv: int
    stages: int
    consumers: int


def _tiling() -> dict[int, Tiles]:
    """Per head dimension, the tiles as the kernel's Config spells them (``X = D == d ? a : b``)."""
    source = KERNEL.read_text()
    found = {name: re.search(rf"int {name} = D == (\d+) \? (\d+) : (\d+);", source)
             for name in ("BKV", "STAGES", "CONSUMERS")}
    assert all(found.values()), "the kernel's tile constants changed form: update this model with them"

    def value(name: str, d: int) -> int:
        match = found[name]
        return int(match[2]) if d == int(match[1]) else int(match[3])  # type: ignore[index]

    return {d: Tiles(value("BKV", d), value("STAGES", d), value("CONSUMERS", d)) for d in (64, 128, 256)}


TILES = _tiling()

# The wgmma accumulator layout: thread t (warp w = t / 32, lane l), register i.
_T = np.arange(128)
_WARP, _LANE = _T // 32, _T % 32


def acc_rows(n: int) -> np.ndarray:
    i = np.arange(n // 2)
    return (_WARP * 16 + _LANE // 4)[:, None] + 8 * ((i >> 1) & 1)[None, :]


def acc_cols(n: int) -> np.ndarray:
    i = np.arange(n // 2)
    return ((i >> 2) * 8 + (i & 1))[None, :] + (_LANE % 4 * 2)[:, None]


def to_acc(matrix: np.ndarray) -> np.ndarray:
    n = matrix.shape[1]
    return matrix[acc_rows(n), acc_cols(n)]


def quad(values: np.ndarray, reduce) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The butterfly over lanes 4q..4q+3 (xor 1, then xor 2): every lane of a quad ends with the reduction."""
    return np.repeat(reduce(values.reshape(32, 4), axis=1), 4)


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest, ties to even) and back, as __floats2bfloat162_rn does."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32)


def a_fragment_matrix(p: np.ndarray) -> np.ndarray:
    """The 64 x (16 * steps) A operand that wgmma reads from p[thread][step][register][low/high]: register j
    holds row r + 8 (j & 1), columns c + 8 (j >> 1) and the next, with r = 16 w + l / 4, c = 2 (l % 4)."""
    steps = p.shape[1]
    matrix = np.full((64, 16 * steps), np.nan, dtype=np.float32)
    r, c = 16 * _WARP + _LANE // 4, 2 * (_LANE % 4)
    for k in range(steps):
        for j in range(4):
            rows, cols = r + 8 * (j & 1), 16 * k + c + 8 * (j >> 1)
            matrix[rows, cols], matrix[rows, cols + 1] = p[:, k, j, 0], p[:, k, j, 1]
    assert not np.isnan(matrix).any(), "the fragments do not cover the A tile"
    return matrix


@dataclass(frozen=True)
class Work:
    q0: int
    kv_tiles: int


def cta_work(q_tile: int, S: int, causal: bool, bkv: int, rows: int) -> Work:
    q0 = q_tile * rows
    last_key = min(S, q0 + rows) if causal else S
    return Work(q0, -(-last_key // bkv))


def warpgroup_tiles(work: Work, q0w: int, S: int, causal: bool, bkv: int) -> int:
    return min(work.kv_tiles, -(-min(S, q0w + 64) // bkv)) if causal else work.kv_tiles


def online_softmax(acc: np.ndarray, m: np.ndarray, l: np.ndarray, scale_log2: np.float32) -> np.ndarray:
    """The kernel's online_softmax on [128][N / 2] scores, in place; returns alpha [128][2]."""
    alpha = np.empty((128, 2), dtype=np.float32)
    for h in range(2):
        cols = [i for i in range(acc.shape[1]) if (i >> 1) & 1 == h]
        row_max = quad(acc[:, cols].max(axis=1), np.max)
        m_new = np.maximum(m[:, h], row_max * scale_log2)
        m_use = np.where(m_new == -np.inf, np.float32(0), m_new)
        with np.errstate(invalid="ignore"):
            alpha[:, h] = np.exp2(m[:, h] - m_use)
        m[:, h] = m_new
        acc[:, cols] = np.exp2(acc[:, cols] * scale_log2 - m_use[:, None])
        l[:, h] = l[:, h] * alpha[:, h] + acc[:, cols].sum(axis=1)
    return alpha


def pack_p(acc: np.ndarray) -> np.ndarray:
    """Registers 8k .. 8k+7 of the scores, pairwise to bf16, are k16 block k of P: [128][steps][4][2]."""
    return bf16(acc).reshape(128, acc.shape[1] // 8, 4, 2)


def model_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """O (bf16 values as float32) and LSE of one head, following the kernel's CTAs and warpgroups at the
    kernel's tiles for D."""
    S, D = q.shape
    bkv, consumers = TILES[D].bkv, TILES[D].consumers
    scale_log2 = np.float32(1.4426950408889634 / math.sqrt(D))
    O = np.full((S, D), np.nan, dtype=np.float32)  # the harness's outputs start as garbage
    LSE = np.full(S, np.nan, dtype=np.float32)

    def rows(x: np.ndarray, first: int, count: int) -> np.ndarray:  # a TMA box: zeros past S
        box = np.zeros((count, D), dtype=np.float32)
        box[: max(0, min(count, S - first))] = x[first:first + count]
        return box

    for q_tile in range(-(-S // (64 * consumers))):
        work = cta_work(q_tile, S, causal, bkv, 64 * consumers)
        for consumer in range(consumers):
            q0w = work.q0 + 64 * consumer
            if q0w >= S:  # a warpgroup with every row past S computes nothing
                continue
            tiles = warpgroup_tiles(work, q0w, S, causal, bkv)
            assert 1 <= tiles <= work.kv_tiles
            q_rows = rows(q, q0w, 64)
            m = np.full((128, 2), -np.inf, dtype=np.float32)
            l = np.zeros((128, 2), dtype=np.float32)
            o = None

            def scores(j: int) -> np.ndarray:
                acc = to_acc(q_rows @ rows(k, j * bkv, bkv).T)
                if j * bkv + bkv > S or (causal and j * bkv + bkv - 1 > q0w):  # needs_mask
                    key = j * bkv + acc_cols(bkv)
                    query = q0w + acc_rows(bkv)
                    acc = np.where((key >= S) | (causal & (key > query)), np.float32(-np.inf), acc)
                return acc.astype(np.float32)

            def pv(p: np.ndarray, j: int, o: np.ndarray | None) -> np.ndarray:
                product = to_acc(a_fragment_matrix(p) @ rows(v, j * bkv, bkv)).astype(np.float32)
                return product if o is None else o + product

            acc = scores(0)
            online_softmax(acc, m, l, scale_log2)
            p = pack_p(acc)
            for j in range(1, tiles):
                acc = scores(j)           # S_j is issued first ...
                o_next = pv(p, j - 1, o)  # ... then P_{j-1} V_{j-1}
                alpha = online_softmax(acc, m, l, scale_log2)
                o = o_next * alpha[:, (np.arange(D // 2) >> 1) & 1]
                p = pack_p(acc)
            o = pv(p, tiles - 1, o)

            total = np.stack([quad(l[:, h], np.sum) for h in range(2)], axis=1)
            lse = (m + np.log2(total)) * np.float32(LN2)
            out_rows = q0w + acc_rows(D)
            keep = out_rows < S  # the TMA store clips rows >= S
            values = bf16(o / total[:, (np.arange(D // 2) >> 1) & 1])
            O[out_rows[keep], acc_cols(D)[keep]] = values[keep]
            for h in range(2):
                lse_rows = q0w + (_WARP * 16 + _LANE // 4 + 8 * h)
                writer = (_LANE % 4 == 0) & (lse_rows < S)
                LSE[lse_rows[writer]] = lse[writer, h]
    return O, LSE


# D = 64 (192 query rows per CTA): the last one or two warpgroups of a CTA past S (S = 150, 200, 577), and causal
# CTAs whose warpgroups compute different numbers of 128-key tiles (S = 300: 1, 1 and 2 at q0 = 0; 2, 3 and none at
# q0 = 192). D = 128 and 256 (128 rows): the second warpgroup past S (S = 64, 130), partial key tiles.
CASES = [(64, 1, 0), (64, 17, 1), (64, 150, 0), (64, 193, 1), (64, 200, 0), (64, 257, 1), (64, 300, 1), (64, 577, 0),
         (128, 130, 0), (128, 191, 1), (128, 256, 1), (256, 64, 1), (256, 150, 0), (256, 193, 1)]


def assert_model_passes(D: int, S: int, causal: int) -> None:
    """The model on the task's inputs passes its comparison."""
    torch = pytest.importorskip("torch")
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs, run_reference

    task = get_task("attention_fwd")
    sizes = {"B": 1, "H": 2, "S": S, "D": D, "causal": causal}
    inputs = make_inputs(task, sizes, seed=7)
    q, k, v = (inputs[name].float().numpy() for name in ("Q", "K", "V"))
    O = np.empty((1, 2, S, D), dtype=np.float32)
    LSE = np.empty((1, 2, S), dtype=np.float32)
    for head in range(2):
        O[0, head], LSE[0, head] = model_head(q[0, head], k[0, head], v[0, head], bool(causal))
    actual = {"O": torch.from_numpy(O).to(torch.bfloat16), "LSE": torch.from_numpy(LSE)}
    for comparison in compare_outputs(task, actual, run_reference(task, dict(inputs), sizes)):
        assert comparison.passed, comparison


@pytest.mark.parametrize(("D", "S", "causal"), CASES, ids=[f"d{d}-s{s}-c{c}" for d, s, c in CASES])
def test_the_kernels_steps_give_the_tasks_answer(D: int, S: int, causal: int) -> None:
    assert_model_passes(D, S, causal)


def test_a_wrong_mask_is_caught() -> None:
    """The comparison above can fail: the model without the causal mask misses the causal reference."""
    rng = np.random.default_rng(0)
    q, k, v = (bf16(rng.standard_normal((100, 64)).astype(np.float32)) for _ in range(3))
    masked, _ = model_head(q, k, v, causal=True)
    unmasked, _ = model_head(q, k, v, causal=False)
    assert np.abs(masked - unmasked).max() > 0.1
    assert not np.isnan(masked).any() and not np.isnan(unmasked).any()


# ---- the rings: producer and consumers against the mbarriers ----------------------------------------


class Ring:
    """Completed phases of each stage's full and empty barrier (empty completes after `consumers` arrivals)."""

    def __init__(self, stages: int, consumers: int) -> None:
        self.stages, self.consumers = stages, consumers
        self.full = [0] * stages
        self.empty = [0] * stages
        self.arrivals = [0] * stages

    def release(self, stage: int) -> None:
        self.arrivals[stage] += 1
        if self.arrivals[stage] == self.consumers:
            self.arrivals[stage] = 0
            self.empty[stage] += 1


def parity_wait(completed: int, wanted: int) -> bool:
    """A parity wait for phase `wanted` (0-based) is only right when the barrier is one phase away or done."""
    assert completed in (wanted, wanted + 1), f"parity aliasing: waiting for phase {wanted} with {completed} done"
    return completed == wanted + 1


def producer(k_ring: Ring, v_ring: Ring, tiles: int):  # type: ignore[no-untyped-def]
    for j in range(tiles):
        stage, use = j % k_ring.stages, j // k_ring.stages
        for ring in (k_ring, v_ring):
            while use > 0 and not parity_wait(ring.empty[stage], use - 1):  # a fresh stage counts as released
                yield
            ring.full[stage] += 1  # the TMA bytes land


def consumer(k_ring: Ring, v_ring: Ring, tiles: int, mine: int):  # type: ignore[no-untyped-def]
    """One consumer warpgroup's ring traffic: its ``mine`` tiles (S_j one step ahead of P_{j-1} V_{j-1}), then the
    CTA's remaining tiles handed back unread."""
    stages = k_ring.stages

    def wait(ring: Ring, j: int):  # type: ignore[no-untyped-def]
        while not parity_wait(ring.full[j % stages], j // stages):
            yield

    if mine > 0:
        yield from wait(k_ring, 0)
        k_ring.release(0)
        for j in range(1, mine):
            yield from wait(k_ring, j)
            yield from wait(v_ring, j - 1)
            k_ring.release(j % stages)
            v_ring.release((j - 1) % stages)
        yield from wait(v_ring, mine - 1)
        v_ring.release((mine - 1) % stages)
    for j in range(mine, tiles):
        yield from wait(k_ring, j)
        k_ring.release(j % stages)
        yield from wait(v_ring, j)
        v_ring.release(j % stages)


def schedules(agents: int) -> list[list[int]]:
    """Round-robin orders that favour each agent in turn: forwards, backwards, rotated, and each agent
    stepping three times before the others (every interleaving cannot be tried)."""
    ring = list(range(agents))
    return [ring, ring[::-1], ring[1:] + ring[:1]] + [[a] * 3 + ring[a + 1:] + ring[:a] for a in ring]


def run_rings(S: int, causal: bool, tiles: Tiles) -> None:
    """Every CTA of a head: producer and consumers against the rings, under schedules that favour each side
    in turn."""
    bkv, consumers = tiles.bkv, tiles.consumers
    for q_tile in range(-(-S // (64 * consumers))):
        work = cta_work(q_tile, S, causal, bkv, 64 * consumers)
        mine = [warpgroup_tiles(work, work.q0 + 64 * c, S, causal, bkv) if work.q0 + 64 * c < S else 0
                for c in range(consumers)]
        for order in schedules(1 + consumers):
            k_ring, v_ring = Ring(tiles.stages, consumers), Ring(tiles.stages, consumers)
            agents = [producer(k_ring, v_ring, work.kv_tiles)] + [
                consumer(k_ring, v_ring, work.kv_tiles, mine[c]) for c in range(consumers)]
            done = [False] * len(agents)
            for _ in range(100_000):
                for a in order:
                    if not done[a]:
                        done[a] = next(agents[a], StopIteration) is StopIteration
                if all(done):
                    break
            assert all(done), f"deadlock: q_tile {q_tile}, order {order}, done {done}"
            assert k_ring.full == v_ring.full and sum(k_ring.full) == work.kv_tiles
            assert k_ring.empty == k_ring.full and v_ring.empty == v_ring.full  # every stage handed back


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("S", [1, 64, 129, 193, 200, 577, 1000])
@pytest.mark.parametrize("causal", [0, 1])
def test_the_rings_never_deadlock_or_alias_a_phase(D: int, S: int, causal: int) -> None:
    run_rings(S, bool(causal), TILES[D])


def test_the_schedules_are_the_ones_the_reference_model_always_ran() -> None:
    assert schedules(3) == [[0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 0, 0, 1, 2], [1, 1, 1, 2, 0], [2, 2, 2, 0, 1]]


def test_the_model_runs_the_kernels_consumer_counts() -> None:
    """The tiles the model reads from the source: three consumers at D = 64, two otherwise (a change there
    must reach the model, not leave it checking another kernel)."""
    assert {d: tiles.consumers for d, tiles in TILES.items()} == {64: 3, 128: 2, 256: 2}


def test_a_ring_that_counts_two_consumers_of_three_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rings model can fail: empty barriers initialised for two arrivals while three warpgroups release (the
    kernel's init with the wrong count) complete phases early, which the parity check sees."""
    init = Ring.__init__
    monkeypatch.setattr(Ring, "__init__", lambda self, stages, consumers: init(self, stages, 2))
    with pytest.raises(AssertionError):
        run_rings(1000, False, TILES[64])
