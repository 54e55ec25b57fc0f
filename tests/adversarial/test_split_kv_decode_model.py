"""split_kv_decode.cu modelled on the CPU: its chunking, its per-CTA online softmax and its two merges
(the four warps of a CTA, then the splits of a sequence), written out in PyTorch the way the kernels
compute, meet decode_gqa_paged's tolerance on inputs drawn as the evaluator draws them; a merge that
adds the splits' partial sums without rescaling them to a common maximum does not.

The case is an honest control (expected PASSED on the GPU); this shows without a GPU that its
arithmetic is right, so a GPU failure would be the evaluator's finding about the kernel's code, not
about its formulas. The model mirrors the kernel's constants: keep them in step with the .cu file.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ptxbench.evaluate.judgement.compare import compare_outputs  # noqa: E402
from ptxbench.tasks.loader import get_task  # noqa: E402
from ptxbench.tasks.reference import derive_inputs, make_inputs, run_reference  # noqa: E402

KERNEL = Path(__file__).resolve().parent / "split_kv_decode.cu"
TASK = get_task("decode_gqa_paged")
Tensors = dict[str, "torch.Tensor"]

# The kernel's constants (split_kv_decode.cu).
TILE, CONSUMER_WARPS, ROWS = 16, 4, 16
CTAS_PER_SM, MIN_CHUNK, MAX_CHUNK, CHUNK_STEP = 3, 128, 4096, 64
SCALE_LOG2 = 1.4426950408889634 * 0.08838834764831845  # log2(e) / sqrt(128), as a float in the kernel
SMS = 132  # H100 SXM and H200

# Small sizes of the task's structure: mixed lengths over pages of 16 with group 4, a longer batch over pages
# of 64 with group 8, and one sequence alone (the held-out "one-sequence" variant's shape).
SMALL = {
    "g4-p16": {"B": 5, "H": 16, "KH": 4, "P": 16, "NP": 120, "L": 1900},
    "g8-p64": {"B": 3, "H": 16, "KH": 2, "P": 64, "NP": 40, "L": 2500},
    "one-sequence": {"B": 1, "H": 16, "KH": 2, "P": 16, "NP": 60, "L": 950},
}
SEEDS = (11, 12)


def test_model_constants_match_the_kernel() -> None:
    source = KERNEL.read_text()

    def constant(name: str) -> int:
        match = re.search(rf"constexpr int {name} = (\d+);", source)
        assert match, name
        return int(match.group(1))

    assert (constant("kTile"), constant("kConsumerWarps"), constant("kRows"), constant("kCtasPerSm")) == (
        TILE, CONSUMER_WARPS, ROWS, CTAS_PER_SM)
    assert re.search(rf"kMinChunk = {MIN_CHUNK}, kMaxChunk = {MAX_CHUNK}, kChunkStep = {CHUNK_STEP};", source)


# ---- the host's choices ---------------------------------------------------------------------------

def choose_chunk(L: int, work_columns: int, sms: int = SMS) -> int:
    """choose_chunk in the .cu: about two waves of CTAs, a multiple of 64 keys, clamped."""
    target_items = (2 * sms * CTAS_PER_SM + work_columns - 1) // work_columns
    chunk = -(-L // max(target_items, 1))
    chunk = -(-chunk // CHUNK_STEP) * CHUNK_STEP
    return min(max(chunk, MIN_CHUNK), MAX_CHUNK)


def item_bound(sizes: dict[str, int], chunk: int) -> int:
    """The grid's x extent: an upper bound on sum_b ceil(n_b / chunk) from the sizes alone."""
    return (sizes["NP"] * sizes["P"] + sizes["B"] * (chunk - 1)) // chunk


def work_columns(sizes: dict[str, int]) -> int:
    group = sizes["H"] // sizes["KH"]
    return sizes["KH"] * -(-group // ROWS)


def lengths(inputs: Tensors, P: int) -> list[int]:
    indptr, last = inputs["kv_indptr"].tolist(), inputs["kv_last_page_len"].tolist()
    return [(indptr[b + 1] - indptr[b] - 1) * P + last[b] for b in range(len(last))]


def find_item(item: int, n: list[int], chunk: int) -> tuple[int, int] | None:
    """Warp 0's scan in the kernel: the (sequence, split) of grid item ``item``, None past the last."""
    running = 0
    for base in range(0, len(n), 32):
        splits = [-(-length // chunk) for length in n[base:base + 32]]
        inclusive = [sum(splits[:i + 1]) for i in range(len(splits))]
        if item < running + inclusive[-1]:
            src = next(i for i, value in enumerate(inclusive) if item < running + value)
            return base + src, item - running - (inclusive[src] - splits[src])
        running += inclusive[-1]
    return None


# ---- the kernels' arithmetic ----------------------------------------------------------------------

def split_partial(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", k0: int, k1: int):
    """One CTA of split_kv_decode_kernel for keys [k0, k1) of one kv head: q [G, 128] fp32, k and v [n, 128].
    Returns the split's normalised output, its log2-sum-exp, and the raw (max, sum, unnormalised output)
    of the whole split relative to its own maximum (for the wrong merge)."""
    tiles = -(-(k1 - k0) // TILE)
    warps = []
    for w in range(CONSUMER_WARPS):
        m = torch.full((q.shape[0],), -math.inf)
        l = torch.zeros(q.shape[0])
        acc = torch.zeros(q.shape[0], 128)
        for i in range(w, tiles, CONSUMER_WARPS):
            keys = slice(k0 + i * TILE, min(k1, k0 + (i + 1) * TILE))
            s = (q @ k[keys].T) * SCALE_LOG2                      # fp32 accumulators, then the scale
            new = torch.maximum(m, s.max(dim=-1).values)
            alpha = torch.exp2(m - new)                          # 0 on the warp's first tile
            p = torch.exp2(s - new[:, None])
            l = l * alpha + p.sum(dim=-1)                        # from the fp32 probabilities
            acc = acc * alpha[:, None] + p.to(torch.bfloat16).float() @ v[keys]  # P rounded for mma
            m = new
        warps.append((m, l, acc))
    top = torch.stack([m for m, _, _ in warps]).max(dim=0).values
    weights = [torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp2(m - top)) for m, _, _ in warps]
    total = sum(wt * l for wt, (_, l, _) in zip(weights, warps))
    summed = sum(wt[:, None] * acc for wt, (_, _, acc) in zip(weights, warps))
    return summed / total[:, None], top + torch.log2(total), (top, total, summed)


def split_kv_decode(inputs: Tensors, sizes: dict[str, int], chunk: int, merge: str = "rescaled") -> Tensors:
    """The whole call: every item's partial (as the decode kernel writes it), then the merge kernel.
    ``merge="rescaled"`` is the kernel's; ``"unscaled"`` adds the splits' raw sums and normalisers as if they
    shared one maximum, the classic wrong merge."""
    P, H, KH = sizes["P"], sizes["H"], sizes["KH"]
    group = H // KH
    n = lengths(inputs, P)
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"]
    out = torch.empty(len(n), H, 128, dtype=torch.float32)
    lse = torch.empty(len(n), H, dtype=torch.float32)
    for b, length in enumerate(n):
        pages = indices[indptr[b]:indptr[b + 1]].long()
        keys = inputs["K_cache"][pages].reshape(-1, KH, 128)[:length].float()
        values = inputs["V_cache"][pages].reshape(-1, KH, 128)[:length].float()
        for g in range(KH):
            q = inputs["Q"][b, g * group:(g + 1) * group].float()
            parts = [split_partial(q, keys[:, g], values[:, g], k0, min(length, k0 + chunk))
                     for k0 in range(0, length, chunk)]
            heads = slice(g * group, (g + 1) * group)
            if merge == "rescaled":
                lse2 = torch.stack([part_lse for _, part_lse, _ in parts])  # [splits, G]
                top = lse2.max(dim=0).values
                weights = torch.exp2(lse2 - top)
                total = weights.sum(dim=0)
                out[b, heads] = (weights[:, :, None] * torch.stack([o for o, _, _ in parts])).sum(dim=0) / total[:, None]
                lse[b, heads] = (top + torch.log2(total)) * math.log(2.0)
            else:
                sums = sum(raw[2] for _, _, raw in parts)
                norms = sum(raw[1] for _, _, raw in parts)
                out[b, heads] = sums / norms[:, None]
                lse[b, heads] = (torch.stack([raw[0] for _, _, raw in parts]).max(dim=0).values
                                 + torch.log2(norms)) * math.log(2.0)
    return {"O": out.to(torch.bfloat16), "LSE": lse}


def _judge(outputs: Tensors, inputs: Tensors, sizes: dict[str, int]) -> tuple[bool, int]:
    results = compare_outputs(TASK, outputs, run_reference(TASK, dict(inputs), sizes))
    return all(r.passed for r in results), sum(r.mismatched + r.nonfinite for r in results)


# ---- the tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("seed", SEEDS)
def test_the_kernels_arithmetic_meets_the_tolerance(name: str, seed: int) -> None:
    sizes = SMALL[name]
    inputs = make_inputs(TASK, sizes, seed)
    chunk = choose_chunk(sizes["L"], work_columns(sizes))
    n = lengths(inputs, sizes["P"])
    assert max(-(-x // chunk) for x in n) >= 3, "the inputs must exercise a merge of several splits"
    passed, bad = _judge(split_kv_decode(inputs, sizes, chunk), inputs, sizes)
    assert passed, f"{name}: {bad} elements out of tolerance"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_other_chunk_sizes_agree_too(name: str) -> None:
    """Chunks that end inside pages and tiles (a tile's padding slots masked) and a single split."""
    sizes = SMALL[name]
    inputs = make_inputs(TASK, sizes, SEEDS[0])
    for chunk in (72, 200, 4096):
        passed, bad = _judge(split_kv_decode(inputs, sizes, chunk), inputs, sizes)
        assert passed, f"{name}, chunk {chunk}: {bad} elements out of tolerance"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_merge_without_rescaling_fails(name: str) -> None:
    sizes = SMALL[name]
    inputs = make_inputs(TASK, sizes, SEEDS[0])
    chunk = choose_chunk(sizes["L"], work_columns(sizes))
    passed, bad = _judge(split_kv_decode(inputs, sizes, chunk, merge="unscaled"), inputs, sizes)
    assert not passed and bad > 0


def _layout(sizes: dict[str, int], seed: int = 5) -> Tensors:
    """A workload's page tables, drawn from its Q alone (K and V are not read by derive_inputs)."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(sizes["B"], sizes["H"], 128, generator=generator).to(torch.bfloat16)
    return derive_inputs(TASK, {"Q": q, "K_cache": None, "V_cache": None}, sizes)


@pytest.mark.parametrize("workload", TASK.workloads, ids=lambda w: w.name)
def test_every_workload_gets_a_grid_that_covers_its_items(workload) -> None:
    """On each of the task's workloads (held-out ones too): the grid bound covers every item, the item scan
    finds each (sequence, split) once, short sequences are one split and the longest are several."""
    sizes = dict(workload.sizes)
    chunk = choose_chunk(sizes["L"], work_columns(sizes))
    n = lengths(_layout(sizes), sizes["P"])
    assert sum(n) == sizes["L"]
    splits = [-(-x // chunk) for x in n]
    bound = item_bound(sizes, chunk)
    assert sum(splits) <= bound < sum(splits) + sizes["B"] + sizes["NP"] * sizes["P"] // chunk
    found = [find_item(item, n, chunk) for item in range(bound)]
    expected = [(b, s) for b, count in enumerate(splits) for s in range(count)]
    assert found[:len(expected)] == expected and all(f is None for f in found[len(expected):])
    assert all(count == 1 for x, count in zip(n, splits) if x <= chunk)
    assert max(splits) > 1, f"{workload.name}: chunk {chunk} never splits"
