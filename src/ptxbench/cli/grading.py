"""The grader the refinement loop gets from the command line (``run``, ``fixit repair``, ``fixit eval``,
``fixit ablation``): this machine, or with ``--server`` a running ``ptxbench serve``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptxbench.cli.output import console

from ptxbench.records.evidence import EvidenceProfile

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


def server_evidence_note(url: str, evidence: EvidenceProfile, chosen: bool) -> str:
    """Which evidence profile grading through a server gathers, and why."""
    why = "as --evidence says" if chosen else "the default when grading through a server"
    other = "publish" if evidence is EvidenceProfile.SWEEP else "sweep"
    return (f"note: candidates are graded on {url} under the {evidence.value} evidence profile ({why}; "
            f"--evidence {other} for the other)")


def grader_for_refinement(server: str | None = None, token: str | None = None, evidence: str | None = None, *,
                          on_server: EvidenceProfile = EvidenceProfile.PUBLISH
                          ) -> StaticGrader | GpuGrader | ServerGrader:
    """The one choice of where candidates are evaluated, made here and passed down: a running server where
    ``--server`` names one, else the GPU grader where a GPU is visible, else the static grader (and say so).
    ``evidence``: the profile asked for (None: ``on_server`` through a server, which ``run`` and ``fixit repair``
    make sweep and say so, else publish)."""
    from ptxbench.refine.graders import StaticGrader, grader_for_this_machine

    if server is not None:
        from ptxbench.client import Client, ServerGrader
        from ptxbench.serve.evaluation import EvalOptions

        profile = EvidenceProfile(evidence) if evidence is not None else on_server
        client = Client(server, token)
        try:
            remote = ServerGrader(client, EvalOptions(evidence=profile))
        except BaseException:
            client.close()
            raise
        if not remote.health.on_gpus:
            # built and read only: no GPU evidence to choose, recorded as a static grading here records it
            remote.options = remote.options.model_copy(update={"evidence": EvidenceProfile.PUBLISH})
            console.print(server_static_note(client.url), highlight=False)
        elif evidence is not None or on_server is not EvidenceProfile.PUBLISH:
            console.print(server_evidence_note(client.url, profile, evidence is not None), highlight=False)
        return remote
    grader = grader_for_this_machine(EvidenceProfile(evidence) if evidence is not None else EvidenceProfile.PUBLISH)
    if isinstance(grader, StaticGrader):
        console.print(static_evaluation_note(), highlight=False)
    return grader
