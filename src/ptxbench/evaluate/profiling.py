"""The executed-instruction stage: one call of the candidate under Nsight Compute, in its own process.

Only that call is profiled (cudaProfilerStart/Stop around it, after a warm-up call), with the
per-opcode executed-instruction metric; ``executed.judge_execution`` turns the counts into verdicts.
Clocks are left alone (``--clock-control none``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.executed import NCU_METRICS, RequirementExecution, judge_execution, parse_ncu_csv
from ptxbench.tasks.model import Task


def ncu_command(program: list[str]) -> list[str]:
    return ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
            "--print-metric-instances", "details", "--metrics", ",".join(NCU_METRICS), *program]


def profile_requirements(task: Task, arch: Arch, shared_object: Path, timeout_s: float) -> list[RequirementExecution]:
    sizes = task.timed().sizes
    with tempfile.TemporaryDirectory() as folder:
        task_file = Path(folder) / "task.json"
        task_file.write_text(task.model_dump_json())
        program = [sys.executable, "-m", "ptxbench.evaluate.profile_one", str(shared_object), str(task_file),
                   json.dumps(sizes)]
        proc = subprocess.run(ncu_command(program), capture_output=True, text=True, timeout=timeout_s,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
    profiles = parse_ncu_csv(proc.stdout)
    flops = task.flops_for(sizes)
    return [judge_execution(requirement, arch, profiles, flops) for requirement in task.requirements_for(arch)]
