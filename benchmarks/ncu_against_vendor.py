"""Why a kernel is slower than the vendor library: Nsight Compute's clock, throughput and warp-stall
metrics for one call of the kernel and one call of its task's vendor baseline, on the same workload,
side by side. One command on a lent GPU; the reference-kernel issue asks misses to be explained.

    python benchmarks/ncu_against_vendor.py kernels/reference/sm_90a/gemm_fp8.cu \\
        [--workload square-8192] [--baseline cublaslt] [--metrics m1,m2] [--out DIR]

Each side is one call after two warm-up calls, profiled alone (cuProfilerStart/Stop around it) with
the clocks left alone (``--clock-control none``: a kernel that draws less power runs at a higher
clock, and that is part of the comparison). Writes ncu_<task>_<workload>.{json,md} into --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "WarpStateStats",
            "SchedulerStats", "Occupancy", "LaunchStats")
# The rows every comparison shows first (when ncu reported them), with their labels.
HEADLINE = {
    "gpu__time_duration.sum": "time",
    "sm__cycles_elapsed.avg.per_second": "SM clock",
    "sm__cycles_elapsed.max": "SM cycles",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots busy",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "L1/shared throughput",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 throughput",
    "lts__t_bytes.sum": "L2 bytes",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput",
    "launch__registers_per_thread": "registers per thread",
    "launch__grid_size": "grid",
    "launch__block_size": "block",
}
# Only names ncu accepted on the H200: one it does not know fails the whole profile.
EXTRA_METRICS = ("sm__cycles_elapsed.max", "lts__t_bytes.sum")
TENSOR_MARK = "pipe_tensor"  # the tensor-pipe metrics the sections collected are shown too: their
TENSOR_KIND = ".avg.pct_of_peak_sustained_active"  # per-SM average, and only where a side used that pipe
STALL_MARK = "issue_stalled"
STALLS_SHOWN = 12

# The vendor side: the variant's untimed setup (which warms its call up) and one more warm-up call
# outside the profiled range, then exactly the call the evaluator times, profiled once.
VENDOR_PROGRAM = """
import json, secrets, sys
import torch
from ptxbench.evaluate.baselines.variants import variant_specs
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.reference import make_inputs
spec = json.loads(sys.argv[1])
task = get_task(spec["task"])
inputs = make_inputs(task, spec["sizes"], secrets.randbits(62), device="cuda")
call = variant_specs(task)[spec["baseline"]].setup(inputs, spec["sizes"])
call()
torch.cuda.synchronize()
torch.cuda.profiler.start()
call()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def ncu_command(program: list[str], metrics: list[str]) -> list[str]:
    """ncu on ``program``'s profiled range only, the sections above plus ``metrics``, as a raw CSV."""
    sections = [part for name in SECTIONS for part in ("--section", name)]
    return ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw", *sections,
            "--metrics", ",".join(metrics), *program]


def vendor_program(task_id: str, sizes: dict[str, int], baseline: str) -> list[str]:
    return [sys.executable, "-c", VENDOR_PROGRAM, json.dumps({"task": task_id, "sizes": sizes, "baseline": baseline})]


def parse_raw_csv(text: str) -> list[dict]:
    """Each profiled kernel launch of ncu's raw CSV page: its name and {metric: [unit, value]}."""
    from ptxbench.evaluate.proof.executed import ncu_csv_table

    header, units, body = ncu_csv_table(text)
    launches = []
    for row in body:
        if len(row) != len(header):
            continue
        cells = dict(zip(header, zip(units, row)))
        launches.append({"kernel": row[header.index("Kernel Name")],
                         "metrics": {name: [unit, value] for name, (unit, value) in cells.items() if "__" in name}})
    return launches


def _value(cell: list[str] | None) -> float | None:
    from ptxbench.evaluate.proof.executed import ncu_number

    return None if cell is None else ncu_number(cell[1])


def main_kernel(launches: list[dict]) -> dict:
    """The launch that took longest: the one a GEMM's time is (a library may add a memset or two)."""
    if not launches:
        raise ValueError("ncu profiled no kernel")
    return max(launches, key=lambda k: _value(k["metrics"].get("gpu__time_duration.sum")) or 0.0)


def side_by_side(ours: dict, vendor: dict) -> list[str]:
    """Markdown rows: the headline metrics, the tensor pipe's, then the warp-stall reasons by our
    kernel's value (the largest first)."""
    def cell(kernel: dict, name: str) -> str:
        unit, value = kernel["metrics"].get(name, ["", "–"])
        return f"{value} {unit}".strip()

    names = [n for n in HEADLINE if n in ours["metrics"] or n in vendor["metrics"]]
    rows = [f"| {HEADLINE[n]} (`{n}`) | {cell(ours, n)} | {cell(vendor, n)} |" for n in names]
    tensor = sorted({n for k in (ours, vendor) for n in k["metrics"] if TENSOR_MARK in n and n.endswith(TENSOR_KIND)
                     and any(_value(side["metrics"].get(n)) for side in (ours, vendor))})
    rows += [f"| `{n}` | {cell(ours, n)} | {cell(vendor, n)} |" for n in tensor]
    stalls = sorted((n for n in ours["metrics"] if STALL_MARK in n and _value(ours["metrics"][n]) is not None),
                    key=lambda n: -(_value(ours["metrics"][n]) or 0.0))[:STALLS_SHOWN]
    rows += [f"| stall: `{n}` | {cell(ours, n)} | {cell(vendor, n)} |" for n in stalls]
    return rows


def _profile(command: list[str], timeout_s: float) -> list[dict]:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    try:
        return parse_raw_csv(proc.stdout)
    except ValueError as exc:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise SystemExit(f"{exc}; ncu exited {proc.returncode}: {tail}") from None


def main() -> None:
    import torch

    from ptxbench.arch.registry import Arch
    from ptxbench.check import build_request, read_candidate
    from ptxbench.evaluate.baselines.variants import baseline_variants
    from ptxbench.evaluate.proof.profiling import profiled_program
    from ptxbench.tasks.loader import get_task
    from ptxbench.toolchain.compile import build

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", type=Path, help="the kernel file; its stem names the task")
    parser.add_argument("--workload", help="workload name (default: the task's timed one)")
    parser.add_argument("--baseline", help="vendor variant (default: the task's first)")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--metrics", default="", help="more metrics, comma-separated")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=Path.cwd())
    args = parser.parse_args()

    task = get_task(args.kernel.stem)
    workload = next((w for w in task.workloads if w.name == args.workload), None) if args.workload else task.timed()
    if workload is None:
        parser.error(f"no workload {args.workload!r} in {task.id}: {', '.join(w.name for w in task.workloads)}")
    baseline = args.baseline or next(iter(baseline_variants(task)))
    metrics = [*EXTRA_METRICS, *filter(None, args.metrics.split(","))]
    built = build(build_request(read_candidate(args.kernel), Arch(args.arch), task))
    if not built.ok:
        raise SystemExit(f"{args.kernel} does not build:\n{built.log[-3000:]}")
    with tempfile.TemporaryDirectory() as folder:
        ours_program = profiled_program(task, dict(workload.sizes), Path(built.directory) / "candidate.so", Path(folder))
        ours = _profile(ncu_command(ours_program, metrics), args.timeout_s)
    vendor = _profile(ncu_command(vendor_program(task.id, dict(workload.sizes), baseline), metrics), args.timeout_s)
    ours_main, vendor_main = main_kernel(ours), main_kernel(vendor)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "task": task.id,
              "workload": workload.name, "sizes": dict(workload.sizes), "baseline": baseline,
              "command": "python benchmarks/ncu_against_vendor.py " + " ".join(sys.argv[1:]),
              "ours": ours, "vendor": vendor}
    lines = [f"# {args.kernel.name} against {baseline} under Nsight Compute ({workload.name}, {result['gpu']})", "",
             f"{result['date']}; torch {result['torch']}; command: `{result['command']}`", "",
             f"Ours: `{ours_main['kernel'][:90]}` ({len(ours)} launch(es)); vendor: `{vendor_main['kernel'][:90]}` "
             f"({len(vendor)} launch(es)). The longest launch of each side is compared.", "",
             "| metric | ours | vendor |", "|---|---|---|", *side_by_side(ours_main, vendor_main)]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"ncu_{task.id}_{workload.name}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
