"""A supervised worker process: candidates run there, so a crash, hang, abort or corrupted CUDA context
ends the worker, never the harness.

The worker serves requests from a handler object created in the child (``"module:Class"``, built
with the device index). Each request has a time limit; past it the worker is killed and replaced.
The parent never trusts the child's judgement: handlers return raw data, and the verdicts are made
in the parent. Nor does it trust the child's bytes: the candidate's code runs in the child and can
write to the pipe, so replies are unpickled with an allow-list of the types a reply holds (tensors,
their storages, dtypes); anything else (a pickle that would call ``os.system`` in the harness) ends
the child as ``ForgedReply``.

A worker that hosts candidate code is *isolated* (``isolate=True``; see ``confinement.py``): before its
handler is built it starts its own session, joins its own cgroup where the machine has a writable
cgroup2 mount, closes what it inherited, works in a private directory with an allow-listed
environment, and sees the harness's run directory and caches read-only. The mode achieved is
``Worker.isolation``. The harness's host process is a plain worker: it writes results and caches.
"""

from __future__ import annotations

import atexit
import importlib
import io
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.isolation.confinement import (
    Cgroup,
    candidate_environment,
    compile_cache_environment,
    close_inherited_descriptors,
    import_roots,
    protect_paths,
    protected_paths_from,
)
from ptxbench.evaluate.isolation.processes import (
    become_subreaper,
    descendants,
    kill_descendants,
    kill_until_none,
    mapped_libraries,
    process_state,
    reap,
    session_members,
    signal_all,
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
# The longest message a child may send: replies carry tensors by handle, so they are small; a longer
# announced length is a forged frame.
MAX_MESSAGE_BYTES = 64 << 20
# What a candidate's worker imports on its way (the task model, the loader, input drawing) is imported there
# too, with the handler's own module (the candidate side's library and launch gate come with it): a fresh
# worker then starts on its first request at once.
PRELOADED = ["torch", "torch.multiprocessing", "torch.profiler", "ptxbench.tasks.model", "ptxbench.tasks.reference"]


def stop_forkserver() -> None:
    """Stop this process's forkserver and whatever it forked, and collect them: at the harness's exit and
    when a host process ends, so neither the server (which lives while any holder of its "alive" pipe
    does) nor a worker is left running with parent 1. The next worker starts a fresh server."""
    _drop_forkserver(end_workers=True)


def _drop_forkserver(end_workers: bool) -> None:
    """Kill and collect the forkserver and forget it, so the next start launches a fresh one; with
    ``end_workers``, the processes it forked too (otherwise they are left to the Workers that own them)."""
    from multiprocessing import forkserver, util

    server = forkserver._forkserver  # noqa: SLF001 - multiprocessing has no public way to stop it
    with server._lock:  # noqa: SLF001
        pid = server._forkserver_pid  # noqa: SLF001
        if pid is None:
            return
        if end_workers:
            reap(kill_descendants(pid))
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with suppress(OSError, TypeError):
            os.close(server._forkserver_alive_fd)  # noqa: SLF001
        reap([pid], timeout_s=5.0)
        address = server._forkserver_address  # noqa: SLF001
        if address and not util.is_abstract_socket_namespace(address):
            with suppress(OSError):
                os.unlink(address)
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None  # noqa: SLF001


def _start_process(process: multiprocessing.process.BaseProcess) -> None:
    """``process.start()``, through a fresh forkserver when the current one refuses the connection. A
    candidate that kills the server (its parent) leaves it exiting for a while: its socket is closed
    but it is not yet a zombie, so multiprocessing's check (``waitpid``) takes it for alive and the
    next start failed with ConnectionRefusedError (seen on a loaded CI machine). The workers it forked
    live on and stay their owners' to end."""
    try:
        process.start()
    except (ConnectionRefusedError, FileNotFoundError):
        _drop_forkserver(end_workers=False)
        process.start()


_stop_at_exit_registered = False


def _context(handler_path: str) -> Any:
    global _stop_at_exit_registered
    if not _stop_at_exit_registered:
        atexit.register(stop_forkserver)  # runs before multiprocessing's own exit handler (registered earlier)
        _stop_at_exit_registered = True
    context = multiprocessing.get_context(START_METHOD)
    context.set_forkserver_preload(PRELOADED + [handler_path.partition(":")[0]])  # used when the server starts
    return context


@dataclass
class _Sandbox:
    """What the harness prepared for an isolated worker, and removes when it ends."""

    directory: str  # the private working directory (HOME)
    cgroup: Cgroup | None
    cgroup_note: str  # why there is no cgroup, for the mode string


class _Child(NamedTuple):
    process: multiprocessing.process.BaseProcess
    connection: Connection
    sandbox: _Sandbox | None  # None: a plain worker (the host), sharing the harness's session


def _forget_inherited_channels() -> None:
    """The forkserver's and resource tracker's descriptors were closed: let multiprocessing start a
    tracker of its own if it needs one, rather than write to (or close) a number reused since."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker._resource_tracker._fd = None  # noqa: SLF001 - the only handle on the inherited pipe
    resource_tracker._resource_tracker._pid = None  # noqa: SLF001
    forkserver._forkserver._forkserver_alive_fd = None  # noqa: SLF001


def _isolate(connection: Connection, directory: str, cgroup_path: str | None, cgroup_note: str) -> str:
    """Isolate this worker before any candidate code runs (see the module docstring); returns the mode
    achieved. The harness's environment is still in ``os.environ``: the paths to protect are read from it."""
    from ptxbench.integrity import key_path
    from ptxbench.paths import cache_root

    protected = [*protected_paths_from(os.environ), str(cache_root()),
                 *import_roots(sys.path, keep_writable=[directory])]  # before chdir: '' is the harness's cwd
    secrets = [str(key_path())]  # the key that signs the caches: a candidate that read it could forge them
    os.setsid()  # kill(0, ...) and the terminal's signals reach this session only
    if cgroup_path is not None:
        try:
            Cgroup(cgroup_path).join()
            cgroup_note = f"cgroup {cgroup_path}"
        except OSError as exc:
            cgroup_note = f"no cgroup: cannot join {cgroup_path}: {exc.strerror}"
    close_inherited_descriptors(keep=[connection.fileno()])
    _forget_inherited_channels()
    os.chdir(directory)
    scrubbed = candidate_environment(os.environ, home=directory)
    os.environ.clear()
    os.environ.update(scrubbed)
    mounts = protect_paths(protected, hidden=secrets)  # while single-threaded: a user namespace needs it
    return f"{mounts}; {cgroup_note}; own session; allow-listed environment; private directory {directory}"


def _serve(connection: Connection, handler_path: str, device: int | None, environment: dict[str, str],
           sandbox: tuple[str, str | None, str] | None = None) -> None:
    # the server's environment is the one it started with: take the harness's as it is now (the GPU's
    # lock, the device pinning a host has set)
    os.environ.clear()
    os.environ.update(environment)
    if sandbox is None:  # the harness's own process (vendor baselines): compiled code from its own cache only
        from ptxbench.paths import cache_root

        os.environ.update(compile_cache_environment(cache_root()))
    isolation = _isolate(connection, *sandbox) if sandbox is not None else None
    become_subreaper()  # what the candidate starts and abandons stays this process's to end
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    module, _, name = handler_path.partition(":")
    handler = getattr(importlib.import_module(module), name)()
    connection.send(("ready", (os.getpid(), isolation)))
    try:
        _serve_requests(connection, handler)
    finally:
        stop_forkserver()  # a host's own server: multiprocessing's children skip the exit handlers


def _serve_requests(connection: Connection, handler: Any) -> None:
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):  # the harness hung up (or was killed): nothing left to serve, nothing to say
            return
        if request is None:
            return
        method, args = request
        try:
            reply: tuple[str, Any] = ("ok", getattr(handler, method)(*args))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, the worker lives on
            reply = ("error", (type(exc).__name__, str(exc), traceback.format_exc()))
        try:
            connection.send(reply)
        except OSError:  # the harness is gone mid-request (a candidate killed it): end without a traceback
            return


def _alive(process: multiprocessing.process.BaseProcess | None) -> bool:
    """Read from /proc, not from multiprocessing, which learns of a worker's end from the forkserver: a
    candidate that kills the server would make its living worker look dead."""
    return process is not None and process.pid is not None and process_state(process.pid) not in (None, "Z")


def _kill_session(session: int, rounds: int = 20) -> list[int]:
    """SIGKILL every process of an isolated worker's session until none is left; returns those killed."""
    return kill_until_none(lambda: session_members(session), rounds)


def _kill_cgroup(cgroup: Cgroup | None) -> list[int]:
    if cgroup is None:
        return []
    members = cgroup.pids()
    cgroup.kill()
    return members


def _kill_now(child: _Child) -> None:
    """SIGKILL the worker and what the candidate started, from any thread (no waiting, no cleanup:
    ``_end`` does that)."""
    pid = child.process.pid
    if pid is None:
        return
    if child.sandbox is not None:
        if child.sandbox.cgroup is not None:
            child.sandbox.cgroup.kill(timeout_s=0)
        signal_all(session_members(pid), signal.SIGKILL)
    if _alive(child.process):
        signal_all([pid, *descendants(pid)], signal.SIGKILL)


def _end(child: _Child | None) -> None:
    """Kill the worker and everything the candidate started from it: the worker is stopped first so it
    starts nothing new (an isolated one's whole cgroup is frozen), then its cgroup, its session and its
    descendants are killed until none is left, then the worker; then its cgroup and private directory
    are removed."""
    if child is None:
        return
    process, connection, sandbox = child
    cgroup = sandbox.cgroup if sandbox is not None else None
    if process.pid is not None:
        killed = [process.pid]
        if _alive(process):
            if cgroup is not None:
                cgroup.freeze(timeout_s=0.5)
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGSTOP)
        killed += _kill_cgroup(cgroup)
        if sandbox is not None:  # also once the worker is gone: what it left in its session is not
            killed += _kill_session(process.pid)
        if _alive(process):
            killed += kill_descendants(process.pid)
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=10)
        reap(killed)  # those re-parented to this process (its forkserver was killed) are its to collect
    if sandbox is not None:
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(sandbox.directory, ignore_errors=True)
    connection.close()


def _check_message(message: Any, ready: bool) -> None:
    """A message is ("ready", (pid, isolation mode or None)) first and only first, then ("ok", payload) or
    ("error", three strings)."""
    if not (isinstance(message, tuple) and len(message) == 2 and message[0] in ("ready", "ok", "error")):
        raise ForgedReply(f"a {type(message).__name__} instead of a (kind, payload) pair")
    kind, payload = message
    if (kind == "ready") != ready:
        raise ForgedReply(f"{kind!r} where {'the ready message' if ready else 'a reply'} was due")
    if kind == "error" and not (isinstance(payload, tuple) and len(payload) == 3
                                and all(isinstance(p, str) for p in payload)):
        raise ForgedReply("an error report that is not three strings")
    if kind == "ready" and not (isinstance(payload, tuple) and len(payload) == 2 and type(payload[0]) is int
                                and (payload[1] is None or isinstance(payload[1], str) and len(payload[1]) < 4096)):
        raise ForgedReply("a ready message that is not (pid, isolation mode)")


class Worker:
    """One child process serving one handler; restarted after any failure that may have damaged it."""

    def __init__(self, handler: str, device: int | None = None, start_timeout_s: float = 120.0,
                 spares: int = 0, isolate: bool = False) -> None:
        """``spares``: processes kept starting in advance; ``renew`` swaps in the oldest, so a fresh process
        does not cost its start-up (creating a CUDA context, starting the kernel tracer, warming up) on
        the critical path. An evaluation renews twice (trials, timing) in less time than
        one start-up, hence more than one. ``isolate``: the process will run candidate code (see the
        module docstring)."""
        self.handler, self.device, self.start_timeout_s = handler, device, start_timeout_s
        self.spares, self.isolate = spares, isolate
        self._child: _Child | None = None
        self._spares: deque[_Child] = deque()
        self._ready = False  # the current process has built its handler
        self._sent_at: float | None = None  # when the request in flight was sent
        self.isolation: str | None = None  # the mode the current process achieved, once it is ready

    @property
    def _process(self) -> multiprocessing.process.BaseProcess | None:
        return self._child.process if self._child is not None else None

    @property
    def _connection(self) -> Connection | None:
        return self._child.connection if self._child is not None else None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _sandbox(self) -> _Sandbox | None:
        if not self.isolate:
            return None
        cgroup = Cgroup.create()
        directory = tempfile.mkdtemp(prefix="ptxbench-candidate-")
        if isinstance(cgroup, str):
            return _Sandbox(directory, None, f"no cgroup ({cgroup}): processes are ended by session and subreaper")
        return _Sandbox(directory, cgroup, "")

    def _spawn(self) -> _Child:
        context = _context(self.handler)
        parent, child = context.Pipe()
        sandbox = self._sandbox()
        arguments = None if sandbox is None else (
            sandbox.directory, sandbox.cgroup.path if sandbox.cgroup is not None else None, sandbox.cgroup_note)
        process = context.Process(target=_serve, args=(child, self.handler, self.device, dict(os.environ), arguments),
                                  daemon=True)
        try:
            _start_process(process)
        except BaseException:
            _end(_Child(process, parent, sandbox))
            raise
        finally:
            child.close()
        return _Child(process, parent, sandbox)

    def start(self) -> None:
        _end(self._child)  # a process that only looks dead is ended all the same
        self._child = self._spawn()
        self._ready = False

    def wait_ready(self) -> None:
        """Block until the process has built its handler (opening the GPU, warming up), so
        that start-up is never charged to a request's time limit. A process that served requests and has
        died since (killed from outside, or by its own code between requests) is reported as WorkerDied,
        not silently replaced: its caller's state (the loaded candidate) went with it."""
        if self._child is None:
            self.start()
        elif not _alive(self._process):
            if self._ready:
                raise self._died()
            self.start()
        if self._ready:
            return
        try:
            _, (_, self.isolation) = self._receive(self.start_timeout_s, ready=True)
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
            message = load_reply(self._read_message(max(1.0, timeout_s - (time.monotonic() - (since or time.monotonic())))))
            _check_message(message, ready)
        except ForgedReply:
            self.kill()
            raise
        return message

    def _read_message(self, timeout_s: float) -> bytes:
        """One whole message. ``recv_bytes`` blocks until all the bytes its header announces have come: a
        child that wrote a partial message, or a garbage header, would hold the harness forever. Past
        ``timeout_s`` a timer kills the child (which closes its end of the pipe); that is WorkerTimeout."""
        assert self._child is not None and self._connection is not None
        expired = threading.Event()
        child = self._child

        def expire() -> None:
            expired.set()
            _kill_now(child)

        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        timer.start()
        try:
            return self._connection.recv_bytes(MAX_MESSAGE_BYTES)
        except (EOFError, OSError) as exc:
            if expired.is_set():
                self.kill()
                raise WorkerTimeout(timeout_s) from None
            if isinstance(exc, OSError) and not isinstance(exc, (BrokenPipeError, ConnectionResetError)):
                raise ForgedReply(f"a message framed wrongly ({exc})") from None
            raise
        finally:
            timer.cancel()

    def _died(self) -> WorkerDied:
        """The pipe broke or the process is gone: end what is left of it and say how it ended."""
        assert self._process is not None
        self._process.join(timeout=10)
        exitcode = self._process.exitcode
        self.kill()
        return WorkerDied(exitcode)

    def prestart(self) -> None:
        """Begin starting the process (if there is none) and the spares now, without waiting for them:
        called as soon as the GPU is known, so the first candidate finds its fresh process started."""
        if not _alive(self._process):
            self.start()
        self._top_up_spares()

    def _top_up_spares(self) -> None:
        while len(self._spares) < self.spares:
            self._spares.append(self._spawn())

    def renew(self) -> None:
        """End the current process and continue in a new one that nothing has run in yet."""
        self.kill()
        while self._spares and not _alive(self._spares[0].process):
            _end(self._spares.popleft())
        if self._spares:
            self._child = self._spares.popleft()
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

    def _candidate_processes(self) -> list[int]:
        """The worker and every process of its session (isolated) or among its descendants."""
        pid = self.pid
        if pid is None or not _alive(self._process):
            return []
        found = [pid, *descendants(pid)]
        if self._child is not None and self._child.sandbox is not None:
            found += [member for member in session_members(pid) if member not in found]
        return found

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Everything of the candidate stopped (SIGSTOP) for the duration, so it can start nothing, on the
        CPU or the GPU, while another process measures. With a cgroup the group is frozen while the stop is
        sent to every process in it, so none forks or escapes meanwhile; without, the worker, its session
        and its descendants are stopped. Resumed afterwards even on error; dead processes are left."""
        cgroup = self._child.sandbox.cgroup if self._child is not None and self._child.sandbox is not None else None
        if cgroup is not None and _alive(self._process) and cgroup.freeze():
            stopped = cgroup.pids()
            signal_all(stopped, signal.SIGSTOP)  # taken on thawing, before any of them runs again
            cgroup.thaw()
        else:
            stopped = self._candidate_processes()
            signal_all(stopped, signal.SIGSTOP)
        for pid in stopped:
            wait_stopped(pid)
        try:
            yield
        finally:
            signal_all(stopped, signal.SIGCONT)

    def alive(self) -> bool:
        """Whether a process is running for this worker now (one that was killed or died is not)."""
        return self._child is not None and _alive(self._process)

    def kill(self) -> None:
        _end(self._child)
        self._child = None
        self.isolation = None

    def close(self) -> None:
        while self._spares:
            _end(self._spares.popleft())
        if self._connection is not None and self._process is not None and _alive(self._process):
            # what it started goes first: once the worker has exited, its orphans would be init's to keep
            reap(kill_descendants(self._process.pid))
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
