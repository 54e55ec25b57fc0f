"""Throughput of a warm ``ptxbench serve`` (issue 27, item 4): N GEMM-class candidates submitted at once.

Each candidate is a reference GEMM with a distinct comment, so each is built and evaluated (no duplicate is
answered from the store). The server is warmed first with two candidates of their own (peaks, workers, clean
baseline times). Reported: candidates per minute from the first submission to the last finish (server clock),
per-stage seconds over the batch (the server's metrics after minus before), and the verdicts; with
``--compare RUN`` (an ``eval`` run of the same files, written to ``--workdir``), whether every verdict agrees.

    ptxbench serve --gpus 0 --state /tmp/serve-state &          # then:
    python benchmarks/serve_throughput.py --count 100 --profile    --out benchmarks/results/serve_h200_ncu.json
    python benchmarks/serve_throughput.py --count 100 --no-profile --out benchmarks/results/serve_h200.json
    ptxbench eval /tmp/serve-candidates --task gemm_bf16 --out /tmp/one-by-one --lanes 1   # the same files, by eval
    python benchmarks/serve_throughput.py --compare-only /tmp/one-by-one --out benchmarks/results/serve_h200_ncu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections import Counter
from pathlib import Path

from ptxbench.client import Client, ServerError
from ptxbench.kernels import reference_folder
from ptxbench.records.evaluation import Evaluation
from ptxbench.serve.models import CandidateRequest, JobOptions, JobView


def _candidates(source: Path, count: int, workdir: Path, tag: str) -> list[tuple[str, str]]:
    workdir.mkdir(parents=True, exist_ok=True)
    text = source.read_text()
    found = []
    for i in range(count):
        name = f"{source.stem}_{tag}{i:03d}"
        body = f"{text}\n// serve throughput candidate {tag}{i}\n"
        (workdir / f"{name}.cu").write_text(body)
        found.append((name, body))
    return found


def _stage_delta(before: dict, after: dict) -> dict:
    delta = {}
    for stage, now in after.items():
        then = before.get(stage, {"count": 0, "total_s": 0.0})
        count = now["count"] - then["count"]
        if count:
            total = now["total_s"] - then["total_s"]
            delta[stage] = {"count": count, "total_s": round(total, 2), "mean_s": round(total / count, 3)}
    return delta


def collect(client: Client, job_ids: list[str], deadline_s: float) -> list[JobView]:
    """Each job's final view; past the deadline each one as it stands, the unfinished ones then cancelled (the
    rate counts the finished ones)."""
    deadline = time.monotonic() + deadline_s
    views = []
    for job_id in job_ids:
        left = deadline - time.monotonic()
        try:
            views.append(client.wait(job_id, timeout_s=left) if left > 0 else client.get(job_id))
        except ServerError:
            views.append(client.get(job_id))
    for view in views:
        if not view.state.finished:
            try:
                client.cancel(view.id)
            except ServerError:  # on a GPU already (409): it finishes there, uncounted
                pass
    return views


def compare(result_file: Path, run: Path) -> dict:
    """Each served verdict against the one ``eval`` gave the same file (items by file name)."""
    served = json.loads(result_file.read_text())["verdicts_by_candidate"]
    differ = {}
    for name, verdict in served.items():
        record = next(iter(run.glob(f"items/*/{name}/result.json")), None)
        local = Evaluation.model_validate_json(record.read_text()).verdict if record else None
        if local != verdict:
            differ[name] = {"served": verdict, "eval": local}
    return {"compared": len(served), "differ": differ, "reference_run": str(run)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:8765")
    parser.add_argument("--token", default=None)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--source", type=Path, default=reference_folder("sm_90a") / "gemm_bf16.cu")
    parser.add_argument("--task", default="gemm_bf16")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timing-budget-ms", type=float, default=None,
                        help="each job's measured time per workload and side (default: eval's)")
    parser.add_argument("--trials", type=int, default=None, help="each job's correctness trials (default: eval's)")
    parser.add_argument("--deadline-s", type=float, default=24 * 3600.0,
                        help="stop waiting after this long; the rate is then over the candidates finished")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/serve-candidates"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compare-only", type=Path, default=None, help="an eval run of --workdir's files")
    args = parser.parse_args()
    if args.compare_only is not None:
        results = json.loads(args.out.read_text())
        results["same_verdicts_as_eval"] = compare(args.out, args.compare_only)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(json.dumps(results["same_verdicts_as_eval"], indent=1))
        return 0

    chosen = {"timing_budget_ms": args.timing_budget_ms, "trials": args.trials}
    options = JobOptions(profile=args.profile, **{k: v for k, v in chosen.items() if v is not None})
    tag = datetime.datetime.now().strftime("%H%M%S")
    with Client(args.server, args.token, timeout_s=600) as client:
        health = client.health()
        warm = [CandidateRequest(source=body, task=args.task, options=options, name=name)
                for name, body in _candidates(args.source, 2, args.workdir.with_name(args.workdir.name + "-warmup"),
                                                         f"w{tag}_")]
        for job in client.submit(warm):
            client.wait(job.id)
        before = client.metrics().model_dump()["stage_seconds"]
        batch = _candidates(args.source, args.count, args.workdir, f"b{tag}_")
        jobs = client.submit([CandidateRequest(source=body, task=args.task, options=options, name=name)
                              for name, body in batch], max_wait_s=24 * 3600)
        views = collect(client, [job.id for job in jobs], args.deadline_s)
        after = client.metrics().model_dump()["stage_seconds"]
    finished = [v for v in views if v.finished_at is not None]
    started = min(v.submitted_at for v in views)
    ended = max((v.finished_at for v in finished), default=started)
    verdicts = {name: v.evaluation.verdict if v.evaluation else v.state.value for (name, _), v in zip(batch, views)}
    results = {
        "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv), "server": args.server,
        "server_version": health.version, "gpu_slots": health.gpus, "profile": args.profile,
        "job_options": options.model_dump(),
        "candidates": args.count, "finished": len(finished), "source": str(args.source),
        "seconds": round(ended - started, 1),
        "candidates_per_minute": round(60 * len(finished) / (ended - started), 2) if ended > started else None,
        "verdicts": dict(Counter(verdicts.values())), "stage_seconds": _stage_delta(before, after),
        "verdicts_by_candidate": verdicts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "verdicts_by_candidate"}, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServerError as exc:  # no server, a refused token, a job that failed: one line, not a traceback
        sys.exit(f"error: {exc}")
