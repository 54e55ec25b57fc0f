"""The grader the refinement loop gets from the command line (``run``, ``fixit repair``, ``fixit eval``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxbench.cli.output import console

if TYPE_CHECKING:
    from ptxbench.refine.graders import GpuGrader, StaticGrader


def static_evaluation_note() -> str:
    """Why `run` grades at the static stage only: there is no GPU to run candidates on."""
    return ("note: no CUDA GPU is visible, so candidates are graded at the static stage only (build + PTX/SASS); "
            "correctness and speed are not measured and no verdict is marked GPU-verified")


def grader_for_refinement() -> StaticGrader | GpuGrader:
    """The GPU grader where a GPU is visible, else the static grader (and say so)."""
    from ptxbench.refine.graders import StaticGrader, grader_for_this_machine

    grader = grader_for_this_machine()
    if isinstance(grader, StaticGrader):
        console.print(static_evaluation_note(), highlight=False)
    return grader
