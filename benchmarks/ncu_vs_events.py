"""How the evaluator's event-timed call compares with Nsight Compute's kernel durations for honest kernels: the
evidence behind guards.MIN_TIMED_SHARE_OF_PROFILED (one launch), MIN_TIMED_SHARE_OF_PROFILED_KERNELS and
MIN_TIMED_SHARE_OF_LONGEST (several launches), which must never accuse an honest kernel of forged timing.

Each candidate is built as the evaluator builds it, loaded in the evaluator's worker and timed alone on its task's
timed workload (the evaluator's protocol: L2 flushed, launch gate, fresh inputs every round), then profiled by
ncu as the executed-instruction proof profiles it (each kernel alone, caches flushed). Per candidate: the launches
and their durations, the event median, its share of the summed durations and of the longest launch, and the least
time the guard allows. Writes benchmarks/results/ncu_vs_events_<gpu>.{json,md}.

    python benchmarks/ncu_vs_events.py [--gold] [--examples] [FILE | TASK=FILE | TASK=ref+FILE ...] [--out DIR]

``ref+FILE``: the task's packaged reference kernel followed by FILE (as the adversarial manifest's base =
"reference").
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

from ptxbench.kernels import reference_folder

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"
EXAMPLES = REPO / "kernels" / "examples"


def ncu_kernel_ms(task, shared_object: Path, timeout_s: float = 600) -> list[float]:  # type: ignore[no-untyped-def]
    """The durations (ms) of one call's kernel launches of the timed workload under ncu, in launch order, measured
    as the executed-instruction proof measures them."""
    from ptxbench.evaluate.proof.executed import NCU_METRICS, parse_ncu_csv
    from ptxbench.evaluate.judgement.launches import kernel_durations_ms
    from ptxbench.evaluate.proof.profiling import REPORT_NAME, profiled_program
    from ptxbench.toolchain.tools import ncu_import_command, ncu_record_command

    with tempfile.TemporaryDirectory() as folder:
        program = profiled_program(task, task.timed().sizes, shared_object, Path(folder))
        report = Path(folder) / REPORT_NAME
        subprocess.run(ncu_record_command(program, report, NCU_METRICS), capture_output=True, text=True,
                       timeout=timeout_s)
        proc = subprocess.run(ncu_import_command(report, NCU_METRICS), capture_output=True, text=True,
                              timeout=timeout_s)
    return kernel_durations_ms(parse_ncu_csv(proc.stdout))


def _candidates(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(task id, name, source) for every candidate asked for."""
    from ptxbench.check import read_candidate
    from ptxbench.context.wrappers import inline_wrapper_header

    found: list[tuple[str, str, str]] = []
    if args.gold:
        found += [(f.stem, f"reference/{f.name}", read_candidate(f)) for f in sorted(reference_folder("sm_90a").glob("*.cu"))]
    if args.examples:
        found += [(f.stem, f"examples/{f.name}", read_candidate(f)) for f in sorted(EXAMPLES.glob("*.cu"))]
    for spec in args.files:
        task, _, path = spec.rpartition("=")
        if path.startswith("ref+"):
            file = Path(path.removeprefix("ref+"))
            reference = (reference_folder("sm_90a") / f"{task}.cu").read_text()
            found.append((task, f"reference+{file.name}", f"{inline_wrapper_header(reference)}\n{file.read_text()}"))
        else:
            file = Path(path)
            found.append((task or file.stem, file.name, read_candidate(file)))
    return found


def measure(evaluator, task, name: str, source: str, budget_ms: float) -> dict:  # type: ignore[no-untyped-def]
    """One candidate: the event median of its timed workload (alone) and ncu's durations of one call."""
    from ptxbench.arch.registry import Arch
    from ptxbench.check import check_source
    from ptxbench.evaluate.judgement.guards import profiled_floor_ms

    report = check_source(source, Arch.SM_90A, task, name)
    shared_object = report.build.artifact(".so")
    if not report.build.ok or shared_object is None:
        return {"task": task.id, "candidate": name, "error": "did not build"}
    evaluator.worker.kill()
    evaluator.worker.call("load", str(shared_object), task.model_dump_json(), timeout_s=300)
    reply = evaluator.worker.call("time", task.timed().sizes, [secrets.randbits(62) for _ in range(3)], [],
                                  budget_ms, timeout_s=600)
    evaluator.worker.kill()
    median = reply["stats"]["candidate"][0]
    kernels = ncu_kernel_ms(task, shared_object)
    total = sum(kernels)
    floor = profiled_floor_ms(kernels)
    return {"task": task.id, "candidate": name, "workload": task.timed().name, "event_ms": median,
            "samples": reply["samples"], "kernel_ms": kernels, "launches": len(kernels), "ncu_ms": total,
            "share_of_sum": median / total if total else None,
            "share_of_longest": median / max(kernels) if kernels else None,
            "allowed_ms": floor, "accused": floor is not None and median < floor}


def _write(out: Path, result: dict) -> None:
    slug = result["gpu"].replace("NVIDIA ", "").replace(" ", "_").lower()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"ncu_vs_events_{slug}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"# Event-timed calls against Nsight Compute's durations on {result['gpu']} ({result['date']}, torch "
             f"{result['torch']}, ncu {result['ncu']})", "", f"Command: `{result['command']}`", "",
             "The event median of the timed workload, timed alone with the evaluator's protocol, against the durations "
             "ncu measured for one call (each launch alone, caches flushed). `allowed` is the least time the "
             "`timing_disagrees` guard accepts; an honest kernel must never be below it.", "",
             "| task | candidate | launches | event ms | ncu ms (sum) | event / sum | event / longest | allowed ms "
             "| accused |", "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row['task']} | {row['candidate']} | – | – | – | – | – | – | {row['error']} |")
            continue
        share = f"{row['share_of_sum']:.3f}" if row["share_of_sum"] else "–"
        longest = f"{row['share_of_longest']:.3f}" if row["share_of_longest"] else "–"
        allowed = f"{row['allowed_ms']:.4f}" if row["allowed_ms"] is not None else "–"
        lines.append(f"| {row['task']} | {row['candidate']} | {row['launches']} | {row['event_ms']:.4f} | "
                     f"{row['ncu_ms']:.4f} | {share} | {longest} | {allowed} | {'yes' if row['accused'] else 'no'} |")
    (out / f"ncu_vs_events_{slug}.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("--gold", action="store_true", help="every packaged reference kernel")
    parser.add_argument("--examples", action="store_true", help="every plain example")
    parser.add_argument("--budget-ms", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import torch

    from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
    from ptxbench.tasks.loader import get_task
    from ptxbench.toolchain.discover import find_toolchain

    gpu = torch.cuda.get_device_name()
    result = {"gpu": gpu, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "torch": torch.__version__, "ncu": find_toolchain().tools["ncu"].version if find_toolchain().has("ncu")
              else None, "python": platform.python_version(), "command": " ".join(["python", *sys.argv]), "rows": []}
    evaluator = GpuEvaluator(EvalOptions())
    try:
        for task_id, name, source in _candidates(args):
            try:
                row = measure(evaluator, get_task(task_id), name, source, args.budget_ms)
            except Exception as exc:  # noqa: BLE001 - one candidate's failure is its row, the others go on
                row = {"task": task_id, "candidate": name, "error": f"{type(exc).__name__}: {exc}"[:200]}
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            _write(args.out, result)
    finally:
        evaluator.close()


if __name__ == "__main__":
    main()
