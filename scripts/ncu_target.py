"""A small program for Nsight Compute to profile: cuBLAS's bf16 GEMM (a positive control that
executes HGMMA, TMA and mbarrier instructions) and the bundled gemm_bf16 example (plain FMA).

Used to record real ncu output as a test fixture for the executed-instruction parser:
    ncu --clock-control none --csv --page raw --print-metric-instances details \
        --metrics sass__inst_executed_per_opcode_with_modifier_all,gpu__time_duration.sum \
        python3 scripts/ncu_target.py > ncu.csv
"""

from __future__ import annotations

from pathlib import Path

import torch

from ptxbench.arch.registry import Arch
from ptxbench.check import build_request
from ptxbench.evaluate.child.library import CandidateLibrary
from ptxbench.tasks.loader import get_task
from ptxbench.toolchain.compile import build

SIZE = 1024


def main() -> None:
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b.T)
    task = get_task("gemm_bf16")
    source = (Path(__file__).resolve().parents[1] / "kernels" / "examples" / "gemm_bf16.cu").read_text()
    result = build(build_request(source, Arch.SM_90A, task))
    assert result.ok, result.log
    library = CandidateLibrary(result.artifact(".so"), task)
    c = torch.empty(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.current_stream()
    assert library({"A": a, "B": b}, {"C": c}, {"M": SIZE, "N": SIZE, "K": SIZE}, stream) == 0
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
