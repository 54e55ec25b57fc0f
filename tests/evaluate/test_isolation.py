"""Isolation of candidate processes: the environment they see, the files they cannot write, the cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ptxbench.evaluate.isolation import confinement, gpu_lock
from ptxbench.evaluate.isolation.confinement import candidate_environment

ISOLATION_FILE = Path(confinement.__file__)

HARNESS_ENVIRONMENT = {
    "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "3", "CUDA_MODULE_LOADING": "LAZY", "NVIDIA_VISIBLE_DEVICES": "all",
    "TMPDIR": "/scratch/tmp", gpu_lock.KEY_VARIABLE: "GPU-1234", "PTXBENCH_LOCK_DIR": "/scratch/locks",
    "HOME": "/home/harness", "OPENAI_API_KEY": "sk-secret", "ANTHROPIC_API_KEY": "sk-ant", "HF_TOKEN": "hf_x",
    "GITHUB_TOKEN": "ghp_x", "AWS_SECRET_ACCESS_KEY": "aws", "CUDA_API_KEY": "hidden in an allowed prefix",
    "PTXBENCH_CACHE": "/home/harness/.cache/ptxbench", "PTXBENCH_PROTECTED_PATHS": "/runs/a",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent", "DATABASE_PASSWORD": "pw", "RANDOM_SETTING": "x",
}


def test_the_candidate_sees_device_and_library_settings_and_the_gpu_lock() -> None:
    seen = candidate_environment(HARNESS_ENVIRONMENT, home="/tmp/private")
    for name in ("PATH", "LD_LIBRARY_PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING",
                 "NVIDIA_VISIBLE_DEVICES", "TMPDIR", gpu_lock.KEY_VARIABLE, "PTXBENCH_LOCK_DIR"):
        assert seen[name] == HARNESS_ENVIRONMENT[name], name
    assert seen["HOME"] == "/tmp/private"
    assert candidate_environment({"PTXBENCH_FAKE_STATE": "/tmp/x"}) == {"PTXBENCH_FAKE_STATE": "/tmp/x"}, \
        "the CPU tests' stand-in GPU side still gets its instructions"


def test_the_candidate_sees_no_secret_nor_the_harnesss_own_settings() -> None:
    seen = candidate_environment(HARNESS_ENVIRONMENT, home="/tmp/private")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY",
                 "CUDA_API_KEY", "PTXBENCH_CACHE", "PTXBENCH_PROTECTED_PATHS", "SSH_AUTH_SOCK",
                 "DATABASE_PASSWORD", "RANDOM_SETTING"):
        assert name not in seen, name
    assert "HOME" not in candidate_environment(HARNESS_ENVIRONMENT), "no HOME rather than the harness's"


def test_the_lock_variables_are_the_ones_gpu_lock_reads() -> None:
    assert gpu_lock.KEY_VARIABLE in confinement.LOCK_VARIABLES
    assert gpu_lock.TRACE_VARIABLE in confinement.LOCK_VARIABLES
    assert "PTXBENCH_LOCK_DIR" in confinement.LOCK_VARIABLES and "PTXBENCH_LOCK_DIR" in Path(gpu_lock.__file__).read_text()


def test_protected_paths_are_read_from_the_harness_environment() -> None:
    environ = {confinement.PROTECTED_PATHS_VARIABLE: os.pathsep.join(["/runs/a", "", "/cache/b"])}
    assert confinement.protected_paths_from(environ) == ["/runs/a", "/cache/b"]
    assert confinement.protected_paths_from({}) == []


# The probes' preamble: confinement.py loaded by its path as profile_one.py loads it (no ptxbench import), and
# one attempt at a file operation, reported as "done" or the error's class and number.
_LOAD_ISOLATION = """
import ctypes, importlib.util, os, sys
spec = importlib.util.spec_from_file_location("isolation", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
"""
_ATTEMPT = """
def attempt(action):
    try:
        action()
        return "done"
    except OSError as exc:
        return type(exc).__name__ + str(exc.errno)
"""


# Loads the module by its path as profile_one.py does (no ptxbench import), protects argv[1], then tries
# to write there, to remount it writable by the syscall itself, and to write beside it.
_PROBE = _LOAD_ISOLATION + """
assert "ptxbench" not in sys.modules
print(module.protect_paths([sys.argv[2], "/no/such/path"]))
""" + _ATTEMPT + """
print(attempt(lambda: open(os.path.join(sys.argv[2], "written"), "w").close()))
libc = ctypes.CDLL(None, use_errno=True)
remount = libc.mount(None, sys.argv[2].encode(), None, ctypes.c_ulong(4096 | 32), None)
print("remounted" if remount == 0 else "remount refused")
print(attempt(lambda: open(os.path.join(sys.argv[3], "beside"), "w").close()))
"""


_SYSTEM_PYTHON = "/usr/bin/python3"


def _probe(protected: Path, beside: Path, demote: bool = False) -> list[str]:
    def as_nobody() -> None:
        os.setgid(65534)
        os.setuid(65534)

    python = _SYSTEM_PYTHON if demote else sys.executable  # root's own interpreter may be out of nobody's reach
    done = subprocess.run([python, "-c", _PROBE, str(ISOLATION_FILE), str(protected), str(beside)],
                          capture_output=True, text=True, timeout=60, preexec_fn=as_nobody if demote else None,
                          env={"PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    protected, beside = tmp_path / "run", tmp_path / "elsewhere"
    protected.mkdir()
    beside.mkdir()
    for folder in (tmp_path, protected, beside):
        folder.chmod(0o777)  # the unprivileged probe may write both, were it not for the mount
    return protected, beside


def _assert_protected(lines: list[str], protected: Path) -> None:
    mode, written, remount, beside = lines
    if mode.startswith("not isolated:"):
        pytest.skip(f"this machine permits no mount namespace here ({mode})")
    assert mode.startswith("read-only mounts: ") and str(protected) in mode and "/no/such" not in mode
    assert written == "OSError30", "EROFS: the protected path is read-only"
    assert remount == "remount refused", "candidate code cannot undo the protection"
    assert beside == "done", "the rest of the machine stays writable"
    assert not (protected / "written").exists()


def test_protect_paths_makes_them_read_only_for_this_process_only(tmp_path: Path) -> None:
    protected, beside = _folders(tmp_path)
    _assert_protected(_probe(protected, beside), protected)
    (protected / "still writable here").touch()  # the harness's own view is unchanged


def test_protect_paths_uses_a_user_namespace_as_a_normal_user(tmp_path: Path) -> None:
    if os.getuid() != 0 or not os.path.exists(_SYSTEM_PYTHON):
        pytest.skip("needs root to start the unprivileged probe, and a system python it can run")
    with tempfile.TemporaryDirectory(dir="/tmp") as reachable:  # pytest's own folder is root's alone
        protected, beside = _folders(Path(reachable))
        lines = _probe(protected, beside, demote=True)
        _assert_protected(lines, protected)
    assert "user namespace" in lines[0]


def test_protect_paths_says_why_not_instead_of_raising(tmp_path: Path) -> None:
    assert confinement.protect_paths([str(tmp_path / "missing")]) == "not isolated: no protected path exists"


def _cgroup_or_skip() -> confinement.Cgroup:
    made = confinement.Cgroup.create(prefix="ptxbench-test")
    if isinstance(made, str):
        pytest.skip(f"no cgroup here: {made}")
    return made


def test_a_cgroup_freezes_and_kills_everything_in_it_whatever_its_session() -> None:
    group = _cgroup_or_skip()
    # a process that joins the group and then starts a daemon in a session of its own
    daemon = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                               f"open({group.path!r} + '/cgroup.procs', 'w').write('0')\n"
                               "time.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while daemon.pid not in group.pids() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group.pids() == [daemon.pid]
        assert group.freeze()
        assert open(f"/proc/{daemon.pid}/stat").read().rpartition(")")[2].split()[0] in ("S", "D", "T")
        group.thaw()
        assert group.kill() and group.pids() == []
        assert daemon.wait(timeout=10) == -9
    finally:
        daemon.kill()
        daemon.wait()
        group.remove()
    assert not os.path.exists(group.path)


def test_groups_left_by_a_dead_harness_are_swept() -> None:
    group = _cgroup_or_skip()
    parent = os.path.dirname(group.path)
    dead = subprocess.Popen(["true"])  # a pid whose process is gone
    dead.wait()
    stale = os.path.join(parent, f"ptxbench-test-{dead.pid}-00000000")
    os.mkdir(stale)
    try:
        confinement.sweep_stale_cgroups(parent, "ptxbench-test")
        assert not os.path.exists(stale), "the dead harness's group is removed"
        assert os.path.exists(group.path), "a living harness's group is kept"
    finally:
        group.remove()
        if os.path.exists(stale):
            os.rmdir(stale)


_READS_HIDDEN = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("isolation", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(module.protect_paths([sys.argv[2]], hidden=[sys.argv[3]]))
print(repr(open(sys.argv[3]).read()))
"""


def test_a_hidden_file_reads_empty_for_the_candidate_only(tmp_path: Path) -> None:
    protected, _ = _folders(tmp_path)
    key = protected / "integrity.key"
    key.write_text("the machine's signing key")
    done = subprocess.run([sys.executable, "-c", _READS_HIDDEN, str(ISOLATION_FILE), str(protected), str(key)],
                          capture_output=True, text=True, timeout=60)
    mode, content = done.stdout.splitlines()
    if mode.startswith("not isolated:"):
        pytest.skip(mode)
    assert f"hidden: {key}" in mode and content == "''"
    assert key.read_text() == "the machine's signing key"


def test_naming_protected_paths_creates_them_and_is_undone(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(confinement.PROTECTED_PATHS_VARIABLE, "/already")
    restore = confinement.name_protected_paths([tmp_path / "run", str(tmp_path / "cache")])
    assert (tmp_path / "run").is_dir(), "created, so the first worker started finds it to protect"
    assert confinement.protected_paths_from(os.environ) == ["/already", str(tmp_path / "run"), str(tmp_path / "cache")]
    restore()
    assert os.environ[confinement.PROTECTED_PATHS_VARIABLE] == "/already"


# Protects argv[2] with the default scratch space, then tries to write outside scratch space (argv[3]), in
# scratch space (argv[4]), and into the harness (its parent, with every capability) through /proc: without
# CAP_SYS_PTRACE and with fewer capabilities than its parent, the kernel refuses /proc/<ppid>/root (as it
# refuses ptrace and /proc/<ppid>/mem, which the kernel of this CPU machine's sandbox does not model alike).
_MACHINE_PROBE = _LOAD_ISOLATION + """
print(module.protect_paths([sys.argv[2]]))
""" + _ATTEMPT + """
print(attempt(lambda: open(os.path.join(sys.argv[3], "written"), "w").close()))
print(attempt(lambda: open(os.path.join(sys.argv[4], "written"), "w").close()))
parent_view = f"/proc/{os.getppid()}/root" + sys.argv[3]
print(attempt(lambda: open(os.path.join(parent_view, "through_proc"), "w").close()))
print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
"""


def _outside_scratch_space() -> Path:
    """A folder this test may write in that is not scratch space (a clone under /tmp is)."""
    roots = [os.path.realpath(root) for root in confinement.writable_roots()]
    for folder in (Path.home(), Path(__file__).resolve().parents[2], Path("/var/lib"), Path("/opt")):
        real = os.path.realpath(folder)
        if os.path.isdir(real) and os.access(real, os.W_OK) and not confinement._within(real, roots):
            return Path(real)
    pytest.skip("no writable folder outside scratch space here")


def test_the_machine_is_read_only_to_the_candidate_but_scratch_space(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("shown as root, where the GPU machine runs the harness")
    protected, scratch = _folders(tmp_path)
    outside = _outside_scratch_space() / f".ptxbench-isolation-probe-{os.getpid()}"
    outside.mkdir()
    try:
        done = subprocess.run([sys.executable, "-c", _MACHINE_PROBE, str(ISOLATION_FILE), str(protected), str(outside),
                               str(scratch)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        mode, outside_write, scratch_write, through_proc, dumpable = done.stdout.splitlines()
        if mode.startswith("not isolated:"):
            pytest.skip(mode)
        assert "the rest of the machine read-only but" in mode and "/tmp" in mode, mode
        assert outside_write == "OSError30", "EROFS: outside scratch space, the machine is read-only"
        assert scratch_write == "done", "scratch space stays writable (the private directory lives there)"
        assert through_proc == "PermissionError13", "no way into the harness's view of the files"
        assert dumpable == "0", "other lanes' candidates (same capabilities) cannot reach into this one"
        assert not (outside / "written").exists() and not (outside / "through_proc").exists()
        (outside / "harness still writes").touch()  # the harness's own view is unchanged
    finally:
        for child in outside.iterdir():
            child.unlink()
        outside.rmdir()


def test_a_scratch_mount_point_that_could_not_be_made_read_only_is_named(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    calls: list[str] = []

    def mount(source, target, flags, what):  # type: ignore[no-untyped-def]
        calls.append(target)
        if target == "/stubborn":
            raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(confinement, "_mount", mount)
    monkeypatch.setattr(confinement, "_mount_points", lambda: ["/", "/tmp", "/tmp/inner", "/stubborn", "/proc"])
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((0,) * 11))
    refused = confinement._read_only_machine(["/tmp", "/proc", "/tmp/inner"])
    assert refused == ["/stubborn (Operation not permitted)"]
    assert calls == ["/", "/stubborn"], "scratch mounts and those below them are left writable"


def test_import_roots_protect_the_harness_code_but_not_scratch_space(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    private = tmp_path / "private"
    private.mkdir()
    roots = confinement.import_roots([str(site), "/tmp", "/", str(tmp_path / "missing"), os.path.dirname(os.__file__),
                                    str(tmp_path)], keep_writable=[str(private)])
    assert str(site.resolve()) in roots, "wheels unpacked in scratch space are protected by name"
    assert os.path.realpath(os.path.dirname(os.__file__)) in roots
    assert "/tmp" not in roots and "/" not in roots, "never scratch space itself or a folder above it"
    assert str(tmp_path.resolve()) not in roots, "nor a folder holding the candidate's private directory"
