"""Two `ptxbench eval` invocations at once on one GPU, as a lab's sweep runs them: one with every task's example
(moe_grouped_gemm's DeepSeek-V3 workloads among them), one with every adversarial case of tests/adversarial. What
#36 asks of the evaluator under load: no item lost (every candidate has a result), no HARNESS_ERROR, and each case
the status it gets alone. Writes concurrent_evals_<gpu>.{json,md} to --out (default benchmarks/results).

    python benchmarks/concurrent_evals.py [--out DIR] [--timeout-s 560] [--trials 2] [--timing-budget-ms 30] [--part K/N]

Both lists together take about 1,000 s on an H100, more than one lent-GPU call may run: ``--part K/N`` runs the K-th
of N interleaved shares of each list (every N-th example and case, from the K-th), still two runs at once, and
writes ``concurrent_evals_<gpu>_part<K>of<N>.*``; the N parts together cover every item once.

Both runs go without ncu (a run of every case under ncu does not fit one lent-GPU call; the cases only ncu catches
then expect any candidate status, as in tests/gpu/test_hostile_run_gpu.py). They share the machine's cache, so the
baselines one run measures the other reads, as two runs of one user do.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the adversarial manifest and its expectations live with the tests

from tests.shares import parse_share, share  # noqa: E402 (found through the line above)


def parse_part(text: str) -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N, else a one-line error."""
    try:
        return parse_share(text, "--part")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _adversarial_generations(folder: Path, part: tuple[int, int]) -> tuple[Path, dict[str, dict]]:
    """The cases of this part as one generations file (each case a sample of its task, numbered as in the whole
    manifest) and which item is which case."""
    from ptxbench.records.trajectory import item_name
    from tests.adversarial.cases import case_source, manifest_cases

    lines, items = [], {}
    for sample, case in share(list(enumerate(manifest_cases())), part):
        lines.append(json.dumps({"task": case["task"], "sample": sample,
                                 "completion": f"```cuda\n{case_source(case)}\n```"}))
        items[f"{case['task']}/{item_name(sample)}"] = case
    path = folder / "adversarial.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, items


def _results(run: Path) -> dict[str, object]:
    from ptxbench.records.evaluation import Evaluation

    found: dict[str, object] = {}
    for stored in sorted(run.glob("items/*/*/result.json")):
        key = f"{stored.parent.parent.name}/{stored.parent.name}"
        try:
            found[key] = Evaluation.model_validate_json(stored.read_text())
        except (OSError, ValueError) as exc:
            found[key] = f"unreadable: {exc}"
    return found


def _signed(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:+.3f}"


def _judged(case: dict, evaluation: object) -> str | None:
    """None when the case got what it must (as the hostile run judges it without ncu), else why not."""
    from ptxbench.records.evaluation import Evaluation
    from tests.gpu.test_evaluator_gpu import assert_expected
    from tests.gpu.test_hostile_run_gpu import _expectation

    if not isinstance(evaluation, Evaluation):
        return str(evaluation)
    try:
        assert_expected(_expectation(case, profile=False), evaluation)
    except AssertionError as exc:
        return f"expected {case['expect']}, got {evaluation.verdict}: {str(exc).splitlines()[0][:200]}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--timeout-s", type=float, default=560.0)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--timing-budget-ms", type=float, default=30.0)
    parser.add_argument("--part", type=parse_part, default=(1, 1), help="K/N: the K-th of N shares of each list")
    args = parser.parse_args()
    import torch

    from ptxbench.records.evaluation import InfraFailure
    from ptxbench.tasks.loader import bundled_suite

    work = Path(tempfile.mkdtemp(prefix="concurrent_evals."))
    generations, cases = _adversarial_generations(work, args.part)
    options = ["--no-profile", "--trials", str(args.trials), "--timing-budget-ms", str(args.timing_budget_ms)]
    examples_folder = REPO / "kernels" / "examples"
    example_files = share([f for t in bundled_suite() if (f := examples_folder / f"{t.id}.cu").is_file()], args.part)
    runs = {"examples": ([str(f) for f in example_files], work / "examples"),
            "adversarial": ([str(generations)], work / "adversarial")}
    started = time.monotonic()
    processes = {name: subprocess.Popen([sys.executable, "-m", "ptxbench", "eval", *paths, "--out", str(out), *options],
                                        stdout=(work / f"{name}.log").open("w"), stderr=subprocess.STDOUT)
                 for name, (paths, out) in runs.items()}
    ended: dict[str, dict] = {}
    while len(ended) < len(processes) and time.monotonic() - started < args.timeout_s:
        for name, process in processes.items():
            if name not in ended and process.poll() is not None:
                ended[name] = {"rc": process.returncode, "seconds": round(time.monotonic() - started, 1)}
        time.sleep(1)
    for name, process in processes.items():
        if name not in ended:
            process.terminate()
            ended[name] = {"rc": None, "seconds": None, "note": f"cut at {args.timeout_s:.0f} s"}
    examples = _results(runs["examples"][1])
    adversarial = _results(runs["adversarial"][1])
    expected_examples = {f"{f.stem}/{f.stem}" for f in example_files}
    rows = []
    for key in sorted(expected_examples | set(examples)):
        evaluation = examples.get(key)
        timings = getattr(evaluation, "timings", None) or []
        rows.append({"run": "examples", "item": key, "verdict": getattr(evaluation, "verdict", evaluation or "lost"),
                     "message": getattr(evaluation, "message", "")[:240], "problem": None if evaluation is not None
                     else "no result",
                     # the wall-clock guard's evidence on honest kernels (guards.wall_allowance_ms): event time,
                     # wall time beyond the events less the baseline's, and the protocol's own host time per call
                     "wall_unexplained_ms": {t.workload: [t.candidate_ms, t.wall_unexplained_ms, t.wall_protocol_ms]
                                             for t in timings}})
    for key, case in cases.items():
        evaluation = adversarial.get(key)
        problem = "no result" if evaluation is None else _judged(case, evaluation)
        rows.append({"run": "adversarial", "item": f"{key} ({case['file']})",
                     "verdict": getattr(evaluation, "verdict", evaluation or "lost"),
                     "message": getattr(evaluation, "message", "")[:240], "problem": problem})
    for row in rows:  # a run cut by the time limit did not lose its unfinished items: it never got to them
        if row["verdict"] == "lost" and ended[row["run"]]["rc"] is None:
            row["verdict"], row["problem"] = "unfinished", f"the run was cut at {args.timeout_s:.0f} s"
    harness_errors = [r["item"] for r in rows if r["verdict"] == f"infra: {InfraFailure.HARNESS_ERROR.value}"]
    lost = [r["item"] for r in rows if r["verdict"] == "lost"]
    gpu = torch.cuda.get_device_name(0)
    summary = {"gpu": gpu, "part": list(args.part), "memory_bytes": torch.cuda.get_device_properties(0).total_memory,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "torch": torch.__version__, "python": platform.python_version(),
               "command": " ".join(["python", *sys.argv]), "options": options, "runs": ended,
               "items": len(rows), "lost": lost, "harness_errors": harness_errors,
               "unfinished": [r["item"] for r in rows if r["verdict"] == "unfinished"],
               "wrong": [f"{r['item']}: {r['problem']}" for r in rows
                         if r["problem"] and r["verdict"] not in ("lost", "unfinished")],
               "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    slug = gpu.lower().replace("nvidia ", "").replace(" ", "_")
    if args.part != (1, 1):
        slug += f"_part{args.part[0]}of{args.part[1]}"
    (args.out / f"concurrent_evals_{slug}.json").write_text(json.dumps(summary, indent=1))
    of = f" (part {args.part[0]} of {args.part[1]} of each list)" if args.part != (1, 1) else ""
    lines = [f"# Two `ptxbench eval` runs at once on one {gpu}{of}", "",
             f"{summary['date']}, torch {summary['torch']}, `{summary['command']}`, options `{' '.join(options)}`.", "",
             *(f"- run {name}: rc {info['rc']}, {info['seconds']} s {info.get('note', '')}" for name, info in ended.items()),
             f"- items {len(rows)}, lost {len(lost)}, unfinished {len(summary['unfinished'])}, "
             f"HARNESS_ERROR {len(harness_errors)}, "
             f"not as expected {len(summary['wrong'])}", "",
             "Wall clock beyond the events per timed call of the honest examples (ms: event time, unexplained, the "
             "protocol's own host time; the guard allows max(0.5 ms, the event time, the protocol's time)):", "",
             *(f"- {r['item']}: " + ", ".join(f"{w} {c:.3f} ms, {_signed(u)}, {_signed(p)}"
                                            for w, (c, u, *rest) in r["wall_unexplained_ms"].items()
                                            for p in [rest[0] if rest else None])
               for r in rows if r.get("wall_unexplained_ms")), "",
             "| run | item | verdict | problem |", "|---|---|---|---|",
             *(f"| {r['run']} | {r['item']} | {r['verdict']} | {r['problem'] or ''} |" for r in rows)]
    (args.out / f"concurrent_evals_{slug}.md").write_text("\n".join(lines) + "\n")
    for name in runs:
        print((work / f"{name}.log").read_text()[-3000:])
    print("\n".join(lines[:8]))
    print("\n".join(summary["wrong"]) or "every item as expected")


if __name__ == "__main__":
    main()
