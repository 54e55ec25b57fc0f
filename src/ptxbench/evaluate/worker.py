"""A supervised worker process: candidates run there, so a crash, hang, abort or corrupted CUDA context
ends the worker, never the harness.

The worker serves requests from a handler object created in the child (``"module:Class"``, built
with the device index). Each request has a time limit; past it the worker is killed and replaced.
The parent never trusts the child's judgement: handlers return raw data, and the verdicts are made
in the parent.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ptxbench.errors import PtxbenchError


class WorkerDied(PtxbenchError):
    """The worker exited while serving a request (segfault, abort, exit, out of memory)."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        described = {None: "without an exit code", -6: "by SIGABRT (abort)", -9: "by SIGKILL", -11: "by SIGSEGV"}
        super().__init__(f"the candidate's process died {described.get(exitcode, f'with exit code {exitcode}')}")


class WorkerTimeout(PtxbenchError):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"no answer within {seconds:g} s (hang or endless loop); the process was killed")


class RequestFailed(PtxbenchError):
    """The handler raised: the message and traceback come from the child."""

    def __init__(self, kind: str, message: str, trace: str) -> None:
        self.kind, self.trace = kind, trace
        super().__init__(f"{kind}: {message}")


def _serve(connection: Connection, handler_path: str, device: int | None) -> None:
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    module, _, name = handler_path.partition(":")
    handler = getattr(importlib.import_module(module), name)()
    connection.send(("ready", os.getpid()))
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        method, args = request
        try:
            connection.send(("ok", getattr(handler, method)(*args)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, the worker lives on
            connection.send(("error", (type(exc).__name__, str(exc), traceback.format_exc())))


def _end(process: multiprocessing.process.BaseProcess | None, connection: Connection | None) -> None:
    if process is not None and process.is_alive():
        process.kill()
        process.join(timeout=10)
    if connection is not None:
        connection.close()


class Worker:
    """One child process serving one handler; restarted after any failure that may have damaged it."""

    def __init__(self, handler: str, device: int | None = None, start_timeout_s: float = 120.0,
                 keep_spare: bool = False) -> None:
        """``keep_spare``: ``renew`` swaps in a process started in advance, so a fresh process per candidate
        does not cost its start-up (importing torch, creating a CUDA context) on the critical path."""
        self.handler, self.device, self.start_timeout_s = handler, device, start_timeout_s
        self.keep_spare = keep_spare
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self._spare: tuple[multiprocessing.process.BaseProcess, Connection] | None = None
        self._ready = False  # the current process has built its handler

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _spawn(self) -> tuple[multiprocessing.process.BaseProcess, Connection]:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, self.handler, self.device), daemon=True)
        process.start()
        child.close()
        return process, parent

    def start(self) -> None:
        self._process, self._connection = self._spawn()
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the process has built its handler (importing torch, creating a CUDA context), so
        that start-up is never charged to a request's time limit."""
        if self._process is None or not self._process.is_alive():
            self.start()
        if self._ready:
            return
        try:
            self._receive(self.start_timeout_s)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise self._died() from None
        self._ready = True

    def _receive(self, timeout_s: float) -> Any:
        """The process's next message; past ``timeout_s`` it is killed (a hang, as the caller sees it)."""
        assert self._connection is not None
        if not self._connection.poll(timeout_s):
            self.kill()
            raise WorkerTimeout(timeout_s)
        return self._connection.recv()

    def _died(self) -> WorkerDied:
        """The pipe broke: the process exited. Reap it and say how it ended."""
        assert self._process is not None
        self._process.join(timeout=10)
        exitcode = self._process.exitcode
        self.kill()
        return WorkerDied(exitcode)

    def renew(self) -> None:
        """End the current process and continue in a new one that nothing has run in yet."""
        self.kill()
        spare, self._spare = self._spare, None
        if spare is not None and spare[0].is_alive():
            self._process, self._connection = spare
            self._ready = False  # its "ready" message waits in the pipe
        else:
            if spare is not None:
                _end(*spare)
            self.start()
        if self.keep_spare:
            self._spare = self._spawn()

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        """Run ``handler.method(*args)`` in the worker; raises WorkerTimeout, WorkerDied or RequestFailed."""
        self.wait_ready()
        assert self._connection is not None
        try:
            self._connection.send((method, args))
            kind, payload = self._receive(timeout_s)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise self._died() from None
        if kind == "error":
            raise RequestFailed(*payload)
        return payload

    def kill(self) -> None:
        _end(self._process, self._connection)
        self._process, self._connection = None, None

    def close(self) -> None:
        if self._spare is not None:
            _end(*self._spare)
            self._spare = None
        if self._connection is not None and self._process is not None and self._process.is_alive():
            try:
                self._connection.send(None)
                self._process.join(timeout=10)
            except (BrokenPipeError, OSError):
                pass
        self.kill()

    def mapped_libraries(self) -> set[str]:
        """Shared objects mapped into the worker now (read by the parent from /proc, not asked of the child)."""
        if self.pid is None:
            return set()
        try:
            with open(f"/proc/{self.pid}/maps") as maps:
                return {line.split()[-1] for line in maps if line.rstrip().endswith(".so") or ".so." in line}
        except OSError:
            return set()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
