"""Why a kernel's median differs between fresh processes, and whether timing the vendor baseline next to
the candidate cancels it.

Each of ``--processes`` fresh processes times the vendor baseline, then loads the candidate and times it,
``--repeats`` times each (the evaluator's own ``CandidateRunner.time``), while ``nvidia-smi`` samples the
SM clock, power and temperature every 50 ms. The result shows the spread of the medians across
processes, within a process, and of the candidate/baseline ratio, next to the clocks seen during each
measurement. Writes ``timing_stability_<task>_<gpu>.json``.

    python benchmarks/timing_stability.py [--task gemm_bf16] [--candidate FILE] [--processes 6] [--out DIR]
    python benchmarks/timing_stability.py --interleaving 6 [--task ...]   (the evaluator's interleaved timing)
    python benchmarks/timing_stability.py --evaluations 6 [--task ...]    (its timing stage, evaluation after
                                                                            evaluation, per setting)
"""

from __future__ import annotations

import argparse
import datetime
import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ptxbench.kernels import reference_folder

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"

_CHILD = """
import json, secrets, sys, time
from ptxbench.evaluate.baselines.variants import baseline_variants
from ptxbench.evaluate.child.gpu_side import CandidateRunner
from ptxbench.tasks.loader import get_task
task = get_task(sys.argv[1]); so = sys.argv[2]; repeats = int(sys.argv[3]); budget = float(sys.argv[4])
sizes = task.timed().sizes
runner = CandidateRunner()
runner.set_task(task.model_dump_json())
seeds = [secrets.randbits(62) for _ in range(3)]
variants = list(baseline_variants(task))
rows = []
def measure(kind, candidate):
    started = time.time()
    reply = runner.time(sizes, seeds, [] if candidate else variants, budget, 3, candidate)
    stats = reply["stats"]["candidate" if candidate else variants[0]]
    rows.append({"kind": kind, "start": started, "end": time.time(), "median_ms": stats[0], "iqr_ms": stats[1]})
for _ in range(repeats):
    measure("baseline", False)
runner.load(so, task.model_dump_json())
for _ in range(repeats):
    measure("candidate", True)
print("ROWS" + json.dumps(rows))
"""


def _spread_pct(values: list[float]) -> float:
    return 100 * (max(values) - min(values)) / statistics.median(values) if values else 0.0


def _clock_during(samples: list[dict], start: float, end: float) -> dict:
    inside = [s for s in samples if start <= s["t"] <= end]
    if not inside:
        return {}
    return {key: statistics.fmean(s[key] for s in inside) for key in ("sm_mhz", "power_w", "temp_c")} | {
        "reasons": sorted({s["reasons"] for s in inside})}


def _sampler() -> subprocess.Popen:
    return subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                             "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)


def _sample_in_background(samples: list[dict]) -> subprocess.Popen:
    """``nvidia-smi`` sampling the SM clock, power, temperature and throttle reasons into ``samples``."""
    import threading

    sampler = _sampler()

    def read() -> None:
        assert sampler.stdout is not None
        for line in sampler.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                samples.append({"t": time.time(), "sm_mhz": float(parts[0]), "power_w": float(parts[1]),
                                "temp_c": float(parts[2]), "reasons": parts[3]})
            except (ValueError, IndexError):
                continue
    threading.Thread(target=read, daemon=True).start()
    return sampler


# (alternate after this much measured time per side, measured time per side and workload, baseline process)
EVALUATION_SETTINGS = [(0.0, 100.0, "long-lived"), (1.0, 100.0, "long-lived"), (1.0, 50.0, "long-lived"),
                       (1.0, 100.0, "fresh")]


def _evaluations(task, shared_object: str, repeats: int) -> dict:  # type: ignore[no-untyped-def]
    """The evaluator's timing stage, ``repeats`` evaluations of one candidate per setting, in one
    evaluator as ``ptxbench eval`` runs them: each evaluation in a fresh candidate process that times
    every timed and visible workload in turn beside the baseline process, with the GPU's lock held.
    Settings (EVALUATION_SETTINGS): the chunk between switches, the measured time per side, and whether
    the baseline process lives as long as the evaluator (as it does) or is renewed per evaluation. Says
    how far each workload's candidate time, baseline time and their ratio spread across evaluations,
    with the clocks seen meanwhile. One unrecorded evaluation comes first (spares warming up)."""
    from ptxbench.evaluate.timing import protocol as timing
    from ptxbench.evaluate.baselines.variants import baseline_variants
    from ptxbench.evaluate.evaluator import HANDLER, EvalOptions, GpuEvaluator
    from ptxbench.evaluate.isolation.worker import Worker

    evaluator = GpuEvaluator(EvalOptions())
    evaluator.baselines.close()
    evaluator.baselines = Worker(HANDLER, None, spares=1)  # spares only serve the "fresh" setting
    workloads = [w for w in task.workloads if w.role.value != "heldout"]
    samples: list[dict] = []
    sampler = _sample_in_background(samples)
    rows = []
    try:
        _ = evaluator.lock  # names the lock before any spare starts: spares then warm up outside timings
        evaluator.baselines.renew()
        evaluator.baselines.call("set_task", task.model_dump_json(), timeout_s=120)
        evaluator.worker.call("set_task", task.model_dump_json(), timeout_s=120)  # the clean time's partner
        fastest = {}
        with evaluator.lock.exclusive():
            for workload in workloads:
                clean = {v: timing.interleaved(evaluator.worker, evaluator.baselines, workload, v, 100.0, 600,
                                                     candidate=False).baseline[0]
                         for v in baseline_variants(task)}
                fastest[workload.name] = min(clean, key=clean.__getitem__)

        def evaluation(chunk_ms: float, budget_ms: float, baseline_process: str) -> list[dict]:
            timing.CHUNK_MS = chunk_ms
            if baseline_process == "fresh":
                evaluator.baselines.renew()
                evaluator.baselines.call("set_task", task.model_dump_json(), timeout_s=120)
            evaluator.worker.renew()
            evaluator.worker.wait_ready()
            measured_rows = []
            with evaluator.lock.exclusive():
                evaluator.worker.call("load", shared_object, task.model_dump_json(), timeout_s=120)
                for workload in workloads:
                    started, began = time.perf_counter(), time.time()
                    measured = timing.interleaved(evaluator.worker, evaluator.baselines, workload,
                                                  fastest[workload.name], budget_ms, 600)
                    candidate_ms, baseline_ms = measured.candidate[0], measured.baseline[0]
                    measured_rows.append({
                        "chunk_ms": chunk_ms, "budget_ms": budget_ms, "baseline_process": baseline_process,
                        "workload": workload.name, "variant": fastest[workload.name], "candidate_ms": candidate_ms,
                        "baseline_ms": baseline_ms, "ratio": baseline_ms / candidate_ms,
                        "samples": measured.samples, "seconds": time.perf_counter() - started,
                        "start": began, "end": time.time()})
                evaluator.worker.kill()
            return measured_rows

        evaluation(*EVALUATION_SETTINGS[0])  # unrecorded: the spares start meanwhile
        for setting in EVALUATION_SETTINGS:
            for repeat in range(repeats):
                rows += [row | {"repeat": repeat} for row in evaluation(*setting)]
    finally:
        evaluator.close()
        sampler.terminate()
    time.sleep(0.2)
    for row in rows:
        row["clocks"] = _clock_during(samples, row.pop("start"), row.pop("end"))
    summary = []
    for chunk_ms, budget_ms, baseline_process in EVALUATION_SETTINGS:
        chosen = [r for r in rows if (r["chunk_ms"], r["budget_ms"], r["baseline_process"])
                  == (chunk_ms, budget_ms, baseline_process)]
        per_workload = {}
        for workload in workloads:
            mine = [r for r in chosen if r["workload"] == workload.name]
            per_workload[workload.name] = {
                "ratio_spread_pct": _spread_pct([r["ratio"] for r in mine]),
                "candidate_spread_pct": _spread_pct([r["candidate_ms"] for r in mine]),
                "baseline_spread_pct": _spread_pct([r["baseline_ms"] for r in mine]),
                "candidate_ms": statistics.median(r["candidate_ms"] for r in mine),
                "samples": statistics.median(r["samples"] for r in mine)}
        summary.append({"chunk_ms": chunk_ms, "budget_ms": budget_ms, "baseline_process": baseline_process,
                        "seconds_per_evaluation": sum(r["seconds"] for r in chosen) / repeats,
                        "workloads": per_workload})
    return {"summary": summary, "rows": rows}


def _interleaving(task, shared_object: str, repeats: int) -> dict:  # type: ignore[no-untyped-def]
    """The evaluator's interleaved timing of the timed workload, ``repeats`` times per setting (chunk
    length between switches, measured time per side), in one evaluator: how far the candidate/baseline
    ratio spreads. A chunk of 0 ms alternates after every call."""
    from ptxbench.evaluate.timing import protocol as timing
    from ptxbench.evaluate.baselines.variants import baseline_variants
    from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator

    evaluator = GpuEvaluator(EvalOptions())
    settings = [(0.0, 100.0), (20.0, 100.0), (0.0, 400.0), (20.0, 400.0)]
    rows = []
    try:
        evaluator.device()
        evaluator.baselines.wait_ready()
        evaluator.worker.call("load", shared_object, task.model_dump_json(), timeout_s=120)
        evaluator.baselines.call("set_task", task.model_dump_json(), timeout_s=120)
        variant = next(iter(baseline_variants(task)))
        for chunk_ms, budget_ms in settings:
            timing.CHUNK_MS = chunk_ms
            for _ in range(repeats):
                started = time.perf_counter()
                measured = timing.interleaved(evaluator.worker, evaluator.baselines, task.timed(), variant,
                                              budget_ms, 600)
                candidate_ms, baseline_ms = measured.candidate[0], measured.baseline[0]
                rows.append({"chunk_ms": chunk_ms, "budget_ms": budget_ms, "candidate_ms": candidate_ms,
                             "baseline_ms": baseline_ms, "ratio": baseline_ms / candidate_ms,
                             "samples": measured.samples, "seconds": time.perf_counter() - started})
    finally:
        evaluator.close()
    summary = []
    for chunk_ms, budget_ms in settings:
        chosen = [r for r in rows if r["chunk_ms"] == chunk_ms and r["budget_ms"] == budget_ms]
        summary.append({"chunk_ms": chunk_ms, "budget_ms": budget_ms,
                        "ratio_spread_pct": _spread_pct([r["ratio"] for r in chosen]),
                        "candidate_spread_pct": _spread_pct([r["candidate_ms"] for r in chosen]),
                        "baseline_spread_pct": _spread_pct([r["baseline_ms"] for r in chosen]),
                        "seconds_each": statistics.fmean(r["seconds"] for r in chosen)})
    return {"summary": summary, "rows": rows}


def main() -> None:
    import torch

    from ptxbench.arch.registry import Arch
    from ptxbench.check import build_request, read_candidate
    from ptxbench.tasks.loader import get_task
    from ptxbench.toolchain.compile import build

    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="gemm_bf16")
    parser.add_argument("--candidate", type=Path, default=reference_folder("sm_90a") / "gemm_bf16.cu")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget-ms", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--interleaving", type=int, default=0, metavar="REPEATS",
                        help="instead: the evaluator's interleaved timing, REPEATS times per setting")
    parser.add_argument("--evaluations", type=int, default=0, metavar="REPEATS",
                        help="instead: the evaluator's timing stage, REPEATS evaluations per setting")
    args = parser.parse_args()
    task = get_task(args.task)
    built = build(build_request(read_candidate(args.candidate), Arch.SM_90A, task))
    if not built.ok:
        raise SystemExit(f"{args.candidate} did not build:\n{built.log[-3000:]}")
    shared_object = str(Path(built.directory) / "candidate.so")
    slug = torch.cuda.get_device_name().replace("NVIDIA ", "").replace(" ", "_").lower()
    if args.interleaving:
        result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                  "command": "python benchmarks/timing_stability.py " + " ".join(sys.argv[1:]),
                  "task": args.task, "workload": task.timed().name,
                  **_interleaving(task, shared_object, args.interleaving)}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"timing_interleaving_{args.task}_{slug}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["summary"], indent=2))
        return
    if args.evaluations:
        result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
                  "command": "python benchmarks/timing_stability.py " + " ".join(sys.argv[1:]),
                  "task": args.task, **_evaluations(task, shared_object, args.evaluations)}
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"timing_evaluations_{args.task}_{slug}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["summary"], indent=2))
        return

    samples: list[dict] = []
    sampler = _sample_in_background(samples)
    processes = []
    try:
        for index in range(args.processes):
            proc = subprocess.run([sys.executable, "-c", _CHILD, args.task, shared_object, str(args.repeats),
                                   str(args.budget_ms)], capture_output=True, text=True, timeout=300)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS")), None)
            if line is None:
                raise SystemExit(f"process {index} failed:\n{proc.stderr[-3000:]}")
            rows = json.loads(line[4:])
            time.sleep(0.5)
            for row in rows:
                row["clocks"] = _clock_during(samples, row["start"], row["end"])
            processes.append(rows)
            time.sleep(secrets.randbelow(4))  # idle gaps of 0-3 s, as between the stages of an evaluation
    finally:
        sampler.terminate()

    def medians(kind: str) -> list[list[float]]:
        return [[r["median_ms"] for r in rows if r["kind"] == kind] for rows in processes]

    base, cand = medians("baseline"), medians("candidate")
    ratios = [statistics.median(c) / statistics.median(b) for b, c in zip(base, cand)]
    summary = {
        "baseline_spread_across_processes_pct": _spread_pct([statistics.median(b) for b in base]),
        "candidate_spread_across_processes_pct": _spread_pct([statistics.median(c) for c in cand]),
        "baseline_spread_within_process_pct": max(_spread_pct(b) for b in base),
        "candidate_spread_within_process_pct": max(_spread_pct(c) for c in cand),
        "ratio_spread_across_processes_pct": _spread_pct(ratios),
        "ratios": ratios,
    }
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "command": "python benchmarks/timing_stability.py " + " ".join(sys.argv[1:]),
              "task": args.task, "workload": task.timed().name, "summary": summary, "processes": processes}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"timing_stability_{args.task}_{slug}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    for index, rows in enumerate(processes):
        for row in rows:
            clocks = row["clocks"]
            print(f"process {index} {row['kind']:9s} {row['median_ms']:.4f} ms  iqr {row['iqr_ms']:.4f}  "
                  f"sm {clocks.get('sm_mhz', 0):.0f} MHz  {clocks.get('power_w', 0):.0f} W  "
                  f"{clocks.get('temp_c', 0):.0f} C  {clocks.get('reasons', '')}")


if __name__ == "__main__":
    main()
