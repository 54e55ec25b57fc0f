"""Time every vendor-baseline variant of every task on its timed and visible workloads (GPU only).

Each variant is timed the evaluator's way: checked and set up in the evaluator's baseline process and
the fresh worker (``check_baselines``, setup untimed), then ``timing.interleaved(...,
candidate=False)``. Writes benchmarks/results/baselines_h200.{json,md} and the package-data summary
src/ptxbench/tasks/baseline_quality.json that `ptxbench tasks show` and `ptxbench report` warn from.

    python benchmarks/baselines.py [--tasks a,b] [--budget-ms 30] [--compile-gemm]

With --tasks, the results file is updated: those tasks replaced, the others kept with the date, command
and versions they were measured with (``measured``).

torch.compile's max-autotune of a GEMM shape takes minutes, so the evaluator does not time it (the GEMMs'
baseline is the library alone) and this benchmark audits it only with --compile-gemm (else the reason is
recorded); without it the whole run fits in ~8 minutes on an H200.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
GEMM_TASKS = ("gemm_bf16", "gemm_fp8", "gemm_fp8_blockscale", "moe_grouped_gemm")
NO_GEMM_COMPILE = "not measured: --compile-gemm not given (max-autotune of one GEMM shape takes minutes)"


def attainable_s(moved: float, flops: float, peaks: dict[str, float], fp8: bool) -> float:
    """max(bytes / measured copy bandwidth, FLOPs / best measured library matmul rate)."""
    bound = moved / peaks["bytes_per_s"]
    return max(bound, flops / peaks["fp8_flops" if fp8 else "bf16_flops"]) if flops else bound


def workload_row(variants: dict[str, dict[str, Any]], attainable: float) -> dict[str, Any]:
    """One workload's entry: every variant, the fastest and its share of the roofline (percent)."""
    timed = {name: v["ms"] for name, v in variants.items() if "ms" in v}
    best = min(timed, key=timed.__getitem__) if timed else None
    return {"best": best, "best_ms": timed[best] if best else None,
            "best_pct_of_roofline": 100 * attainable / (timed[best] / 1e3) if best else None,
            "variants": variants}


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Vendor baselines on {doc['gpu']} ({doc['date']})", "", f"`{doc['command']}`", "",
             "| task | workload | best | best ms | % of roofline | variants |", "|---|---|---|---|---|---|"]
    for task, workloads in doc["tasks"].items():
        for workload, row in workloads.items():
            cells = "; ".join(f"{n} {v['ms']:.4f} ms" if "ms" in v else f"{n}: {v['skipped']}"
                              for n, v in row["variants"].items())
            best_ms = "—" if row["best_ms"] is None else f"{row['best_ms']:.4f}"
            pct = "—" if row["best_pct_of_roofline"] is None else f"{row['best_pct_of_roofline']:.1f}"
            lines.append(f"| {task} | {workload} | {row['best'] or '—'} | {best_ms} | {pct} | {cells} |")
    runs: dict[tuple[str, str], list[str]] = {}
    for task, provenance in doc.get("measured", {}).items():
        runs.setdefault((provenance["date"], provenance["command"]), []).append(task)
    if len(runs) > 1:  # a file updated task by task: say which run measured what
        lines += ["", "Measured in several runs:", ""]
        lines += [f"- {day}, `{command}`: {', '.join(tasks)}" for (day, command), tasks in sorted(runs.items())]
    return "\n".join(lines) + "\n"


def write(doc: dict[str, Any], stem: Path, quality_path: Path | None = None, keep_others: bool = False) -> None:
    """The result JSON and markdown, and the package-data quality summary (with ``keep_others``, a run over some
    tasks, the summary's other tasks are kept with the GPU and date they were measured on)."""
    from ptxbench.evaluate.baselines.variants import QUALITY_PATH, load_baseline_quality, quality_from_results, write_quality

    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(doc))
    quality_path = quality_path or QUALITY_PATH
    previous = load_baseline_quality(quality_path) if keep_others else None
    write_quality(quality_from_results(doc, previous), quality_path)


def measure(task_ids: list[str] | None, budget_ms: float, compile_gemm: bool,
            after_task: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every variant of every task's shown workloads; ``after_task`` gets the document so far after each
    task, so a run cut short (a lent GPU's time limit) keeps the tasks it finished."""
    from ptxbench.evaluate.baselines.variants import SETUP_TIMEOUT_S, variant_specs
    from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
    from ptxbench.evaluate.timing.protocol import interleaved
    from ptxbench.tasks.loader import bundled_suite
    from ptxbench.tasks.model import Role

    evaluator = GpuEvaluator(EvalOptions(profile=False, timing_budget_ms=budget_ms))
    device = evaluator.device()
    peaks = evaluator.peaks()
    limit_s = 600.0
    tasks: dict[str, Any] = {}
    try:
        for task in bundled_suite():
            if task_ids and task.id not in task_ids:
                continue
            if evaluator._fresh_worker() or evaluator._baseline_worker_ready():
                raise RuntimeError("a worker could not start")
            fp8 = any(i.dtype.value.startswith("float8") for i in task.inputs)
            tasks[task.id] = {}
            with evaluator.lock.exclusive("baselines benchmark"):
                for worker in (evaluator.baselines, evaluator.worker):
                    worker.call("set_task", task.model_dump_json(), timeout_s=60)
                for workload in (w for w in task.workloads if w.role is not Role.HELDOUT):
                    variants: dict[str, dict[str, Any]] = {}
                    names = []
                    for name in variant_specs(task, audit=True):
                        if name == "compile" and task.id in GEMM_TASKS and not compile_gemm:
                            variants[name] = {"skipped": NO_GEMM_COMPILE}
                        else:
                            names.append(name)
                    for worker in (evaluator.baselines, evaluator.worker):
                        ready = [n for n in names if n not in variants]
                        for name, reason in worker.call("check_baselines", workload.sizes, ready,
                                                        timeout_s=SETUP_TIMEOUT_S).items():
                            if reason is not None:
                                variants[name] = {"skipped": reason}
                    for name in names:
                        if name not in variants:
                            reply = interleaved(evaluator.worker, evaluator.baselines, workload, name, budget_ms,
                                                limit_s, candidate=False)
                            variants[name] = {"ms": reply.baseline[0]}
                    attainable = attainable_s(task.bytes_for(workload.sizes), task.flops_for(workload.sizes), peaks, fp8)
                    tasks[task.id][workload.name] = workload_row(dict(sorted(variants.items())), attainable)
                    print(task.id, workload.name, tasks[task.id][workload.name]["best"], flush=True)
            if after_task is not None:
                after_task(_document(device, tasks))
    finally:
        evaluator.close()
    return _document(device, tasks)


def _document(device: dict[str, Any], tasks: dict[str, Any]) -> dict[str, Any]:
    versions = {"torch": device.get("torch"), "cuda": device.get("cuda"), "cudnn": device.get("cudnn"),
                "triton": _version("triton"), "liger_kernel": _version("liger_kernel"),
                "flashinfer": _version("flashinfer_python"), "fa3_fwd": _version("fa3_fwd"),
                "cudnn_frontend": _version("nvidia_cudnn_frontend")}
    provenance = {"date": date.today().isoformat(), "command": " ".join(["python", "benchmarks/baselines.py",
                                                                         *sys.argv[1:]]), "versions": versions}
    return {"gpu": device.get("name"), **provenance, "tasks": dict(tasks),
            "measured": {task_id: provenance for task_id in tasks}}


def merged(previous: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` (a run over some tasks) written over ``previous`` (the results file so far): the tasks it
    measured replaced, the others kept with the date, command and versions they were measured with
    (``measured``), in the suite's order. Results of another GPU are never mixed in."""
    from ptxbench.tasks.loader import bundled_suite

    if previous.get("gpu") != new.get("gpu"):
        raise SystemExit(f"the results file holds {previous.get('gpu')} results, this run is on {new.get('gpu')}: "
                         "write it elsewhere (--out)")
    earlier = {"date": previous.get("date"), "command": previous.get("command"), "versions": previous.get("versions")}
    measured = {task_id: previous.get("measured", {}).get(task_id, earlier) for task_id in previous["tasks"]}
    measured |= new["measured"]
    tasks = {**previous["tasks"], **new["tasks"]}
    order = [task.id for task in bundled_suite() if task.id in tasks]
    order += [task_id for task_id in tasks if task_id not in order]  # a task no longer in the suite stays last
    return {**new, "tasks": {t: tasks[t] for t in order}, "measured": {t: measured[t] for t in order}}


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module.replace("_", "-"))
    except PackageNotFoundError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    parser.add_argument("--budget-ms", type=float, default=30.0, help="measured time per variant and side")
    parser.add_argument("--compile-gemm", action="store_true", help="also time torch.compile of the GEMMs")
    parser.add_argument("--out", default=str(RESULTS / "baselines_h200"), help="result path without suffix")
    args = parser.parse_args()
    out = Path(args.out)
    chosen = [t for t in args.tasks.split(",") if t] or None
    # A run over some tasks updates the results file; one over every task replaces it.
    previous = json.loads(out.with_suffix(".json").read_text()) if chosen and out.with_suffix(".json").is_file() else None

    def written(doc: dict[str, Any]) -> None:
        write(merged(previous, doc) if previous is not None else doc, out, keep_others=chosen is not None)

    written(measure(chosen, args.budget_ms, args.compile_gemm, after_task=written))


if __name__ == "__main__":
    main()
