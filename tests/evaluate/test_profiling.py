"""The ncu stage's profiled program: its plan, written on the CPU, and its refusal to import torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ptxbench.contract.signature import parameters
from ptxbench.evaluate.profiling import profiled_program
from ptxbench.tasks.loader import get_task


def test_the_plan_lists_the_entry_points_arguments_in_order(tmp_path: Path) -> None:
    task = get_task("gemm_fp8")
    sizes = {"M": 16, "N": 32, "K": 64}
    command = profiled_program(task, sizes, tmp_path / "candidate.so", tmp_path)
    assert command[1] == "-I" and command[2].endswith("profile_one.py"), "isolated: no site packages, no torch"
    plan = json.loads(Path(command[3]).read_text())
    assert plan["entry_point"] == task.entry_point and plan["library"] == str(tmp_path / "candidate.so")
    kinds = [a["kind"] for a in plan["arguments"]]
    assert kinds == [p.kind for p in parameters(task)]
    specs = {spec.name: spec for spec in [*task.inputs, *task.outputs]}
    for parameter, argument in zip(parameters(task), plan["arguments"]):
        if parameter.kind == "input":
            expected = specs[parameter.name].numel(sizes) * specs[parameter.name].dtype.size
            assert Path(argument["file"]).stat().st_size == expected, parameter.name
        elif parameter.kind == "output":
            assert argument["bytes"] == specs[parameter.name].numel(sizes) * specs[parameter.name].dtype.size
        elif parameter.kind == "size":
            assert argument["value"] == sizes[parameter.name]


def test_the_program_runs_on_the_standard_library_alone(tmp_path: Path) -> None:
    """Without a GPU it stops at the driver, having imported nothing heavy (it never imports ptxbench)."""
    command = profiled_program(get_task("rmsnorm"), {"T": 4, "Hd": 64}, tmp_path / "candidate.so", tmp_path)
    probe = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
             "except (OSError, SystemExit, RuntimeError):\n    pass\n"
             "print(sorted(m for m in ('torch', 'ptxbench', 'pydantic') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-I", "-c", probe, *command[2:]], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr


def test_the_program_holds_the_gpu_lock_while_it_uses_the_gpu(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The evaluator does not hold the lock through ncu's start-up; the profiled program takes it, shared,
    before it opens the GPU, so it waits while a lane times (and without a GPU then stops at the driver)."""
    import time

    from ptxbench.evaluate.gpu_lock import KEY_VARIABLE, GpuLock

    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv(KEY_VARIABLE, "GPU-test")
    command = profiled_program(get_task("rmsnorm"), {"T": 4, "Hd": 64}, tmp_path / "candidate.so", tmp_path)
    plan = json.loads(Path(command[3]).read_text())
    assert plan["gpu_lock"] == {"key": "GPU-test", "folder": str(tmp_path / "locks")}
    lock = GpuLock("GPU-test", tmp_path / "locks")
    with lock.exclusive():
        program = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert program.poll() is None, "it waits for the timing to end"
    program.communicate(timeout=60)
    assert program.returncode is not None
