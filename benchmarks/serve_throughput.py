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

Evidence profiles (issue 40): ``--evidence sweep|publish`` names each job's profile (default publish, the figures
above); ``--evidence both`` evaluates the batch under sweep, then its first ``--publish-count`` candidates again
under publish on the same warm server, and reports both rates and, per candidate evaluated under both, whether the
verdicts agree and how far the timed workload's speedups differ. ``--mix`` makes the batch a mix: the GEMM
reference, plain examples of several tasks and failing candidates of the adversarial suite, in turn (``MIX``).

    python benchmarks/serve_throughput.py --mix --evidence both --count 100 --publish-count 20 --out $OUT/serve_h100.json
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
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.serve.models import CandidateRequest, JobOptions, JobView

REPO = Path(__file__).resolve().parents[1]
# (task, file): the GEMM reference, plain correct examples, and failing candidates (their status in
# tests/adversarial/manifest.toml); a batch takes them in turn
MIX = [("gemm_bf16", reference_folder("sm_90a") / "gemm_bf16.cu"),
       ("softmax", REPO / "kernels/examples/softmax.cu"), ("rmsnorm", REPO / "kernels/examples/rmsnorm.cu"),
       ("transpose", REPO / "kernels/examples/transpose.cu"), ("silu_mul", REPO / "kernels/examples/silu_mul.cu"),
       ("gemm_bf16", REPO / "kernels/examples/gemm_bf16.cu"),
       ("softmax", REPO / "tests/adversarial/wrong_on_heldout.cu"),  # INCORRECT
       ("rmsnorm", REPO / "tests/adversarial/nan_output.cu"),  # INCORRECT
       ("transpose", REPO / "tests/adversarial/illegal_address.cu"),  # RUNTIME_ERROR
       ("gemm_bf16", REPO / "tests/adversarial/library_call.cu")]  # REJECTED


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


def mixed(count: int, workdir: Path, tag: str) -> list[tuple[str, str, str]]:
    """``count`` candidates (task, name, source) taking MIX in turn, each with a comment of its own."""
    workdir.mkdir(parents=True, exist_ok=True)
    found = []
    for i in range(count):
        task, source = MIX[i % len(MIX)]
        name = f"{source.stem}_{tag}{i:03d}"
        body = f"{source.read_text()}\n// serve throughput candidate {tag}{i}\n"
        (workdir / f"{name}.cu").write_text(body)
        found.append((task, name, body))
    return found


def _speedup(view: JobView, workload: str | None) -> float | None:
    """The speedup on ``workload`` (None: the view's only timing, a sweep's timed workload)."""
    timings = view.evaluation.timings if view.evaluation else []
    chosen = [t for t in timings if workload is None or t.workload == workload]
    return chosen[0].speedup if chosen and (workload is not None or len(timings) == 1) else None


def _timed_workload(view: JobView) -> str | None:
    timings = view.evaluation.timings if view.evaluation else []
    return timings[0].workload if len(timings) == 1 else None


def agreement(sweep: dict[str, JobView], publish: dict[str, JobView]) -> dict:
    """Per candidate evaluated under both profiles: the verdicts, whether they agree, and the timed workload's
    speedups with their difference in percent of publish's."""
    rows, differ = {}, []
    for name in sorted(set(sweep) & set(publish)):
        verdicts = [v.evaluation.verdict if v.evaluation else v.state.value for v in (sweep[name], publish[name])]
        timed = _timed_workload(sweep[name])  # sweep times the timed workload alone
        speedups = [_speedup(sweep[name], None), _speedup(publish[name], timed) if timed else None]
        spread = (100 * abs(speedups[0] - speedups[1]) / speedups[1]
                  if speedups[0] is not None and speedups[1] else None)
        rows[name] = {"sweep": verdicts[0], "publish": verdicts[1], "same_verdict": verdicts[0] == verdicts[1],
                      "sweep_speedup": speedups[0], "publish_speedup": speedups[1],
                      "speedup_difference_pct": round(spread, 2) if spread is not None else None}
        if verdicts[0] != verdicts[1]:
            differ.append(name)
    spreads = [r["speedup_difference_pct"] for r in rows.values() if r["speedup_difference_pct"] is not None]
    return {"compared": len(rows), "verdicts_differ": differ,
            "largest_speedup_difference_pct": max(spreads, default=None), "by_candidate": rows}


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


def measure(client: Client, batch: list[tuple[str, str, str]], options: JobOptions,
            deadline_s: float) -> tuple[dict, dict[str, JobView]]:
    """One batch under ``options`` on a warm server: its rate, verdicts and stage seconds, and each job's view."""
    before = client.metrics().model_dump()["stage_seconds"]
    jobs = client.submit([CandidateRequest(source=body, task=task, options=options, name=name)
                          for task, name, body in batch], max_wait_s=24 * 3600)
    views = collect(client, [job.id for job in jobs], deadline_s)
    after = client.metrics().model_dump()["stage_seconds"]
    finished = [v for v in views if v.finished_at is not None]
    started = min(v.submitted_at for v in views)
    ended = max((v.finished_at for v in finished), default=started)
    verdicts = {name: v.evaluation.verdict if v.evaluation else v.state.value for (_, name, _), v in zip(batch, views)}
    figures = {
        "evidence": (options.evidence or EvidenceProfile.PUBLISH).value, "job_options": options.model_dump(mode="json"),
        "candidates": len(batch), "finished": len(finished), "seconds": round(ended - started, 1),
        "candidates_per_minute": round(60 * len(finished) / (ended - started), 2) if ended > started else None,
        "verdicts": dict(Counter(verdicts.values())), "stage_seconds": _stage_delta(before, after),
        "verdicts_by_candidate": verdicts,
    }
    return figures, {name: v for (_, name, _), v in zip(batch, views)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="http://127.0.0.1:8765")
    parser.add_argument("--token", default=None)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--source", type=Path, default=reference_folder("sm_90a") / "gemm_bf16.cu")
    parser.add_argument("--task", default="gemm_bf16")
    parser.add_argument("--mix", action="store_true", help="the batch takes MIX in turn instead of --source")
    parser.add_argument("--evidence", choices=["publish", "sweep", "both"], default="publish",
                        help="each job's evidence profile; both: sweep, then publish on --publish-count of them")
    parser.add_argument("--publish-count", type=int, default=None,
                        help="with --evidence both: the first this many candidates again under publish (default all)")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timing-budget-ms", type=float, default=None,
                        help="each job's measured time per workload and side (default: eval's)")
    parser.add_argument("--trials", type=int, default=None, help="each job's correctness trials (default: eval's)")
    parser.add_argument("--deadline-s", type=float, default=24 * 3600.0,
                        help="stop waiting after this long (per profile); the rate is then over the candidates finished")
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
    base = JobOptions(profile=args.profile, **{k: v for k, v in chosen.items() if v is not None})
    profiles = ["sweep", "publish"] if args.evidence == "both" else [args.evidence]
    tag = datetime.datetime.now().strftime("%H%M%S")
    if args.mix:
        batch = mixed(args.count, args.workdir, f"b{tag}_")
        firsts = {task: path for task, path in reversed(MIX)}  # each task's first file: every baseline cached
        warm = [(task, f"{path.stem}_w{tag}", f"{path.read_text()}\n// warm-up {tag}\n") for task, path in firsts.items()]
    else:
        batch = [(args.task, name, body) for name, body in _candidates(args.source, args.count, args.workdir, f"b{tag}_")]
        warm = [(args.task, name, body) for name, body in
                _candidates(args.source, 2, args.workdir.with_name(args.workdir.name + "-warmup"), f"w{tag}_")]
    measured: dict[str, dict] = {}
    views: dict[str, dict[str, JobView]] = {}
    with Client(args.server, args.token, timeout_s=600) as client:
        health = client.health()
        for profile in profiles:
            options = base.model_copy(update={"evidence": EvidenceProfile(profile)})
            for job in client.submit([CandidateRequest(source=body, task=task, options=options, name=name)
                                      for task, name, body in warm]):
                client.wait(job.id)
            part = batch[:args.publish_count] if profile == "publish" and len(profiles) == 2 and args.publish_count \
                else batch
            measured[profile], views[profile] = measure(client, part, options, args.deadline_s)
            if len(measured) < len(profiles):  # what is measured so far survives a run stopped in the next profile
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"unfinished": f"stopped before {profiles[len(measured)]}",
                                                "command": " ".join(sys.argv), "profiles": measured}, indent=1) + "\n")
    results: dict = {
        "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv), "server": args.server,
        "server_version": health.version, "gpu_slots": health.gpus, "profile": args.profile,
        "source": "mix" if args.mix else str(args.source),
    }
    if len(profiles) == 1:
        results |= measured[profiles[0]]
    else:
        results |= {"profiles": measured, "agreement": agreement(views["sweep"], views["publish"])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(_shown(results), indent=1))
    return 0


def _shown(results: dict) -> dict:
    """The results without the per-candidate tables (they are in the file)."""
    shown = {k: v for k, v in results.items() if k not in ("verdicts_by_candidate", "profiles", "agreement")}
    for profile, figures in (results.get("profiles") or {}).items():
        shown[profile] = {k: v for k, v in figures.items() if k != "verdicts_by_candidate"}
    if "agreement" in results:
        shown["agreement"] = {k: v for k, v in results["agreement"].items() if k != "by_candidate"}
    return shown


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServerError as exc:  # no server, a refused token, a job that failed: one line, not a traceback
        sys.exit(f"error: {exc}")
