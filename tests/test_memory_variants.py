"""The memory-bound variants of benchmarks/variants (rmsnorm.*, transpose.*) as the next GPU call will run
them: each splices into its reference and builds for sm_90a with every required feature in the SASS and no
spills, with the knob overrides the lead's command uses; and the index logic they change, which only a GPU
run would otherwise exercise, is modelled here: which 16-byte chunks of a row each thread holds in registers,
which tiles each warp owns, and where the warp's ldmatrix/stmatrix pairs move every element of a tile."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ptxbench.kernels import reference_folder

from .conftest import repo_script
from .kernel_models import grouped_tile

kernel_variants = repo_script("benchmarks/kernel_variants.py")

VARIANTS = kernel_variants.VARIANTS
# The variants of the lead's command lines that change device code (benchmarks/variants/*.cu say how to run
# them); the plain ones share their build with test_kernel_variants.py's through the session's build cache.
BUILT = [
    ("rmsnorm", "regs:@rmsnorm.regs_one_barrier.cu"),
    ("rmsnorm", "regs128:@rmsnorm.regs_one_barrier.cu;kThreads=128"),
    ("rmsnorm", "bulkstore:@rmsnorm.bulk_store.cu"),
    ("rmsnorm", "lean:@rmsnorm.ring_sizing.cu"),
    ("rmsnorm", "regs-lean:@rmsnorm.regs_one_barrier.cu;@rmsnorm.ring_sizing.cu"),
    ("transpose", "warps:@transpose.warp_tiles.cu"),
]


def _source(task: str, text: str) -> str:
    return kernel_variants.variant_sources(reference_folder("sm_90a") / f"{task}.cu",
                                           [kernel_variants.parse_variant(text)])[0]


@pytest.mark.parametrize("task, text", BUILT, ids=[t for _, t in BUILT])
def test_the_variant_builds_with_its_required_features_and_no_spills(task, text):
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.tasks.loader import get_task

    report = check_source(_source(task, text), Arch.SM_90A, get_task(task), f"{task}.cu")
    assert report.build.ok, report.build.diagnosis
    assert report.ok, [r.message for r in report.static.requirements] + list(report.static.policy_violations)
    assert all(k.resources.spill_store_bytes == 0 for k in report.static.kernels)


def test_the_bulk_store_variant_stores_with_the_copy_engine():
    """Its point is Y leaving through cp.async.bulk; the reference's global stores of Y must be gone."""
    source = _source("rmsnorm", "b:@rmsnorm.bulk_store.cu")
    kernel = source[source.index("rmsnorm_bulk_kernel("):source.index("rmsnorm_plain_kernel(")]
    assert "cp.async.bulk.global.shared::cta.bulk_group" in kernel and "y4[" not in kernel


def test_the_ring_sizing_knobs_are_overridable():
    source = _source("rmsnorm", "l:@rmsnorm.ring_sizing.cu;kRingBytesPerSm=0;kCtasPerSm=2;kLeanDecode=false")
    assert "kRingBytesPerSm = 0;" in source and "kCtasPerSm = 2;" in source and "kLeanDecode = false;" in source


# ---- rmsnorm.regs_one_barrier: the chunks in registers -------------------------------------------------

def _regs_constants() -> tuple[int, str, str]:
    text = (VARIANTS / "rmsnorm.regs_one_barrier.cu").read_text()
    elems = re.search(r"constexpr int kRegRowElems = (\d+);", text)
    per_thread = re.search(r"constexpr int kMaxVec = (.+?);", text)
    held = re.search(r"const int v = (tid \+ j \* kThreads);", text)
    rest = re.search(r"for \(int v = (tid \+ kMaxVec \* kThreads); v < nvec; v \+= kThreads\)", text)
    assert elems and per_thread and held and rest, "the variant's chunk mapping changed form: update this model"
    assert per_thread[1] == "kRegRowElems / 8 / kThreads"
    return int(elems[1]), held[1], rest[1]


@pytest.mark.parametrize("threads", [128, 256, 512])
@pytest.mark.parametrize("hd", [896, 2880, 4096, 5120, 7168, 8192, 16384, 16448])
def test_every_chunk_of_a_row_is_read_and_written_once_by_the_thread_that_holds_it(threads, hd):
    """Pass 1 and pass 2 walk the same chunks: those held in registers (j < kMaxVec) and, for rows longer
    than kRegRowElems, the rest re-read from shared memory; together every chunk exactly once."""
    elems, _, _ = _regs_constants()
    max_vec, nvec = elems // 8 // threads, hd // 8
    owner = np.full(nvec, -1)
    for tid in range(threads):
        chunks = [tid + j * threads for j in range(max_vec) if tid + j * threads < nvec]
        chunks += list(range(tid + max_vec * threads, nvec, threads))
        for v in chunks:
            assert owner[v] == -1, f"chunk {v} taken twice"
            owner[v] = tid
    assert (owner >= 0).all()
    in_regs = nvec <= max_vec * threads
    # Every task workload keeps its row in registers (one barrier per row); longer rows take the old path.
    assert in_regs == (hd <= elems)


def test_two_slots_of_partial_sums_fit_where_w_was():
    """The parity-alternating slots (2 x warps floats) live in W's buffer, at least 128 bytes (Hd >= 64)."""
    for threads in (128, 256, 512):
        assert 2 * (threads // 32) * 4 <= 128


# ---- rmsnorm.ring_sizing: a ring shallower than two stages is never refilled ---------------------------

@pytest.mark.parametrize("t", [1, 5, 7, 32, 131, 132, 133, 264, 1000, 3000, 16384])
@pytest.mark.parametrize("sms, blocks", [(132, 1), (132, 4), (132, 8), (78, 3)])
def test_a_lean_decode_ring_holds_every_row_its_cta_sees(t, sms, blocks):
    """stages = min(stages, ceil(T / min(T, SMs))), grid = min(T, SMs x blocks): a ring cut below the
    reference's is at least as deep as any CTA's row count, so no stage is refilled (a 1-stage ring would
    otherwise wait for a row it has not loaded yet in the bulk-store variant)."""
    text = (VARIANTS / "rmsnorm.ring_sizing.cu").read_text()
    assert "const int64_t units = T < int64_t(dev->sms) ? T : int64_t(dev->sms);" in text
    assert "const unsigned grid = unsigned(T < resident ? T : resident);" in text
    for stages in (2, 4, 8):
        per_cta = math.ceil(t / min(t, sms))
        lean = min(stages, per_cta)
        grid = min(t, sms * blocks)
        rows = [len(range(b, t, grid)) for b in range(grid)]
        if lean < stages:
            assert max(rows) <= lean


# ---- transpose.warp_tiles: tiles per warp, and the transposition of a tile by one warp ---------------

@pytest.mark.parametrize("r, c", [(16384, 8192), (4096, 4096), (128, 32768), (1000, 4104), (24, 12000),
                                  (3072, 5120), (16384, 128)])
def test_the_warps_take_every_tile_once(r, c):
    text = (VARIANTS / "transpose.warp_tiles.cu").read_text()
    assert "const int first = warp * int(gridDim.x) + int(blockIdx.x);" in text
    assert "const int64_t needed = (tiles + kWarps - 1) / kWarps;" in text
    n_rt, n_ct = -(-r // 64), -(-c // 64)
    tiles = n_rt * n_ct
    grid = min(-(-tiles // 4), 132)
    seen = np.zeros((n_rt, n_ct), dtype=np.int64)
    gwarps = grid * 4
    for block in range(grid):
        for warp in range(4):
            first = warp * grid + block
            mine = (tiles - first + gwarps - 1) // gwarps if first < tiles else 0
            for i in range(mine):
                seen[grouped_tile(first + i * gwarps, n_rt, n_ct, 8)] += 1
    assert (seen == 1).all()


def _swizzled(row: int, col: int) -> int:
    """Byte offset of element (row, col) of a 64 x 64 bf16 tile written by TMA with SWIZZLE_128B."""
    return row * 128 + (((col // 8) ^ (row % 8)) << 4) + (col % 8) * 2


def test_one_warp_transposes_a_whole_swizzled_tile():
    """ldmatrix.x4.trans then stmatrix.x4 with the variant's addresses, lane by lane (PTX ISA semantics:
    lanes 8m..8m+7 address rows 0..7 of matrix m; register i of lane t holds row t/4, columns 2(t%4) and
    2(t%4)+1 of matrix i, transposed on load with .trans): the output tile is the input's transpose."""
    text = (VARIANTS / "transpose.warp_tiles.cu").read_text()
    for expr in ("for (int j = 0; j < 16; ++j)", "const int b = j * 4 + m;", "const int bi = b >> 3, bj = b & 7;",
                 "src + (8 * bi + k) * 128 + ((bj ^ k) << 4)", "dst + (8 * bj + k) * 128 + ((bi ^ k) << 4)"):
        assert expr in text, f"the variant's tile addressing changed ({expr!r}): update this model"
    rng = np.random.default_rng(0)
    tile = rng.integers(0, 2**16, size=(64, 64), dtype=np.uint16)
    smem_in = np.zeros(8192, dtype=np.uint8)
    for row in range(64):
        for col in range(64):
            smem_in[_swizzled(row, col):_swizzled(row, col) + 2] = np.frombuffer(tile[row, col].tobytes(), np.uint8)
    smem_out = np.full(8192, 0xAB, dtype=np.uint8)

    def element(buf: np.ndarray, address: int, i: int) -> int:
        return int(np.frombuffer(buf[address + 2 * i:address + 2 * i + 2].tobytes(), np.uint16)[0])

    for j in range(16):
        ld_rows, st_rows = {}, {}
        for lane in range(32):
            m, k = lane >> 3, lane & 7
            b = j * 4 + m
            bi, bj = b >> 3, b & 7
            ld_rows[(m, k)] = (8 * bi + k) * 128 + ((bj ^ k) << 4)
            st_rows[(m, k)] = (8 * bj + k) * 128 + ((bi ^ k) << 4)
        # ldmatrix.trans: lane t, register i gets M_i^T[t/4][2(t%4) + e] = M_i[2(t%4) + e][t/4].
        regs = {(t, i): [element(smem_in, ld_rows[(i, 2 * (t % 4) + e)], t // 4) for e in range(2)]
                for t in range(32) for i in range(4)}
        # stmatrix: lane t, register i goes to row t/4 of matrix i, columns 2(t%4) + e.
        for (t, i), pair in regs.items():
            for e in range(2):
                address = st_rows[(i, t // 4)] + 2 * (2 * (t % 4) + e)
                smem_out[address:address + 2] = np.frombuffer(np.uint16(pair[e]).tobytes(), np.uint8)
    result = np.array([[int(np.frombuffer(smem_out[_swizzled(yr, yc):_swizzled(yr, yc) + 2].tobytes(), np.uint16)[0])
                        for yc in range(64)] for yr in range(64)], dtype=np.uint16)
    assert (result == tile.T).all()


@pytest.mark.parametrize("knob", ["kGroup", "kDeepStages"])
def test_the_transpose_knobs_of_the_command_line_are_overridable(knob):
    """g16/g32 (raster group) and d16/d24 (deep ring) are plain overrides of the reference."""
    source = (reference_folder("sm_90a") / "transpose.cu").read_text()
    assert kernel_variants.apply_overrides(source, {knob: "16"}) != source


def test_the_deepest_ring_of_the_command_line_fits_one_cta_per_sm():
    """d24: (24 + 3 output) tiles of 8 KB + 24 barriers + 1024 bytes of alignment slack <= 227 KB (H200 opt-in)."""
    source = (reference_folder("sm_90a") / "transpose.cu").read_text()
    formula = re.search(r"constexpr uint32_t smem_bytes\(\) \{ return (.+?); \}", source)
    assert formula and formula[1] == "(STAGES + kOutBufs) * kTileBytes + 8 * STAGES + 1024"
    assert (24 + 3) * 8192 + 8 * 24 + 1024 <= 227 * 1024
