"""A handler for the worker tests: misbehaves on request, like a candidate can."""

from __future__ import annotations

import os
import time


class Misbehaving:
    task = None  # what ``load`` set, as the candidate runner keeps its loaded task

    def echo(self, value):  # type: ignore[no-untyped-def]
        return value

    def load(self, inputs: object) -> None:
        from types import SimpleNamespace

        self.task = SimpleNamespace(inputs=inputs)

    def inputs(self) -> object:
        return self.task.inputs  # fails in a process that loaded nothing, as the candidate runner would

    def kill_parent(self) -> None:
        """Kill the forkserver, as ``kill(getppid(), SIGKILL)`` in a candidate's constructor does."""
        import signal

        os.kill(os.getppid(), signal.SIGKILL)

    def kill_own_group(self) -> None:
        """``kill(0, SIGTERM)``: every process of this one's process group."""
        import signal

        os.kill(0, signal.SIGTERM)
        time.sleep(5)

    def open_descriptors(self) -> list[int]:
        return sorted(int(name) for name in os.listdir("/proc/self/fd"))

    def connection_descriptor(self) -> int:
        import gc
        from multiprocessing.connection import Connection

        return next(o.fileno() for o in gc.get_objects() if isinstance(o, Connection) and not o.closed)

    def scribble(self, spared: list[int]) -> None:
        """Write garbage to every descriptor 0-255 but ``spared`` (an inherited pipe, a harness file)."""
        for descriptor in range(256):
            if descriptor not in spared:
                try:
                    os.write(descriptor, b"\x00\xffgarbage\n" * 64)
                except OSError:
                    pass

    def write_file(self, path: str) -> str:
        try:
            with open(path, "w") as out:
                out.write("overwritten by the candidate")
            return "written"
        except OSError as exc:
            return f"refused: {exc.strerror}"

    def read_file(self, path: str) -> str:
        with open(path) as source:
            return source.read()

    def working_directory(self) -> str:
        return os.getcwd()

    def leave_daemon(self, pid_file: str) -> None:
        """Clear this process's subreaper flag, then fork twice, the grandchild in a session of its own: a
        daemon neither the worker's descendants nor its session contain."""
        import ctypes

        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for standard in (0, 1, 2):  # as a daemon does; it keeps every other descriptor
                    os.dup2(null, standard)
                _publish_pid(pid_file)
                time.sleep(600)
            os._exit(0)
        os.wait()
        while not os.path.exists(pid_file):
            time.sleep(0.01)

    def leave_server_holder(self, pid_file: str) -> None:
        """A daemon (out of the session, subreaper flag cleared) that keeps, of everything it inherited,
        only the forkserver's "alive" pipe: the server then never learns that the harness has gone."""
        import ctypes
        from multiprocessing import forkserver

        kept = forkserver._forkserver._forkserver_alive_fd
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.closerange(0, kept)
                os.closerange(kept + 1, 1024)
                _publish_pid(pid_file)
                time.sleep(600)
            os._exit(0)
        os.wait()
        while not os.path.exists(pid_file):
            time.sleep(0.01)

    def start_counter(self, path: str) -> None:
        """A child in a process group of its own that appends to ``path`` every 10 ms."""
        if os.fork() == 0:
            os.setpgid(0, 0)
            while True:
                with open(path, "a") as out:
                    out.write(".")
                time.sleep(0.01)
        while not os.path.exists(path):
            time.sleep(0.01)

    def cpu_tensor(self):  # type: ignore[no-untyped-def]
        import torch

        return torch.arange(6, dtype=torch.float32)

    def pid(self) -> int:
        return os.getpid()

    def orphan_itself(self, pid_file: str) -> None:
        """Kill the process this one was forked from (the forkserver), so the harness's multiprocessing
        believes this one dead, and leave a child behind that would outlive it."""
        import signal

        os.kill(os.getppid(), signal.SIGKILL)
        if os.fork() == 0:
            with open(pid_file + ".part", "w") as out:
                out.write(str(os.getpid()))
            os.rename(pid_file + ".part", pid_file)
            time.sleep(600)
            os._exit(0)
        while not os.path.exists(pid_file):
            time.sleep(0.01)

    def environment(self, name: str) -> str | None:
        return os.environ.get(name)

    def torch_loaded(self) -> bool:
        import sys

        return "torch" in sys.modules

    def hang(self) -> None:
        while True:
            time.sleep(1)

    def crash(self) -> None:
        os.abort()

    def exit(self, code: int) -> None:
        os._exit(code)

    def fail(self) -> None:
        raise ValueError("the candidate returned garbage")


def _publish_pid(pid_file: str) -> None:
    with open(pid_file + ".part", "w") as out:
        out.write(str(os.getpid()))
    os.rename(pid_file + ".part", pid_file)


class SlowToStart(Misbehaving):
    """Builds slowly, as a handler that imports torch and creates a CUDA context does."""

    def __init__(self) -> None:
        time.sleep(1.5)


class _RunsCommand:
    """Unpickles as a call of ``os.system``: what a candidate could write into the pipe."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (self.command,))


class Forging(Misbehaving):
    """Replies the harness never produces, as a candidate's native code could write them."""

    def code_in_reply(self, marker: str) -> object:
        return _RunsCommand(f"touch {marker}")

    def tensor(self):  # type: ignore[no-untyped-def]
        import torch

        return {"outputs": {"C": torch.ones(3, dtype=torch.bfloat16)}, "size": torch.Size([3])}
