"""Scale-out throughput: the same candidates evaluated on one GPU, then on every visible GPU.

Each run evaluates ``--copies`` copies of the bundled example of each ``--tasks`` task (every copy a
distinct source, so no build or result is reused) into a fresh run directory, exactly as ``ptxbench
eval`` does (builds on the CPU cores ahead of the GPUs). Reported: candidates per minute, the speed-up
over one GPU, and per-GPU evidence that every GPU worked: items and busy seconds per GPU from the
run directory's placement records, and ``nvidia-smi`` utilization sampled every second during the run.
Writes benchmarks/results/multi_gpu_throughput_<gpu>.{json,md}.

    python benchmarks/multi_gpu_throughput.py [--copies 4] [--tasks rmsnorm,softmax,gemm_bf16]
        [--no-profile] [--backend local|ray] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"
EXAMPLES = REPO / "kernels" / "examples"


class UtilizationSampler:
    """``nvidia-smi`` GPU utilization (percent) per GPU index, once a second, in a background thread."""

    def __init__(self) -> None:
        self.samples: dict[str, list[int]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None

    def __enter__(self) -> "UtilizationSampler":
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            for line in out.splitlines():
                index, _, value = line.partition(",")
                if value.strip().isdigit():
                    self.samples[index.strip()].append(int(value))

    def summary(self) -> dict[str, dict[str, float]]:
        return {gpu: {"samples": len(values), "mean_pct": sum(values) / len(values),
                      "busy_share": sum(v > 0 for v in values) / len(values)}
                for gpu, values in sorted(self.samples.items()) if values}


def _candidates(tasks: list[str], copies: int) -> list[Any]:
    from ptxbench.evaluate.fleet.run import candidate_from_file
    from ptxbench.tasks.loader import get_task

    found = []
    for task_id in tasks:
        base = candidate_from_file(EXAMPLES / f"{task_id}.cu", get_task(task_id))
        for copy in range(copies):
            found.append(base.model_copy(update={"item": f"copy_{copy:03d}",
                                                 "source": f"// copy {copy} {secrets.token_hex(4)}\n{base.source}"}))
    return found


def _run(gpus: int, backend: str, tasks: list[str], copies: int, profile: bool) -> dict[str, Any]:
    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.evaluator import EvalOptions
    from ptxbench.evaluate.fleet.run import PLACEMENT_FILE, evaluate_candidates

    candidates = _candidates(tasks, copies)
    options = EvalOptions(profile=profile)
    with tempfile.TemporaryDirectory(prefix="ptxbench-throughput-") as folder:
        out = Path(folder) / "run"
        if backend == "ray":
            import ray

            ray.init(num_gpus=gpus, include_dashboard=False, log_to_driver=False)
        try:
            with UtilizationSampler() as sampler:
                started = time.perf_counter()
                if backend == "ray":
                    results = evaluate_candidates(candidates, Arch.SM_90A, out, options, backend="ray")
                else:
                    results = evaluate_candidates(candidates, Arch.SM_90A, out, options, gpus=list(range(gpus)))
                seconds = time.perf_counter() - started
        finally:
            if backend == "ray":
                ray.shutdown()
        per_gpu: dict[str, dict[str, Any]] = defaultdict(lambda: {"items": 0, "busy_s": 0.0})
        for record in out.glob(f"items/*/*/{PLACEMENT_FILE}"):
            placement = json.loads(record.read_text())
            key = str(placement["where"].get("cuda_visible_devices"))
            per_gpu[key]["items"] += 1
            per_gpu[key]["busy_s"] += placement["seconds"]
    statuses: dict[str, int] = defaultdict(int)
    for evaluation in results:
        failure = evaluation.infra_failure.value if evaluation.infra_failure else "?"
        statuses[evaluation.status.value if evaluation.status else f"infra:{failure}"] += 1
    return {"gpus": gpus, "candidates": len(candidates), "seconds": seconds,
            "per_minute": len(candidates) / (seconds / 60), "statuses": dict(statuses),
            "per_gpu": {gpu: {**v, "busy_share": v["busy_s"] / seconds} for gpu, v in sorted(per_gpu.items())},
            "nvidia_smi": sampler.summary()}


def _versions(backend: str) -> dict[str, Any]:
    import torch

    from ptxbench import __version__
    from ptxbench.records.rundir import _git_revision

    driver = None
    if shutil.which("nvidia-smi"):
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    versions = {"ptxbench": __version__, "git_revision": _git_revision(), "python": platform.python_version(),
                "torch": torch.__version__, "cuda": torch.version.cuda, "driver": driver}
    if backend == "ray":
        import ray

        versions["ray"] = ray.__version__
    return versions


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=4, help="copies of each task's example")
    parser.add_argument("--tasks", default="rmsnorm,softmax,gemm_bf16", help="tasks whose examples are evaluated")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="the ncu stage, as ptxbench eval runs it by default")
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the result files")
    args = parser.parse_args()
    count = torch.cuda.device_count()
    if count == 0:
        raise SystemExit("no CUDA GPU is visible")
    tasks = [t for t in args.tasks.split(",") if t]
    runs = [_run(gpus, args.backend, tasks, args.copies, args.profile) for gpus in sorted({1, count})]
    for run in runs:
        run["speedup"] = run["per_minute"] / runs[0]["per_minute"]
        run["efficiency"] = run["speedup"] / run["gpus"]
        print(json.dumps(run), flush=True)
    gpu = torch.cuda.get_device_name()
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": gpu,
              "visible_gpus": count, "cpus": os.cpu_count(), "backend": args.backend, "tasks": tasks,
              "copies": args.copies, "profile": args.profile, "ncu": shutil.which("ncu") is not None,
              "versions": _versions(args.backend), "runs": runs}
    slug = gpu.replace("NVIDIA ", "").replace(" ", "_").lower()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"multi_gpu_throughput_{slug}.json").write_text(json.dumps(result, indent=2) + "\n")
    versions = ", ".join(f"{k} {v}" for k, v in result["versions"].items() if v)
    lines = [f"# Multi-GPU evaluation throughput on {count} x {gpu} ({result['date']})", "",
             f"{args.copies} copies of the examples of {', '.join(tasks)}; backend {args.backend}; ncu stage "
             f"{'on' if args.profile and result['ncu'] else 'off'}; {result['cpus']} CPUs; {versions}.", "",
             "| GPUs | candidates | wall s | candidates / min | speed-up | efficiency | statuses |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['gpus']} | {r['candidates']} | {r['seconds']:.1f} | {r['per_minute']:.2f} | {r['speedup']:.2f}x "
              f"| {100 * r['efficiency']:.0f} % | {', '.join(f'{k} {v}' for k, v in r['statuses'].items())} |"
              for r in runs]
    lines += ["", "Per GPU (placement records: items and busy share of the wall time; nvidia-smi: mean utilization "
              "and share of 1 s samples above 0 %):", "",
              "| GPUs in run | GPU | items | busy share | nvidia-smi mean | nvidia-smi busy samples |", "|---|---|---|---|---|---|"]
    for run in runs:
        for gpu_id, usage in run["per_gpu"].items():
            smi = run["nvidia_smi"].get(gpu_id, {})
            lines.append(f"| {run['gpus']} | {gpu_id} | {usage['items']} | {100 * usage['busy_share']:.0f} % | "
                         + (f"{smi['mean_pct']:.0f} % | {100 * smi['busy_share']:.0f} % |" if smi else "— | — |"))
    (args.out / f"multi_gpu_throughput_{slug}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
