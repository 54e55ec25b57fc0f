"""The bundled suite: complete, valid, hashed, and strict about malformed task files."""

from __future__ import annotations

from importlib import resources

import pytest

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch
from ptxbench.errors import TaskError
from ptxbench.tasks.loader import bundled_suite, get_task, parse_task
from ptxbench.tasks.model import DType, Family, Role, Tolerance


def _suite_text(name: str) -> str:
    return resources.files("ptxbench.tasks").joinpath("suite", f"{name}.toml").read_text()


def test_suite_covers_the_families_the_benchmark_promises() -> None:
    suite = bundled_suite()
    families = [t.family for t in suite]
    for family in (Family.GEMM, Family.ATTENTION_FORWARD, Family.ATTENTION_BACKWARD):
        assert family in families
    assert families.count(Family.MEMORY_BOUND) >= 2
    dtypes = {i.dtype for t in suite if t.family is Family.GEMM for i in t.inputs}
    assert {DType.BF16, DType.E4M3} <= dtypes


@pytest.mark.parametrize("task", bundled_suite(), ids=lambda t: t.id)
def test_every_task_has_requirements_for_both_targets_and_held_out_shapes(task) -> None:  # type: ignore[no-untyped-def]
    for arch in BENCHMARK_ARCHS:
        assert task.requirements_for(arch), f"{task.id} has no requirements for {arch.value}"
    assert task.held_out()
    assert len([w for w in task.workloads if w.role is Role.TIMED]) == 1
    for workload in task.workloads:
        assert task.bytes_for(workload.sizes) > 0
        assert task.flops_for(workload.sizes) >= 0
    # A task of many FLOPs per byte (the H200's ridge is near 200) states the share of FLOPs its matrix
    # feature must perform; a bandwidth-bound one (memory-bound ops, GQA decode) the share of bytes its copy
    # feature must move.
    intensity = task.flops_for(task.timed().sizes) / task.bytes_for(task.timed().sizes)
    requirements = task.requirements_for(Arch.SM_90A)
    if intensity > 50:
        assert [r for r in requirements if r.min_flop_share], "compute-bound tasks state their matrix FLOP share"
    else:
        assert [r for r in requirements if r.min_byte_share], "bandwidth-bound tasks state their copy byte share"
    if task.family is Family.MEMORY_BOUND:
        assert intensity == 0


@pytest.mark.parametrize("task_id", ["attention_fwd", "attention_bwd"])
def test_attention_shows_every_head_dim_mask_and_length_and_holds_out_combinations(task_id: str) -> None:
    task = get_task(task_id)
    shown = {(w.sizes["D"], w.sizes["causal"]) for w in task.shown()}
    assert shown == {(64, 0), (128, 0), (128, 1), (256, 1)}  # each value of each switch is shown ...
    assert {w.sizes["S"] % 64 != 0 for w in task.shown()} == {True, False}  # ragged lengths too, without the mask
    assert all(w.sizes["causal"] == 0 for w in task.shown() if w.sizes["S"] % 64)
    held_out = {(w.sizes["D"], w.sizes["causal"], w.sizes["S"] % 64 != 0) for w in task.held_out()}
    assert {(64, 1, False), (256, 0, False), (128, 1, True), (256, 1, True)} <= held_out
    assert min(w.sizes["S"] for w in task.held_out()) < 64  # a length shorter than one tile
    # ... the combinations are not
    assert [v.name for v in task.held_out_variants()] == ["hd64-causal", "hd256-full", "s-ragged-causal"]
    assert task.timed().name == "hd128-s4096" and task.timed().sizes == {"B": 4, "H": 16, "S": 4096, "D": 128,
                                                                          "causal": 0}


@pytest.mark.parametrize("task_id", ["attention_fwd", "attention_bwd"])
def test_attention_flops_count_exactly_the_unmasked_pairs(task_id: str) -> None:
    task = get_task(task_id)
    per_pair = {"attention_fwd": 4, "attention_bwd": 10}[task_id]  # FLOPs per (query, key) pair and head dim
    for seq in (1, 17, 64, 577, 1537):
        pairs = {0: seq * seq, 1: sum(1 for i in range(seq) for j in range(seq) if j <= i)}
        for causal, count in pairs.items():
            sizes = {"B": 3, "H": 5, "S": seq, "D": 256, "causal": causal}
            assert task.flops_for(sizes) == per_pair * 3 * 5 * 256 * count
            # bytes: each bf16 [B, H, S, D] tensor and each fp32 [B, H, S] one once, whatever the mask
            tensors, stats = {"attention_fwd": (4, 1), "attention_bwd": (8, 1)}[task_id]
            assert task.bytes_for(sizes) == 3 * 5 * seq * (tensors * 256 * 2 + stats * 4)


def test_gemm_includes_decode_sizes() -> None:
    task = get_task("gemm_bf16")
    assert min(w.sizes["M"] for w in task.shown()) <= 16
    assert min(w.sizes["M"] for w in task.held_out()) == 1


def test_content_hash_is_stable_and_tracks_every_field() -> None:
    text = _suite_text("gemm_bf16")
    first, again = parse_task(text, "a"), parse_task(text, "b")
    assert first.content_hash == again.content_hash == get_task("gemm_bf16").content_hash
    changed = parse_task(text.replace("sizes = { M = 1, N = 11008", "sizes = { M = 2, N = 11008"), "c")
    assert changed.content_hash != first.content_hash
    assert len(first.content_hash) == 64


def test_default_tolerance_is_dtype_aware() -> None:
    bf16, f32 = Tolerance.for_dtype(DType.BF16), Tolerance.for_dtype(DType.F32)
    assert bf16.rtol == pytest.approx(2**-6)
    assert f32.rtol < 1e-4
    task = get_task("transpose")
    assert task.tolerance_for("Y").rtol == 0 and task.tolerance_for("Y").rms_atol == 0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('id = "gemm_bf16"', 'id = "Bad Id"'), "id"),
        (lambda t: t.replace('shape = ["M", "K"]', 'shape = ["M", "Z"]', 1), "unknown axes"),
        (lambda t: t.replace('flops = "2 * M * N * K"', 'flops = "2 * M * Q"'), "unknown axes"),
        (lambda t: t.replace('any_of = ["tma.load"]', 'any_of = ["tma.lod"]', 1), "unknown feature 'tma.lod'"),
        (lambda t: t.replace('any_of = ["wgmma.bf16"]', 'any_of = ["tcgen05.mma.f16"]'), "not available on sm_90a"),
        (lambda t: t.replace('role = "heldout"', 'role = "visible"'), "held-out"),
        (lambda t: t.replace("sizes = { M = 1000, N = 5120, K = 3584 }", "sizes = { M = 1000, N = 5120, K = 3585 }"),
         "not a multiple of 64"),
        (lambda t: t.replace('role = "visible"\nsizes = { M = 4096, N = 4096', 'role = "timed"\nsizes = { M = 4096, N = 4096'),
         "exactly one timed"),
        (lambda t: t.replace("def reference(", "def ref("), "def reference"),
        (lambda t: t + "\nsurprise = 1\n", "surprise"),
        (lambda t: t.replace("statement = '''", "statement = '''\n", 1).replace("'''\nreference", "\nreference", 1),
         "not valid TOML"),
    ],
)
def test_malformed_tasks_get_one_clear_message(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TaskError, match=message) as caught:
        parse_task(edit(_suite_text("gemm_bf16")), "broken.toml")
    assert str(caught.value).startswith("broken.toml: ")


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(TaskError, match="bundled tasks: .*gemm_bf16"):
        get_task("gemm_bf17")


def test_a_task_round_trips_through_json() -> None:
    task = get_task("attention_bwd")
    again = type(task).model_validate_json(task.model_dump_json())
    assert again == task and again.content_hash == task.content_hash
