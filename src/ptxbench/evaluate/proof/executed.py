"""Executed-instruction evidence from Nsight Compute: which features a kernel really ran, and how much
of the task's arithmetic its matrix instructions did.

Input is ncu's raw CSV as ``ncu --import REPORT --csv --page raw --print-metric-instances details``
prints a report the harness had ncu write (never the profiled program's own output), with the metric
``sass__inst_executed_per_opcode_with_modifier_all``: per kernel launch, executed warp-level counts
per full SASS mnemonic, with the launch's grid, block and stream, and the bytes the copy engine (TMA
and bulk copies) moved between global and shared memory. A feature counts as *executed* only when its defining instruction has a
non-zero count in the candidate's own kernels; for matrix features the FLOPs follow from the shape
in the mnemonic (``HGMMA.64x64x16``) and ncu's per-warp counting, so one wgmma followed by FFMA for
the rest shows up as a tiny share, not as "uses wgmma"; likewise one token bulk copy in a
memory-bound task shows up as a tiny share of the task's bytes.
"""

from __future__ import annotations

import csv
import io
import re

from ptxbench.arch.registry import Arch, load_registry
from ptxbench.records.evaluation import Dims, KernelProfile, RequirementExecution
from ptxbench.tasks.model import Requirement

OPCODE_METRIC = "sass__inst_executed_per_opcode_with_modifier_all"
DURATION_METRIC = "gpu__time_duration.sum"
# Bytes the TMA unit read from global memory into shared memory, and wrote from shared to global. On the
# H200 a kernel of 256 bulk copies (cp.async.bulk, UBLKCP) of 4 KB each way counted 1,048,576 bytes in
# each (tests/fixtures/ncu/h200_bulk_copy_scaled_units.csv): non-tensor bulk copies count here as tensor
# copies do. An unknown metric name does not fail ncu (measured there): its column is simply absent, and
# the share is then unverified.
TMA_LOAD_BYTES_METRIC = "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"
TMA_STORE_BYTES_METRIC = "l1tex__m_l1tex2xbar_write_bytes_mem_global_op_tma_st.sum"
BYTE_METRICS = (TMA_LOAD_BYTES_METRIC, TMA_STORE_BYTES_METRIC)
NCU_METRICS = (OPCODE_METRIC, DURATION_METRIC, *BYTE_METRICS)
# Which byte counters a feature's transfers show up in (the counters do not tell tensor from bulk copies).
FEATURE_BYTE_METRICS: dict[str, tuple[str, ...]] = {
    "tma.load": (TMA_LOAD_BYTES_METRIC,),
    "tma.load_multicast": (TMA_LOAD_BYTES_METRIC,),
    "tma.store": (TMA_STORE_BYTES_METRIC,),
    "bulk.copy": (TMA_LOAD_BYTES_METRIC, TMA_STORE_BYTES_METRIC),
}
# ncu prints values in scaled units unless told otherwise (``--print-units base``); both are read.
_UNIT_SCALE = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
               "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}

_INSTANCE = re.compile(r"([A-Z][A-Z0-9_.]*(?:\.[A-Za-z0-9_]+)*):\s*([\d,]+)")


def ncu_number(text: str) -> float | None:
    """A value cell of ncu's CSV (thousands separated by commas); None when it is not a number (n/a)."""
    cleaned = text.replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return None


def ncu_quantity(text: str, unit: str) -> float | None:
    """A value cell in base units (bytes, nanoseconds) given its unit cell; None when not a number."""
    value = ncu_number(text.partition("(")[0])
    if value is None:
        return None
    return value * _UNIT_SCALE.get(unit.strip(), 1.0)


def ncu_dims(text: str) -> Dims | None:
    """A dimension cell such as ``(256, 1, 1)``; None when it is not three integers."""
    parts = [part.strip() for part in text.strip().strip("()").split(",")]
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def ncu_csv_table(text: str) -> tuple[list[str], list[str], list[list[str]]]:
    """ncu's raw CSV page as (metric names, units, one row per launch); any text before the table
    (ncu's own notes) is skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV table in the output (no line starting with \"ID\")")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return rows[0], rows[1] if len(rows) > 1 else [], rows[2:]


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """Kernel launches from ncu's raw CSV page (the per-opcode executed-instruction metric)."""
    return [profile for _, profile in parse_ncu_csv_by_process(text)]


def parse_ncu_csv_by_process(text: str) -> list[tuple[int | None, KernelProfile]]:
    """Kernel launches from ncu's raw CSV page, each with the id of the process that made it (None where the
    page has no such column): a batched session (``proof.batching``) is split by it."""
    header, units, body = ncu_csv_table(text)
    column = {name: index for index, name in enumerate(header)}
    if OPCODE_METRIC not in column:
        raise ValueError(f"the ncu output lacks {OPCODE_METRIC}; profile with --metrics {','.join(NCU_METRICS)}")
    units = units if len(units) == len(header) else [""] * len(header)
    profiles = []
    for row in body:
        if len(row) != len(header):
            continue
        cell = row[column[OPCODE_METRIC]]
        executed = {m.group(1): int(m.group(2).replace(",", "")) for m in _INSTANCE.finditer(cell.partition("(")[2])}

        def quantity(name: str) -> float | None:
            return ncu_quantity(row[column[name]], units[column[name]]) if name in column else None

        moved = {name: value for name in BYTE_METRICS if (value := quantity(name)) is not None}
        process = row[column["Process ID"]].strip() if "Process ID" in column else ""
        profiles.append((int(process) if process.isdigit() else None, KernelProfile(
            launch_id=int(row[column["ID"]]), name=row[column["Kernel Name"]],
            stream=row[column["Stream"]] if "Stream" in column else None,
            grid=ncu_dims(row[column["Grid Size"]]) if "Grid Size" in column else None,
            block=ncu_dims(row[column["Block Size"]]) if "Block Size" in column else None,
            duration_ns=quantity(DURATION_METRIC), executed=executed, bytes=moved)))
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


def moved_bytes(feature_ids: list[str], profiles: list[KernelProfile]) -> float | None:
    """Bytes the features' transfers moved over every launch (each counter once, even when several
    features share it); None when none of their counters is in the report (or none has counters)."""
    metrics = {metric for feature_id in feature_ids for metric in FEATURE_BYTE_METRICS.get(feature_id, ())}
    values = [profile.bytes[metric] for profile in profiles for metric in sorted(metrics) if metric in profile.bytes]
    return sum(values) if values else None


def judge_execution(requirement: Requirement, arch: Arch, profiles: list[KernelProfile],
                    task_flops: float, task_bytes: float = 0.0) -> RequirementExecution:
    """Whether the candidate's kernels executed the requirement, and enough of the FLOPs or of the
    task's bytes (``task_bytes``: ``Task.bytes_for``) where it says so."""
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
    verdict = RequirementExecution(requirement=requirement, executed=hits, satisfied=True, message=f"{label}: executed")
    if requirement.min_flop_share is not None:
        verdict = _judge_flop_share(verdict, share)
    if requirement.min_byte_share is not None and verdict.satisfied:
        verdict = _judge_byte_share(verdict, moved_bytes(requirement.any_of, profiles), task_bytes)
    return verdict


def _judge_flop_share(verdict: RequirementExecution, share: float | None) -> RequirementExecution:
    requirement, label = verdict.requirement, verdict.requirement.label
    assert requirement.min_flop_share is not None
    if share is None:
        return verdict.model_copy(update={
            "satisfied": False, "flop_share": None,
            "message": f"{label}: executed, but its share of the FLOPs cannot be read from the SASS mnemonics on "
                       "this target: unverified"})
    ok = share >= requirement.min_flop_share
    return verdict.model_copy(update={
        "satisfied": ok, "flop_share": share,
        "message": f"{label}: executed, performing {share:.1%} of the task's FLOPs"
                   + ("" if ok else f" (needs {requirement.min_flop_share:.0%}: the rest runs on other instructions)")})


def _judge_byte_share(verdict: RequirementExecution, moved: float | None, task_bytes: float) -> RequirementExecution:
    """A share the report cannot give (its counters absent, or a task without bytes) is unverified, never
    "used" and never a finding against the candidate."""
    requirement, label = verdict.requirement, verdict.requirement.label
    assert requirement.min_byte_share is not None
    if moved is None or task_bytes <= 0:
        why = "the task has no byte count" if task_bytes <= 0 else (
            "ncu's report has none of its byte counters (" + ", ".join(
                sorted({m for f in requirement.any_of for m in FEATURE_BYTE_METRICS.get(f, ())})) + ")")
        return verdict.model_copy(update={
            "satisfied": False, "verified": False,
            "message": f"{label}: executed, but the share of the task's bytes it moved is unknown ({why}): unverified"})
    share = moved / task_bytes
    ok = share >= requirement.min_byte_share
    return verdict.model_copy(update={
        "satisfied": ok, "byte_share": share,
        "message": f"{label}: executed, moving {_percent(share)} of the task's bytes"
                   + ("" if ok else f" (needs {requirement.min_byte_share:.0%}: the rest moves another way)")})


def _percent(share: float) -> str:
    """A share as a percentage, with two significant digits below 0.1 % (a token copy is not "0.0%")."""
    return f"{share:.1%}" if share >= 1e-3 or share == 0 else f"{share * 100:.2g}%"
