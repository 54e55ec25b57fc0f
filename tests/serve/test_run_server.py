"""``ptxbench run --server`` and Fixit's ``--server``: the refinement loop graded by the real server over loopback
(uvicorn in a subprocess; the GPU side's CPU stand-in, or no GPU at all), a scripted model (the replay provider),
and the run directory compared file by file with the one a local run writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.cli import app
from ptxbench.context.wrappers import inline_wrapper_header
from ptxbench.client import Client, ServerError, ServerGrader
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.kernels import reference_folder
from ptxbench.records.completion import Completion
from ptxbench.records.evaluation import Evaluation, Status
from ptxbench.records.trajectory import Feedback, ItemResult
from ptxbench.refine.graders import GpuGrader
from ptxbench.serve.models import CandidateRequest

from ..cli.newcomer import cli, one_line
from ..conftest import EXAMPLES
from ..evaluate.scaleout import FAKE, small_softmax
from ..fixit.test_mine_and_dataset import _run
from .harness import free_port, running
from .test_server import VARYING

SOFTMAX = (EXAMPLES / "softmax.cu").read_text()  # correct, without the features (the static check says so)
REFERENCE = reference_folder("sm_90a")  # correct, with the features: passes the static check
BROKEN = SOFTMAX + "\nthis line is not C++;\n"  # the entry point is there: extracted, then fails to build
FAST = EvalOptions(trials=1, time=False, profile=False, call_timeout_s=60)


def reference(task: str) -> str:
    """A reference kernel as a model would answer it: one whole file, its ``#include "ptx_wrappers.cuh"`` written
    out (an answer that includes the header builds alike everywhere: tests/context/test_wrappers.py)."""
    return inline_wrapper_header((REFERENCE / f"{task}.cu").read_text())


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Completions and builds cached per test (the server, started after this, shares the folder)."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("PTXBENCH_SERVE_TOKEN", raising=False)


def _answers(path: Path, task: str, sources: list[str]) -> str:
    """A replay file: turn n of sample 0 answers ``sources[n]``; the model spec that replays it."""
    path.write_text("".join(json.dumps({"task": task, "sample": 0, "turn": turn, "completion": f"```cuda\n{s}\n```"})
                            + "\n" for turn, s in enumerate(sources)))
    return f"replay:{path}"


def _feedback(data: dict[str, Any]) -> dict[str, Any]:
    """A turn's feedback without what two evaluations of one source may differ in (times, the build cache)."""
    feedback = Feedback.model_validate(data)
    record = feedback.record
    assert isinstance(record, Evaluation)
    return {**feedback.model_dump(exclude={"record"}), "record": record.model_dump(exclude=VARYING)}


def _completion(data: dict[str, Any]) -> dict[str, Any]:
    """A completion without whether it came from the cache (the second run's do) and how long that took."""
    return Completion.model_validate(data).model_dump(exclude={"cached", "latency_s"})


def _item_files(run: Path) -> dict[str, Any]:
    """Every file of every item of a run directory, the records compared by content."""
    files: dict[str, Any] = {}
    for path in sorted((run / "items").rglob("*")):
        if not path.is_file():
            continue
        name = str(path.relative_to(run))
        if path.name == "feedback.json":
            files[name] = _feedback(json.loads(path.read_text()))
        elif path.name == "completion.json":
            files[name] = _completion(json.loads(path.read_text()))
        elif path.name == "result.json":
            ItemResult.model_validate_json(path.read_text())  # a valid trajectory, compared as its turns below
            result = json.loads(path.read_text())
            result["turns"] = [{**turn, "feedback": _feedback(turn["feedback"]),
                                "completion": _completion(turn["completion"])} for turn in result["turns"]]
            files[name] = result
        else:
            files[name] = path.read_text()
    return files


def test_run_with_server_writes_the_run_directory_a_local_run_writes(tmp_path: Path) -> None:
    """Three turns (a compile error, a kernel without the features, then the fix) graded here and by a server
    without GPUs: the same files."""
    model = _answers(tmp_path / "answers.jsonl", "softmax", [BROKEN, SOFTMAX, reference("softmax")])
    runner = CliRunner()
    command = ["run", "--model", model, "--tasks", "softmax", "--turns", "3"]
    local = runner.invoke(app, [*command, "--out", str(tmp_path / "local")])
    assert local.exit_code == 0, local.output
    with running(tmp_path / "state", gpus=[]) as server:
        remote = runner.invoke(app, [*command, "--out", str(tmp_path / "remote"), "--server", server.url])
        assert remote.exit_code == 0, remote.output
        assert len(Client(server.url).list()) == 3, "each turn's candidate is evaluated by the server"
    assert "the server" in remote.output and "has no GPU" in remote.output
    files = {side: _item_files(tmp_path / side) for side in ("local", "remote")}
    assert files["remote"] == files["local"]
    assert sorted(Path(name).name for name in files["local"]) == sorted(
        ["candidate.cu", "completion.json", "feedback.json", "request.json"] * 3 + ["result.json"])
    turns = [files["remote"][f"items/softmax/sample_000/turn_{n}/feedback.json"] for n in range(3)]
    assert [(t["stage"], t["passed"]) for t in turns] == [("compile", False), ("static", False), ("static", True)]
    assert turns[0]["record"]["status"] == Status.COMPILE_ERROR.value
    assert "1/1 passed the static stage" in " ".join(remote.output.split())
    assert json.loads((tmp_path / "remote" / "run.json").read_text())["config"] == \
        json.loads((tmp_path / "local" / "run.json").read_text())["config"]


def test_the_server_grades_a_turn_as_the_gpu_grader_does_here(tmp_path: Path) -> None:
    """With the GPU side's CPU stand-in on both sides: the feedback a model is told, and its record, agree."""
    task = small_softmax()
    here = GpuGrader(GpuEvaluator(FAST, handler=f"{FAKE}:FakeRunner", reference_device="cpu"))
    try:
        local = here.grade(task, Arch.SM_90A, SOFTMAX)
    finally:
        here.close()
    with running(tmp_path / "state") as server:
        remote_grader = ServerGrader(Client(server.url), FAST)
        try:
            assert remote_grader.health.on_gpus
            remote = remote_grader.grade(task, Arch.SM_90A, SOFTMAX)
        finally:
            remote_grader.close()
    assert remote.verified_on_gpu and remote.passed and remote.stage == "gpu"
    assert _feedback(remote.model_dump(mode="json")) == _feedback(local.model_dump(mode="json"))


def test_fixit_repair_with_server_keeps_the_repairs_a_local_repair_keeps(tmp_path: Path) -> None:
    from ptxbench._io import write_jsonl
    from ptxbench.fixit.mine import mine_failures

    (case, *_) = mine_failures([_run(tmp_path)])
    write_jsonl(tmp_path / "failures.jsonl", [case])
    teacher = _answers(tmp_path / "teacher.jsonl", case.attempt.task, [reference("transpose")])
    runner = CliRunner()
    command = ["fixit", "repair", str(tmp_path / "failures.jsonl"), "--teacher", teacher]
    local = runner.invoke(app, [*command, "--out", str(tmp_path / "local.jsonl"), "--work", str(tmp_path / "lw")])
    assert local.exit_code == 0, local.output
    with running(tmp_path / "state", gpus=[]) as server:
        remote = runner.invoke(app, [*command, "--out", str(tmp_path / "remote.jsonl"), "--work", str(tmp_path / "rw"),
                                     "--server", server.url])
        assert remote.exit_code == 0, remote.output
        assert len(Client(server.url).list()) == 1
    assert "1 repairs kept (0 verified on a GPU)" in remote.output
    assert (tmp_path / "remote.jsonl").read_text() == (tmp_path / "local.jsonl").read_text() != ""
    assert _item_files(tmp_path / "rw") == _item_files(tmp_path / "lw")


# -- what goes wrong: each one line, before any model is asked ------------------------------------------------

def _refused(*args: str, cwd: Path) -> str:
    done = cli(*args, cwd=cwd, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    text = one_line(done.stderr)
    assert text.startswith("error: ") and text.count("error: ") == 1, done.stderr
    return text


def test_an_unreachable_server_or_a_refused_token_is_one_line_and_leaves_no_run(tmp_path: Path) -> None:
    model = _answers(tmp_path / "answers.jsonl", "softmax", [SOFTMAX])
    command = ["run", "--model", model, "--tasks", "softmax", "--out", "run"]
    nobody = f"http://127.0.0.1:{free_port()}"
    assert f"error: {nobody}: no answer (ConnectError" in _refused(*command, "--server", nobody, cwd=tmp_path)
    assert _refused(*command, "--server-token", "a-token-without-a-server", cwd=tmp_path) == \
        "error: --server-token is the access token of a --server: give --server URL with it"
    token = "a-long-enough-token-for-tests"
    with running(tmp_path / "state", gpus=[], token=token) as server:
        for given in ([], ["--server-token", "a-wrong-token-of-some-length"]):
            text = _refused(*command, "--server", server.url, *given, cwd=tmp_path)
            assert text.startswith(f"error: {server.url}: 401 a valid access token is required") and \
                "--server-token, or PTXBENCH_SERVE_TOKEN" in text, text
        (tmp_path / "failures.jsonl").write_text("")
        text = _refused("fixit", "repair", "failures.jsonl", "--teacher", model, "--server", server.url, cwd=tmp_path)
        assert "401" in text
    assert not (tmp_path / "run").exists()


def test_a_server_of_another_version_or_without_the_task_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ptxbench

    with running(tmp_path / "state", gpus=[], allow_task_definitions=False) as server, Client(server.url) as client:
        grader = ServerGrader(client, FAST)
        with pytest.raises(ServerError) as unknown:
            client.submit(CandidateRequest(source=SOFTMAX, task="no_such_task"))
        assert unknown.value.status == 404 and "unknown task 'no_such_task'" in str(unknown.value)
        with pytest.raises(ServerError) as not_bundled:  # a task of this client's own, not the server's suite
            grader.grade(small_softmax(), Arch.SM_90A, SOFTMAX)
        assert not_bundled.value.status == 403 and "bundled task ids only" in str(not_bundled.value)
        assert "\n" not in str(unknown.value) + str(not_bundled.value)

        theirs = client.health().version
        monkeypatch.setattr(ptxbench, "__version__", "0.0.0-other")
        with pytest.raises(ServerError) as mixed:
            ServerGrader(client, FAST)
        assert str(mixed.value) == (f"{server.url} runs ptxbench {theirs}, this client is 0.0.0-other: their records "
                                    "would mix two versions of the harness; use one version on both sides")


def test_a_full_queue_is_waited_out_as_retry_after_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """429 with Retry-After: the client sleeps that long and submits again; without one it gives up at once."""
    answers = [httpx.Response(429, json={"error": "the queue is full"}, headers={"Retry-After": "0.25"}),
               httpx.Response(202, json={"jobs": [{"id": "j1", "state": "queued", "duplicate": False}]})]
    slept: list[float] = []
    monkeypatch.setattr("ptxbench.client.time.sleep", slept.append)
    client = Client("http://server.invalid")
    client._http = httpx.Client(base_url=client.url, transport=httpx.MockTransport(lambda _: answers.pop(0)))
    (job,) = client.submit(CandidateRequest(source=SOFTMAX, task="softmax"))
    assert job.id == "j1" and slept == [0.25] and not answers
    answers.append(httpx.Response(429, json={"error": "the queue is full"}))
    with pytest.raises(ServerError) as full:
        client.submit(CandidateRequest(source=SOFTMAX, task="softmax"))
    assert full.value.status == 429 and str(full.value) == "http://server.invalid: 429 the queue is full"
