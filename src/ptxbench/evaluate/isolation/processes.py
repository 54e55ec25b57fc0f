"""What a process is doing and what it left behind, read from /proc: the standard library alone, so the
ncu stage's profiled program (which imports nothing of ptxbench) can use it too.

A candidate's code may start processes of its own and abandon them (a daemon that forks twice), to run
on after its worker is gone. A process that hosts candidate code therefore becomes a *subreaper*: what
its children abandon is re-parented to it instead of to init, so everything the candidate started stays
among its descendants, and whoever ends it ends those first. (Code that undoes the subreaper flag, or
kills its own host first, can still escape: that needs a PID namespace, which needs privileges.)
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable
from contextlib import suppress

PR_SET_CHILD_SUBREAPER = 36  # prctl option, linux/prctl.h


def become_subreaper() -> None:
    """Adopt what this process's descendants abandon (Linux; a no-op elsewhere)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first, then the parent's pid); empty
    once the process is gone. The name is skipped by its closing parenthesis: it may hold spaces."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()
    except OSError:
        return []


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's process counts: it cannot be signalled, yet it lives)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_state(pid: int) -> str | None:
    """The one-letter state of process ``pid`` ('T': stopped, 'Z': zombie), None once it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def wait_stopped(pid: int, timeout_s: float = 1.0) -> None:
    """SIGSTOP is delivered asynchronously: wait until the process is really stopped (or gone)."""
    deadline = time.monotonic() + timeout_s
    while process_state(pid) not in ("T", "t", None) and time.monotonic() < deadline:
        time.sleep(0.00002)  # it usually stops within tens of microseconds


def descendants(pid: int) -> list[int]:
    """Living (not zombie) descendants of process ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in children.get(parent, [])]
        found += frontier
    return found


def session_members(session: int) -> list[int]:
    """Living (not zombie) processes of session ``session`` (a worker that called setsid: its pid), whatever
    their parent: a daemon that double-forked stays in its session unless it starts one of its own."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)  # state, parent, process group, session, ...
            if len(fields) > 3 and fields[0] != "Z" and fields[3] == str(session):
                members.append(int(entry))
    return members


def signal_all(pids: list[int], signal_number: int) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal_number)


def kill_until_none(find: Callable[[], list[int]], rounds: int = 20) -> list[int]:
    """SIGKILL the processes ``find`` names until it names none (a forking one may add more meanwhile);
    returns those it killed, for ``reap``."""
    killed: list[int] = []
    for _ in range(rounds):
        left = find()
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        killed += left
        time.sleep(0.01)
    return killed


def kill_descendants(pid: int, rounds: int = 20) -> list[int]:
    """SIGKILL every descendant of ``pid`` until none is left; returns those it killed."""
    return kill_until_none(lambda: descendants(pid), rounds)


def reap(pids: list[int], timeout_s: float = 1.0) -> None:
    """Collect the exit status of those of ``pids`` that are this process's children: killed processes
    whose parent died are re-parented to the nearest subreaper (a host process) and would stay zombies
    there. Processes that are not this one's children are left to theirs."""
    waiting = set(pids)
    deadline = time.monotonic() + timeout_s
    while waiting:
        for pid in list(waiting):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    waiting.discard(pid)
            except ChildProcessError:
                waiting.discard(pid)
        if not waiting or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def mapped_libraries(pid: int | str) -> set[str]:
    """Shared objects mapped into process ``pid`` (or "self") now; empty if they cannot be read."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return {line.split()[-1] for line in maps if line.rstrip().endswith(".so") or ".so." in line}
    except OSError:
        return set()
