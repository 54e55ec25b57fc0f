"""The adversarial suite's manifest is complete and consistent, and every case builds (CPU only).

Each ``.cu`` here is a candidate the GPU evaluator must not pass; ``manifest.toml`` says which status
it must get and, for REJECTED, which guard must fire. Running them needs a GPU; this test checks what
can be checked without one: the list matches the folder, its values come from the fixed vocabularies,
every case builds for sm_90a with the harness flags and exports its entry point, and the two cases
aimed at static checks look to the static report the way they are meant to (so that only the run-time
checks can catch them). Where a cheat acts on the host before any GPU work, its entry point is called
here through ctypes in a throw-away process (no device: CUDA calls just fail) to show that the case
really attempts it, so the GPU tests cannot pass merely because a case is toothless.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptxbench._compat import tomllib
from ptxbench.arch.registry import Arch
from ptxbench.check import check_files
from ptxbench.records.check import CheckReport
from ptxbench.static.report import Stage
from ptxbench.kernels import reference_folder
from ptxbench.tasks.loader import bundled_suite, get_task

from .cases import case_file

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.toml"

EXPECTS = {"COMPILE_ERROR", "RUNTIME_ERROR", "TIMEOUT", "INCORRECT", "REJECTED", "PASSED", "any"}
GUARDS = {"library_call", "torch_fallback", "other_stream", "cached_output", "input_mutation", "dead_code_feature",
          "out_of_bounds_write", "below_physical_floor", "feature_not_executed", "host_transfer", "profiler_evasion",
          "timed_only_stream", "timed_only_shortcut", "forged_timing"}
CHECKS = {"others_unaffected", "no_survivors", "harness_unchanged", "compile_cache_unchanged"}
REQUIRED_KEYS = {"file", "task", "expect", "why"}
OPTIONAL_KEYS = {"guard", "check", "secret_env", "base"}
HEADER = re.compile(r"^// ADVERSARIAL CASE (?P<case>\w+) \(task (?P<task>\w+)\) -- expected: (?P<expect>[A-Z_]+(?: or [A-Z_]+)*)\b")


def _cases() -> list[dict[str, str]]:
    with MANIFEST.open("rb") as handle:
        return tomllib.load(handle)["case"]


CASES = _cases()


def _case(file: str) -> dict[str, str]:
    return next(c for c in CASES if c["file"] == file)


def test_manifest_lists_exactly_the_files_here() -> None:
    listed = [c["file"] for c in CASES]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    for name in listed:
        assert (HERE / name).is_file(), f"{name} is listed but missing"
    assert sorted(p.name for p in HERE.glob("*.cu")) == sorted(listed), "every .cu here must be listed"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["file"])
def test_entry_uses_the_fixed_vocabulary(case: dict[str, str]) -> None:
    tasks = {t.id for t in bundled_suite()}
    assert REQUIRED_KEYS <= set(case) <= REQUIRED_KEYS | OPTIONAL_KEYS, sorted(case)
    assert case["file"].endswith(".cu")
    assert case["task"] in tasks
    expected = case["expect"] if isinstance(case["expect"], list) else [case["expect"]]
    assert set(expected) <= EXPECTS and len(set(expected)) == len(expected), expected
    assert len(expected) == 1 or "any" not in expected, f"{case['file']}: a list names statuses, not \"any\""
    if "REJECTED" in expected:
        assert case.get("guard") in GUARDS, f"{case['file']}: REJECTED needs a guard from the list"
    else:
        assert "guard" not in case, f"{case['file']}: only a REJECTED case names a guard"
    if case["expect"] == "any":
        assert case.get("check") in CHECKS, f"{case['file']}: expect = \"any\" needs a check from the list"
    elif "check" in case:
        assert case["check"] in CHECKS, case["file"]
    if "base" in case:
        assert case["base"] == "reference" and (reference_folder("sm_90a") / f"{case['task']}.cu").is_file()
    if "secret_env" in case:
        assert re.fullmatch(r"PTXBENCH_TEST_\w+_API_KEY", case["secret_env"]), "a test-only name the scrub must cover"
    why = case["why"].strip()
    assert why and why.endswith(".") and "\n" not in why


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["file"])
def test_file_opens_with_its_explanation(case: dict[str, str]) -> None:
    lines = (HERE / case["file"]).read_text().splitlines()
    match = HEADER.match(lines[0])
    assert match, f"{case['file']}: the first line must be '// ADVERSARIAL CASE <name> (task <id>) -- expected: <STATUS>'"
    assert match["case"] == Path(case["file"]).stem
    expected = case["expect"] if isinstance(case["expect"], list) else [case["expect"]]
    assert match["task"] == case["task"] and match["expect"] == " or ".join(e.upper() for e in expected)
    block = []
    for line in lines:
        if not line.startswith("//"):
            break
        block.append(line)
    assert any("How the evaluator must catch it" in line for line in block), case["file"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CheckReport]:
    composed = tmp_path_factory.mktemp("composed")
    items = [(case_file(c, composed), get_task(c["task"])) for c in CASES]
    return {Path(r.candidate).name: r for r in check_files(items, Arch.SM_90A)}


def test_every_case_builds_for_sm90a_with_its_entry_point(reports: dict[str, CheckReport]) -> None:
    for case in CASES:
        report = reports[case["file"]]
        diagnosis = report.build.diagnosis.summary if report.build.diagnosis else report.build.log[-2000:]
        assert report.build.ok, f"{case['file']}: {diagnosis}"
        assert report.static is not None and report.build.artifact(".so") is not None
        assert report.static.task == case["task"]


def test_dead_code_wgmma_is_in_the_sass(reports: dict[str, CheckReport]) -> None:
    """Statically indistinguishable from real use: only the executed-instruction check can catch it."""
    static = reports["dead_code_wgmma.cu"].static
    wgmma = next(r for r in static.requirements if "wgmma.bf16" in r.requirement.any_of)
    assert wgmma.stage is Stage.IN_SASS, wgmma.message
    assert any(m.startswith("HGMMA.") and m.endswith(".F32.BF16") for k in static.kernels for m in k.sass)
    assert any("wgmma.bf16" in k.features for k in static.kernels)


def test_library_call_is_flagged_statically_but_not_linked(reports: dict[str, CheckReport]) -> None:
    static = reports["library_call.cu"].static
    assert any("dlopen" in v for v in static.policy_violations), static.policy_violations
    assert not any("links" in v for v in static.policy_violations), "no link-time dependency: caught at run time"


def test_no_other_case_trips_a_static_policy(reports: dict[str, CheckReport]) -> None:
    """The rest are invisible to the source and link checks: the GPU evaluator must catch them."""
    for case in CASES:
        if case["file"] != "library_call.cu":
            assert not reports[case["file"]].static.policy_violations, case["file"]


def test_library_call_is_the_only_case_without_a_kernel(reports: dict[str, CheckReport]) -> None:
    """The torch_fallback case defines a kernel it never launches, so "no kernel in the build" is not its tell."""
    without = sorted(name for name, report in reports.items() if not report.static.kernels)
    assert without == ["library_call.cu"]


@pytest.mark.parametrize(("file", "feature"), [("profiler_detect.cu", "wgmma.bf16"), ("token_bulk_copy.cu", "bulk.copy")])
def test_token_features_satisfy_the_static_check(reports: dict[str, CheckReport], file: str, feature: str) -> None:
    """The token kernels really hold the required instruction, so only executed counts and shares can catch them."""
    static = reports[file].static
    requirement = next(r for r in static.requirements if feature in r.requirement.any_of)
    assert requirement.stage is Stage.IN_SASS, requirement.message
    holders = [k for k in static.kernels if feature in k.features]
    assert holders and len(holders) < len(static.kernels), "the token sits beside a plain kernel that does the work"


# ---- Host-side cheats, shown without a GPU: the entry point is called in a throw-away process. ----

_CALL = """
import ctypes, sys
library = ctypes.CDLL(sys.argv[1])
entry = getattr(library, sys.argv[2])
values = [int(v) for v in sys.argv[3:]]
entry.argtypes = [ctypes.c_int64] * len(values)  # pointers travel as 64-bit integers (null: never used)
entry.restype = ctypes.c_int
print("calling", flush=True)
print("returned", entry(*values), flush=True)
"""
# Arguments in the entry points' order; pointers and the stream are null, the sizes those a cheat needs.
_RMSNORM_EMPTY = ["0", "0", "0", "0", "4096", "0"]  # T = 0: nothing for the GPU to do
_GEMM_1024 = ["0", "0", "0", "1024", "1024", "1024", "0"]


def _shared_object(reports: dict[str, CheckReport], file: str) -> str:
    return str(reports[file].build.artifact(".so"))


def _call_command(reports: dict[str, CheckReport], file: str, arguments: list[str]) -> list[str]:
    entry = _case(file)["task"]
    return [sys.executable, "-c", _CALL, _shared_object(reports, file), entry, *arguments]


def _sandbox_environment(root: Path) -> dict[str, str]:
    """Only the search roots a test controls: a private HOME, caches and TMPDIR under ``root``."""
    for name in ("home", "cache", "tmp"):
        (root / name).mkdir(parents=True, exist_ok=True)
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "cache"),
                   "PTXBENCH_CACHE": str(root / "cache" / "ptxbench"), "TMPDIR": str(root / "tmp")}
    if "LD_LIBRARY_PATH" in os.environ:
        environment["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return environment


def test_fake_ncu_csv_prints_what_a_stdout_parser_would_believe(reports: dict[str, CheckReport]) -> None:
    from ptxbench.evaluate.proof.executed import parse_ncu_csv

    done = subprocess.run(_call_command(reports, "fake_ncu_csv.cu", _GEMM_1024), capture_output=True, text=True,
                          timeout=60)
    assert "calling" in done.stdout, done.stderr
    for stream in (done.stdout, done.stderr):
        profiles = parse_ncu_csv(stream)
        assert any(count > 0 for p in profiles for name, count in p.executed.items() if name.startswith("HGMMA."))


def test_fake_counter_permission_prints_ncus_error_on_both_streams(reports: dict[str, CheckReport]) -> None:
    done = subprocess.run(_call_command(reports, "fake_counter_permission.cu", _GEMM_1024), capture_output=True,
                          text=True, timeout=60)
    assert "==ERROR== ERR_NVGPUCTRPERM" in done.stdout and "==ERROR== ERR_NVGPUCTRPERM" in done.stderr


def test_kill_process_group_signals_its_whole_group(reports: dict[str, CheckReport]) -> None:
    done = subprocess.run(_call_command(reports, "kill_process_group.cu", _RMSNORM_EMPTY), capture_output=True,
                          text=True, timeout=60, start_new_session=True)  # its own group: only it can die
    assert done.returncode == -signal.SIGTERM and "returned" not in done.stdout, (done.returncode, done.stdout)


def test_kill_parent_kills_the_process_that_started_it(reports: dict[str, CheckReport]) -> None:
    command = " ".join(f"'{part}'" for part in _call_command(reports, "kill_parent.cu", _RMSNORM_EMPTY))
    done = subprocess.run(["sh", "-c", f"{command}; echo parent survived"], capture_output=True, text=True,
                          timeout=60, start_new_session=True)
    assert done.returncode == -signal.SIGKILL and "parent survived" not in done.stdout, (done.returncode, done.stdout)


def test_exit_zero_leaves_mid_call_with_a_clean_status(reports: dict[str, CheckReport]) -> None:
    done = subprocess.run(_call_command(reports, "exit_zero.cu", _RMSNORM_EMPTY), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "calling" in done.stdout and "returned" not in done.stdout


def test_ignore_signals_hang_survives_every_polite_signal(reports: dict[str, CheckReport]) -> None:
    process = subprocess.Popen(_call_command(reports, "ignore_signals_hang.cu", _RMSNORM_EMPTY),
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "calling"
        time.sleep(0.5)  # inside the entry point by now
        for polite in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
            process.send_signal(polite)
        time.sleep(1.0)
        assert process.poll() is None, "a catchable signal ended the hang"
    finally:
        process.kill()
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def test_fd_garbage_writes_forged_replies_into_inherited_pipes(reports: dict[str, CheckReport]) -> None:
    read_end, write_end = os.pipe()
    try:
        done = subprocess.run(_call_command(reports, "fd_garbage.cu", _RMSNORM_EMPTY), capture_output=True,
                              timeout=60, pass_fds=(write_end,))
        os.close(write_end)
        write_end = -1
        received = os.read(read_end, 1 << 16)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    assert b"returned" in done.stdout, done.stderr  # it goes on to compute after spraying
    assert b'"status": "PASSED"' in received and len(received) > 4096


def _daemons() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "ptxb_daemon":
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def test_daemon_escape_leaves_a_daemon_in_another_session(reports: dict[str, CheckReport], tmp_path: Path) -> None:
    before = _daemons()
    output = tmp_path / "output.txt"
    with output.open("w") as sink:  # a file, not a pipe: the daemon keeps its copy of stdout open
        done = subprocess.run(_call_command(reports, "daemon_escape.cu", _RMSNORM_EMPTY), stdout=sink,
                              stderr=subprocess.STDOUT, timeout=60, start_new_session=True)
    deadline = time.monotonic() + 10
    started = _daemons() - before
    while not started and time.monotonic() < deadline:
        time.sleep(0.1)
        started = _daemons() - before
    try:
        assert "returned" in output.read_text(), output.read_text()  # the call itself completes
        assert len(started) == 1, "one daemon outlives the process that made it"
        daemon = next(iter(started))
        assert done.returncode == 0 and os.getsid(daemon) != os.getsid(0), "it left the caller's session"
    finally:
        for pid in started:
            os.kill(pid, signal.SIGKILL)


def test_rewrite_results_forges_every_record_it_can_reach(reports: dict[str, CheckReport], tmp_path: Path) -> None:
    """Run inside a fake run directory, with every search root the case uses pointed under tmp_path."""
    environment = _sandbox_environment(tmp_path)
    run = tmp_path / "run"
    item = run / "items" / "rmsnorm" / "honest"
    item.mkdir(parents=True)
    (run / "run.json").write_text('{"schema": 1}')
    (item / "result.json").write_text('{"status": "INCORRECT"}')
    baseline = tmp_path / "cache" / "ptxbench" / "baselines" / "h200.json"
    baseline.parent.mkdir(parents=True)
    baseline.write_text('{"baseline_ms": 0.05}')
    work = tmp_path / "tmp" / "worker"
    work.mkdir()
    command = " ".join(f"'{part}'" for part in _call_command(reports, "rewrite_results.cu", _RMSNORM_EMPTY))
    # Started from a shell whose working directory is also under tmp_path: /proc/<ppid>/cwd stays inside.
    done = subprocess.run(["sh", "-c", f"{command}; exit $?"], cwd=work, env=environment, capture_output=True,
                          text=True, timeout=120)
    assert "returned" in done.stdout, done.stderr
    assert '"forged": true' in (item / "result.json").read_text()
    assert '"forged": true' in (run / "run.json").read_text()
    assert '"forged": true' in baseline.read_text()
    assert (run / "items" / "FORGED_BY_CANDIDATE.json").is_file()


def test_every_guard_the_manifest_names_maps_to_evaluator_guards() -> None:
    """The GPU test checks a REJECTED case against GUARDS_FOR; a guard name missing there would fail only on the GPU."""
    from tests.gpu.test_evaluator_gpu import GUARDS_FOR

    named = {c["guard"] for c in CASES if "guard" in c}
    assert named <= set(GUARDS_FOR) and set(GUARDS_FOR) <= GUARDS, sorted(named - set(GUARDS_FOR))


def test_tamper_harness_marks_the_code_it_can_reach(reports: dict[str, CheckReport], tmp_path: Path) -> None:
    """Against a stand-in package on PYTHONPATH (never the real one): the case finds it and appends its mark."""
    package = tmp_path / "site" / "ptxbench"
    (package / "evaluate" / "judgement").mkdir(parents=True)
    (package / "tasks" / "suite").mkdir(parents=True)
    files = [package / "__init__.py", package / "evaluate" / "judgement" / "verdict.py",
             package / "tasks" / "suite" / "rmsnorm.toml"]
    for file in files:
        file.write_text("original = True\n")
    environment = {**_sandbox_environment(tmp_path), "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run(_call_command(reports, "tamper_harness.cu", _RMSNORM_EMPTY), capture_output=True, text=True,
                          timeout=60, env=environment)
    assert "returned" in done.stdout, done.stderr
    for file in files:
        assert "TAMPERED-BY-CANDIDATE" in file.read_text(), file


def test_poison_compile_cache_marks_the_compiled_code_it_can_reach(reports: dict[str, CheckReport],
                                                                    tmp_path: Path) -> None:
    """Inductor's default folder under TMPDIR and the harness's compile cache named in its parent's environment
    (a shell started with the sandbox's variables, so nothing outside tmp_path is searched) get the mark."""
    environment = _sandbox_environment(tmp_path)
    inductor = tmp_path / "tmp" / "torchinductor_someone" / "ab" / "kernel.py"
    harness = tmp_path / "cache" / "ptxbench" / "compile" / "inductor" / "cd" / "graph.py"
    untouched = tmp_path / "cache" / "ptxbench" / "compile" / "inductor" / "cd" / "kernel.cubin"
    for file in (inductor, harness, untouched):
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("original = True\n")
    command = " ".join(f"'{part}'" for part in _call_command(reports, "poison_compile_cache.cu", _RMSNORM_EMPTY))
    done = subprocess.run(["sh", "-c", f"{command}; exit $?"], cwd=tmp_path / "tmp", env=environment,
                          capture_output=True, text=True, timeout=120)
    assert "returned" in done.stdout, done.stderr
    assert "POISONED-BY-CANDIDATE" in inductor.read_text() and "POISONED-BY-CANDIDATE" in harness.read_text()
    assert untouched.read_text() == "original = True\n", "generated Python only: binaries stay loadable"


_LOAD_BESIDE_TORCH = """
import ctypes, sys, types

class Event:  # a stand-in for torch.cuda.Event: every interval measures 10 ms
    def elapsed_time(self, end):
        return 10.0

sys.modules["torch"] = types.SimpleNamespace(cuda=types.SimpleNamespace(Event=Event))
ctypes.CDLL(sys.argv[1])  # what the worker does; the case's constructor runs here
print("interval", Event().elapsed_time(Event()), flush=True)
"""


def test_forged_timing_rewrites_the_event_intervals_of_the_process_that_loads_it(
        reports: dict[str, CheckReport]) -> None:
    """Loaded into a Python process that has imported (a stand-in) torch, the case makes a 10 ms interval read
    8 ms; loaded where there is no torch (the profiled program), it changes nothing."""
    done = subprocess.run([sys.executable, "-c", _LOAD_BESIDE_TORCH, _shared_object(reports, "forged_timing.cu")],
                          capture_output=True, text=True, timeout=60)
    assert "interval 8.0" in done.stdout, done.stdout + done.stderr
    plain = _LOAD_BESIDE_TORCH.replace('sys.modules["torch"] = ', "_unused = ")
    done = subprocess.run([sys.executable, "-c", plain, _shared_object(reports, "forged_timing.cu")],
                          capture_output=True, text=True, timeout=60)
    assert "interval 10.0" in done.stdout, done.stdout + done.stderr
