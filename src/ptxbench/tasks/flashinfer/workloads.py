"""A definition's workloads as the task's: sizes bound and checked, each layout read or drawn, roles given.

Workloads keep their order; the largest (most FLOPs, then most elements moved) is timed, every third of the
others is held out (at least one). Two workloads of the same sizes are one (the first is kept).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from ptxbench.tasks import formula
from ptxbench.tasks.flashinfer.blobs import BlobMissing, BlobReader
from ptxbench.tasks.flashinfer.layouts import IndexPlan, Layout, blob_layout, drawn_layout, layout_axes
from ptxbench.tasks.flashinfer.schema import AxisConst, AxisVar, Definition, ImportProblem, WorkloadSpec

HELD_OUT_EVERY = 3


class ImportedWorkload(NamedTuple):
    name: str
    sizes: dict[str, int]
    layout: Layout | None  # None for a definition without index inputs
    source: str  # where the layout came from: "blobs", "drawn", or "drawn: <why the blobs could not be read>"
    uuid: str


def checkable(constraint: str, axes: set[str]) -> bool:
    """Whether a constraint is one PTXBench can check (arithmetic and comparisons over the axes)."""
    try:
        return formula.names_in(constraint) <= axes
    except formula.FormulaError:
        return False


def _name(index: int, spec: WorkloadSpec) -> str:
    return f"w{index:02d}-" + re.sub(r"[^A-Za-z0-9_.-]", "-", spec.uuid)[:8]


def bind(definition: Definition, plan: IndexPlan, specs: list[WorkloadSpec], blobs: BlobReader) -> list[ImportedWorkload]:
    """Every distinct workload, its sizes (const axes included, layout axes added) and layout."""
    consts = {n: a.value for n, a in definition.axes.items() if isinstance(a, AxisConst)}
    variables = [n for n, a in definition.axes.items() if isinstance(a, AxisVar)]
    checked = [c for c in definition.constraints if checkable(c, set(definition.axes))]
    found: list[ImportedWorkload] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for index, spec in enumerate(specs):
        missing = [n for n in variables if n not in spec.axes]
        if missing:
            raise ImportProblem(f"workload {spec.uuid}: no value for axis {missing[0]}")
        unknown = sorted(set(spec.axes) - set(variables) - set(consts))
        if unknown:
            raise ImportProblem(f"workload {spec.uuid}: {unknown[0]} is not a var axis of {definition.name}")
        restated = [n for n in spec.axes if n in consts and spec.axes[n] != consts[n]]
        if restated:  # a workload may restate a const axis (the original PTXBench's do), never change it
            raise ImportProblem(f"workload {spec.uuid}: {restated[0]} = {spec.axes[restated[0]]}, but the definition "
                                f"fixes it to {consts[restated[0]]}")
        sizes = {n: consts[n] if n in consts else spec.axes[n] for n in definition.axes}
        for constraint in checked:
            if not formula.holds(constraint, sizes):
                raise ImportProblem(f"workload {spec.uuid} breaks the definition's constraint {constraint!r}")
        layout, source = None, ""
        if plan.derived:
            try:
                layout = blob_layout(plan, spec, sizes, blobs)
                source = "blobs" if layout is not None else ""
            except BlobMissing as exc:  # the trace names blobs this copy of the dataset lacks: said in the note
                source = f"drawn: {exc}"
            if layout is None:
                layout = drawn_layout(plan, spec, sizes)
                source = source or "drawn"
            sizes |= layout_axes(plan, layout, sizes)
        key = tuple(sorted(sizes.items()))
        if key not in seen:
            seen.add(key)
            found.append(ImportedWorkload(_name(index, spec), sizes, layout, source, spec.uuid))
    if len(found) == 1 and not plan.derived and variables:
        found.append(_held_out_companion(definition, found[0], variables, checked))
    if len(found) < 2:
        raise ImportProblem(f"{len(found)} distinct workload(s): a task needs one timed and at least one held out")
    return found


def _held_out_companion(definition: Definition, only: ImportedWorkload, variables: list[str],
                        checked: list[str]) -> ImportedWorkload:
    """A second workload for a definition that comes with one (the original PTXBench's fp8 GEMMs): its var axes
    a little over half the given ones and odd (twice and one more where that is the same), so the held-out
    shape is one a kernel cannot be fitted to."""
    sizes = dict(only.sizes)
    for name in variables:
        halved = max(1, sizes[name] // 2 + 1) | 1
        sizes[name] = halved if halved != sizes[name] else 2 * sizes[name] + 1
    if not all(formula.holds(c, sizes) for c in checked) or sizes == only.sizes:
        raise ImportProblem("1 distinct workload: a task needs one timed and at least one held out, and no "
                            "held-out shape meets the definition's constraints")
    return ImportedWorkload(f"{only.name}-heldout", sizes, None, "companion", only.uuid)


def with_roles(workloads: list[ImportedWorkload], weight: str) -> list[dict[str, Any]]:
    """The task's ``[[workloads]]`` tables: the heaviest timed and listed first (as in the bundled tasks: the
    evaluator times the workloads in the task's order, and its summary and the results read the first timing as
    the timed workload's), every third other one held out; the others keep the traces' order."""
    timed = max(range(len(workloads)), key=lambda i: (formula.evaluate(weight, workloads[i].sizes), -i))
    others = [i for i in range(len(workloads)) if i != timed]
    held = {i for n, i in enumerate(others) if n % HELD_OUT_EVERY == HELD_OUT_EVERY - 1} or {others[-1]}
    rows = []
    for i, workload in enumerate(workloads):
        source = {"": "", "blobs": "; its layout from the trace's blobs", "drawn": "; its layout drawn at import",
                  "companion": "; its var axes halved and made odd by the importer (the definition has one "
                               "workload)"}.get(workload.source, "; its layout drawn at import, its blobs missing")
        rows.append({"name": workload.name, "role": "timed" if i == timed else "heldout" if i in held else "visible",
                     "sizes": workload.sizes, "note": f"trace {workload.uuid}{source}"})
    return [rows[timed], *rows[:timed], *rows[timed + 1:]]
