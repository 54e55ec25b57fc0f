"""A NumPy model of the mla_decode_paged reference kernel (kernels/reference/sm_90a/mla_decode_paged.cu), step for
step, checked against the task's reference under the task's tolerance: the logic no GPU is asked about here (the
host's split of the batch's 64-key tiles into one wave of equal chunks on an upper bound of the tile count, the walk
that finds a chunk's first sequence by a 32-wide prefix sum and steps on, the producer's page groups (a page of 64,
four of 16, 64 pages of 1) and the rows they land on, the two warpgroups' halves of S with the max exchanged, P in
bf16, the zeroed value rows past a sequence's end, segments and their workspace slots c + b in bf16, sequences one
CTA holds whole written straight to the outputs, and the merge of the rest).

Shared memory is modelled as it persists: a stage keeps what earlier tiles left in rows a tile does not load, and
starts as NaN, and every slot past a last page's fill holds NaN in the caches, so a missing mask or zeroing shows
as a non-finite answer. The P tile's swizzled addresses are the kernel's formula, checked to be the 128-byte
swizzle wgmma reads. What it cannot show: the tensor maps, the TMA unit, wgmma's descriptors, the mbarrier ring's
timing, the speed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptxbench.kernels import reference_folder

from .kernel_models import kernel_constants

KERNEL = reference_folder("sm_90a") / "mla_decode_paged.cu"
LOG2E = np.float32(1.4426950408889634)
LN2 = np.float32(math.log(2.0))


C = kernel_constants(KERNEL, *("kLatent", "kRope", "kRows", "kKeys", "kStages"))
ROWS, KEYS, STAGES, LATENT = C["kRows"], C["kKeys"], C["kStages"], C["kLatent"]
DIMS = C["kLatent"] + C["kRope"]
HALF = KEYS // 2


def test_the_model_runs_the_kernels_constants() -> None:
    assert (LATENT, DIMS, ROWS, KEYS) == (512, 576, 64, 64), "the model below assumes these"
    assert STAGES >= 2


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest, ties to even) and back, as __floats2bfloat162_rn does (NaN stays NaN)."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


# ---- the host's split and the walk -------------------------------------------------------------------


def split(B: int, H: int, P: int, NP: int, L: int, sms: int) -> tuple[int, int, int]:
    """(tiles bound, chunk, splits) as the host picks them."""
    tiles = NP if P == KEYS else (L + 63 * B) // KEYS
    head_blocks = -(-H // ROWS)
    want = max(1, sms // head_blocks)
    chunk = -(-tiles // want)
    return tiles, chunk, -(-tiles // chunk)


def keys_of(indptr: list[int], last: list[int], P: int, s: int) -> int:
    return (indptr[s + 1] - indptr[s] - 1) * P + last[s]


def walk(indptr: list[int], last: list[int], P: int, t0: int, t1: int) -> list[dict[str, int | bool]]:
    """TileWalk: begin's 32-wide prefix search, then next() tile by tile."""
    B = len(last)
    found = None
    before = 0
    for base in range(0, B, 32):
        counts = [-(-keys_of(indptr, last, P, s) // KEYS) if s < B else 0 for s in range(base, base + 32)]
        incl = np.cumsum(counts).tolist()
        hits = [lane for lane in range(32) if base + lane < B and before + incl[lane] > t0]
        if hits:
            h = hits[0]
            found = (base + h, before + incl[h] - counts[h])
            break
        before += incl[31]
    if found is None:
        return []
    b, tstart = found
    tiles = []
    n = keys_of(indptr, last, P, b)
    ntiles = -(-n // KEYS)
    for tile in range(t0, t1):
        j = tile - tstart
        if j >= ntiles:
            assert j == ntiles
            if b + 1 >= B:
                break
            b, tstart = b + 1, tstart + ntiles
            n = keys_of(indptr, last, P, b)
            ntiles = -(-n // KEYS)
            j = 0
        is_last = j + 1 == ntiles
        tiles.append({"b": b, "j": j, "tile": tile, "tstart": tstart, "first_page": indptr[b],
                      "valid": min(KEYS, n - j * KEYS), "seg_start": j == 0 or tile == t0,
                      "ends": is_last or tile + 1 == t1, "whole": is_last and tstart >= t0})
    return tiles


def merge_chunks(indptr: list[int], last: list[int], P: int, b: int, tstart: int, chunk: int) -> range:
    ntiles = -(-keys_of(indptr, last, P, b) // KEYS)
    return range(tstart // chunk, (tstart + ntiles - 1) // chunk + 1)


def p_offset(row: int, key: int) -> int:
    """The kernel's byte offset of P[row][key] in the 64 x 64 bf16 tile."""
    return row * 128 + (((key >> 3) ^ (row & 7)) << 4) + (key & 7) * 2


def test_the_p_tile_is_the_128_byte_swizzle_wgmma_reads() -> None:
    offsets = {p_offset(r, k) for r in range(ROWS) for k in range(0, KEYS, 2)}
    assert len(offsets) == ROWS * KEYS // 2 and max(offsets) < ROWS * KEYS * 2
    for r in range(ROWS):
        for k in range(KEYS):
            linear = r * 128 + k * 2  # the unswizzled address; the swizzle XORs bits 4-6 with bits 7-9
            assert p_offset(r, k & ~1) + (k & 1) * 2 == linear ^ (((linear >> 7) & 7) << 4)


# ---- the kernel, step by step ------------------------------------------------------------------------


def decode(inputs: dict[str, np.ndarray], sizes: dict[str, int], sms: int, *, zero_values: bool = True,
           merged: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
    B, H, P, NP, L = (sizes[k] for k in ("B", "H", "P", "NP", "L"))
    indptr, indices, last = inputs["indptr"], inputs["indices"], inputs["last"]
    q = np.concatenate([inputs["q_nope"], inputs["q_pe"]], axis=-1).reshape(B * H, DIMS)
    cache = np.concatenate([inputs["ckv"], inputs["kpe"]], axis=-1).reshape(NP * P, DIMS)
    scale_log2 = np.float32(inputs["scale"] * LOG2E)
    tiles, chunk, splits = split(B, H, P, NP, L, sms)
    output = np.full((B, H, LATENT), np.nan, dtype=np.float32)
    lse = np.full((B, H), np.nan, dtype=np.float32)
    slots = splits + B - 1
    part_o = np.full((slots, H, LATENT), np.nan, dtype=np.float32)
    part_lse = np.full((slots, H), np.nan, dtype=np.float32)
    seq_tile0 = np.full(B, -1, dtype=np.int64)
    written: set[tuple[int, int]] = set()
    rows = min(P, KEYS)
    groups = KEYS // rows
    covered: list[int] = []
    for y in range(-(-H // ROWS)):
        head0 = y * ROWS
        for c in range(splits):
            t0, t1 = c * chunk, min(c * chunk + chunk, tiles)
            stages = [np.full((KEYS, DIMS), np.nan, dtype=np.float32) for _ in range(STAGES)]
            qs = np.zeros((ROWS, DIMS), dtype=np.float32)
            for i, w in enumerate(walk(indptr, last, P, t0, t1)):
                if y == 0:
                    covered.append(int(w["tile"]))
                tile = stages[i % STAGES]
                # the producer: `used` groups of `rows` cache rows at tile rows g * rows
                used = -(-int(w["valid"]) // rows)
                for g in range(used):
                    page = indices[int(w["first_page"]) + int(w["j"]) * groups + g]
                    tile[g * rows:(g + 1) * rows] = cache[page * P:page * P + rows]
                b, valid = int(w["b"]), int(w["valid"])
                if w["seg_start"]:
                    qrows = np.arange(b * H + head0, b * H + head0 + ROWS)
                    qs = np.where((qrows < B * H)[:, None], q[np.minimum(qrows, B * H - 1)], 0.0).astype(np.float32)
                    if w["j"] == 0 and y == 0:
                        seq_tile0[b] = int(w["tstart"])
                    o = [np.zeros((ROWS, 256), dtype=np.float32) for _ in range(2)]
                    m = np.full(ROWS, -np.inf, dtype=np.float32)
                    sums = [np.zeros(ROWS, dtype=np.float32) for _ in range(2)]
                with np.errstate(invalid="ignore", over="ignore"):
                    sc = [(qs @ tile[HALF * wg:HALF * (wg + 1)].T).astype(np.float32) for wg in range(2)]
                keys = [np.arange(HALF * wg, HALF * (wg + 1)) for wg in range(2)]
                sc = [np.where(keys[wg][None, :] >= valid, -np.inf, sc[wg]) for wg in range(2)]
                mine = [sc[wg].max(axis=1) for wg in range(2)]
                tile_max = np.maximum(mine[0], mine[1])
                m_new = np.maximum(m, tile_max * scale_log2)
                alpha = np.exp2(m - m_new).astype(np.float32)
                m = m_new
                p = [np.exp2(sc[wg] * scale_log2 - m_new[:, None]).astype(np.float32) for wg in range(2)]
                sums = [sums[wg] * alpha + p[wg].sum(axis=1) for wg in range(2)]
                pb = bf16(np.concatenate(p, axis=1))
                if zero_values and valid < KEYS:
                    tile[valid:, :LATENT] = 0.0
                with np.errstate(invalid="ignore"):
                    o = [o[wg] * alpha[:, None] + pb @ tile[:, 256 * wg:256 * (wg + 1)] for wg in range(2)]
                if w["ends"]:
                    total = sums[0] + sums[1]
                    full = np.concatenate(o, axis=1) / total[:, None]
                    lse2 = m + np.log2(total)
                    live = [r for r in range(ROWS) if head0 + r < H]
                    heads = [head0 + r for r in live]
                    if w["whole"]:
                        output[b, heads] = bf16(full[live])
                        lse[b, heads] = lse2[live] * LN2
                    else:
                        slot = c + b
                        assert (slot, heads[0]) not in written, "two pieces in one workspace slot"
                        written.add((slot, heads[0]))
                        part_o[slot, heads] = bf16(full[live])
                        part_lse[slot, heads] = lse2[live]
    assert sorted(covered) == sorted(set(covered)), "a tile walked twice"
    if not merged:
        return output, lse, chunk
    for b in range(B):
        assert seq_tile0[b] >= 0, f"no CTA recorded sequence {b}'s first tile"
        chunks = merge_chunks(indptr, last, P, b, int(seq_tile0[b]), chunk)
        if len(chunks) == 1:
            continue
        lses = part_lse[[c + b for c in chunks]]  # [parts, H]
        top = lses.max(axis=0)
        weights = np.exp2(lses - top).astype(np.float32)
        acc = np.einsum("ph,phd->hd", weights, part_o[[c + b for c in chunks]])
        total = weights.sum(axis=0)
        output[b] = bf16(acc / total[:, None])
        lse[b] = (top + np.log2(total)) * LN2
    return output, lse, chunk


# ---- against the task --------------------------------------------------------------------------------

SMALL = {
    "h128-p64": {"B": 5, "H": 128, "P": 64, "NP": 40, "L": 2300},
    "h16-p64": {"B": 3, "H": 16, "P": 64, "NP": 12, "L": 700},
    "h64-p16": {"B": 4, "H": 64, "P": 16, "NP": 50, "L": 760},
    "h16-p1": {"B": 6, "H": 16, "P": 1, "NP": 400, "L": 400},
    "b1-h128-p64": {"B": 1, "H": 128, "P": 64, "NP": 10, "L": 600},
    "one-token-p64": {"B": 1, "H": 16, "P": 64, "NP": 1, "L": 1},
    "one-token-p16": {"B": 1, "H": 16, "P": 16, "NP": 1, "L": 1},
    "one-page-each-p16": {"B": 40, "H": 16, "P": 16, "NP": 40, "L": 300},
    "b70-p1": {"B": 70, "H": 16, "P": 1, "NP": 300, "L": 300},
}
SMS = (132, 5)


def _inputs(sizes: dict[str, int], seed: int):  # type: ignore[no-untyped-def]
    """The task's inputs (drawn as the evaluator draws them), every slot past a last page's fill NaN in both caches."""
    torch = pytest.importorskip("torch")
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs

    task = get_task("mla_decode_paged")
    inputs = make_inputs(task, sizes, seed)
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"].tolist()
    last = inputs["kv_last_page_len"].tolist()
    for b in range(sizes["B"]):
        page = indices[indptr[b + 1] - 1]
        for name in ("ckv_cache", "kpe_cache"):
            inputs[name][page, last[b]:] = float("nan")
    model = {"q_nope": inputs["q_nope"].float().numpy(), "q_pe": inputs["q_pe"].float().numpy(),
             "ckv": inputs["ckv_cache"].float().numpy(), "kpe": inputs["kpe_cache"].float().numpy(),
             "indptr": indptr, "indices": indices, "last": last, "scale": float(inputs["sm_scale"].item())}
    return task, inputs, model, torch


def _judge(task, inputs, sizes, output, lse, torch) -> tuple[bool, int]:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.judgement.compare import compare_outputs
    from ptxbench.tasks.reference import run_reference

    actual = {"output": torch.from_numpy(output).to(torch.bfloat16), "lse": torch.from_numpy(lse)}
    results = compare_outputs(task, actual, run_reference(task, dict(inputs), sizes))
    return all(r.passed for r in results), sum(r.mismatched + r.nonfinite for r in results)


CASES = [(name, sms) for name in sorted(SMALL) for sms in SMS]


@pytest.mark.parametrize(("name", "sms"), CASES, ids=[f"{n}-sm{s}" for n, s in CASES])
def test_the_kernels_steps_give_the_tasks_answer(name: str, sms: int) -> None:
    sizes = SMALL[name]
    task, inputs, model, torch = _inputs(sizes, seed=7)
    output, lse, chunk = decode(model, sizes, sms)
    assert np.isfinite(output).all() and np.isfinite(lse).all(), "every output written, nothing from the NaN slots"
    passed, bad = _judge(task, inputs, sizes, output, lse, torch)
    assert passed, f"{name}, chunk {chunk} tiles: {bad} elements out of tolerance"


def test_without_zeroing_the_values_past_the_end_nan_reaches_the_output() -> None:
    """The model can fail: a zero P times a stale NaN value row is NaN."""
    sizes = SMALL["h64-p16"]
    _, _, model, _ = _inputs(sizes, seed=7)
    output, _, _ = decode(model, sizes, SMS[0], zero_values=False)
    assert np.isnan(output).any()


def test_without_the_merge_the_split_sequences_are_missing() -> None:
    sizes = SMALL["h128-p64"]
    _, _, model, _ = _inputs(sizes, seed=8)
    output, _, _ = decode(model, sizes, SMS[0], merged=False)
    assert np.isnan(output).any(), "the merge writes what the decode kernel leaves to it"


# ---- the walk on every workload's layout -------------------------------------------------------------


def _layout(sizes: dict[str, int], seed: int = 5) -> tuple[list[int], list[int], list[int]]:
    """A workload's page tables, drawn from its q_nope alone (derive_inputs reads no cache)."""
    torch = pytest.importorskip("torch")
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import derive_inputs

    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(sizes["B"], sizes["H"], 512, generator=generator).to(torch.bfloat16)
    layout = derive_inputs(get_task("mla_decode_paged"), {"q_nope": q, "q_pe": None, "ckv_cache": None,
                                                          "kpe_cache": None}, sizes)
    return (layout["kv_indptr"].tolist(), layout["kv_indices"].tolist(), layout["kv_last_page_len"].tolist())


def _shapes() -> dict[str, dict[str, int]]:
    from ptxbench.tasks.loader import get_task

    return {w.name: dict(w.sizes) for w in get_task("mla_decode_paged").workloads} | {
        f"edge-{k}": v for k, v in SMALL.items()}


@pytest.mark.parametrize("sms", (132, 114))
@pytest.mark.parametrize("name", sorted(_shapes()))
def test_every_workload_is_covered_once_by_the_walks_and_the_merge(name: str, sms: int) -> None:
    """Every tile of every sequence walked by exactly one CTA of a head block, within one wave; each piece in its own
    slot; a sequence is written whole by one CTA exactly when the merge finds it in one chunk."""
    sizes = _shapes()[name]
    B, H, P, NP, L = (sizes[k] for k in ("B", "H", "P", "NP", "L"))
    indptr, _, last = _layout(sizes)
    assert sum(keys_of(indptr, last, P, b) for b in range(B)) == L
    tiles, chunk, splits = split(B, H, P, NP, L, sms)
    assert splits * -(-H // ROWS) <= sms, "one wave"
    true_tiles = sum(-(-keys_of(indptr, last, P, b) // KEYS) for b in range(B))
    assert true_tiles <= tiles, "the host's bound covers every tile"
    seen: list[tuple[int, int]] = []
    slots: set[int] = set()
    tstart: dict[int, int] = {}
    whole: dict[int, bool] = {}
    for c in range(splits):
        for w in walk(indptr, last, P, c * chunk, min(c * chunk + chunk, tiles)):
            b = int(w["b"])
            seen.append((b, int(w["j"])))
            if w["j"] == 0:
                tstart[b] = int(w["tstart"])
            if w["ends"]:
                if w["whole"]:
                    whole[b] = True
                else:
                    assert c + b not in slots
                    slots.add(c + b)
    expected = [(b, j) for b in range(B) for j in range(-(-keys_of(indptr, last, P, b) // KEYS))]
    assert seen == expected
    assert len(tstart) == B
    for b in range(B):
        one_chunk = len(merge_chunks(indptr, last, P, b, tstart[b], chunk)) == 1
        assert one_chunk == whole.get(b, False), b
    assert max(slots, default=0) < splits + B - 1
