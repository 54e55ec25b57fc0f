"""Where one candidate's evaluation time goes: the evaluator's stages, the parent's hottest functions,
the pieces of one correctness trial inside a worker, and the parts of the ncu stage.

A diagnostic for the throughput goal (benchmarks/evaluator_benchmark.py measures the rate itself).
Prints a report and writes it as JSON to ``--out``. ``--session-of N`` also times N copies of the profiled
program, each its own process, recorded by one ncu session (what profiling several candidates per session
would save over one session each), and reading that report back.

    python benchmarks/evaluator_breakdown.py [--candidate FILE] [--task gemm_bf16] [--session-of 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import secrets
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ptxbench.kernels import reference_folder

REPO = Path(__file__).resolve().parents[1]


def _seconds(action: Callable[[], Any], repeats: int = 3) -> float:
    """Best of ``repeats`` wall times (the first call may pay one-off set-up)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def _stages(task, source: str) -> dict:  # type: ignore[no-untyped-def]
    """A warm-up evaluation, then one under cProfile: its stage durations and the parent's hot spots."""
    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator

    report: dict = {}
    evaluator = GpuEvaluator(EvalOptions(profile=True))
    try:
        first = evaluator.evaluate(task, Arch.SM_90A, source)
        report["first"] = {"status": str(first.status), "durations_s": first.durations_s}
        profiler = cProfile.Profile()
        profiler.enable()
        second = evaluator.evaluate(task, Arch.SM_90A, source)
        profiler.disable()
        report["second"] = {"status": str(second.status), "durations_s": second.durations_s}
    finally:
        evaluator.close()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
    report["parent_profile"] = text.getvalue()
    return report


def _trial_pieces(task, shared_object: Path) -> dict:  # type: ignore[no-untyped-def]
    """The costs inside one trial of the largest workload, measured in this process."""
    import torch
    from multiprocessing.reduction import ForkingPickler
    from torch.profiler import ProfilerActivity, profile

    from ptxbench.evaluate.child.gpu_side import CandidateRunner
    from ptxbench.tasks.reference import make_inputs, run_reference

    runner = CandidateRunner()
    runner.load(str(shared_object), task.model_dump_json())
    workload = max(task.workloads, key=lambda w: task.bytes_for(w.sizes))
    sizes = workload.sizes
    seed = secrets.randbits(62)
    inputs = make_inputs(task, sizes, seed, device="cuda")
    outputs, _ = runner._outputs_with_canaries(sizes)
    stream = torch.cuda.Stream()

    def call() -> None:
        runner.library(inputs, outputs, sizes, stream)
        stream.synchronize()

    def profiled_call() -> None:
        with profile(activities=[ProfilerActivity.CUDA]):
            call()

    reply = runner.trial(sizes, seed)
    moved = sum(t.numel() * t.element_size() for part in ("outputs", "inputs_after") for t in reply[part].values())
    pieces = {
        "workload": workload.name, "bytes_to_parent": moved,
        "make_inputs_s": _seconds(lambda: (make_inputs(task, sizes, seed, device="cuda"), torch.cuda.synchronize())),
        "call_s": _seconds(call),
        "profiled_call_s": _seconds(profiled_call),
        "to_cpu_s": _seconds(lambda: [t.cpu() for t in [*outputs.values(), *inputs.values()]]),
        "pickle_s": _seconds(lambda: ForkingPickler.dumps(reply)),
        "whole_trial_s": _seconds(lambda: runner.trial(sizes, seed)),
        "reference_s": _seconds(lambda: (run_reference(task, make_inputs(task, sizes, seed, device="cuda"), sizes),
                                         torch.cuda.synchronize())),
    }
    return pieces


def _ncu_pieces(task, shared_object: Path, session_of: int = 1) -> dict:  # type: ignore[no-untyped-def]
    """The ncu stage split: the profiled program alone, under ncu with the cheap metric, with the real one;
    with ``session_of`` > 1 also that many programs in one ncu session and its report read back."""
    from ptxbench.evaluate.proof.executed import NCU_METRICS
    from ptxbench.evaluate.proof.profiling import REPORT_NAME, profiled_program
    from ptxbench.toolchain.discover import find_toolchain
    from ptxbench.toolchain.tools import ncu_import_command, ncu_record_command

    ncu = find_toolchain().path("ncu")

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        program = profiled_program(task, task.timed().sizes, shared_object, Path(folder))
        plan_s = time.perf_counter() - started
        torch_only = [sys.executable, "-c", "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"]
        runs = {
            "python_import_torch_s": torch_only,
            "program_alone_s": program,
            "ncu_torch_only_s": [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", *torch_only],
            "ncu_duration_metric_s": [ncu, "--clock-control", "none", "--profile-from-start", "off",
                                      "--metrics", "gpu__time_duration.sum", *program],
            "ncu_full_stage_s": ncu_record_command(program, Path(folder) / REPORT_NAME, NCU_METRICS),
        }
        if session_of > 1:
            plans = [Path(folder) / f"session{i}" for i in range(session_of)]
            for plan in plans:
                plan.mkdir()
            one_after_another = " && ".join(shlex.join(profiled_program(task, task.timed().sizes, shared_object, plan))
                                            for plan in plans)
            session_report = Path(folder) / f"session.{REPORT_NAME}"
            runs[f"ncu_session_of_{session_of}_s"] = ncu_record_command(
                ["--target-processes", "all", "bash", "-c", one_after_another], session_report, NCU_METRICS)
            runs[f"ncu_import_session_of_{session_of}_s"] = ncu_import_command(session_report, NCU_METRICS)
        timings = {"write_plan_s": plan_s}
        for name, command in runs.items():
            started = time.perf_counter()
            proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
            timings[name] = time.perf_counter() - started
            if proc.returncode:
                timings[name.replace("_s", "_error")] = proc.stderr[-2000:]
    return timings


def main() -> None:
    from ptxbench.arch.registry import Arch
    from ptxbench.check import build_request, read_candidate
    from ptxbench.tasks.loader import get_task
    from ptxbench.toolchain.compile import build

    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="gemm_bf16")
    parser.add_argument("--candidate", type=Path, default=reference_folder("sm_90a") / "gemm_bf16.cu")
    parser.add_argument("--session-of", type=int, default=1, help="also time this many programs in one ncu session")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    task = get_task(args.task)
    source = read_candidate(args.candidate)
    started = time.perf_counter()
    built = build(build_request(source, Arch.SM_90A, task))
    report: dict = {"build_s": time.perf_counter() - started}
    shared_object = Path(built.directory) / "candidate.so"
    for name, part in (("ncu", lambda: _ncu_pieces(task, shared_object, args.session_of)),
                       ("trial", lambda: _trial_pieces(task, shared_object)),
                       ("stages", lambda: _stages(task, source))):
        try:
            report[name] = part()
        except Exception as exc:  # noqa: BLE001 - a diagnostic keeps the parts it could measure
            report[name] = {"error": repr(exc)}
        print(json.dumps({name: report[name]}, indent=1, default=str), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "evaluator_breakdown.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
