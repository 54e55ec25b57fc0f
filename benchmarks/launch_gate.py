"""Does a busy host move CUDA-event times, and does the launch gate keep host delays out of them?

The evaluator's own ``CandidateRunner`` times a vendor baseline (the timed shape of each ``--tasks``
task) call by call, alternating between the launch gate and the spin cover alone, so both methods see
the same moments. It does so on a quiet machine, then under load: one busy process per CPU core plus
``--context-churn`` processes that open a CUDA context, allocate 256 MB and close it again in a loop
(what starting a spare worker does next to a timing). For each (load, method): median, 90th
percentile and maximum of the event times, and how far the median moved under load.

    python benchmarks/launch_gate.py [--tasks gemm_bf16 rmsnorm] [--calls 300] [--out DIR]

Writes ``launch_gate_<gpu>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"

_BUSY = "while True: pass"
_CONTEXT_CHURN = """
import ctypes
driver = ctypes.CDLL("libcuda.so.1")
driver.cuInit(0)
device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
driver.cuDeviceGet(ctypes.byref(device), 0)
while True:
    driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
    driver.cuCtxSetCurrent(context)
    driver.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(256 << 20))
    driver.cuMemFree_v2(pointer)
    driver.cuCtxSetCurrent(None)
    driver.cuDevicePrimaryCtxRelease_v2(device)
"""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(values), "p90_ms": _percentile(values, 0.9), "max_ms": max(values),
            "calls": len(values)}


def _measure(runner, task, calls: int) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """``calls`` calls of the fastest-listed baseline per method, alternating gate and cover call by call."""
    from ptxbench.evaluate.baselines.variants import baseline_variants

    variant = next(iter(baseline_variants(task)))
    runner.set_task(task.model_dump_json())
    runner.prepare_timing(task.timed().sizes, [secrets.randbits(62) for _ in range(3)], [variant], False)
    times: dict[str, list[float]] = {"gate": [], "cover": []}
    for index in range(calls + 3):
        for method in times:
            runner.use_launch_gate(method == "gate")
            value = runner.time_rounds(1)[variant][0]
            if index >= 3:  # warm-up
                times[method].append(value)
    runner.use_launch_gate(True)
    return times


def _load(churn: int) -> list[subprocess.Popen]:
    cores = os.cpu_count() or 1
    return ([subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(cores)]
            + [subprocess.Popen([sys.executable, "-c", _CONTEXT_CHURN]) for _ in range(churn)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["gemm_bf16", "rmsnorm"])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per (task, load, method)")
    parser.add_argument("--context-churn", type=int, default=2, help="processes opening CUDA contexts under load")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    import torch

    from ptxbench.evaluate.child.gpu_side import CandidateRunner
    from ptxbench.tasks.loader import get_task

    runner = CandidateRunner()
    if not runner.launch_gate()["gated"]:
        sys.exit(f"the launch gate could not be used here: {runner.gate_note}")
    results = []
    for name in args.tasks:
        task = get_task(name)
        row: dict = {"task": name, "workload": task.timed().name}
        for load in ("quiet", "loaded"):
            processes = _load(args.context_churn) if load == "loaded" else []
            try:
                time.sleep(1.0 if processes else 0.0)  # let the load start
                times = _measure(runner, task, args.calls)
            finally:
                for process in processes:
                    process.kill()
                    process.wait()
            row[load] = {method: _summary(values) for method, values in times.items()}
        for method in ("gate", "cover"):
            quiet, loaded = row["quiet"][method]["median_ms"], row["loaded"][method]["median_ms"]
            row[f"{method}_median_shift_pct"] = 100 * (loaded / quiet - 1)
        results.append(row)
        print(json.dumps(row), flush=True)
    gpu = torch.cuda.get_device_name(0)
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
              "torch": torch.__version__, "cuda": torch.version.cuda, "cpus": os.cpu_count(),
              "command": "python benchmarks/launch_gate.py " + " ".join(sys.argv[1:]), "results": results}
    stem = f"launch_gate_{gpu.split()[-1].lower()}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [f"# Launch gate vs spin cover on {gpu} ({record['date']}, torch {record['torch']}, CUDA {record['cuda']}, "
             f"{record['cpus']} CPUs)", "", f"Command: `{record['command']}`", "",
             "| task | workload | load | method | median ms | p90 ms | max ms | median moved under load |",
             "|---|---|---|---|---|---|---|---|"]
    for row in results:
        for load in ("quiet", "loaded"):
            for method in ("gate", "cover"):
                s = row[load][method]
                shift = f"{row[f'{method}_median_shift_pct']:+.2f} %" if load == "loaded" else ""
                lines.append(f"| {row['task']} | {row['workload']} | {load} | {method} | {s['median_ms']:.4f} | "
                             f"{s['p90_ms']:.4f} | {s['max_ms']:.4f} | {shift} |")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
