"""What the build alone decides, and the verdict of a candidate that cannot be run: one rule for every path.

``eval`` without a GPU, ``run``'s static grading, Fixit's repairs without a GPU and run directories written
before this rule all judge a candidate here, so the same file gets the same verdict and the same error class
whichever command saw it. A build that fails is the candidate's COMPILE_ERROR and a binary that links a
vendor library is REJECTED, on a GPU machine as without one (the GPU evaluator asks ``verdict_before_running``
too). Anything else needs a GPU to be judged: without one it is the harness's NO_GPU, never the candidate's
failure, and its static report (the required features in the PTX and the SASS) stays beside it as evidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxbench.evaluate.judgement.guards import linked_library_guards
from ptxbench.records.evaluation import Evaluation, Generation, InfraFailure, Status

if TYPE_CHECKING:
    from ptxbench.records.check import CheckReport

NO_GPU_MESSAGE = "no CUDA GPU visible: built and read statically only; not run"


def verdict_before_running(evaluation: Evaluation) -> Evaluation | None:
    """The verdict the build alone decides, GPU or not: a build that failed is the candidate's
    COMPILE_ERROR, a binary that links a library is REJECTED; None when the candidate must be run.
    ``evaluation`` carries the build and the static report (its status is not read)."""
    result = evaluation.build
    if result is None or not result.ok:
        summary = result.diagnosis.message if result is not None and result.diagnosis else "the build failed"
        return evaluation.model_copy(update={"status": Status.COMPILE_ERROR, "infra_failure": None,
                                             "message": evaluation.message or summary})
    linked = linked_library_guards(evaluation.static)
    if linked:
        return evaluation.model_copy(update={"status": Status.REJECTED, "infra_failure": None,
                                             "message": linked[0].detail, "guards": linked})
    return None


def decided_by_build(evaluation: Evaluation) -> bool:
    """Whether the evaluation's verdict is one the build alone decided (nothing ran on a GPU)."""
    return evaluation.status is not None and not evaluation.trials and verdict_before_running(evaluation) is not None


def static_verdict(report: "CheckReport", task_hash: str, generation: Generation | None = None) -> Evaluation:
    """The evaluation of a candidate that is built and read but not run (no GPU): what the build decides,
    else NO_GPU with the static report."""
    built = Evaluation(candidate=report.candidate, task=report.task or "", task_hash=task_hash, arch=report.arch,
                       infra_failure=InfraFailure.NO_GPU, build=report.build, static=report.static,
                       generation=generation, message=NO_GPU_MESSAGE)
    decided = verdict_before_running(built.model_copy(update={"message": ""}))
    return decided if decided is not None else built
