"""The inputs catch the classic shortcuts, in every workload (held-out ones included) where the shapes
allow: rows of logits above 100 for softmax; page tables shuffled over the pool and last pages partial
for paged decode; expert groups of unequal and zero size; ragged sequences of unequal lengths; and a
tail (a size that is no multiple of the usual tile) in every tiled dimension.

Layouts are derived from the inputs the derivations read, drawn exactly as ``make_inputs`` draws them
(the same seed, the same order: those inputs come first in every task), while the large tensors the
derivations never read are left empty, so every workload is checked without drawing its KV cache or
its expert weights. tests/adversarial/test_shortcuts.py shows that each property is what exposes its
shortcut.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tasks import reference  # noqa: E402
from ptxbench.tasks.loader import bundled_suite, get_task  # noqa: E402
from ptxbench.tasks.model import InitKind, Task, Workload  # noqa: E402

SEEDS = (0, 1)


def layout(task: Task, workload: Workload, seed: int, read: int) -> dict[str, "torch.Tensor"]:
    """The derived inputs ``make_inputs(task, workload.sizes, seed)`` returns, drawing for real only the
    first ``read`` inputs (what the derivation reads); the other drawn inputs are empty placeholders."""
    generator = torch.Generator().manual_seed(seed)
    drawn: dict[str, torch.Tensor] = {}
    for index, spec in enumerate(i for i in task.inputs if i.init.kind is not InitKind.DERIVED):
        if index < read:
            drawn[spec.name] = reference._draw(spec, workload.sizes, generator, "cpu")
        else:
            drawn[spec.name] = torch.empty(0, dtype=getattr(torch, spec.dtype.value))
    return reference.derive_inputs(task, drawn, workload.sizes)


def _workloads(task_id: str) -> list[tuple[Task, Workload]]:
    task = get_task(task_id)
    return [(task, w) for w in task.workloads]


def _ids(pair: tuple[Task, Workload]) -> str:
    return f"{pair[0].id}:{pair[1].name}"


def test_the_layout_helper_matches_make_inputs() -> None:
    """On a small shape, the derived inputs of the helper are exactly make_inputs' own."""
    for task_id, sizes in (("decode_gqa_paged", {"B": 3, "H": 8, "KH": 2, "P": 16, "NP": 7, "L": 90}),
                           ("mla_decode_paged", {"B": 3, "H": 8, "P": 16, "NP": 7, "L": 90}),
                           ("moe_grouped_gemm", {"T": 48, "E": 8, "N": 64, "K": 64}),
                           ("prefill_gqa_ragged", {"B": 3, "S": 20, "DS": 3, "T": 51, "H": 8, "KH": 2})):
        task = get_task(task_id)
        full = reference.make_inputs(task, sizes, seed=4)
        derived = layout(task, Workload(name="small", role="visible", sizes=sizes), 4, read=1)
        assert derived and all(torch.equal(full[name], tensor) for name, tensor in derived.items()), task_id


# ---- softmax: rows above 100 ------------------------------------------------------------------------

LARGE = 1 << 26  # elements: above this a workload's offsets are checked without drawing the whole of X


@pytest.mark.parametrize("pair", _workloads("softmax"), ids=_ids)
def test_every_softmax_workload_has_rows_above_100(pair: tuple[Task, Workload]) -> None:
    """Drawn for real where X is at most 64M elements (every held-out workload); for the two larger
    (the timed one and a vocabulary), the row offsets, which are X's first draw from the seed, are read
    off the same generator: the very rows make_inputs shifts by 112, whose maxima then lie above 100
    unless all of a row's thousands of N(0, 3) values fall below -12."""
    task, workload = pair
    spec = task.inputs[0]
    rows, cols = spec.concrete_shape(workload.sizes)
    generator = torch.Generator().manual_seed(SEEDS[0])
    if rows * cols <= LARGE:
        maxima = reference._draw(spec, workload.sizes, generator, "cpu").float().amax(dim=1)
        assert (maxima > 100).any() and (maxima < 88).any(), workload.name  # both kinds of row in one batch
    else:
        offsets = reference._row_offsets(spec.init, rows, generator, "cpu")
        assert offsets is not None and (offsets >= 100).any() and (offsets == 0).any()
        assert spec.init.row_offset - 12 >= 100 and cols >= 1024


# ---- paged decode: shuffled page tables, partial last pages, unequal lengths --------------------------

def _paged(task_id: str) -> list[tuple[Task, Workload]]:
    return _workloads(task_id)


PAGED = _paged("decode_gqa_paged") + _paged("mla_decode_paged")


def _sequences(tables: dict[str, "torch.Tensor"], P: int) -> list[tuple[list[int], int]]:
    indptr, indices, last = (tables[k].tolist() for k in ("kv_indptr", "kv_indices", "kv_last_page_len"))
    return [(indices[indptr[b]:indptr[b + 1]], last[b]) for b in range(len(last))]


def _keys(pages: list[int], last: int, P: int) -> set[tuple[int, int]]:
    """The (page, slot) pairs a sequence attends to."""
    return {(page, slot) for i, page in enumerate(pages) for slot in range(P if i < len(pages) - 1 else last)}


@pytest.mark.parametrize("pair", PAGED, ids=_ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_every_paged_workload_scatters_its_pages_and_ends_in_partial_pages(pair: tuple[Task, Workload],
                                                                           seed: int) -> None:
    """Reading sequence b's pages as kv_indptr[b], kv_indptr[b] + 1, ... (pages assumed in order) attends to
    other keys than its own for some sequence; some last page is partial wherever pages hold more than one
    token; and sequences differ in length wherever there are several."""
    task, workload = pair
    sizes = workload.sizes
    P, NP = sizes["P"], sizes["NP"]
    tables = layout(task, workload, seed, read=1)
    sequences = _sequences(tables, P)
    assert sorted(tables["kv_indices"].tolist()) == list(range(NP)), "a permutation of the pool"
    start = 0
    in_order_differs = False
    for pages, last in sequences:
        assumed = list(range(start, start + len(pages)))
        in_order_differs |= _keys(pages, last, P) != _keys(assumed, last, P)
        start += len(pages)
    assert in_order_differs, f"{workload.name}: the page table is as good as in order"
    if P > 1:
        assert any(last < P for _, last in sequences), f"{workload.name}: every last page is full"
    lengths = [(len(pages) - 1) * P + last for pages, last in sequences]
    assert sum(lengths) == sizes["L"]
    if sizes["B"] > 1:
        assert len(set(lengths)) > 1, f"{workload.name}: all sequences have one length"


# ---- MoE: groups of unequal and zero size ------------------------------------------------------------

@pytest.mark.parametrize("pair", _workloads("moe_grouped_gemm"), ids=_ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_every_moe_workload_has_unequal_and_empty_groups(pair: tuple[Task, Workload], seed: int) -> None:
    task, workload = pair
    T, E = workload.sizes["T"], workload.sizes["E"]
    ends = layout(task, workload, seed, read=1)["expert_offsets"].long()
    counts = torch.diff(ends, prepend=torch.zeros(1, dtype=torch.long))
    assert int(ends[-1]) == T and (counts >= 0).all()
    assert (counts == 0).any(), f"{workload.name}: no empty expert"
    assert len(set(counts[counts > 0].tolist())) > 1, f"{workload.name}: the non-empty groups are equal"
    balanced = torch.tensor([(e + 1) * T // E for e in range(E)])
    assert not torch.equal(ends, balanced), f"{workload.name}: the routing is balanced"


# ---- ragged prefill: unequal lengths ----------------------------------------------------------------

@pytest.mark.parametrize("pair", _workloads("prefill_gqa_ragged"), ids=_ids)
@pytest.mark.parametrize("seed", SEEDS)
def test_every_ragged_batch_has_sequences_of_unequal_lengths(pair: tuple[Task, Workload], seed: int) -> None:
    task, workload = pair
    B, T = workload.sizes["B"], workload.sizes["T"]
    bounds = layout(task, workload, seed, read=1)["seq_indptr"].tolist()
    lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    assert bounds[0] == 0 and bounds[-1] == T and min(lengths) >= 1
    if B > 1:
        assert len(set(lengths)) > 1, f"{workload.name}: all sequences have one length"
        equal = [b * (T // B) for b in range(B)] + [T]
        assert bounds != equal
    else:
        assert workload.sizes["DS"] == 0  # one sequence: the only batch where equal lengths are the truth


def test_the_large_workloads_draw_their_layout_from_a_block_sum_equal_to_the_whole() -> None:
    """prefill's sequence order comes from the integer sum of Q's bits, now taken a block at a time: the
    same number as the sum of one int64 copy of Q (which was four times Q's size)."""
    namespace = reference._namespace(get_task("prefill_gqa_ragged"))
    q = torch.randn(3, (1 << 24) + 4099, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    assert namespace["_bits_sum"](q) == int(q.view(torch.int16).to(torch.int64).sum())


# ---- tails in every tiled dimension ------------------------------------------------------------------

# Per task, the dimensions a kernel tiles and the tile a kernel for the task typically takes; a dimension
# whose divisibility already guarantees the tile (fp8's K, a multiple of 128) is not listed. A tail is a
# workload's size that is no multiple of the tile.
TILES: dict[str, dict[str, int]] = {
    "gemm_bf16": {"M": 128, "N": 128, "K": 128},
    "gemm_fp8": {"M": 128, "N": 128},
    "gemm_fp8_blockscale": {"M": 128, "N": 128},
    "moe_grouped_gemm": {"T": 128, "N": 128, "K": 128},
    "attention_fwd": {"S": 128},
    "attention_bwd": {"S": 128},
    "attention_fp8_fwd": {"S": 128},
    "decode_gqa_paged": {"L": 64},
    "mla_decode_paged": {"H": 64, "L": 64},
    "prefill_gqa_ragged": {"T": 128, "S": 128},
    "rmsnorm": {"T": 8, "Hd": 256},
    "add_rmsnorm": {"T": 8, "Hd": 256},
    "silu_mul": {"T": 8, "N": 256},
    "softmax": {"R": 8, "C": 128},
    "rope": {"T": 8},
    "transpose": {"R": 64, "C": 64},
}


def test_the_tile_table_covers_every_task() -> None:
    assert set(TILES) == {t.id for t in bundled_suite()}


@pytest.mark.parametrize("task_id", sorted(TILES))
def test_every_tiled_dimension_has_a_tail(task_id: str) -> None:
    """A kernel that handles only whole tiles in any one dimension fails some workload. At least one tail
    per dimension is held out, so a tail-free kernel cannot be fitted to the shown shapes alone."""
    task = get_task(task_id)
    for axis, tile in TILES[task_id].items():
        tails = [w for w in task.workloads if w.sizes[axis] % tile]
        assert tails, f"{task_id}: every workload's {axis} is a multiple of {tile}"
        assert [w for w in tails if w.role.value == "heldout"], f"{task_id}: no held-out tail in {axis}"
