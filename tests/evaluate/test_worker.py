"""Worker supervision on the CPU: hangs, crashes, aborts and exceptions end a request, not the harness."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ptxbench.evaluate.worker import ForgedReply, RequestFailed, Worker, WorkerDied, WorkerTimeout

HANDLER = "tests.evaluate.fake_handler:Misbehaving"


def test_answers_and_survives_handler_exceptions() -> None:
    with Worker(HANDLER) as worker:
        assert worker.call("echo", {"x": [1, 2]}, timeout_s=60) == {"x": [1, 2]}
        first = worker.call("pid", timeout_s=10)
        with pytest.raises(RequestFailed, match="ValueError: the candidate returned garbage") as caught:
            worker.call("fail", timeout_s=10)
        assert "Traceback" in caught.value.trace
        assert worker.call("pid", timeout_s=10) == first, "an exception does not cost the process"


def test_hang_is_killed_and_the_worker_replaced() -> None:
    with Worker(HANDLER) as worker:
        first = worker.call("pid", timeout_s=60)
        with pytest.raises(WorkerTimeout, match="within 0.5 s"):
            worker.call("hang", timeout_s=0.5)
        assert worker.call("pid", timeout_s=60) != first


@pytest.mark.parametrize(("method", "args", "exitcode"), [("crash", (), -6), ("exit", (3,), 3)])
def test_abort_and_exit_are_reported_with_their_cause(method: str, args: tuple, exitcode: int) -> None:
    with Worker(HANDLER) as worker:
        with pytest.raises(WorkerDied) as caught:
            worker.call(method, *args, timeout_s=60)
        assert caught.value.exitcode == exitcode
        assert worker.call("echo", 7, timeout_s=60) == 7


def test_parent_reads_the_workers_libraries_itself() -> None:
    with Worker(HANDLER) as worker:
        worker.call("pid", timeout_s=60)
        assert any("libc" in path for path in worker.mapped_libraries())


def test_renew_continues_in_a_new_process_and_the_spares_are_reaped() -> None:
    worker = Worker(HANDLER, spares=2)
    try:
        first = worker.call("pid", timeout_s=60)
        worker.renew()
        second = worker.call("pid", timeout_s=60)
        assert second != first
        spares = list(worker._spares)
        assert len(spares) == 2 and all(process.is_alive() for process, _ in spares)  # started ahead
        worker.renew()
        assert worker.call("pid", timeout_s=60) == spares[0][0].pid, "the oldest spare goes first"
        worker.renew()
        assert worker.call("pid", timeout_s=60) == spares[1][0].pid
        assert len(worker._spares) == 2
        spares = list(worker._spares)
    finally:
        worker.close()
    assert not worker._spares and not any(process.is_alive() for process, _ in spares)


def test_prestart_starts_the_spares_before_the_first_renewal() -> None:
    worker = Worker(HANDLER, spares=2)
    try:
        worker.prestart()
        spares = list(worker._spares)
        assert worker.pid is not None and len(spares) == 2, "the process and its spares start without a request"
        worker.renew()
        assert worker.call("pid", timeout_s=60) == spares[0][0].pid, "the first renewal finds a spare started"
    finally:
        worker.close()


def test_a_worker_is_forked_with_torch_loaded_and_the_harness_environment_as_it_is_now(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Workers come from a server that imported torch once; its environment is frozen when it starts, so
    each worker takes the harness's current one (the GPU's lock is named after the first worker runs)."""
    monkeypatch.delenv("PTXBENCH_TEST_VARIABLE", raising=False)
    worker = Worker(HANDLER, spares=1)
    try:
        assert worker.call("environment", "PTXBENCH_TEST_VARIABLE", timeout_s=60) is None
        assert worker.call("torch_loaded", timeout_s=60), "the handler never imports torch itself"
        monkeypatch.setenv("PTXBENCH_TEST_VARIABLE", "set later")
        worker.renew()  # the spare, started before the variable was set, is used first
        worker.renew()
        assert worker.call("environment", "PTXBENCH_TEST_VARIABLE", timeout_s=60) == "set later"
    finally:
        worker.close()


def test_a_worker_that_kills_its_forkserver_is_still_ended_with_its_children(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """multiprocessing learns of a worker's end from the forkserver: once a candidate kills the server,
    its worker looks dead. Ending it must still kill it and what it started (checked to fail when the
    end trusts multiprocessing's view)."""
    from ptxbench.evaluate.processes import process_state

    worker = Worker(HANDLER)
    try:
        pid = worker.call("pid", timeout_s=60)
        worker.call("orphan_itself", str(tmp_path / "child.pid"), timeout_s=60)
        child = int((tmp_path / "child.pid").read_text())
        worker.kill()
        deadline = time.time() + 5
        while {process_state(pid), process_state(child)} - {None, "Z"} and time.time() < deadline:
            time.sleep(0.05)
        left = {p for p in (pid, child) if process_state(p) not in (None, "Z")}
        for survivor in left:
            os.kill(survivor, signal.SIGKILL)
        assert not left, "a process outlived the worker's end"
        assert worker.call("echo", 7, timeout_s=60) == 7, "a new forkserver serves the next worker"
    finally:
        worker.close()


def test_start_up_is_not_charged_to_a_requests_time_limit() -> None:
    with Worker("tests.evaluate.fake_handler:SlowToStart") as worker:
        assert worker.call("echo", 7, timeout_s=0.5) == 7  # the handler takes 1.5 s to build


def test_a_reply_that_would_run_code_in_the_harness_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "ran"
    with Worker("tests.evaluate.fake_handler:Forging") as worker:
        first = worker.call("pid", timeout_s=60)
        with pytest.raises(ForgedReply, match="may not name posix.system"):
            worker.call("code_in_reply", str(marker), timeout_s=60)
        assert not marker.exists(), "the forged pickle ran in the harness"
        assert worker.call("pid", timeout_s=60) != first, "the process that forged it was killed"


def test_tensors_still_cross_the_allow_list() -> None:
    torch = pytest.importorskip("torch")
    with Worker("tests.evaluate.fake_handler:Forging") as worker:
        reply = worker.call("tensor", timeout_s=60)
    assert torch.equal(reply["outputs"]["C"], torch.ones(3, dtype=torch.bfloat16))
    assert reply["size"] == torch.Size([3])
