"""The gold set on the GPU: every reference kernel passes every workload (held-out ones included) and,
where Nsight Compute is installed, executes every required feature — wgmma for the whole of a GEMM's
FLOPs. Speed is measured by benchmarks/reference_kernels.py, not here. Run with `-m gpu`."""

from __future__ import annotations

import shutil

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import read_candidate
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.kernels import reference_folder
from ptxbench.records.evaluation import Status
from ptxbench.tasks.loader import get_task


pytestmark = pytest.mark.gpu
REFERENCE = reference_folder("sm_90a")


@pytest.fixture(scope="module")
def evaluator():  # type: ignore[no-untyped-def]
    gpu = GpuEvaluator(EvalOptions(trials=2, time=False, profile=shutil.which("ncu") is not None))
    yield gpu
    gpu.close()


@pytest.mark.parametrize("path", sorted(REFERENCE.glob("*.cu")), ids=lambda p: p.stem)
def test_reference_passes_with_its_features_executed(evaluator, path) -> None:  # type: ignore[no-untyped-def]
    task = get_task(path.stem)
    evaluation = evaluator.evaluate(task, Arch.SM_90A, read_candidate(path), path.name)
    print(f"GOLD {path.stem}: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert {t.role for t in evaluation.trials} == {w.role.value for w in task.workloads}
    if evaluation.features is not None:
        assert all(f.satisfied for f in evaluation.features)
        shares = [f.flop_share for f in evaluation.features if f.requirement.min_flop_share]
        assert all(share is not None and share >= 0.95 for share in shares), shares


def task_on_sizes(task_id: str, named: dict[str, dict[str, int]]):  # type: ignore[no-untyped-def]
    """The task with its workloads replaced by these named sizes: the first timed, the last held out."""
    from ptxbench.tasks.model import Role, Workload

    task = get_task(task_id)
    roles = [Role.TIMED] + [Role.VISIBLE] * (len(named) - 2) + [Role.HELDOUT]
    workloads = [Workload(name=name, role=role, sizes=sizes) for role, (name, sizes) in zip(roles, named.items())]
    # the task's variants partition its own workloads, not these: dropped
    return task.model_validate({**task.model_dump(), "workloads": [w.model_dump() for w in workloads], "variants": []})


def gemm_on_shapes(task_id: str, shapes: list[tuple[int, int, int]]):  # type: ignore[no-untyped-def]
    """The GEMM task with its workloads replaced by (M, N, K) shapes."""
    return task_on_sizes(task_id, {f"m{m}-n{n}-k{k}": {"M": m, "N": n, "K": k} for m, n, k in shapes})


def assert_reference_passes_on(evaluator, task_id: str,  # type: ignore[no-untyped-def]
                               shapes: list[tuple[int, int, int]]) -> None:
    evaluation = evaluator.evaluate(gemm_on_shapes(task_id, shapes), Arch.SM_90A,
                                    read_candidate(REFERENCE / f"{task_id}.cu"), f"{task_id}.cu")
    print(f"{task_id} on {len(shapes)} extra shapes: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert len({t.workload for t in evaluation.trials}) == len(shapes)


def test_bf16_reference_is_right_on_small_batches_beyond_the_tasks_workloads(evaluator) -> None:  # type: ignore[no-untyped-def]
    """The decode path (M <= 64: split-K clusters, operands swapped so M is wgmma's N) on every tile
    height it has (8, 16, 32, 64 rows, and M just past each), one K block, and splits of 1 to 8."""
    assert_reference_passes_on(evaluator, "gemm_bf16", [
        (1, 64, 64), (7, 192, 128), (9, 4096, 14336), (16, 6144, 4096), (17, 11008, 4096), (32, 128, 4096),
        (33, 5120, 3584), (64, 4096, 4096)])


def test_fp8_reference_is_right_on_edges_of_its_tiles_and_pairs(evaluator) -> None:  # type: ignore[no-untyped-def]
    """The fp8 kernel pairs CTAs along M (B multicast), promotes every two stages a stage late, and
    issues each tile's first stage before the last tile's epilogue: one and two tile-rows, an odd count
    (the last pair's second tile wholly past M, skipped between two computed tiles), a tile-column half
    past N (the second CTA's half of B wholly out of bounds), 1, 2 and 3 K stages, and batches of at
    most 64 rows (the nine-stage ring of 64-row A tiles, wrapped several times) and just past 64."""
    assert_reference_passes_on(evaluator, "gemm_fp8", [
        (304, 192, 384), (16, 64, 128), (128, 64, 256), (144, 128, 384), (256, 320, 256), (2000, 4160, 1152),
        (64, 192, 128), (48, 1024, 2560), (80, 640, 1280)])


def test_gemm_fp8_blockscale_reference_is_right_at_its_tile_and_scale_block_edges(evaluator) -> None:  # type: ignore[no-untyped-def]
    """The block-scaled fp8 kernel's edges: one token and one k-block; 80-wide tiles (M <= 128) that straddle a
    128-row weight-scale block at 48 and at 16 columns, or end in one past N; 64-row A tiles (M <= 64) and
    just past them; a last weight block of 64 rows (N = 2112) on both tile widths; 128-wide tiles in pairs
    with an odd count of tile-rows (the pair's second tile wholly past M) and a tile-column whose second half
    of B is wholly past N; TMA-store epilogues (K <= 4096) and direct ones (K = 4224: 33 k-blocks); and
    several tiles per CTA, so the ring wraps many times with tiles of different scale rows."""
    shapes = [(1, 64, 128), (64, 192, 256), (65, 320, 384), (128, 2112, 1280), (129, 192, 128),
              (300, 704, 512), (200, 448, 4224), (1000, 2112, 384), (1536, 8192, 640)]
    named = {f"m{m}-n{n}-k{k}": {"M": m, "N": n, "K": k, "KB": k // 128, "NB": -(-n // 128)} for m, n, k in shapes}
    assert_passes_on(evaluator, "gemm_fp8_blockscale", named)


def test_attention_reference_is_right_at_every_tile_edge(evaluator) -> None:  # type: ignore[no-untyped-def]
    """Lengths at and either side of the kernel's edges: a 64-row warpgroup (the later ones of a CTA wholly past
    S get no Q and compute nothing), the CTA of 192 query rows at D = 64 and 128 rows otherwise, the KV tile
    (64 keys at D = 256, 128 otherwise, the last one partial and masked past S), causal and not, at each head
    dimension."""
    lengths = (1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 383, 385, 577)
    named = {f"d{d}-s{s}-c{c}": {"B": 1, "H": 3, "S": s, "D": d, "causal": c}
             for d in (64, 128, 256) for s in lengths for c in (0, 1)}
    evaluation = evaluator.evaluate(task_on_sizes("attention_fwd", named), Arch.SM_90A,
                                    read_candidate(REFERENCE / "attention_fwd.cu"), "attention_fwd.cu")
    print(f"attention_fwd on {len(named)} edge lengths: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert len({t.workload for t in evaluation.trials}) == len(named)


def test_attention_fp8_reference_is_right_at_every_tile_edge(evaluator) -> None:  # type: ignore[no-untyped-def]
    """The fp8 kernel's edges at the lengths its contract allows (multiples of 64): one 64-row warpgroup (the CTA's
    second wholly past S: no Q, every tile handed back), one and two full 128-row tiles, half a tile past them
    (the last 128-key tile half masked past S), the 3-stage K ring and 2-stage V rings wrapped (S = 640, 1088),
    causal and not, with two heads per batch so the tensor maps' head stride is exercised. Not yet run on a GPU;
    tests/test_reference_fp8_attention_model.py checks the P fragment and V transpose on the CPU."""
    named = {f"b{b}-h{h}-s{s}-c{c}": {"B": b, "H": h, "S": s, "causal": c}
             for b, h, s in ((1, 2, 64), (2, 2, 128), (1, 3, 192), (1, 2, 256), (2, 2, 320), (1, 2, 640),
                             (1, 2, 1088))
             for c in (0, 1)}
    assert_passes_on(evaluator, "attention_fp8_fwd", named)


def test_attention_bwd_reference_is_right_at_every_tile_edge(evaluator) -> None:  # type: ignore[no-untyped-def]
    """Lengths at and either side of the backward kernels' edges: the dK/dV kernel's 64-query steps and key tiles
    (128 keys, 64 a warpgroup; 64 keys at D = 256, the second warpgroup's keys wholly past S when S <= 64), the dQ
    kernel's 128-query CTAs (a second warpgroup wholly past S) and key steps (64, 32 at D = 256), causal and not,
    at each head dimension. Not S = 1: there every dS is zero but for rounding (O = V), so dQ is noise that the
    task's tolerance, scaled by |dS|, cannot accept from any kernel (tests/test_reference_attention_bwd_model.py)."""
    named = {f"d{d}-s{s}-c{c}": {"B": 1, "H": 3, "S": s, "D": d, "causal": c}
             for d in (64, 128, 256) for s in (2, 17, 31, 33, 63, 64, 65, 127, 128, 129, 192, 255, 385)
             for c in (0, 1)}
    evaluation = evaluator.evaluate(task_on_sizes("attention_bwd", named), Arch.SM_90A,
                                    read_candidate(REFERENCE / "attention_bwd.cu"), "attention_bwd.cu")
    print(f"attention_bwd on {len(named)} edge lengths: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert len({t.workload for t in evaluation.trials}) == len(named)


def assert_passes_on(evaluator, task_id: str, named: dict[str, dict[str, int]]) -> None:  # type: ignore[no-untyped-def]
    evaluation = evaluator.evaluate(task_on_sizes(task_id, named), Arch.SM_90A,
                                    read_candidate(REFERENCE / f"{task_id}.cu"), f"{task_id}.cu")
    print(f"{task_id} on {len(named)} edge shapes: {evaluation.status} {evaluation.message}")
    assert evaluation.status is Status.PASSED, evaluation.message
    assert len({t.workload for t in evaluation.trials}) == len(named)


def test_add_rmsnorm_reference_is_right_at_the_edges_of_its_ring(evaluator) -> None:  # type: ignore[no-untyped-def]
    """One token; rows of one 16-byte vector per thread or less (Hd = 64 .. 2048: eight stages), rows that leave two
    stages (Hd = 8256, 16384, 23232: the largest that fits; 24576 falls back to the plain kernel); a hidden size that
    is a multiple of 64 only; more rows than resident CTAs, and fewer."""
    named = {f"t{t}-h{h}": {"T": t, "Hd": h} for t, h in
             [(1000, 4160), (1, 64), (1, 16384), (3, 192), (7, 2048), (129, 8256), (2, 23232), (3, 24576), (2000, 576)]}
    assert_passes_on(evaluator, "add_rmsnorm", named)


def test_silu_mul_reference_is_right_at_every_chunk_edge(evaluator) -> None:  # type: ignore[no-untyped-def]
    """Rows of one chunk (N <= 4096) and of several with a shorter last one (4160 = 2112 + 2048 at prefill; 8 chunks of
    576 with a last of 128 at T = 3), one token, the finest decode cut, the widest rows."""
    named = {f"t{t}-n{n}": {"T": t, "N": n} for t, n in
             [(300, 4160), (1, 64), (3, 4160), (1, 8256), (2, 28736), (17, 1472), (1000, 4096), (5, 512)]}
    assert_passes_on(evaluator, "silu_mul", named)


def test_rope_reference_is_right_for_every_head_split(evaluator) -> None:  # type: ignore[no-untyped-def]
    """Odd and unequal head counts; units of one head (decode) and of several, some straddling Q and K (runs of 8 of
    30 + 7 heads at T = 64, runs of 3 of 128 + 8 at T = 5, two runs of 150 of 200 + 100 heads at prefill, where a
    token is more than a stage holds); one token; MHA and GQA; both head dimensions and every theta."""
    shapes = [(300, 7, 1, 128, 10000), (1, 1, 1, 64, 10000), (2, 5, 3, 128, 500000), (5, 128, 8, 128, 1000000),
              (300, 200, 100, 64, 500000), (64, 30, 7, 128, 500000), (3000, 12, 2, 64, 1000000),
              (33, 40, 40, 128, 500000), (3, 3, 5, 64, 10000)]
    named = {f"t{t}-q{q}-k{k}-d{d}-th{th}": {"T": t, "Hq": q, "Hkv": k, "D": d, "theta": th}
             for t, q, k, d, th in shapes}
    assert_passes_on(evaluator, "rope", named)


def test_decode_reference_is_right_on_every_edge_of_its_split(evaluator) -> None:  # type: ignore[no-untyped-def]
    """One token (a page of 16 and of 64: three tiles past the fill skipped), one full page; batches of one-page
    sequences (one token each; chunks holding more than 32 sequences); groups of 1, 16, 20 and 32 query heads (two
    head blocks for the last two, one kv head for 32); a single long sequence over pages of 64; an odd batch of
    257. Not yet run on a GPU; tests/test_reference_decode_model.py checks the same steps on the CPU."""
    shapes = [(1, 32, 8, 16, 1, 1), (1, 32, 8, 64, 1, 1), (1, 32, 8, 64, 1, 64), (300, 8, 2, 16, 300, 300),
              (500, 16, 2, 64, 500, 16000), (3, 8, 8, 16, 50, 780), (5, 32, 2, 64, 40, 2400), (4, 40, 2, 64, 30, 1800),
              (2, 32, 1, 16, 100, 1590), (1, 64, 8, 64, 2000, 127950), (257, 32, 4, 16, 3000, 46000)]
    named = {f"b{b}-h{h}-kh{kh}-p{p}-np{np_}-l{l}": {"B": b, "H": h, "KH": kh, "P": p, "NP": np_, "L": l}
             for b, h, kh, p, np_, l in shapes}
    assert_passes_on(evaluator, "decode_gqa_paged", named)


def test_prefill_gqa_ragged_reference_is_right_on_ragged_edges(evaluator) -> None:  # type: ignore[no-untyped-def]
    """Ragged batches with a sequence of length 1 beside long ones, one token alone, and lengths at and either side
    of the kernel's edges for each packing of heads into a tile (8 heads: 16-token tiles, 8 a warpgroup; 4: 32 and
    16; 2 with a group of 6; 1 for plain multi-head attention): a second warpgroup wholly past a sequence's end,
    the 128-key tile (127, 128, 129), and a group of 16 served by two CTAs per kv head. The order of the sequences
    in memory follows the data, so a last K/V tile runs into the next sequence or past T."""
    shapes = [(1, 1, 0, 32, 8), (3, 129, 64, 32, 8), (2, 2, 1, 8, 1), (4, 130, 43, 3, 3), (5, 257, 64, 12, 2),
              (3, 300, 149, 32, 2), (4, 129, 1, 32, 8), (3, 33, 1, 32, 8), (2, 17, 1, 32, 8), (10, 17, 1, 64, 8),
              (2, 1000, 999, 32, 4), (40, 64, 1, 32, 4)]
    named = {f"b{b}-s{s}-ds{ds}-h{h}-kh{kh}": {"B": b, "S": s, "DS": ds, "T": b * s - ds * b * (b - 1) // 2,
                                                "H": h, "KH": kh}
             for b, s, ds, h, kh in shapes}
    assert_passes_on(evaluator, "prefill_gqa_ragged", named)


def test_moe_grouped_gemm_reference_is_right_on_group_edges(evaluator) -> None:  # type: ignore[no-untyped-def]
    """One token; each tile width the host picks (BN = 64 at N <= 320; 128 at T = 4096, N = 4096; 256 at T = 100,
    N = 4096 and at T = 8000, N = 2880, its last tile-column 64 wide, the W box reading the next expert's rows); X in
    boxes of 16, 64 and 128 rows (groups of a few rows, of up to 64 and larger); more than 32 experts (the walker's
    chunks of 32: 40, and 300 experts for 500 rows, most empty or of a few rows); groups of many tile-rows (the
    grouped order) beside empty ones. The routing is the task's own (skewed, an eighth of the experts empty), so
    groups end at arbitrary rows. tests/test_reference_moe_model.py checks the same tile logic on the CPU."""
    shapes = [(1, 2, 64, 64), (100, 8, 4096, 256), (3001, 40, 192, 192), (127, 3, 320, 128), (500, 300, 128, 64),
              (4096, 4, 4096, 640), (8000, 5, 2880, 128)]
    named = {f"t{t}-e{e}-n{n}-k{k}": {"T": t, "E": e, "N": n, "K": k} for t, e, n, k in shapes}
    assert_passes_on(evaluator, "moe_grouped_gemm", named)


def test_mla_decode_reference_is_right_on_every_edge_of_its_split(evaluator) -> None:  # type: ignore[no-untyped-def]
    """One token (pages of 64, 16 and 1: a tile of one key, the other 63 value rows zeroed), one full page of 64;
    partial last pages of 16; batches of more sequences than CTAs (chunks holding many, the 32-wide search run
    ten times); token-granular pages with 16 and 128 heads; 8 heads (one 64-row block mostly empty), 72 (a second
    block of 8) and 192 (three blocks); a single long sequence split over every CTA. Not yet run on a GPU;
    tests/test_reference_mla_model.py checks the same steps on the CPU."""
    shapes = [(1, 16, 64, 1, 1), (1, 128, 16, 1, 1), (1, 16, 1, 1, 1), (1, 128, 64, 1, 64), (3, 64, 16, 20, 300),
              (300, 16, 64, 300, 5000), (70, 16, 1, 3000, 3000), (5, 128, 1, 700, 700), (4, 8, 16, 40, 600),
              (3, 72, 16, 30, 450), (2, 192, 64, 30, 1850), (1, 128, 64, 500, 31990), (1, 16, 16, 1000, 15990)]
    named = {f"b{b}-h{h}-p{p}-np{np_}-l{l}": {"B": b, "H": h, "P": p, "NP": np_, "L": l}
             for b, h, p, np_, l in shapes}
    assert_passes_on(evaluator, "mla_decode_paged", named)
