"""The ncu stage on the CPU: the profiled program's plan, its refusal to import torch, its protection of the
harness's folders, and (with a fake ncu) that only ncu's report and the harness's own probe decide anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.contract.signature import parameters
from ptxbench.evaluate.proof.profiling import profiled_program
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
    from ptxbench.evaluate.isolation.gpu_lock import KEY_VARIABLE

    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv(KEY_VARIABLE, "GPU-test")
    command = profiled_program(get_task("rmsnorm"), {"T": 4, "Hd": 64}, tmp_path / "candidate.so", tmp_path)
    plan = json.loads(Path(command[3]).read_text())
    assert plan["gpu_lock"] == {"key": "GPU-test", "folder": str(tmp_path / "locks"), "alone": False}
    command = profiled_program(get_task("rmsnorm"), {"T": 4, "Hd": 64}, tmp_path / "candidate.so", tmp_path, alone=True)
    assert json.loads(Path(command[3]).read_text())["gpu_lock"]["alone"] is True


def test_the_program_loads_every_module_it_names_by_path_without_ptxbench(tmp_path: Path) -> None:
    """The profiled program runs under ``python -I`` where ptxbench is not importable and finds the harness's
    modules it needs by their paths in other folders of ``evaluate/``: each must be there and load."""
    from ptxbench.evaluate.child import profile_one
    from ptxbench.evaluate.proof.profiling import PROFILED_PROGRAM

    assert PROFILED_PROGRAM.samefile(profile_one.__file__)
    script = ("import importlib.util, sys\n"
              "spec = importlib.util.spec_from_file_location('program', sys.argv[1])\n"
              "program = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(program)\n"
              "for name in program._STANDALONE:\n    program._standalone(name)\n"
              "assert not [m for m in sys.modules if m.startswith(('ptxbench.', 'torch'))], sorted(sys.modules)\n"
              "print(' '.join(sorted(program._STANDALONE)))")
    done = subprocess.run([sys.executable, "-I", "-c", script, str(PROFILED_PROGRAM)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == sorted(profile_one._STANDALONE) == ["confinement", "cuda_driver", "gpu_lock", "processes"]


def test_the_program_opens_the_gpu_at_once_but_runs_the_candidate_only_under_the_lock(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The evaluator does not hold the lock through ncu's start-up, nor the program while it opens the
    GPU and allocates (no kernel runs there); the inputs' copies, the candidate's code and the profiled
    calls wait while a lane times."""
    import importlib.util
    import threading
    import time
    import types

    from ptxbench.evaluate.child import profile_one as installed
    from ptxbench.evaluate.isolation.gpu_lock import GpuLock

    spec = importlib.util.spec_from_file_location("profile_one_under_test", installed.__file__)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    events: list[str] = []
    real_standalone = program._standalone
    harmless = types.SimpleNamespace(become_subreaper=lambda: None, kill_descendants=lambda pid: events.append("reaped"))
    monkeypatch.setattr(program, "_standalone", lambda name: harmless if name == "processes" else real_standalone(name))
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

    from ptxbench.evaluate.child import profile_one as installed

    spec = importlib.util.spec_from_file_location("profile_one_under_test", installed.__file__)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    real_standalone = program._standalone
    harmless = types.SimpleNamespace(become_subreaper=lambda: None, kill_descendants=lambda pid: events.append("reaped"))
    monkeypatch.setattr(program, "_standalone", lambda name: harmless if name == "processes" else real_standalone(name))
    monkeypatch.setattr(program, "_profile", lambda plan, *opened: events.append("profiled") or 0)
    return program


def test_alone_the_program_allocates_only_once_it_has_the_gpu_to_itself(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import threading
    import time

    from ptxbench.evaluate.isolation.gpu_lock import GpuLock

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
    driver = program._standalone("cuda_driver")

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


# -- the proof read from ncu's report alone, with a fake ncu on PATH (tests/evaluate/fake_ncu.py) --------------

NCU_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
PLAIN_REPORT = (NCU_FIXTURES / "h200_counter_probe.csv").read_text()  # one plain kernel: a store, no copy
BULK_REPORT = (NCU_FIXTURES / "h200_bulk_copy_candidate.csv").read_text()  # bulk copies in and out, mbarriers
# What the bulk-copy candidate printed under ncu on the H200: a table shaped like ncu's and ERR_NVGPUCTRPERM.
CANDIDATE_NOISE = (NCU_FIXTURES / "h200_bulk_copy_candidate_output.txt").read_text()
FORGED_TABLE = BULK_REPORT.replace("k(const float *, float *)", "rmsnorm_kernel")


def _small_rmsnorm():  # type: ignore[no-untyped-def]
    from ptxbench.tasks.model import Task

    data = get_task("rmsnorm").model_dump(mode="json")
    data["workloads"] = [{"name": "small", "role": "timed", "sizes": {"T": 4, "Hd": 64}},
                         {"name": "small-heldout", "role": "heldout", "sizes": {"T": 3, "Hd": 128}}]
    data["variants"] = []  # the suite's variants partition its own workloads, not these
    return Task.model_validate(data)


def _fake_ncu(tmp_path: Path, monkeypatch, **scripted) -> Path:  # type: ignore[no-untyped-def]
    from .fake_ncu import use

    folder = tmp_path / "fake-ncu"
    use(folder, monkeypatch, **scripted)
    return folder


def _profile(tmp_path: Path):  # type: ignore[no-untyped-def]
    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.proof.profiling import profile_requirements

    return profile_requirements(_small_rmsnorm(), Arch.SM_90A, tmp_path / "candidate.so", timeout_s=60)


def test_a_table_the_candidate_prints_is_ignored_only_the_report_counts(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _fake_ncu(tmp_path, monkeypatch, candidate_output=CANDIDATE_NOISE + FORGED_TABLE, candidate_report=PLAIN_REPORT)
    features, launches = _profile(tmp_path)
    assert [launch.name for launch in launches] == ["ptxbench_counter_probe"]
    copy = next(f for f in features if "bulk.copy" in f.requirement.any_of)
    assert copy.verified and not copy.satisfied and "never executed" in copy.message


def test_without_a_report_a_printed_table_is_no_profile(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.proof.profiling import ProfiledRunFailed

    _fake_ncu(tmp_path, monkeypatch, candidate_output=FORGED_TABLE + "the last words\n", candidate_report=None)
    with pytest.raises(ProfiledRunFailed, match="ncu wrote no report") as failed:
        _profile(tmp_path)
    assert "the program's output under ncu ends" in str(failed.value) and "the last words" in str(failed.value)


def test_an_unreadable_report_is_no_profile(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.proof.profiling import ProfiledRunFailed

    from .fake_ncu import UNREADABLE

    _fake_ncu(tmp_path, monkeypatch, candidate_output=FORGED_TABLE, candidate_report=UNREADABLE)
    with pytest.raises(ProfiledRunFailed, match="could not be read"):
        _profile(tmp_path)


def test_a_candidate_printing_the_permission_error_is_judged_on_its_report(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert "ERR_NVGPUCTRPERM" in CANDIDATE_NOISE
    _fake_ncu(tmp_path, monkeypatch, candidate_output=CANDIDATE_NOISE, candidate_report=BULK_REPORT)
    features, launches = _profile(tmp_path)
    assert all(f.verified and f.satisfied for f in features), [f.message for f in features]
    assert (launches[0].grid, launches[0].block, launches[0].stream) == ((64, 1, 1), (128, 1, 1), "13")


def test_the_report_lies_in_a_folder_the_program_protects_and_secrets_stay_out(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from .fake_ncu import recordings

    from ptxbench.evaluate.isolation.confinement import PROTECTED_PATHS_VARIABLE
    from ptxbench.integrity import key_path
    from ptxbench.paths import cache_root

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv(PROTECTED_PATHS_VARIABLE, str(tmp_path / "runs"))
    folder = _fake_ncu(tmp_path, monkeypatch, candidate_report=BULK_REPORT)
    _profile(tmp_path)
    (recorded,) = recordings(folder)
    report = Path(recorded["report"])
    assert str(report.parent) in recorded["plan"]["protect"], "the report's folder is made read-only for the program"
    # what a worker holding candidate code protects, the profiled program protects too
    assert {str(tmp_path / "runs"), str(cache_root())} <= set(recorded["plan"]["protect"])
    assert recorded["plan"]["hide"] == [str(key_path())]
    assert not report.parent.exists(), "the harness's folder is removed afterwards"
    assert "OPENAI_API_KEY" not in recorded["environment"] and "HF_TOKEN" not in recorded["environment"]


def test_the_probe_learns_counter_permission_from_the_harness_kernel(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.proof.profiling import probe_counters

    from .fake_ncu import recordings

    folder = _fake_ncu(tmp_path, monkeypatch, probe_report=PLAIN_REPORT)
    assert probe_counters(timeout_s=60) is None
    assert [r["role"] for r in recordings(folder)] == ["probe"]
    denied = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
              "access NVIDIA GPU Performance Counters on the target device 0.\n")
    _fake_ncu(tmp_path, monkeypatch, probe_output=denied, probe_report=None)
    reason = probe_counters(timeout_s=60)
    assert reason is not None and "ERR_NVGPUCTRPERM" in reason and "probe kernel" in reason
    _fake_ncu(tmp_path, monkeypatch, probe_output="==ERROR== something else\n", probe_report=None)
    reason = probe_counters(timeout_s=60)
    assert reason is not None and "probe failed" in reason and "something else" in reason
    _fake_ncu(tmp_path, monkeypatch, probe_report=BULK_REPORT)  # a report without the probe's kernel
    reason = probe_counters(timeout_s=60)
    assert reason is not None and "no executed instruction counts" in reason


def test_the_program_protects_its_folders_before_opening_the_gpu_and_goes_on_where_it_cannot(
        tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import types

    events: list[str] = []
    program = _program_under_test(monkeypatch, events)
    siblings = program._standalone

    def sibling(name: str):  # type: ignore[no-untyped-def]
        if name == "confinement":
            return types.SimpleNamespace(protect_paths=lambda paths: events.append(f"protect {paths}") or "read-only")
        return siblings(name)

    monkeypatch.setattr(program, "_standalone", sibling)
    monkeypatch.setattr(program, "_open", lambda plan: events.append("opened") or (None, None, []))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"gpu_lock": None, "protect": [str(tmp_path)]}))
    assert program.main(str(plan)) == 0
    assert events == [f"protect {[str(tmp_path)]}", "opened", "profiled", "reaped"]
    assert f"{program.PROTECTION_MARK} read-only" in capsys.readouterr().err

    def refused(paths):  # type: ignore[no-untyped-def]
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(program, "_standalone", lambda name: types.SimpleNamespace(protect_paths=refused)
                        if name == "confinement" else siblings(name))
    events.clear()
    assert program.main(str(plan)) == 0 and events == ["opened", "profiled", "reaped"]
    assert "not isolated: PermissionError" in capsys.readouterr().err

    def hiding(paths, hidden=()):  # type: ignore[no-untyped-def]
        events.append(f"protect {paths} hide {list(hidden)}")
        return "read-only, hidden"

    monkeypatch.setattr(program, "_standalone", lambda name: types.SimpleNamespace(protect_paths=hiding)
                        if name == "confinement" else siblings(name))
    plan.write_text(json.dumps({"gpu_lock": None, "protect": [str(tmp_path)], "hide": [str(tmp_path / "key")]}))
    events.clear()
    assert program.main(str(plan)) == 0
    assert events[0] == f"protect {[str(tmp_path)]} hide {[str(tmp_path / 'key')]}" and events[1] == "opened"
