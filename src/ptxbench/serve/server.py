"""``ptxbench serve``: configuration, the access policy, and uvicorn around the app.

Access: on a loopback address the token is optional (anyone who can reach the port is on this machine);
on any other address the server refuses to start without one, since every request runs code on its GPUs.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from ptxbench.errors import PtxbenchError
from ptxbench.records import Record
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


def serve(config: ServeConfig, announce: bool = True) -> None:
    """Run the server until it is stopped (SIGINT, SIGTERM); every accepted job is kept in the state folder."""
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
                         allow_task_definitions=config.allow_task_definitions)
    try:
        service.start()
        app = create_app(service, token=config.token, max_request_bytes=config.max_request_bytes)
        server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                               access_log=False, timeout_graceful_shutdown=5))
        if announce:
            where = f"{engine.slot_count} GPU slot(s)" if engine.on_gpus else "no GPU: build and read only"
            threading.Thread(target=_announce, args=(server, f"ptxbench serve: http://{_url_host(config.host)}:"
                                                             f"{config.port} ({where}; state in {state})"),
                             daemon=True).start()
        server.run()
        if not server.started:
            raise PtxbenchError(f"could not listen on {config.host}:{config.port} (uvicorn said why above)")
    finally:
        service.close()


def _announce(server: Any, line: str) -> None:
    """The address, once the server listens on it (not before: a client may start on this line)."""
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        print(line, flush=True)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
