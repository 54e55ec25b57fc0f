"""A batch through a real ``ptxbench serve`` on the GPU (issue 27): the server's verdicts are the ones
``eval`` gives the same files, a duplicate is answered from the store, and the record is ``eval``'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.client import Client
from ptxbench.evaluate.evaluator import HANDLER
from ptxbench.records.evaluation import Evaluation, Status
from ptxbench.serve.models import CandidateRequest, JobOptions

from ..conftest import EXAMPLES, REPO
from ..serve.harness import running

pytestmark = pytest.mark.gpu
ADVERSARIAL = REPO / "tests" / "adversarial"
# No ncu (the plain examples would be REJECTED for features never executed) and no timing (the baselines of
# two tasks take a minute): the verdicts of the stages the server adds nothing to, in about a minute.
OPTIONS = JobOptions(trials=1, time=False, profile=False)


def request(path: Path, task: str, name: str) -> CandidateRequest:
    return CandidateRequest(source=path.read_text(), task=task, arch=Arch.SM_90A, options=OPTIONS, name=name)


def test_a_batch_through_the_server_gets_evals_verdicts(tmp_path: Path) -> None:
    batch = [request(EXAMPLES / "rmsnorm.cu", "rmsnorm", "rmsnorm.cu"),
             request(EXAMPLES / "softmax.cu", "softmax", "softmax.cu"),
             request(ADVERSARIAL / "nan_output.cu", "rmsnorm", "nan_output.cu"),
             request(ADVERSARIAL / "illegal_address.cu", "transpose", "illegal_address.cu"),
             request(EXAMPLES / "rmsnorm.cu", "rmsnorm", "rmsnorm-again.cu")]  # the first one's duplicate
    expected = [Status.PASSED, Status.PASSED, Status.INCORRECT, Status.RUNTIME_ERROR, Status.PASSED]
    with running(tmp_path / "state", handler=HANDLER, reference_device="cuda", lanes=2) as server, \
            Client(server.url, timeout_s=600) as client:
        assert client.health().on_gpus
        accepted = client.submit(batch)
        assert accepted[-1].duplicate and accepted[-1].id == accepted[0].id
        views = [client.wait(job.id, timeout_s=900) for job in accepted]
        for view, want in zip(views, expected):
            assert view.evaluation is not None, view
            print(f"SERVED {view.name}: {view.evaluation.status} — {view.evaluation.message[:160]}")
            assert view.evaluation.status == want, view.evaluation.message
            stages = [event.stage for event in view.events]
            assert "build" in stages and "gpu" in stages
            stored = Path(view.run_dir) / view.item / "result.json"
            assert Evaluation.model_validate_json(stored.read_text()) == view.evaluation
        metrics = client.metrics()
        assert metrics.queue_depth == 0 and metrics.jobs.get("done", 0) >= 4
