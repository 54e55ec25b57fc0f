"""Executed-instruction evidence, on real Nsight Compute output recorded on the H200
(scripts/ncu_target.py: cuBLAS's bf16 GEMM and the plain gemm_bf16 example, both 1024³)."""

from __future__ import annotations

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.executed import KernelProfile, judge_execution, parse_ncu_csv
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
