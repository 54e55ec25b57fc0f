"""The grader the refinement loop gets from the command line (``run``, ``fixit repair``, ``fixit eval``,
``fixit ablation``): this machine, or with ``--server`` a running ``ptxbench serve``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxbench.cli.output import console

if TYPE_CHECKING:
    from ptxbench.client import ServerGrader
    from ptxbench.refine.graders import GpuGrader, StaticGrader


def static_evaluation_note() -> str:
    """Why `run` grades at the static stage only: there is no GPU to run candidates on."""
    return ("note: no CUDA GPU is visible, so candidates are graded at the static stage only (build + PTX/SASS); "
            "correctness and speed are not measured and no verdict is marked GPU-verified")


def server_static_note(url: str) -> str:
    """Why `run --server` grades at the static stage only: the server has no GPU either."""
    return (f"note: the server {url} has no GPU, so candidates are graded at the static stage only (build + PTX/SASS); "
            "correctness and speed are not measured and no verdict is marked GPU-verified")


def grader_for_refinement(server: str | None = None, token: str | None = None
                          ) -> StaticGrader | GpuGrader | ServerGrader:
    """The one choice of where candidates are evaluated, made here and passed down: a running server where
    ``--server`` names one, else the GPU grader where a GPU is visible, else the static grader (and say so)."""
    from ptxbench.refine.graders import StaticGrader, grader_for_this_machine

    if server is not None:
        from ptxbench.client import Client, ServerGrader

        client = Client(server, token)
        try:
            remote = ServerGrader(client)
        except BaseException:
            client.close()
            raise
        if not remote.health.on_gpus:
            console.print(server_static_note(client.url), highlight=False)
        return remote
    grader = grader_for_this_machine()
    if isinstance(grader, StaticGrader):
        console.print(static_evaluation_note(), highlight=False)
    return grader
