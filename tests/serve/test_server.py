"""``ptxbench serve`` driven over loopback: the real server (uvicorn in a subprocess, the GPU side's CPU
stand-in behind it) and a real HTTP client (httpx, through ``ptxbench.client``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ptxbench.arch.registry import Arch
from ptxbench.client import Client, ServerError
from ptxbench.evaluate.fleet.run import Candidate, evaluate_candidates
from ptxbench.records.evaluation import Evaluation, Status
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.serve.models import JobOptions, JobState

from ..conftest import EXAMPLES, REPO
from ..evaluate.scaleout import FAKE, OPTIONS, small_softmax
from .harness import FAST, Server, candidate, environment, running

# what differs between two evaluations of one candidate: wall times, whether the build was cached, the inputs'
# seeds (fresh on every trial) and so the errors measured on them, and the paths the isolation made read-only
# (each run's own folder)
MEASURED_ON_SEED = {"max_abs_error", "max_rel_error", "max_error_ratio", "worst_index", "worst_value", "worst_expected",
                    "bound_at_worst"}
VARYING = {"durations_s": True, "build": {"cached": True, "duration_s": True}, "isolation": True,
           "trials": {"__all__": {"seed": True, "comparisons": {"__all__": MEASURED_ON_SEED}}}}


@pytest.fixture(autouse=True)
def _no_pinned_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.slow
def test_a_job_streams_its_stages_and_ends_with_the_evaluation_a_local_eval_gives(tmp_path: Path) -> None:
    with running(tmp_path / "state") as server, Client(server.url) as client:
        request = candidate()
        (job,) = client.submit(request)
        assert job.state is JobState.QUEUED and not job.duplicate
        stages: list[str] = []
        view = client.wait(job.id, on_event=lambda event: stages.append(event.stage), timeout_s=120)
        assert stages == ["accepted", "build", "gpu", "trials", "done"], stages
        assert view.state is JobState.DONE and view.evaluation is not None
        served = view.evaluation
        assert served.status is Status.PASSED and served.candidate == "softmax-0.cu"

        # the result is the run directory's file, as `eval` writes it
        item = server.state / view.run_dir / "items" / "softmax" / view.item
        assert sorted(p.name for p in item.iterdir()) == ["build.log", "candidate.cu", "placement.json", "result.json"]
        assert Evaluation.model_validate_json((item / "result.json").read_text()) == served
        assert client.get(job.id).evaluation == served

        # the same candidate again: answered from the stored result, nothing evaluated
        (again,) = client.submit(request.model_copy(update={"name": "another-name.cu"}))
        assert again.duplicate and again.id == job.id and again.state is JobState.DONE
        assert [j.id for j in client.list(state="done")] == [job.id]
        metrics = client.metrics()
        assert metrics.jobs["done"] == 1 and metrics.stage_seconds["total"].count == 1 and metrics.queue_depth == 0
        assert metrics.gpus["0"]["device"] == "Fake H200" and not metrics.gpus["0"]["busy"]

    local = evaluate_candidates([Candidate(task=small_softmax(), item="softmax", source=request.source,
                                           origin="softmax-0.cu")], Arch.SM_90A, tmp_path / "local",
                                OPTIONS.model_copy(update={"lanes": 2, "evidence": EvidenceProfile.SWEEP}), gpus=[0],
                                handler=f"{FAKE}:FakeRunner", reference_device="cpu")[0]
    # the server's default profile is sweep (a job naming none): the local eval asks for the same
    assert served.evidence is EvidenceProfile.SWEEP
    assert served.model_dump(exclude=VARYING) == local.model_dump(exclude=VARYING)
    assert served.isolation is not None and served.isolation.split(":")[0] == local.isolation.split(":")[0]


@pytest.mark.slow
def test_a_server_killed_mid_queue_loses_no_job_and_finishes_them_all_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    slow = {"PTXBENCH_FAKE_SPANS": str(tmp_path / "spans.log")}  # every trial takes 0.2 s
    options = JobOptions(trials=2, time=False, profile=False)
    server = Server(state, env=slow).ready()
    try:
        with Client(server.url) as client:
            jobs = client.submit([candidate(i, options) for i in range(3)])
            assert len({j.id for j in jobs}) == 3
            client.wait(jobs[0].id, timeout_s=120)
            states = {client.get(j.id).state for j in jobs[1:]}
            assert states != {JobState.DONE}, "the queue is not drained when the server is killed"
    finally:
        server.kill()  # kill -9: no shutdown of any kind
    server = Server(state, env=slow, port=server.port).ready()
    try:
        with Client(server.url) as client:
            views = [client.wait(j.id, timeout_s=120) for j in jobs]
            assert all(v.state is JobState.DONE and v.evaluation is not None for v in views)
            assert all(v.evaluation.status is Status.PASSED for v in views if v.evaluation)
            assert [v.evaluation.candidate for v in views if v.evaluation] == [f"softmax-{i}.cu" for i in range(3)]
            assert len(client.list()) == 3, "no job was lost or doubled"
    finally:
        server.stop()


@pytest.mark.slow
def test_a_full_queue_answers_429_with_retry_after_and_a_queued_job_can_be_cancelled(tmp_path: Path) -> None:
    slow = {"PTXBENCH_FAKE_SPANS": str(tmp_path / "spans.log")}
    long_job = JobOptions(trials=10, time=False, profile=False)  # 2 workloads x 10 trials x 0.2 s on the GPU
    with running(tmp_path / "state", env=slow, max_queue=3) as server, Client(server.url) as client:
        over = httpx.post(f"{server.url}/v1/jobs", content=_batch(4))
        assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
        assert "queue is full" in over.json()["error"]

        running_job, second, queued = client.submit([candidate(i, long_job) for i in range(3)])
        refused = httpx.post(f"{server.url}/v1/jobs", content=_batch(1, start=10))
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        with pytest.raises(ServerError) as full:
            client.submit(candidate(11), wait_when_full=False)
        assert full.value.status == 429 and full.value.retry_after_s is not None

        # the engine holds two jobs (one slot and one ahead): the third is still in the queue
        assert client.get(queued.id).state is JobState.QUEUED
        assert client.cancel(queued.id).state is JobState.CANCELLED
        assert client.get(queued.id).events[-1].stage == "cancelled"
        for item in client.stream(running_job.id, timeout_s=60):
            if getattr(item, "stage", None) == "gpu":
                break
        with pytest.raises(ServerError) as busy:
            client.cancel(running_job.id)
        assert busy.value.status == 409 and "cannot be cancelled" in str(busy.value)
        (accepted,) = client.submit(candidate(11))  # room again: the cancelled job no longer counts
        assert accepted.state is JobState.QUEUED
        for job in (second, accepted):
            client.cancel(job.id) if client.get(job.id).state is JobState.QUEUED else None


def _batch(count: int, start: int = 100) -> bytes:
    return json.dumps({"candidates": [json.loads(candidate(start + i).model_dump_json(exclude_none=True))
                                      for i in range(count)]}).encode()


def test_malformed_requests_get_a_4xx_with_a_one_line_reason(tmp_path: Path) -> None:
    with running(tmp_path / "state", gpus=[], max_request_bytes=64 * 1024, allow_task_definitions=False) as server:
        url = f"{server.url}/v1/jobs"
        source = (EXAMPLES / "softmax.cu").read_text()
        cases = [
            (httpx.post(url, content=b"{not json"), 400, "not JSON"),
            (httpx.post(url, json=["a list"]), 422, "one candidate"),
            (httpx.post(url, json={"task": "softmax"}), 422, "missing field 'source'"),
            (httpx.post(url, json={"source": source, "task": "softmax", "options": {"trails": 5}}), 422,
             "'options.trails'"),
            (httpx.post(url, json={"source": source, "task": "softmax", "options": {"lanes": 4}}), 422, "--lanes"),
            (httpx.post(url, json={"source": source, "task": "softmax", "arch": "sm_90"}), 422, "plain target"),
            (httpx.post(url, json={"source": source, "task": "no_such_task"}), 404, "unknown task"),
            (httpx.post(url, json={"source": source, "task": "softmax", "task_hash": "0" * 64}), 409, "differs"),
            (httpx.post(url, json={"source": source, "task_definition": json.loads(small_softmax().model_dump_json())}),
             403, "--allow-task-definitions"),
            (httpx.post(url, json={"source": source, "task": "softmax", "version": 99}), 422, "upgrade"),
            (httpx.post(url, content=b"x" * (65 * 1024)), 413, "over 65536 bytes"),
            (httpx.get(f"{server.url}/v1/jobs/nope"), 404, "no job 'nope'"),
            (httpx.get(f"{server.url}/v1/jobs", params={"state": "bogus"}), 422, "state"),
        ]
        for response, status, words in cases:
            error = response.json()["error"]
            assert response.status_code == status and words in error, (status, response.status_code, error)
            assert "\n" not in error and len(error) < 600, error


def test_a_token_is_required_off_loopback_and_checked_when_set(tmp_path: Path) -> None:
    refused = subprocess.run([sys.executable, "-m", "ptxbench", "serve", "--host", "0.0.0.0", "--state",
                              str(tmp_path / "open")], cwd=REPO, env=environment({"PTXBENCH_SERVE_TOKEN": ""}),
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "give an access token" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "open").exists()

    token = "a-long-enough-token-for-tests"
    with running(tmp_path / "state", gpus=[], token=token) as server:
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, {"Authorization": token}):
            answer = httpx.get(f"{server.url}/v1/metrics", headers=headers)
            assert answer.status_code == 401 and "access token" in answer.json()["error"]
        assert httpx.get(f"{server.url}/v1/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with Client(server.url, token) as client:
            assert client.health().status == "ok" and not client.health().on_gpus
        with Client(server.url) as client, pytest.raises(ServerError) as unauthorised:
            client.health()
        assert unauthorised.value.status == 401


def test_eval_with_server_writes_the_run_directory_a_local_eval_writes(tmp_path: Path) -> None:
    """Without a GPU on either side: the server builds and reads, as a local eval does here."""
    from typer.testing import CliRunner

    from ptxbench.cli import app

    runner = CliRunner()
    kernel = str(EXAMPLES / "softmax.cu")
    local = runner.invoke(app, ["eval", kernel, "--out", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    with running(tmp_path / "state", gpus=[]) as server:
        started = time.monotonic()
        remote = runner.invoke(app, ["eval", kernel, "--out", str(tmp_path / "remote"), "--server", server.url])
        assert remote.exit_code == 0, remote.output
        assert time.monotonic() - started < 60
        again = runner.invoke(app, ["eval", kernel, "--out", str(tmp_path / "remote"), "--server", server.url])
        assert again.exit_code == 0, again.output
        assert len(Client(server.url).list()) == 1, "a finished item is not sent again"
        wrong = runner.invoke(app, ["eval", kernel, "--server", server.url, "--gpus", "0"])
        assert wrong.exit_code == 2 and "--gpus" in wrong.output
    files = {}
    for side in ("local", "remote"):
        item = tmp_path / side / "items" / "softmax" / "softmax"
        files[side] = {p.name: p.read_text() for p in item.iterdir() if p.name != "placement.json"}
        files[side]["result.json"] = Evaluation.model_validate_json(files[side]["result.json"]).model_dump(exclude=VARYING)
    assert files["remote"] == files["local"]
    assert "static only" in remote.output and str(tmp_path / "remote") in remote.output.replace("\n", "")
