"""Reading and ending a process's descendants from /proc, the way the worker ends a candidate's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from ptxbench.evaluate.isolation.processes import descendants, kill_descendants, process_state, wait_stopped

# A child that starts a grandchild (which sleeps) and then sleeps itself.
_TREE = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"


def _wait_for(condition, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_descendants_are_found_and_killed_to_the_last() -> None:
    child = subprocess.Popen([sys.executable, "-c", _TREE])
    try:
        assert _wait_for(lambda: len(descendants(child.pid)) == 1), "the grandchild appears"
        assert len(descendants(os.getpid())) >= 2, "grandchildren count as descendants"
        grandchild = descendants(child.pid)[0]
        kill_descendants(child.pid)
        assert _wait_for(lambda: process_state(grandchild) in (None, "Z"))
        assert descendants(child.pid) == [], "a killed (zombie) descendant is not counted"
        assert child.poll() is None, "the process itself is left to its owner"
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) is None


def test_a_stopped_process_reads_as_stopped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        wait_stopped(child.pid)
        assert process_state(child.pid) == "T"
        os.kill(child.pid, signal.SIGCONT)
        assert _wait_for(lambda: process_state(child.pid) == "S")
    finally:
        child.kill()
        child.wait()


# A small evaluation through the local pool (one host process, its candidate's worker with spares, the
# baseline process, their forkservers), whose candidate abandons a daemon in a session of its own.
_SMALL_EVALUATION = """
import sys
from pathlib import Path
from ptxbench.arch.registry import Arch
from ptxbench.evaluate.fleet.run import evaluate_candidates
from tests.evaluate.scaleout import FAKE, OPTIONS, candidates
results = evaluate_candidates(candidates(1), Arch.SM_90A, Path(sys.argv[1]), OPTIONS, gpus=[0],
                              handler=f"{FAKE}:FakeRunner", reference_device="cpu")
print("evaluated:", [r.status for r in results])
"""


def _marked(marker: str) -> list[int]:
    """Processes whose initial environment holds ``marker`` (inherited by every fork and exec of the run)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            try:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    if marker.encode() in environ.read():
                        found.append(int(entry))
            except OSError:
                pass
    return [pid for pid in found if process_state(pid) not in (None, "Z")]


def test_an_evaluation_leaves_no_process_behind(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """After the run ends: no forkserver, worker, host or candidate daemon of it is left running."""
    import uuid

    marker = f"ptxbench-tree-{uuid.uuid4().hex}"
    environment = {**os.environ, "PTXBENCH_FAKE_STATE": str(tmp_path), "PTXBENCH_FAKE_TREE": marker,
                   "PTXBENCH_FAKE_BEHAVIOUR": "daemon", "PTXBENCH_FAKE_DAEMON": str(tmp_path / "daemon.pid")}
    environment.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", _SMALL_EVALUATION, str(tmp_path / "run")], env=environment,
                          capture_output=True, text=True, timeout=500, start_new_session=True)
    left: list[int] = []
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "evaluated:" in done.stdout
        assert (tmp_path / "daemon.pid").exists(), "the candidate did abandon a daemon"
        _wait_for(lambda: not _marked(marker), seconds=5)
        left = _marked(marker)
        described = {pid: open(f"/proc/{pid}/cmdline").read().replace("\0", " ")[:120] for pid in left}
        assert not left, f"processes outlived the run: {described}"
    finally:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_session_members_include_other_process_groups_and_orphans() -> None:
    from ptxbench.evaluate.isolation.processes import session_members

    # the session leader starts a process in a group of its own, which outlives its parent's exit
    tree = ("import os, subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setpgid(0, 0); time.sleep(60)']); "
            "time.sleep(60)")
    leader = subprocess.Popen([sys.executable, "-c", tree], start_new_session=True)
    try:
        assert _wait_for(lambda: len(session_members(leader.pid)) == 2)
        other = next(pid for pid in session_members(leader.pid) if pid != leader.pid)
        assert _wait_for(lambda: os.getpgid(other) == other), "in a process group of its own"
        assert os.getpid() not in session_members(leader.pid)
    finally:
        for pid in session_members(leader.pid):
            os.kill(pid, signal.SIGKILL)
        leader.wait()
    assert _wait_for(lambda: session_members(leader.pid) == [])
