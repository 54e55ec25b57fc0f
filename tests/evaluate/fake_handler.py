"""A handler for the worker tests: misbehaves on request, like a candidate can."""

from __future__ import annotations

import os
import time


class Misbehaving:
    def echo(self, value):  # type: ignore[no-untyped-def]
        return value

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
