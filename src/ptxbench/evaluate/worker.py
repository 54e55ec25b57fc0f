"""A supervised worker process: candidates run there, so a crash, hang, abort or corrupted CUDA context
ends the worker, never the harness.

The worker serves requests from a handler object created in the child (``"module:Class"``, built
with the device index). Each request has a time limit; past it the worker is killed and replaced.
The parent never trusts the child's judgement: handlers return raw data, and the verdicts are made
in the parent. Nor does it trust the child's bytes: the candidate's code runs in the child and can
write to the pipe, so replies are unpickled with an allow-list of the types a reply holds (tensors,
their storages, dtypes); anything else (a pickle that would call ``os.system`` in the harness) ends
the child as ``ForgedReply``.
"""

from __future__ import annotations

import importlib
import io
import multiprocessing
import os
import pickle
import signal
import time
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from typing import Any

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.processes import (
    become_subreaper,
    kill_descendants,
    mapped_libraries,
    process_state,
    wait_stopped,
)


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


class ForgedReply(WorkerDied):
    """The child sent a reply the harness never produces: its code tampered with the channel."""

    def __init__(self, detail: str) -> None:
        self.exitcode = None
        self.detail = detail
        PtxbenchError.__init__(self, f"the candidate's process sent a forged reply ({detail}); it was refused and killed")


# What a reply may name when unpickled: tensors as torch.multiprocessing shares them (CUDA IPC
# handles, shared-memory storages) and the types their metadata needs. Dtypes are checked by type.
_REPLY_GLOBALS = {
    "torch.multiprocessing.reductions": {"rebuild_tensor", "rebuild_cuda_tensor", "rebuild_typed_storage",
                                         "rebuild_storage_fd", "rebuild_storage_filename", "rebuild_storage_empty"},
    "torch": {"Tensor", "Size"},
    "torch.storage": {"UntypedStorage", "TypedStorage"},
    "multiprocessing.resource_sharer": {"DupFd"},
}


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name in _REPLY_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        if module == "torch":
            import torch

            value = getattr(torch, name, None)
            if isinstance(value, torch.dtype):
                return value
        raise pickle.UnpicklingError(f"a reply may not name {module}.{name}")


def load_reply(data: bytes) -> Any:
    """Unpickle bytes from a child, allowing only what a harness reply contains."""
    try:
        return _ReplyUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any malformed or forged payload is the child's doing
        raise ForgedReply(f"{type(exc).__name__}: {exc}") from None


class RequestFailed(PtxbenchError):
    """The handler raised: the message and traceback come from the child."""

    def __init__(self, kind: str, message: str, trace: str) -> None:
        self.kind, self.trace = kind, trace
        super().__init__(f"{kind}: {message}")


# Workers are forked from a server process that has imported torch once (multiprocessing's forkserver):
# a spawned worker spent ~6 s of its ~8 s start-up importing torch, and an evaluation needs two fresh
# workers. The server never touches CUDA, so each fork opens the GPU afresh; it is a clean process
# started by the harness (not a fork of it), and nothing a worker does reaches the server or later forks.
START_METHOD = "forkserver"
# What a candidate's worker imports on its way (the task model, the loader, input drawing, the launch
# gate) is imported there too: a fresh worker then starts on its first request at once.
PRELOADED = ["torch", "torch.multiprocessing", "torch.profiler", "ptxbench.tasks.model", "ptxbench.tasks.reference",
             "ptxbench.evaluate.library", "ptxbench.evaluate.launch_gate"]


def _context(handler_path: str) -> Any:
    context = multiprocessing.get_context(START_METHOD)
    context.set_forkserver_preload(PRELOADED + [handler_path.partition(":")[0]])  # used when the server starts
    return context


def _serve(connection: Connection, handler_path: str, device: int | None, environment: dict[str, str]) -> None:
    # the server's environment is the one it started with: take the harness's as it is now (the GPU's
    # lock, the device pinning a host has set)
    os.environ.clear()
    os.environ.update(environment)
    become_subreaper()  # what the candidate starts and abandons stays this process's to end
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
    """Kill the worker and everything the candidate started from it: the worker is stopped first so it
    starts nothing new, then its descendants are killed until none is left, then the worker. Whether it
    lives is read from /proc, not from multiprocessing, which learns of its end from the forkserver: a
    candidate that kills the server would otherwise look dead and be left running."""
    if process is not None and process.pid is not None:
        if process_state(process.pid) not in (None, "Z"):
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGSTOP)
            kill_descendants(process.pid)
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=10)
    if connection is not None:
        connection.close()


def _check_message(message: Any, ready: bool) -> None:
    """A message is ("ready", pid) first and only first, then ("ok", payload) or ("error", three strings)."""
    if not (isinstance(message, tuple) and len(message) == 2 and message[0] in ("ready", "ok", "error")):
        raise ForgedReply(f"a {type(message).__name__} instead of a (kind, payload) pair")
    kind, payload = message
    if (kind == "ready") != ready:
        raise ForgedReply(f"{kind!r} where {'the ready message' if ready else 'a reply'} was due")
    if kind == "error" and not (isinstance(payload, tuple) and len(payload) == 3
                                and all(isinstance(p, str) for p in payload)):
        raise ForgedReply("an error report that is not three strings")


class Worker:
    """One child process serving one handler; restarted after any failure that may have damaged it."""

    def __init__(self, handler: str, device: int | None = None, start_timeout_s: float = 120.0,
                 spares: int = 0) -> None:
        """``spares``: processes kept starting in advance; ``renew`` swaps in the oldest, so a fresh process
        does not cost its start-up (creating a CUDA context, starting the kernel tracer, warming up) on
        the critical path. An evaluation renews twice (trials, timing) in less time than
        one start-up, hence more than one."""
        self.handler, self.device, self.start_timeout_s = handler, device, start_timeout_s
        self.spares = spares
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None
        self._spares: deque[tuple[multiprocessing.process.BaseProcess, Connection]] = deque()
        self._ready = False  # the current process has built its handler
        self._sent_at: float | None = None  # when the request in flight was sent

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _spawn(self) -> tuple[multiprocessing.process.BaseProcess, Connection]:
        context = _context(self.handler)
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, self.handler, self.device, dict(os.environ)),
                                  daemon=True)
        process.start()
        child.close()
        return process, parent

    def start(self) -> None:
        _end(self._process, self._connection)  # a process that only looks dead is ended all the same
        self._process, self._connection = self._spawn()
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the process has built its handler (opening the GPU, warming up), so
        that start-up is never charged to a request's time limit."""
        if self._process is None or not self._process.is_alive():
            self.start()
        if self._ready:
            return
        try:
            self._receive(self.start_timeout_s, ready=True)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise self._died() from None
        self._ready = True

    def _receive(self, timeout_s: float, since: float | None = None, ready: bool = False) -> tuple[str, Any]:
        """The process's next message; ``timeout_s`` after ``since`` (a monotonic time; default now) it is
        killed (a hang, as the caller sees it), and a message that is not a harness reply kills it too
        (``ForgedReply``). ``ready``: the message must be the process's first, its "ready"."""
        assert self._connection is not None
        waited = time.monotonic() - since if since is not None else 0.0
        if not self._connection.poll(max(0.0, timeout_s - waited)):
            self.kill()
            raise WorkerTimeout(timeout_s)
        try:
            message = load_reply(self._connection.recv_bytes())
            _check_message(message, ready)
        except ForgedReply:
            self.kill()
            raise
        return message

    def _died(self) -> WorkerDied:
        """The pipe broke: the process exited. Reap it and say how it ended."""
        assert self._process is not None
        self._process.join(timeout=10)
        exitcode = self._process.exitcode
        self.kill()
        return WorkerDied(exitcode)

    def prestart(self) -> None:
        """Begin starting the process (if there is none) and the spares now, without waiting for them:
        called as soon as the GPU is known, so the first candidate finds its fresh process started."""
        if self._process is None or not self._process.is_alive():
            self.start()
        self._top_up_spares()

    def _top_up_spares(self) -> None:
        while len(self._spares) < self.spares:
            self._spares.append(self._spawn())

    def renew(self) -> None:
        """End the current process and continue in a new one that nothing has run in yet."""
        self.kill()
        while self._spares and not self._spares[0][0].is_alive():
            _end(*self._spares.popleft())
        if self._spares:
            self._process, self._connection = self._spares.popleft()
            self._ready = False  # its "ready" message waits in the pipe
        else:
            self.start()
        self._top_up_spares()

    def call(self, method: str, *args: Any, timeout_s: float) -> Any:
        """Run ``handler.method(*args)`` in the worker; raises WorkerTimeout, WorkerDied or RequestFailed."""
        self.send(method, *args)
        return self.receive(timeout_s)

    def send(self, method: str, *args: Any) -> None:
        """Start ``handler.method(*args)``; ``receive`` gets its answer, so the caller can work meanwhile."""
        self.wait_ready()
        assert self._connection is not None
        try:
            self._connection.send((method, args))
            self._sent_at = time.monotonic()
        except (BrokenPipeError, ConnectionResetError):
            raise self._died() from None

    def receive(self, timeout_s: float) -> Any:
        """The answer to the request sent last, at most ``timeout_s`` after it was sent; raises
        WorkerTimeout, WorkerDied or RequestFailed."""
        try:
            kind, payload = self._receive(timeout_s, since=self._sent_at)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise self._died() from None
        if kind == "error":
            raise RequestFailed(*payload)
        return payload

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The process stopped (SIGSTOP) for the duration: it can start nothing, on the CPU or the GPU,
        while another process measures. Resumed afterwards even on error; a dead process is left as is."""
        pid = self.pid
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                wait_stopped(pid)
        try:
            yield
        finally:
            if pid is not None:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def kill(self) -> None:
        _end(self._process, self._connection)
        self._process, self._connection = None, None

    def close(self) -> None:
        while self._spares:
            _end(*self._spares.popleft())
        if self._connection is not None and self._process is not None and self._process.is_alive():
            try:
                self._connection.send(None)
                self._process.join(timeout=10)
            except (BrokenPipeError, OSError):
                pass
        self.kill()

    def mapped_libraries(self) -> set[str]:
        """Shared objects mapped into the worker now (read by the parent from /proc, not asked of the child)."""
        return set() if self.pid is None else mapped_libraries(self.pid)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
