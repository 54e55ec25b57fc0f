"""Reading and ending a process's descendants from /proc, the way the worker ends a candidate's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ptxbench.evaluate.processes import descendants, kill_descendants, process_state, wait_stopped

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
