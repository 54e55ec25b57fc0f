"""Stopping ``ptxbench serve``: SIGINT or SIGTERM is a graceful stop that says so in one line on stderr and exits
128 + the signal, with the engine closed (run directories audited) and every unfinished job queued for the next
start; ``--gpus`` on a machine without a GPU is one line saying how to serve without one. Real server processes:
``ptxbench serve`` itself where no GPU is needed, the test server (the GPU side's CPU stand-in) for jobs on a GPU."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.client import Client
from ptxbench.serve.models import JobOptions, JobState
from ptxbench.serve.store import JobStore

from ..cli.newcomer import one_line
from ..conftest import REPO
from .harness import Server, candidate, environment, free_port

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # a CPU machine, on any machine
STOP_LINE = "ptxbench serve: stopped by "


def _serve(state: Path, *args: str) -> subprocess.Popen[str]:
    """``ptxbench serve`` as a user starts it, in its own session (so the test can end what it starts)."""
    return subprocess.Popen([sys.executable, "-m", "ptxbench", "serve", "--state", str(state), *args], cwd=REPO,
                            env=environment(NO_GPU), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_server_gracefully_saying_so_with_128_plus_the_signal(
        tmp_path: Path, stop: signal.Signals, code: int) -> None:
    server = _serve(tmp_path / "state", "--port", str(free_port()))
    try:
        assert server.stdout is not None
        announced = server.stdout.readline()  # printed once it listens
        assert announced.startswith("ptxbench serve: http://127.0.0.1:") and "no GPU" in announced, announced
        server.send_signal(stop)
        out, err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
    assert server.returncode == code, (out, err)
    assert err == f"{STOP_LINE}{stop.name}; no job was left unfinished\n", err
    assert out == ""


@pytest.mark.slow
def test_a_stopped_server_audits_its_runs_and_keeps_every_unfinished_job_queued(tmp_path: Path) -> None:
    state = tmp_path / "state"
    slow = {"PTXBENCH_FAKE_SPANS": str(tmp_path / "spans.log")}  # every trial takes 0.2 s: 2 s a job
    options = JobOptions(trials=10, time=False, profile=False)
    server = Server(state, env=slow).ready()
    try:
        with Client(server.url) as client:
            jobs = client.submit([candidate(i, options) for i in range(4)])
            first = client.wait(jobs[0].id, timeout_s=120)
            assert first.state is JobState.DONE
            planted = state / first.run_dir / "items" / first.task / "planted.cu"  # as a candidate could
            planted.write_text("not the harness's\n")
            unfinished = [j.id for j in jobs if client.get(j.id).state is not JobState.DONE]
            assert unfinished, "the queue is not drained when the server is stopped"
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 143
    finally:
        server.kill()
    lines = server.log.read_text().splitlines()
    assert [line for line in lines if line.startswith(STOP_LINE)] == lines[-1:], lines

    store = JobStore(state)
    try:
        counts = store.counts()
    finally:
        store.close()
    assert counts["building"] == counts["running"] == 0, counts  # queued again at the stop, not at the next start
    left = counts["queued"]
    assert len(unfinished) - 1 <= left <= len(unfinished), counts  # one may have finished while the engine closed
    assert lines[-1] == (f"{STOP_LINE}SIGTERM; {left} unfinished job(s) stay queued in {state.resolve()} "
                         "for the next start")
    assert not planted.exists(), "the run directory was not audited"
    assert (state / first.run_dir / "quarantine" / "items" / first.task / "planted.cu").is_file()

    server = Server(state, env=slow, port=server.port).ready()
    try:
        with Client(server.url) as client:
            views = [client.wait(j.id, timeout_s=120) for j in jobs]
            assert all(v.state is JobState.DONE for v in views), [v.state for v in views]
            assert len(client.list()) == len(jobs), "no job was lost or doubled"
    finally:
        server.stop()


def test_gpus_on_a_machine_without_a_gpu_is_one_line_saying_how_to_serve_without_one(tmp_path: Path) -> None:
    refused = _serve(tmp_path / "state", "--gpus", "0", "--port", str(free_port()))
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2, (out, err)
    assert "Traceback" not in err and err.count("error: ") == 1
    assert one_line(err) == ("error: --gpus 0: this machine shows no GPU (CUDA sees none), so there is no GPU 0: "
                             "leave --gpus out to serve without one (candidates are built and read statically, "
                             "not run)")
    assert out == ""
    assert not (tmp_path / "state").exists(), "refused before anything was made"
