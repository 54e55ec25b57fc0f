"""Executed-instruction evidence, on real Nsight Compute output recorded on the H200
(scripts/ncu_target.py: cuBLAS's bf16 GEMM and the plain gemm_bf16 example, both 1024³)."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.proof.executed import judge_execution, parse_ncu_csv
from ptxbench.records.evaluation import KernelProfile
from ptxbench.tasks.loader import get_task

from .conftest import FIXTURES

PROFILES = parse_ncu_csv((FIXTURES / "ncu" / "h200_cublas_and_example_gemm_1024.csv").read_text())
FLOPS = 2 * 1024**3


def _kernel(fragment: str) -> KernelProfile:
    return next(p for p in PROFILES if fragment in p.name)


def _requirements():  # type: ignore[no-untyped-def]
    return {r.label: r for r in get_task("gemm_bf16").requirements_for(Arch.SM_90A)}


def test_parses_every_launch_with_counts_and_durations() -> None:
    assert [p.launch_id for p in PROFILES] == [0, 1, 2, 3]
    cublas = _kernel("nvjet")
    assert cublas.executed["HGMMA.64x64x16.F32.BF16"] == 65_536
    assert cublas.executed["UTMALDG.3D.MULTICAST"] == 2_048
    assert cublas.duration_ns == pytest.approx(7_200)
    assert _kernel("gemm_bf16_kernel").executed["FFMA"] == 33_554_432


def test_cublas_executes_every_requirement_and_all_the_flops_on_wgmma() -> None:
    cublas = [_kernel("nvjet")]
    verdicts = {label: judge_execution(r, Arch.SM_90A, cublas, FLOPS) for label, r in _requirements().items()}
    assert all(v.satisfied for v in verdicts.values()), verdicts
    # 65,536 warp-level HGMMA.64x64x16 = 16,384 wgmma x 2*64*64*16 FLOPs = exactly 2*1024^3.
    assert verdicts["wgmma.bf16"].flop_share == pytest.approx(1.0)


def test_plain_example_executes_none_of_them() -> None:
    example = [_kernel("gemm_bf16_kernel")]
    for label, requirement in _requirements().items():
        verdict = judge_execution(requirement, Arch.SM_90A, example, FLOPS)
        assert not verdict.satisfied and "never executed" in verdict.message, label


def test_one_wgmma_then_ffma_is_a_minor_share() -> None:
    cheat = KernelProfile(launch_id=0, name="cheat", executed={"HGMMA.64x64x16.F32.BF16": 4, "FFMA": 33_554_432})
    verdict = judge_execution(_requirements()["wgmma.bf16"], Arch.SM_90A, [cheat], FLOPS)
    assert not verdict.satisfied and verdict.flop_share is not None and verdict.flop_share < 1e-4
    assert "needs 95%" in verdict.message


def test_zero_counts_are_not_execution() -> None:
    dead = KernelProfile(launch_id=0, name="dead", executed={"HGMMA.64x64x16.F32.BF16": 0, "FFMA": 10})
    assert not judge_execution(_requirements()["wgmma.bf16"], Arch.SM_90A, [dead], FLOPS).satisfied


def test_output_without_the_table_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no ncu CSV table"):
        parse_ncu_csv("==PROF== Disconnected\n")


# -- launches, units and the copy engine's bytes (reports recorded on the H200, read back with ncu --import) --

BULK = parse_ncu_csv((FIXTURES / "ncu" / "h200_bulk_copy_candidate.csv").read_text())
PROBE = parse_ncu_csv((FIXTURES / "ncu" / "h200_counter_probe.csv").read_text())


def test_each_launch_records_its_grid_block_and_stream() -> None:
    (launch,) = BULK
    assert (launch.name, launch.grid, launch.block, launch.stream) == ("k(const float *, float *)", (64, 1, 1),
                                                                       (128, 1, 1), "13")
    assert PROBE[0].grid == (1, 1, 1) and PROBE[0].block == (32, 1, 1)
    assert _kernel("nvjet").grid is not None and _kernel("nvjet").block is not None


def test_byte_counters_are_read_in_bytes_whatever_unit_ncu_printed() -> None:
    from ptxbench.evaluate.proof.executed import TMA_LOAD_BYTES_METRIC, TMA_STORE_BYTES_METRIC

    # 64 blocks, each one 4 KB bulk copy in and one out, printed in base units
    assert BULK[0].bytes == {TMA_LOAD_BYTES_METRIC: 262_144, TMA_STORE_BYTES_METRIC: 262_144}
    assert BULK[0].duration_ns == pytest.approx(2_720)
    # the same kernel with 256 blocks, printed in Mbyte and us
    (scaled,) = parse_ncu_csv((FIXTURES / "ncu" / "h200_bulk_copy_scaled_units.csv").read_text())
    assert scaled.bytes[TMA_LOAD_BYTES_METRIC] == pytest.approx(1_048_576)
    assert scaled.duration_ns == pytest.approx(2_944)
    assert PROBE[0].bytes == {TMA_LOAD_BYTES_METRIC: 0, TMA_STORE_BYTES_METRIC: 0}
    assert PROBE[0].executed["STG.E"] == 1


def _copy_requirement(*features: str, share: float = 0.4):  # type: ignore[no-untyped-def]
    from ptxbench.tasks.model import Requirement

    return Requirement(any_of=list(features), min_byte_share=share)


def test_copies_that_move_the_tasks_bytes_satisfy_the_byte_share() -> None:
    moved = 2 * 262_144  # in and out
    verdict = judge_execution(_copy_requirement("tma.load", "bulk.copy"), Arch.SM_90A, BULK, 0.0, task_bytes=moved)
    assert verdict.satisfied and verdict.verified and verdict.byte_share == pytest.approx(1.0), verdict.message


def test_a_token_copy_is_a_minor_share_of_the_bytes() -> None:
    verdict = judge_execution(_copy_requirement("tma.load", "bulk.copy"), Arch.SM_90A, BULK, 0.0,
                              task_bytes=100 * 2 * 262_144)
    assert not verdict.satisfied and verdict.verified and verdict.byte_share == pytest.approx(0.01)
    assert "moving 1.0% of the task's bytes (needs 40%" in verdict.message


def test_each_direction_counts_only_its_own_counter_and_a_shared_counter_counts_once() -> None:
    from ptxbench.evaluate.proof.executed import TMA_LOAD_BYTES_METRIC, TMA_STORE_BYTES_METRIC

    loads_only = KernelProfile(launch_id=0, name="k", executed={"UTMALDG.2D": 8, "UTMASTG.2D": 1},
                               bytes={TMA_LOAD_BYTES_METRIC: 1000.0, TMA_STORE_BYTES_METRIC: 10.0})
    store = judge_execution(_copy_requirement("tma.store"), Arch.SM_90A, [loads_only], 0.0, task_bytes=2000)
    assert not store.satisfied and store.byte_share == pytest.approx(0.005)
    either = judge_execution(_copy_requirement("tma.load", "bulk.copy"), Arch.SM_90A, [loads_only], 0.0,
                             task_bytes=2000)
    assert either.byte_share == pytest.approx(1010 / 2000)  # the load counter once, not once per feature


def test_a_report_without_the_byte_counters_leaves_the_share_unverified_not_failed() -> None:
    verdict = judge_execution(_copy_requirement("tma.load"), Arch.SM_90A, [_kernel("nvjet")], FLOPS, task_bytes=1e6)
    assert verdict.executed and not verdict.verified and not verdict.satisfied and verdict.byte_share is None
    assert "unverified" in verdict.message and "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum" in verdict.message


def test_a_byte_share_is_never_judged_for_a_feature_that_did_not_run() -> None:
    verdict = judge_execution(_copy_requirement("tma.load"), Arch.SM_90A, PROBE, 0.0, task_bytes=1e6)
    assert not verdict.satisfied and verdict.verified and "never executed" in verdict.message


def test_every_byte_share_in_the_suite_names_features_with_byte_counters() -> None:
    from ptxbench.evaluate.proof.executed import FEATURE_BYTE_METRICS
    from ptxbench.tasks.loader import bundled_suite

    shares = [(task.id, r) for task in bundled_suite() for arch in (Arch.SM_90A, Arch.SM_100A)
              for r in task.requirements_for(arch) if r.min_byte_share is not None]
    memory_bound = {task.id for task in bundled_suite() if task.family.value == "memory_bound"}
    # GQA and MLA decode move their paged caches once: bandwidth-bound too, so they state a copy byte share
    assert {task_id for task_id, _ in shares} == memory_bound | {"decode_gqa_paged", "mla_decode_paged"}
    assert {"rmsnorm", "rope"} <= memory_bound
    for task_id, requirement in shares:
        assert all(feature in FEATURE_BYTE_METRICS for feature in requirement.any_of), (task_id, requirement)


def test_a_byte_share_is_a_fraction() -> None:
    from pydantic import ValidationError

    for bad in (0.0, 1.5):
        with pytest.raises(ValidationError):
            _copy_requirement("tma.load", share=bad)


def test_a_tiny_share_is_written_with_its_digits() -> None:
    verdict = judge_execution(_copy_requirement("tma.load", "bulk.copy"), Arch.SM_90A, BULK, 0.0, task_bytes=1e12)
    assert "moving 5.2e-05% of the task's bytes" in verdict.message
