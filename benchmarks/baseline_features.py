"""Which of each task's required features the vendor baselines themselves execute (Nsight Compute).

A requirement that the best library does not meet must be justified in the task (memory-bound tasks
ask for the copy engine although PyTorch's kernels do not use it) or dropped. For each task and each
baseline variant this runs one call on the timed workload under ncu (only that call is profiled:
cudaProfilerStart/Stop around it), judges every requirement on the executed counts, and writes
benchmarks/results/baseline_features_<gpu>.{json,md}.

    python benchmarks/baseline_features.py            # driver: needs a GPU and ncu
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"


def child(task_id: str, variant: str) -> None:
    """Runs under ncu: the variant's setup (untimed, it warms the call up) and one more warm-up call
    outside the profiled range, then exactly one timed call profiled: setup work is never counted."""
    import torch

    from ptxbench.evaluate.baselines.variants import variant_specs
    from ptxbench.tasks.loader import get_task
    from ptxbench.tasks.reference import make_inputs

    task = get_task(task_id)
    sizes = task.timed().sizes
    inputs = make_inputs(task, sizes, seed=7, device="cuda")
    call = variant_specs(task)[variant].setup(inputs, sizes)
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main() -> None:
    import torch

    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.baselines.variants import baseline_variants
    from ptxbench.evaluate.proof.executed import NCU_METRICS, judge_execution, parse_ncu_csv
    from ptxbench.tasks.loader import bundled_suite

    rows = []
    for task in bundled_suite():
        flops = task.flops_for(task.timed().sizes)
        for variant in baseline_variants(task):
            command = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
                       "--print-metric-instances", "details", "--metrics", ",".join(NCU_METRICS),
                       sys.executable, __file__, "--child", task.id, variant]
            proc = subprocess.run(command, capture_output=True, text=True, timeout=600,
                                  env=dict(os.environ, PYTHONUNBUFFERED="1"))
            try:
                profiles = parse_ncu_csv(proc.stdout)
            except ValueError as exc:
                rows.append({"task": task.id, "variant": variant, "error": f"{exc}; {proc.stderr[-500:]}"})
                continue
            verdicts = [judge_execution(r, Arch.SM_90A, profiles, flops) for r in task.requirements_for(Arch.SM_90A)]
            rows.append({
                "task": task.id, "variant": variant, "workload": task.timed().name,
                "kernels": [p.name[:90] for p in profiles],
                "duration_us": sum(p.duration_ns or 0 for p in profiles) / 1e3,
                "requirements": [{"requirement": v.requirement.label, "executed": v.satisfied, "flop_share": v.flop_share,
                                  "justified": bool(v.requirement.justification), "message": v.message} for v in verdicts],
            })
            print(f"{task.id}/{variant}: " + "; ".join(v.message for v in verdicts), flush=True)
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
              "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "ncu": subprocess.run(["ncu", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1],
              "rows": rows}
    slug = gpu.replace("NVIDIA ", "").replace(" ", "_").lower()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"baseline_features_{slug}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Features the vendor baselines execute ({gpu}, {result['date']})", "",
             f"torch {result['torch']} (CUDA {result['cuda']}, cuDNN {result['cudnn']}), {result['ncu']}; "
             "timed workload of each task, sm_90a requirements, one profiled call.", "",
             "| task | baseline | requirement | executed | share of FLOPs | justified in the task |", "|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['task']} | {row['variant']} | (profiling failed: {row['error'][:80]}) | | | |")
            continue
        for req in row["requirements"]:
            share = "" if req["flop_share"] is None else f"{req['flop_share']:.1%}"
            lines.append(f"| {row['task']} | {row['variant']} | {req['requirement']} | {'yes' if req['executed'] else 'no'} "
                         f"| {share} | {'yes' if req['justified'] else ''} |")
    (OUT / f"baseline_features_{slug}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
