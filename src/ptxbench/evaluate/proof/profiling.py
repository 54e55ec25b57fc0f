"""The executed-instruction stage: one call of the candidate under Nsight Compute, in its own process.

Only that call is profiled (cuProfilerStart/Stop around it, after a warm-up call), with the
per-opcode executed-instruction metric and the copy engine's byte counters; ``executed.judge_execution``
turns them into verdicts. Clocks are left alone (``--clock-control none``). The profiled program is
``profile_one.py``, which runs on the standard library and the CUDA driver alone, so the stage does not
pay for starting torch.

What the candidate prints cannot pass for ncu: ncu writes a report file (``--export``) into a folder the
harness creates, made read-only for the profiled process where the machine allows, and a second ncu
process reads that report back (``--import``). The program's output serves only error messages. Whether
ncu may read the GPU's counters at all is learnt once per GPU by profiling the harness's own probe kernel
(``probe_counters``), never from a candidate's run.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import sys
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.proof.executed import NCU_METRICS, OPCODE_METRIC, judge_execution
from ptxbench.evaluate.proof.ncu import (  # re-exported: the stage's callers name them here
    PROFILED_PROGRAM, ProfiledRunFailed, import_report, ncu_session, output_tail, profiled_program_command,
    program_environment)
from ptxbench.evaluate.isolation.gpu_lock import KEY_VARIABLE, default_lock_folder, profiler_turn, shared_if_known
from ptxbench.evaluate.isolation.processes import mapped_libraries
from ptxbench.evaluate.child.profile_one import OUT_OF_MEMORY_MARK, PROBE_KERNEL
from ptxbench.records.evaluation import KernelProfile, RequirementExecution
from ptxbench.tasks.model import Task
from ptxbench.toolchain.tools import ncu_record_command

if TYPE_CHECKING:
    from ptxbench.evaluate.proof.batching import ProfileOutcome

__all__ = ["PROFILED_PROGRAM", "Folders", "ProfiledRunFailed", "import_report", "ncu_session", "outcome_profiles",
           "probe_counters", "profile_requirements", "profiled_program", "program_environment", "read_report",
           "run_under_ncu"]

REPORT_NAME = "profile.ncu-rep"
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"


def _scratch() -> str | None:
    """RAM-backed scratch space where there is one: the inputs written for the profiled run are large."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _cuda_runtime() -> list[str]:
    """The CUDA runtime this process has loaded (torch's), so the profiled program links the same one."""
    return sorted(path for path in mapped_libraries("self") if "libcudart.so" in path)[:1]


def plan_arguments(task: Task, sizes: dict[str, int], inputs: dict, folder: Path) -> list[dict]:
    """The entry point's arguments as ``profile_one.py``'s plan lists them: each input written to ``folder``
    as raw bytes, each output's size, the sizes, the stream."""
    from ptxbench.contract.signature import parameters

    outputs = {spec.name: spec for spec in task.outputs}
    arguments: list[dict] = []
    for parameter in parameters(task):
        if parameter.kind == "input":
            host = inputs[parameter.name].contiguous().cpu()
            path = folder / f"{parameter.name}.bin"
            path.write_bytes(ctypes.string_at(host.data_ptr(), host.numel() * host.element_size()))
            arguments.append({"kind": "input", "file": str(path)})
        elif parameter.kind == "output":
            spec = outputs[parameter.name]
            arguments.append({"kind": "output", "bytes": spec.numel(sizes) * spec.dtype.size})
        elif parameter.kind == "size":
            arguments.append({"kind": "size", "value": int(sizes[parameter.name])})
        else:
            arguments.append({"kind": "stream"})
    return arguments


def profiled_program(task: Task, sizes: dict[str, int], shared_object: Path, folder: Path,
                     alone: bool = False, protect: list[Path] | None = None) -> list[str]:
    """The command ncu runs: ``profile_one.py`` on a plan with one fresh input set drawn here (with the
    trials' distributions, so the profiled call sees data like theirs) written as raw bytes; ``protect``:
    the folders the program makes read-only before it loads the candidate (``folder`` among them)."""
    protect = [folder] if protect is None else protect
    import torch

    from ptxbench.tasks.reference import make_inputs

    with shared_if_known("ncu inputs"):  # drawing the inputs uses the GPU
        inputs = make_inputs(task, sizes, secrets.randbits(62), device="cuda" if torch.cuda.is_available() else "cpu")
    arguments = plan_arguments(task, sizes, inputs, folder)
    return _program(folder, {"library": str(shared_object), "entry_point": task.entry_point,
                             "preload": _cuda_runtime(), "arguments": arguments}, alone, protect)


def _program(folder: Path, plan: dict, alone: bool, protect: list[Path]) -> list[str]:
    """``profile_one.py`` on ``plan`` (written into ``folder``), with the GPU's lock named, the folders to
    make read-only (``protect`` and what a worker protects) and the files to hide listed."""
    key = os.environ.get(KEY_VARIABLE)  # the program holds the GPU's lock itself while it uses the GPU
    gpu_lock = {"key": key, "folder": str(default_lock_folder()), "alone": alone} if key else None
    guarded, hidden = _worker_protection()
    path = folder / "plan.json"
    path.write_text(json.dumps({**plan, "gpu_lock": gpu_lock, "protect": [str(p) for p in protect] + guarded,
                                "hide": hidden}))
    return profiled_program_command(path)


def _worker_protection() -> tuple[list[str], list[str]]:
    """What a worker holding candidate code protects, so the profiled program protects it too: the paths
    the harness named (run folders), the folders its Python imports from and the caches' folder read-only,
    the caches' signing key hidden."""
    from ptxbench.paths import cache_root

    try:
        from ptxbench.evaluate.isolation.confinement import import_roots, protected_paths_from
    except ImportError:
        guarded: list[str] = []
    else:
        guarded = [*protected_paths_from(os.environ), *import_roots(sys.path)]
    try:
        from ptxbench.integrity import key_path
    except ImportError:
        hidden: list[str] = []
    else:
        hidden = [str(key_path())]
    return [*guarded, str(cache_root())], hidden


class Folders:
    """A fresh folder of the harness's (mode 0700) for one profiled run: ``plan`` (the plan and inputs),
    ``report`` (ncu's report) and ``home`` (the program's HOME), removed afterwards."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ptxbench-ncu-", dir=_scratch()))
        self.plan, self.report, self.home = self.root / "plan", self.root / "report", self.root / "home"
        for folder in (self.plan, self.report, self.home):
            folder.mkdir()

    def __enter__(self) -> "Folders":
        return self

    def __exit__(self, *_: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def run_under_ncu(program: list[str], report: Path, home: Path, timeout_s: float) -> tuple[int, str]:
    """ncu recording ``program`` into ``report``: its exit code and the output of both (never parsed for
    results), in this machine's one profiler turn (``gpu_lock.profiler_turn``), which the caller takes holding no
    GPU lock."""
    with profiler_turn():
        return ncu_session(ncu_record_command(program, report, NCU_METRICS), program_environment(home), home, timeout_s)


def read_report(report: Path, program_exit: int, program_output: str) -> list[KernelProfile]:
    """The launches in ncu's report, read by a second ncu process; ProfiledRunFailed when the report is
    missing, empty or unreadable (the program's output then only explains why)."""
    said = f"exit {program_exit}; the program's output under ncu ends: {output_tail(program_output)}"
    out_of_memory = OUT_OF_MEMORY_MARK in program_output
    if not report.is_file() or report.stat().st_size == 0:
        raise ProfiledRunFailed(f"ncu wrote no report of the call ({said})", out_of_memory=out_of_memory)
    try:
        profiles = [profile for _, profile in import_report(report)]
    except ValueError as exc:
        raise ProfiledRunFailed(f"ncu's report of the call could not be read ({exc}; {said})",
                                out_of_memory=out_of_memory) from None
    if not profiles:
        raise ProfiledRunFailed(f"ncu's report holds no kernel launch ({said})", out_of_memory=out_of_memory)
    return profiles


def outcome_profiles(outcome: "ProfileOutcome", timeout_s: float) -> list[KernelProfile]:
    """A candidate's launches in a batched session (``batching``), failing as ``read_report`` fails alone: killed
    at its limit, or no launch of its process recorded."""
    if outcome.killed:
        raise ProfiledRunFailed(f"no end within {timeout_s:g} s under ncu; the process was killed")
    if not outcome.profiles:
        said = f"exit {outcome.exit}; the program's output under ncu ends: {output_tail(outcome.output)}"
        raise ProfiledRunFailed(f"ncu recorded no kernel launch of the call ({said})",
                                out_of_memory=outcome.out_of_memory)
    return outcome.profiles


def probe_counters(timeout_s: float) -> str | None:
    """None when ncu may read this GPU's performance counters; otherwise why not. Learnt by profiling the
    harness's own probe kernel (``profile_one.PROBE_KERNEL``) with the candidates' metrics, so only the
    harness's code decides it: a candidate that prints ERR_NVGPUCTRPERM gains nothing."""
    with Folders() as folders:
        program = _program(folders.plan, {"probe": True}, alone=False, protect=[folders.plan, folders.report])
        report = folders.report / REPORT_NAME
        try:
            code, output = run_under_ncu(program, report, folders.home, timeout_s)
        except ProfiledRunFailed as exc:
            return f"the harness's ncu probe failed: {exc}"
        if PERMISSION_ERROR in output:  # the output of ncu and of the harness's own program
            return f"ncu may not read the GPU's performance counters here ({PERMISSION_ERROR} when profiling the harness's probe kernel)"
        try:
            profiles = read_report(report, code, output)
        except ProfiledRunFailed as exc:
            return f"the harness's ncu probe failed: {exc}"
    probe = [p for p in profiles if PROBE_KERNEL in p.name]
    if not any(count > 0 for p in probe for count in p.executed.values()):
        return f"ncu's report of the harness's probe kernel has no executed instruction counts ({OPCODE_METRIC})"
    return None


def profile_requirements(task: Task, arch: Arch, shared_object: Path, timeout_s: float,
                         alone: bool = False, batched: bool = False,
                         ) -> tuple[list[RequirementExecution], list[KernelProfile]]:
    """The requirements judged on executed counts, and every kernel launch the profiled call made (name,
    grid, block, stream; seen from outside the candidate's process, so a library kernel cannot hide).
    ``alone``: the profiled program holds the GPU's lock exclusively, allocations included. ``batched``: in a
    session shared with the other candidates waiting for ncu then (``batching``; never alone), and in a session
    of its own where none waits beside it or that session confirms none of its launches. Call it only where
    ``probe_counters`` found the counters readable: a failure here is the candidate's."""
    sizes = task.timed().sizes
    with Folders() as folders:
        program = profiled_program(task, sizes, shared_object, folders.plan, alone,
                                   protect=[folders.plan, folders.report])
        outcome = None
        if batched and not alone:
            from ptxbench.evaluate.proof.batching import new_request, profiled_together

            outcome = profiled_together(new_request(program, folders.plan / "plan.json", folders.home, timeout_s))
        if outcome is not None and outcome.solo is None:
            profiles = outcome_profiles(outcome, timeout_s)
        else:
            report = folders.report / REPORT_NAME
            code, output = run_under_ncu(program, report, folders.home, timeout_s)
            profiles = read_report(report, code, output)
    flops, moved = task.flops_for(sizes), task.bytes_for(sizes)
    features = [judge_execution(requirement, arch, profiles, flops, moved) for requirement in task.requirements_for(arch)]
    return features, profiles
