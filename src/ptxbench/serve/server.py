"""``ptxbench serve``: configuration, the access policy, and uvicorn around the app.

Access: on a loopback address the token is optional (anyone who can reach the port is on this machine);
on any other address the server refuses to start without one, since every request runs code on its GPUs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import Field

from ptxbench.errors import PtxbenchError
from ptxbench.records import Record
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.serve.evaluation import DEFAULT_LANES, HANDLER

TOKEN_VARIABLE = "PTXBENCH_SERVE_TOKEN"
DEFAULT_PORT = 8765
EXTRA_MISSING = "ptxbench serve needs the 'serve' extra (FastAPI, uvicorn, httpx): pip install 'ptxbench[serve]'"
MIN_TOKEN_CHARS = 16

log = logging.getLogger(__name__)


class ServeConfig(Record):
    """Everything ``ptxbench serve`` is started with. ``handler`` and ``reference_device`` are the GPU side's
    stand-ins for tests, as in ``evaluate_candidates``."""

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    gpus: list[int] | None = Field(default=None, description="Local GPU indices (None: every visible one)")
    lanes: int = Field(default=DEFAULT_LANES, ge=1, le=16)
    state: Path = Path("runs/serve")
    token: str | None = None
    max_queue: int = Field(default=1000, ge=1, description="Unfinished jobs beyond which a submission gets 429")
    max_request_bytes: int = Field(default=16 << 20, ge=1024)
    builders: int | None = Field(default=None, ge=1, description="Candidates built at once ahead of the GPUs")
    allow_task_definitions: bool = Field(default=False, description=(
        "Accept whole task definitions (their reference is Python the server runs unsandboxed)"))
    evidence: EvidenceProfile = Field(default=EvidenceProfile.SWEEP, description=(
        "The evidence profile of a job whose options name none: sweep, the profile of RL and repair loops"))
    handler: str = HANDLER
    reference_device: str = "cuda"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_access(host: str, token: str | None) -> None:
    """Refuse a configuration that would let anyone who reaches the port run code on the GPUs."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise PtxbenchError(f"the access token is shorter than {MIN_TOKEN_CHARS} characters: use a random one "
                            "(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if token is None and not is_loopback(host):
        raise PtxbenchError(f"--host {host} is reachable from other machines: give an access token (--token, or "
                            f"{TOKEN_VARIABLE}), or bind 127.0.0.1")


def serve(config: ServeConfig, announce: bool = True) -> int | None:
    """Run the server until SIGINT or SIGTERM stops it; every accepted job is kept in the state folder.

    On the signal the server stops accepting connections, gives open requests up to 5 s, then closes the engine:
    builds under way finish, a candidate on a GPU is interrupted, the run directories are audited, and every
    unfinished job stays queued for the next start (``stopped_line`` says how many, on stderr with ``announce``).
    A second signal while it closes is ignored (kill -9 stops it at once; the queue still holds every job).
    Returns the signal that stopped it (the command line exits with 128 + it: 130, 143), None if none did."""
    check_access(config.host, config.token)
    try:
        import uvicorn
    except ImportError:
        raise PtxbenchError(EXTRA_MISSING) from None
    from ptxbench.serve.app import create_app
    from ptxbench.serve.evaluation import Engine
    from ptxbench.serve.service import RUNS_FOLDER, JobService

    state = config.state.resolve()
    (state / RUNS_FOLDER).mkdir(parents=True, exist_ok=True)
    engine = Engine(config.gpus, config.lanes, builders=config.builders, handler=config.handler,
                    reference_device=config.reference_device, protect=[state])
    service = JobService(state, engine, max_queue=config.max_queue,
                         allow_task_definitions=config.allow_task_definitions, evidence=config.evidence)
    stop = _Stop()
    with stop.catching():  # from the start: a signal while the GPUs open is kept, and the server then never listens
        try:
            service.start()
            if stop.signal is None:
                app = create_app(service, token=config.token, max_request_bytes=config.max_request_bytes)
                server = _server_stopped_by(uvicorn, stop)(uvicorn.Config(
                    app, host=config.host, port=config.port, log_level="warning", access_log=False,
                    timeout_graceful_shutdown=5))
                if announce:
                    where = f"{engine.slot_count} GPU slot(s)" if engine.on_gpus else "no GPU: build and read only"
                    threading.Thread(target=_announce, args=(server, f"ptxbench serve: http://{_url_host(config.host)}:"
                                                                     f"{config.port} ({where}; evidence profile {config.evidence.value} "
                                                                     f"unless a job names one; state in {state})"),
                                     daemon=True).start()
                server.run()
                if not server.started and stop.signal is None:
                    raise PtxbenchError(f"could not listen on {config.host}:{config.port} (uvicorn said why above)")
        finally:
            unfinished = service.close()
    if announce and stop.signal is not None:
        print(stopped_line(stop.signal, unfinished, state), file=sys.stderr, flush=True)
    return stop.signal


def stopped_line(signum: int, unfinished: int, state: Path) -> str:
    """What a stopped server says last: why it stopped, and what it left to do at the next start."""
    left = (f"{unfinished} unfinished job(s) stay queued in {state} for the next start" if unfinished
            else "no job was left unfinished")
    return f"ptxbench serve: stopped by {signal.Signals(signum).name}; {left}"


class _Stop:
    """The first SIGINT or SIGTERM, kept (not raised, as Python raises SIGINT, nor fatal, as SIGTERM is by
    default) for the whole of ``serve``: before uvicorn listens, while it runs (it is told to shut down), and
    while the engine closes, so the engine is always closed and the process exits with a code saying why."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signal: int | None = None
        self.server: Any = None  # the uvicorn server to shut down, once there is one

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signum
        if self.server is not None:  # the first shuts down; a second while uvicorn still waits on open requests
            self.server.force_exit = self.server.should_exit  # (event streams) stops that wait, as in uvicorn
            self.server.should_exit = True

    @contextlib.contextmanager
    def catching(self) -> Iterator[None]:
        """Handle the signals inside the block (only the main thread can; elsewhere they are left as they are)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.signal(signum, self) for signum in self.SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _server_stopped_by(uvicorn: Any, stop: _Stop) -> Any:
    """uvicorn's server class, its signals left to ``stop``: uvicorn (0.29 on) raises a signal again once it has
    shut down, which would kill the process on SIGTERM before the engine is closed."""

    class Server(uvicorn.Server):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            stop.server = self

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # ``stop`` handles them, around the whole of ``serve``

    return Server


def _announce(server: Any, line: str) -> None:
    """The address, once the server listens on it (not before: a client may start on this line)."""
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        print(line, flush=True)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
