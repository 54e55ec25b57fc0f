"""A server's jobs and their evidence profile: a job whose options name none gets the server's (sweep unless
``serve --evidence`` says otherwise), the job kept says which, and refinement through a server grades under sweep
unless told, saying so. A publish job hashes as jobs did before profiles existed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.cli.grading import grader_for_refinement
from ptxbench.cli.output import console
from ptxbench.client import Client, ServerGrader
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.serve.models import JobOptions
from ptxbench.serve.service import _job_evidence

from .harness import FAST, candidate, running


def test_a_publish_job_hashes_as_before_profiles_and_a_sweep_job_apart() -> None:
    unnamed, publish, sweep = (JobOptions(trials=1), JobOptions(trials=1, evidence=EvidenceProfile.PUBLISH),
                               JobOptions(trials=1, evidence=EvidenceProfile.SWEEP))
    assert unnamed.digest() == publish.digest() != sweep.digest()
    assert "evidence" not in publish.identity() and sweep.identity()["evidence"] == "sweep"
    assert _job_evidence(json.dumps({"options": {"trials": 1}})) is EvidenceProfile.PUBLISH, "a job kept before"


@pytest.fixture(autouse=True)
def _no_pinned_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("PTXBENCH_SERVE_TOKEN", raising=False)


@pytest.mark.slow
def test_the_server_gives_unnamed_jobs_sweep_and_keeps_each_jobs_profile(tmp_path: Path) -> None:
    with running(tmp_path / "state") as server, Client(server.url) as client:
        (swept,) = client.submit(candidate())  # FAST names no profile
        (published,) = client.submit(candidate(options=FAST.model_copy(update={"evidence": EvidenceProfile.PUBLISH})))
        assert not published.duplicate and published.id != swept.id, "another profile: another question"
        for job, profile in ((swept, EvidenceProfile.SWEEP), (published, EvidenceProfile.PUBLISH)):
            view = client.wait(job.id, timeout_s=120)
            assert view.evidence is profile and view.evaluation is not None
            assert view.evaluation.evidence is profile, view.evaluation.message
            header = json.loads((server.state / view.run_dir / "run.json").read_text())
            assert header["evidence"] == profile.value

        with console.capture() as said:
            grader = grader_for_refinement(server.url, on_server=EvidenceProfile.SWEEP)  # what run and fixit repair do
        try:
            assert isinstance(grader, ServerGrader) and grader.evidence is EvidenceProfile.SWEEP
        finally:
            grader.close()
        line = " ".join(said.get().split())
        assert "under the sweep evidence profile (the default when grading through a server" in line, line
        with console.capture() as said:
            chosen = grader_for_refinement(server.url, evidence="publish", on_server=EvidenceProfile.SWEEP)
        chosen.close()
        assert chosen.evidence is EvidenceProfile.PUBLISH and "as --evidence says" in " ".join(said.get().split())
