"""A batch through a real ``ptxbench serve`` on the GPU (issue 27): the server's verdicts are the ones
``eval`` gives the same files, a duplicate is answered from the store, and the record is ``eval``'s; a Fixit
repair refined with the server's evaluations keeps only the GPU-verified fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.check import read_candidate
from ptxbench.client import Client, ServerGrader
from ptxbench.evaluate.evaluator import HANDLER, EvalOptions
from ptxbench.fixit.mine import mine_failures
from ptxbench.fixit.repair import repair
from ptxbench.kernels import reference_folder
from ptxbench.records.evaluation import Evaluation, Status
from ptxbench.records.trajectory import Feedback
from ptxbench.serve.models import CandidateRequest, JobOptions

from ..conftest import EXAMPLES, REPO
from ..fixit.test_mine_and_dataset import _run
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
            stored = server.state / view.run_dir / "items" / view.task / view.item / "result.json"
            assert Evaluation.model_validate_json(stored.read_text()) == view.evaluation
        metrics = client.metrics()
        assert metrics.queue_depth == 0 and metrics.jobs.get("done", 0) >= 4


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (the executed-feature proof)")
def test_a_fixit_repair_graded_by_the_server_keeps_only_a_gpu_verified_repair(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fixit repair --server`` (and ``run --server``, the same loop) on the GPU: tests/gpu/test_fixit_gpu.py's
    scripted teacher, each turn evaluated by the server: the plain transpose comes back REJECTED for not using
    TMA, the TMA reference is kept, verified on the GPU."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    plain = (EXAMPLES / "transpose.cu").read_text()
    expert = read_candidate(reference_folder("sm_90a") / "transpose.cu")
    answers = tmp_path / "teacher.jsonl"
    answers.write_text("".join(json.dumps({"task": "transpose", "sample": 0, "turn": turn,
                                           "completion": f"```cuda\n{source}\n```"}) + "\n"
                               for turn, source in enumerate([plain, expert])))
    (case, *_) = mine_failures([_run(tmp_path)])
    with running(tmp_path / "state", handler=HANDLER, reference_device="cuda", lanes=2) as server:
        grader = ServerGrader(Client(server.url, timeout_s=600),
                              EvalOptions(trials=1, timing_budget_ms=20, call_timeout_s=60))
        try:
            assert grader.health.on_gpus
            pairs = repair([case], f"replay:{answers}", tmp_path / "repairs", grader, turns=3)
            assert len(grader.client.list()) == 2, "both turns were evaluated by the server"
        finally:
            grader.close()
    turns = sorted((tmp_path / "repairs" / "items" / "transpose").glob("*/turn_*/feedback.json"))
    feedback = [Feedback.model_validate_json(path.read_text()) for path in turns]
    print(f"FEEDBACK from the server on the plain kernel:\n{feedback[0].text}")
    assert "Status: REJECTED" in feedback[0].text and "tma.load" in feedback[0].text
    assert feedback[1].passed and feedback[1].verified_on_gpu and isinstance(feedback[1].record, Evaluation)
    assert feedback[1].record.status is Status.PASSED and feedback[1].record.features is not None
    assert len(pairs) == 1 and pairs[0].verified and pairs[0].fixed_source.strip() == expert.strip()
