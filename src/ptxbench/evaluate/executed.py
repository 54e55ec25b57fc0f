"""Executed-instruction evidence from Nsight Compute: which features a kernel really ran, and how much
of the task's arithmetic its matrix instructions did.

Input is ncu's raw CSV (``--csv --page raw --print-metric-instances details``) with the metric
``sass__inst_executed_per_opcode_with_modifier_all``: per kernel launch, executed warp-level counts
per full SASS mnemonic. A feature counts as *executed* only when its defining instruction has a
non-zero count in the candidate's own kernels; for matrix features the FLOPs follow from the shape
in the mnemonic (``HGMMA.64x64x16``) and ncu's per-warp counting, so one wgmma followed by FFMA for
the rest shows up as a tiny share, not as "uses wgmma".
"""

from __future__ import annotations

import csv
import io
import re

from pydantic import BaseModel, Field

from ptxbench.arch.registry import Arch, load_registry
from ptxbench.tasks.model import Requirement

OPCODE_METRIC = "sass__inst_executed_per_opcode_with_modifier_all"
DURATION_METRIC = "gpu__time_duration.sum"
NCU_METRICS = (OPCODE_METRIC, DURATION_METRIC)

_INSTANCE = re.compile(r"([A-Z][A-Z0-9_.]*(?:\.[A-Za-z0-9_]+)*):\s*([\d,]+)")


class KernelProfile(BaseModel):
    """One profiled kernel launch."""

    launch_id: int
    name: str
    stream: str | None = None
    duration_ns: float | None = None
    executed: dict[str, int] = Field(default_factory=dict, description="full SASS mnemonic -> warp-level count")


class RequirementExecution(BaseModel):
    """One requirement judged on executed counts; ``flop_share`` only for matrix features."""

    requirement: Requirement
    executed: dict[str, int] = Field(description="executed mnemonics of the requirement's features")
    flop_share: float | None = None
    satisfied: bool
    message: str


def ncu_number(text: str) -> float | None:
    """A value cell of ncu's CSV (thousands separated by commas); None when it is not a number (n/a)."""
    cleaned = text.replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return None


def ncu_csv_table(text: str) -> tuple[list[str], list[str], list[list[str]]]:
    """ncu's raw CSV page as (metric names, units, one row per launch); the program's own output
    before the table is skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV table in the output (no line starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return rows[0], rows[1] if len(rows) > 1 else [], rows[2:]


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """Kernel launches from ncu's raw CSV page (the per-opcode executed-instruction metric)."""
    header, _, body = ncu_csv_table(text)
    column = {name: index for index, name in enumerate(header)}
    if OPCODE_METRIC not in column:
        raise ValueError(f"the ncu output lacks {OPCODE_METRIC}; profile with --metrics {','.join(NCU_METRICS)}")
    profiles = []
    for row in body:
        if len(row) != len(header):
            continue
        cell = row[column[OPCODE_METRIC]]
        executed = {m.group(1): int(m.group(2).replace(",", "")) for m in _INSTANCE.finditer(cell.partition("(")[2])}
        profiles.append(KernelProfile(
            launch_id=int(row[column["ID"]]), name=row[column["Kernel Name"]],
            stream=row[column["Stream"]] if "Stream" in column else None,
            duration_ns=ncu_number(row[column[DURATION_METRIC]]) if DURATION_METRIC in column else None,
            executed=executed))
    return profiles


def total_executed(profiles: list[KernelProfile]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for profile in profiles:
        for mnemonic, count in profile.executed.items():
            totals[mnemonic] = totals.get(mnemonic, 0) + count
    return totals


def feature_executions(feature_id: str, arch: Arch, executed: dict[str, int]) -> dict[str, int]:
    """Executed counts of the feature's defining instruction (zero counts dropped)."""
    feature = load_registry().get(feature_id)
    hits = feature.in_sass(arch, {m for m, c in executed.items() if c > 0})
    return {m: executed[m] for m in hits}


def matrix_flops(feature_id: str, executed: dict[str, int]) -> float | None:
    """FLOPs done by the feature's executed matrix instructions; None when the mnemonics carry no shape."""
    shape = load_registry().get(feature_id).matrix
    if shape is None:
        return None
    total = 0.0
    known = False
    for mnemonic, count in executed.items():
        per = shape.flops(mnemonic)
        if per is not None:
            known = True
            total += per * count
    return total if known else None


def judge_execution(requirement: Requirement, arch: Arch, profiles: list[KernelProfile],
                    task_flops: float) -> RequirementExecution:
    """Whether the candidate's kernels executed the requirement (and enough of the FLOPs, if it says)."""
    executed = total_executed(profiles)
    hits: dict[str, int] = {}
    share: float | None = None
    for feature_id in requirement.any_of:
        found = feature_executions(feature_id, arch, executed)
        hits.update(found)
        flops = matrix_flops(feature_id, found) if found else None
        if flops is not None and task_flops > 0:
            share = (share or 0.0) + flops / task_flops
    label = requirement.label
    if not hits:
        return RequirementExecution(requirement=requirement, executed={}, satisfied=False,
                                    message=f"{label}: never executed (not in any launched kernel's executed instructions)")
    if requirement.min_flop_share is None:
        return RequirementExecution(requirement=requirement, executed=hits, satisfied=True,
                                    message=f"{label}: executed")
    if share is None:
        return RequirementExecution(requirement=requirement, executed=hits, satisfied=False, flop_share=None,
                                    message=f"{label}: executed, but its share of the FLOPs cannot be read from the SASS "
                                    "mnemonics on this target: unverified")
    ok = share >= requirement.min_flop_share
    return RequirementExecution(
        requirement=requirement, executed=hits, flop_share=share, satisfied=ok,
        message=f"{label}: executed, performing {share:.1%} of the task's FLOPs"
        + ("" if ok else f" (needs {requirement.min_flop_share:.0%}: the rest runs on other instructions)"))
