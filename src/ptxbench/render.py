"""Terminal rendering of reports (rich). Kept apart from the logic so the API stays plain data."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ptxbench.check import CheckReport
from ptxbench.static.report import Stage

_STAGE_STYLE = {
    Stage.IN_SASS: "[green]in SASS[/green]",
    Stage.NOT_IN_SASS: "[yellow]PTX only[/yellow]",
    Stage.ELIMINATED_BEFORE_PTX: "[yellow]source only[/yellow]",
    Stage.UNSUPPORTED_ON_TARGET: "[red]unsupported[/red]",
    Stage.NOT_WRITTEN: "[red]absent[/red]",
}


def render_check(console: Console, report: CheckReport) -> None:
    title = f"[bold]{report.candidate}[/bold] → {report.arch.value}" + (f" (task {report.task})" if report.task else "")
    console.print(title, highlight=False)
    build = report.build
    if not build.ok:
        diagnosis = build.diagnosis
        console.print(f"  [red]build failed[/red]: {diagnosis.failure.value if diagnosis else 'unknown'}")
        if diagnosis:
            console.print(f"  {diagnosis.summary}", highlight=False)
            if diagnosis.first_error:
                console.print(f"  first error: {diagnosis.first_error}", highlight=False, markup=False)
        return
    static = report.static
    if static is None:
        return
    cached = " (cached)" if build.cached else ""
    console.print(f"  built in {build.duration_s:.1f} s{cached}; checked in {report.duration_s:.1f} s")
    kernels = Table("kernel", "regs", "smem B", "spills B", "features in SASS", "top SASS")
    for kernel in static.kernels:
        resources = kernel.resources
        spills = resources.spill_store_bytes + resources.spill_load_bytes
        top = ", ".join(f"{m}×{c}" for m, c in sorted(kernel.sass.items(), key=lambda kv: -kv[1])[:4])
        kernels.add_row(kernel.demangled[:60], str(resources.registers or "?"), str(resources.shared_bytes or 0),
                        str(spills), ", ".join(kernel.features) or "-", top)
    console.print(kernels)
    if static.requirements:
        funnel = Table("requirement", "source", "PTX", "SASS", "verdict")
        for check in static.requirements:
            evidence = check.evidence
            mark = lambda hit: "[green]✓[/green]" if hit else "·"  # noqa: E731
            funnel.add_row(check.requirement.label, mark(any(e.in_source for e in evidence)),
                           mark(any(e.in_ptx for e in evidence)), mark(any(e.in_sass for e in evidence)),
                           _STAGE_STYLE[check.stage])
        console.print(funnel)
        for check in static.requirements:
            if not check.in_sass:
                console.print(f"  • {check.message}", highlight=False)
    elif static.features:
        console.print("  features: " + ", ".join(
            f"{e.feature}[{'SASS' if e.in_sass else 'PTX' if e.in_ptx else 'source'}]" for e in static.features))
    for violation in static.policy_violations:
        console.print(f"  [red]policy[/red]: {violation}", highlight=False)
    for note in static.notes:
        console.print(f"  note: {note}", highlight=False)
