"""``ptxbench serve``: the evaluator as a long-lived HTTP service (``ptxbench.serve.server.serve``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.options import local_gpus
from ptxbench.cli.output import fail
from ptxbench.errors import PtxbenchError

TOKEN_HELP = "Access token clients must send (Authorization: Bearer); required off loopback"


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on; any but loopback needs a token")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8765,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="Local GPUs to use, e.g. 0,1 (default: every "
                                                "visible GPU)")] = None,
    lanes: Annotated[Optional[int], typer.Option("--lanes", min=1, max=16, help="Candidates evaluated at once on "
                                                 "each GPU (default 2); timing always runs alone")] = None,
    state: Annotated[Path, typer.Option("--state", help="Folder of the job store and the run directories "
                                        "(kept across restarts)")] = Path("runs/serve"),
    token: Annotated[Optional[str], typer.Option("--token", envvar="PTXBENCH_SERVE_TOKEN", show_envvar=True,
                                                 help=TOKEN_HELP)] = None,
    max_queue: Annotated[int, typer.Option("--max-queue", min=1, help="Unfinished jobs beyond which a submission "
                                           "is answered 429 with Retry-After")] = 1000,
    max_request_mb: Annotated[float, typer.Option("--max-request-mb", min=0.01, help="Largest request body "
                                                  "(413 beyond)")] = 16.0,
    builders: Annotated[Optional[int], typer.Option("--builders", min=1, help="Candidates built at once ahead of "
                                                    "the GPUs (default: the CPU cores, at most 8)")] = None,
    allow_task_definitions: Annotated[bool, typer.Option("--allow-task-definitions", help="Accept whole task "
                                                         "definitions: their reference is Python the server runs "
                                                         "unsandboxed, so only for trusted clients")] = False,
) -> None:
    """Serve the evaluator over HTTP: warm GPU workers, a durable job queue, stage results as they land."""
    from ptxbench.serve.evaluation import DEFAULT_LANES
    from ptxbench.serve.server import ServeConfig, serve as run_server

    chosen = local_gpus(gpus)
    try:
        config = ServeConfig(host=host, port=port, gpus=chosen, lanes=lanes or DEFAULT_LANES, state=state,
                             token=token or None, max_queue=max_queue,
                             max_request_bytes=int(max_request_mb * (1 << 20)), builders=builders,
                             allow_task_definitions=allow_task_definitions)
    except PtxbenchError as exc:
        fail(str(exc))
    run_server(config)
