"""The real server in a subprocess on a free loopback port, and candidates for it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from ptxbench.serve.models import CandidateRequest, JobOptions

from ..conftest import EXAMPLES, REPO
from ..evaluate.scaleout import FAKE, small_softmax

FAST = JobOptions(trials=1, time=False, profile=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return {**env, **(extra or {})}


class Server:
    """One server process (its own session, so the test ends it with every process it started)."""

    def __init__(self, state: Path, *, port: int | None = None, env: dict[str, str] | None = None, **config: Any) -> None:
        self.state = state
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"port": self.port, "state": str(state), "gpus": [0], "lanes": 1, "handler": f"{FAKE}:FakeRunner",
                  "reference_device": "cpu", "allow_task_definitions": True, **config}
        self.log = state.parent / f"server-{self.port}.log"
        state.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "tests.serve.server_main", json.dumps(config)],
                                            cwd=REPO, env=environment(env), stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def ready(self, token: str | None = None, timeout_s: float = 60.0) -> "Server":
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the server exited: {self.log.read_text()}"
            try:
                if httpx.get(f"{self.url}/v1/health", headers=headers, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not answer: {self.log.read_text()}")

    def kill(self) -> None:
        """kill -9 of the server and of every process it started (its session)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


@contextmanager
def running(state: Path, **config: Any) -> Iterator[Server]:
    server = Server(state, **config).ready(config.get("token"))
    try:
        yield server
    finally:
        server.stop()


def candidate(variant: int = 0, options: JobOptions = FAST) -> CandidateRequest:
    """The softmax example on small workloads; ``variant`` makes another source (a comment), so another job."""
    source = (EXAMPLES / "softmax.cu").read_text() + (f"\n// variant {variant}\n" if variant else "")
    return CandidateRequest(source=source, task_definition=small_softmax(), options=options,
                            name=f"softmax-{variant}.cu")
