"""``ptxbench serve``: the evaluator as a long-lived HTTP service (``ptxbench.serve.server.serve``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ptxbench.cli.options import EVIDENCE_HELP, evidence_profile, local_gpus
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
    evidence: Annotated[str, typer.Option("--evidence", callback=evidence_profile, help=(
        f"{EVIDENCE_HELP}; for jobs whose options name none"))] = "sweep",
) -> None:
    """Serve the evaluator over HTTP: warm GPU workers, a durable job queue, stage results as they land.

    Without a GPU it builds and reads candidates only. SIGINT or SIGTERM stops it gracefully (unfinished jobs
    stay queued for the next start), saying so on stderr; the exit code is then 128 + the signal (130, 143).
    """
    from ptxbench.serve.evaluation import DEFAULT_LANES
    from ptxbench.serve.server import ServeConfig, serve as run_server

    _gpus_exist(gpus, local_gpus(gpus, visible_only=False))
    chosen = local_gpus(gpus)
    try:
        config = ServeConfig(host=host, port=port, gpus=chosen, lanes=lanes or DEFAULT_LANES, state=state,
                             token=token or None, max_queue=max_queue,
                             max_request_bytes=int(max_request_mb * (1 << 20)), builders=builders,
                             allow_task_definitions=allow_task_definitions, evidence=evidence)
    except PtxbenchError as exc:
        fail(str(exc))
    stopped_by = run_server(config)
    if stopped_by is not None:
        raise typer.Exit(128 + stopped_by)


def _gpus_exist(spec: Optional[str], chosen: Optional[list[int]]) -> None:
    """``--gpus`` on a machine that shows no GPU: one line saying so and how to serve without one (build and
    read only), rather than 'GPU 0 is not visible (0 GPU(s) visible)', which leaves the way out to guess."""
    from ptxbench.evaluate.fleet.pool import visible_gpu_count

    if chosen and visible_gpu_count() == 0:
        fail(f"--gpus {spec}: this machine shows no GPU (CUDA sees none), so there is no GPU {chosen[0]}: leave "
             "--gpus out to serve without one (candidates are built and read statically, not run)")
