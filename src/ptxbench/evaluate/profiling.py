"""The executed-instruction stage: one call of the candidate under Nsight Compute, in its own process.

Only that call is profiled (cuProfilerStart/Stop around it, after a warm-up call), with the
per-opcode executed-instruction metric; ``executed.judge_execution`` turns the counts into verdicts.
Clocks are left alone (``--clock-control none``). The profiled program is ``profile_one.py``, which
runs on the standard library and the CUDA driver alone, so the stage does not pay for starting torch.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from contextlib import suppress
from pathlib import Path

from ptxbench.arch.registry import Arch
from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.executed import NCU_METRICS, RequirementExecution, judge_execution, parse_ncu_csv
from ptxbench.evaluate.gpu_lock import KEY_VARIABLE, default_lock_folder, shared_if_known
from ptxbench.evaluate.processes import mapped_libraries
from ptxbench.evaluate.profile_one import OUT_OF_MEMORY_MARK
from ptxbench.tasks.model import Task


def ncu_command(program: list[str]) -> list[str]:
    return ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
            "--print-metric-instances", "details", "--metrics", ",".join(NCU_METRICS), *program]


def _scratch() -> str | None:
    """RAM-backed scratch space where there is one: the inputs written for the profiled run are large."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _cuda_runtime() -> list[str]:
    """The CUDA runtime this process has loaded (torch's), so the profiled program links the same one."""
    return sorted(path for path in mapped_libraries("self") if "libcudart.so" in path)[:1]


def profiled_program(task: Task, sizes: dict[str, int], shared_object: Path, folder: Path,
                     alone: bool = False) -> list[str]:
    """The command ncu runs: ``profile_one.py`` on a plan with one fresh input set drawn here (with the
    trials' distributions, so the profiled call sees data like theirs) written as raw bytes."""
    import torch

    from ptxbench.contract.signature import parameters
    from ptxbench.tasks.reference import make_inputs

    with shared_if_known("ncu inputs"):  # drawing the inputs uses the GPU
        inputs = make_inputs(task, sizes, secrets.randbits(62), device="cuda" if torch.cuda.is_available() else "cpu")
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
    plan = folder / "plan.json"
    key = os.environ.get(KEY_VARIABLE)  # the program holds the GPU's lock itself while it uses the GPU
    gpu_lock = {"key": key, "folder": str(default_lock_folder()), "alone": alone} if key else None
    plan.write_text(json.dumps({"library": str(shared_object), "entry_point": task.entry_point,
                                "preload": _cuda_runtime(), "arguments": arguments, "gpu_lock": gpu_lock}))
    return [sys.executable, "-I", str(Path(__file__).with_name("profile_one.py")), str(plan)]


class NoCounterPermission(PtxbenchError):
    """ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): features stay unverified."""


class ProfiledRunFailed(PtxbenchError):
    """The candidate's call failed or hung under ncu although it ran outside it. ``out_of_memory``: the
    GPU's memory ran out, possibly taken by another evaluation beside it."""

    def __init__(self, message: str, out_of_memory: bool = False) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory


def profile_requirements(task: Task, arch: Arch, shared_object: Path, timeout_s: float,
                         alone: bool = False) -> tuple[list[RequirementExecution], list[str]]:
    """The requirements judged on executed counts, and the names of every kernel the profiled call
    launched (seen from outside the candidate's process, so a library kernel cannot hide). ``alone``:
    the profiled program holds the GPU's lock exclusively, allocations included."""
    sizes = task.timed().sizes
    with tempfile.TemporaryDirectory(dir=_scratch()) as folder:
        program = profiled_program(task, sizes, shared_object, Path(folder), alone)
        # its own session, so a timeout ends the candidate's process too, not only ncu
        with subprocess.Popen(ncu_command(program), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise ProfiledRunFailed(f"no end within {timeout_s:g} s under ncu; the process was killed") from None
            finally:
                with suppress(ProcessLookupError):  # whatever the candidate's code left running there ends too
                    os.killpg(proc.pid, signal.SIGKILL)
    if "ERR_NVGPUCTRPERM" in stdout + stderr:
        raise NoCounterPermission("ncu may not read the performance counters here (ERR_NVGPUCTRPERM)")
    try:
        profiles = parse_ncu_csv(stdout)
    except ValueError:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        raise ProfiledRunFailed(f"the call under ncu ended without a profile (exit {proc.returncode}): "
                                + " | ".join(tail), out_of_memory=OUT_OF_MEMORY_MARK in stdout + stderr) from None
    flops = task.flops_for(sizes)
    features = [judge_execution(requirement, arch, profiles, flops) for requirement in task.requirements_for(arch)]
    return features, [profile.name for profile in profiles]
