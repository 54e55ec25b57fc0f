"""The ncu stage's profiled program: its plan, written on the CPU, and its refusal to import torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_plan_names_the_gpu_lock(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.gpu_lock import KEY_VARIABLE

    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv(KEY_VARIABLE, "GPU-test")
    command = profiled_program(get_task("rmsnorm"), {"T": 4, "Hd": 64}, tmp_path / "candidate.so", tmp_path)
    plan = json.loads(Path(command[3]).read_text())
    assert plan["gpu_lock"] == {"key": "GPU-test", "folder": str(tmp_path / "locks"), "alone": False}
    command = profiled_program(get_task("rmsnorm"), {"T": 4, "Hd": 64}, tmp_path / "candidate.so", tmp_path, alone=True)
    assert json.loads(Path(command[3]).read_text())["gpu_lock"]["alone"] is True


def test_the_program_opens_the_gpu_at_once_but_runs_the_candidate_only_under_the_lock(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The evaluator does not hold the lock through ncu's start-up, nor the program while it opens the
    GPU and allocates (no kernel runs there); the inputs' copies, the candidate's code and the profiled
    calls wait while a lane times."""
    import importlib.util
    import threading
    import time
    import types

    from ptxbench.evaluate import profile_one as installed
    from ptxbench.evaluate.gpu_lock import GpuLock

    spec = importlib.util.spec_from_file_location("profile_one_under_test", installed.__file__)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    events: list[str] = []
    real_sibling = program._sibling
    harmless = types.SimpleNamespace(become_subreaper=lambda: None, kill_descendants=lambda pid: events.append("reaped"))
    monkeypatch.setattr(program, "_sibling", lambda name: harmless if name == "processes" else real_sibling(name))
    monkeypatch.setattr(program, "_open", lambda plan: events.append("opened") or (None, None, []))
    monkeypatch.setattr(program, "_profile", lambda plan, *opened: events.append("profiled") or 0)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"gpu_lock": {"key": "GPU-test", "folder": str(tmp_path / "locks")}}))
    finished: list[int] = []
    with GpuLock("GPU-test", tmp_path / "locks").exclusive():
        runner = threading.Thread(target=lambda: finished.append(program.main(str(plan))))
        runner.start()
        time.sleep(1.0)
        assert events == ["opened"], "it opens the GPU while the lane times, and waits there"
    runner.join(timeout=30)
    assert finished == [0] and events == ["opened", "profiled", "reaped"]


def _program_under_test(monkeypatch, events: list[str]):  # type: ignore[no-untyped-def]
    """profile_one loaded by its path, with the GPU work replaced by entries in ``events``."""
    import importlib.util
    import types

    from ptxbench.evaluate import profile_one as installed

    spec = importlib.util.spec_from_file_location("profile_one_under_test", installed.__file__)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    real_sibling = program._sibling
    harmless = types.SimpleNamespace(become_subreaper=lambda: None, kill_descendants=lambda pid: events.append("reaped"))
    monkeypatch.setattr(program, "_sibling", lambda name: harmless if name == "processes" else real_sibling(name))
    monkeypatch.setattr(program, "_profile", lambda plan, *opened: events.append("profiled") or 0)
    return program


def test_alone_the_program_allocates_only_once_it_has_the_gpu_to_itself(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import threading
    import time

    from ptxbench.evaluate.gpu_lock import GpuLock

    events: list[str] = []
    program = _program_under_test(monkeypatch, events)
    monkeypatch.setattr(program, "_open", lambda plan: events.append("opened") or (None, None, []))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"gpu_lock": {"key": "GPU-test", "folder": str(tmp_path / "locks"), "alone": True}}))
    finished: list[int] = []
    with GpuLock("GPU-test", tmp_path / "locks").shared("another lane's trials"):
        runner = threading.Thread(target=lambda: finished.append(program.main(str(plan))))
        runner.start()
        time.sleep(1.0)
        assert events == [], "it neither allocates nor runs while another evaluation holds the GPU"
    runner.join(timeout=30)
    assert finished == [0] and events == ["opened", "profiled", "reaped"]


def test_running_out_of_memory_is_marked_for_the_harness(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    events: list[str] = []
    program = _program_under_test(monkeypatch, events)
    driver = program._sibling("cuda_driver")

    def no_memory(plan):  # type: ignore[no-untyped-def]
        raise driver.DriverError("cuMemAlloc_v2 failed with CUresult 2", driver.CUDA_ERROR_OUT_OF_MEMORY)

    monkeypatch.setattr(program, "_open", no_memory)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"gpu_lock": None}))
    assert program.main(str(plan)) == 3
    assert program.OUT_OF_MEMORY_MARK in capsys.readouterr().err

    def other_failure(plan):  # type: ignore[no-untyped-def]
        raise driver.DriverError("cuInit failed with CUresult 100", 100)

    monkeypatch.setattr(program, "_open", other_failure)
    with pytest.raises(RuntimeError, match="CUresult 100"):
        program.main(str(plan))
