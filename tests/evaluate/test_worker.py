"""Worker supervision on the CPU: hangs, crashes, aborts and exceptions end a request, not the harness."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ptxbench.evaluate.isolation import confinement
from ptxbench.evaluate.isolation.worker import ForgedReply, RequestFailed, Worker, WorkerDied, WorkerTimeout

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
        assert len(spares) == 2 and all(process.is_alive() for process, *_ in spares)  # started ahead
        worker.renew()
        assert worker.call("pid", timeout_s=60) == spares[0][0].pid, "the oldest spare goes first"
        worker.renew()
        assert worker.call("pid", timeout_s=60) == spares[1][0].pid
        assert len(worker._spares) == 2
        spares = list(worker._spares)
    finally:
        worker.close()
    assert not worker._spares and not any(process.is_alive() for process, *_ in spares)


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
    from ptxbench.evaluate.isolation.processes import process_state

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


# -- isolated workers: what candidate code is kept from -------------------------------------------------------

from ptxbench.evaluate.isolation.processes import process_state as _state  # noqa: E402
from ptxbench.evaluate.isolation.worker import _check_message  # noqa: E402


def _gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.time() + seconds
    while _state(pid) not in (None, "Z") and time.time() < deadline:
        time.sleep(0.02)
    return _state(pid) in (None, "Z")


def test_an_isolated_worker_sees_no_secret_and_works_in_a_private_directory(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("PTXBENCH_CACHE", "/somewhere")
    with Worker(HANDLER) as plain:
        assert plain.call("environment", "OPENAI_API_KEY", timeout_s=60) == "sk-secret", "the host keeps it"
        assert plain.isolation is None
    worker = Worker(HANDLER, isolate=True)
    try:
        assert worker.call("environment", "OPENAI_API_KEY", timeout_s=60) is None
        assert worker.call("environment", "PTXBENCH_CACHE", timeout_s=60) is None
        directory = worker.call("working_directory", timeout_s=60)
        assert worker.call("environment", "HOME", timeout_s=60) == directory != os.getcwd()
        assert worker.isolation is not None and "allow-listed environment" in worker.isolation
    finally:
        worker.close()
    assert not os.path.exists(directory), "the private directory is removed with the worker"


def test_compiled_code_comes_from_the_harnesss_cache_for_baselines_and_a_private_one_for_candidates(
        monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """torch.compile's default folder is in /tmp, writable by candidate code: a candidate could rewrite a
    compiled baseline kernel there. The baseline process compiles into the harness's cache (read-only to
    candidates), a candidate's process into its private directory; neither reads the other's."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_shared")  # what a candidate could poison
    with Worker(HANDLER) as harness:
        for name, folder in confinement.COMPILE_CACHE_VARIABLES.items():
            assert harness.call("environment", name, timeout_s=60) == str(tmp_path / "cache" / "compile" / folder)
    worker = Worker(HANDLER, isolate=True)
    try:
        directory = worker.call("working_directory", timeout_s=60)
        for name, folder in confinement.COMPILE_CACHE_VARIABLES.items():
            assert worker.call("environment", name, timeout_s=60) == os.path.join(directory, "compile", folder)
    finally:
        worker.close()


def test_a_forged_ready_message_is_refused() -> None:
    _check_message(("ready", (12, "read-only mounts: /x")), ready=True)
    _check_message(("ready", (12, None)), ready=True)
    for payload in (12, (12,), ("12", None), (12, 3), (True, None), (12, "x" * 5000)):
        with pytest.raises(ForgedReply):
            _check_message(("ready", payload), ready=True)


# Run in a session of its own: should isolation fail, the signal must not reach pytest's process group.
_KILLS_ITS_GROUP = """
from ptxbench.evaluate.isolation.worker import Worker, WorkerDied
worker = Worker("tests.evaluate.fake_handler:Misbehaving", isolate=True)
try:
    worker.call("kill_own_group", timeout_s=60)
except WorkerDied as exc:
    print("worker died:", exc.exitcode)
print("harness alive:", worker.call("echo", 7, timeout_s=60))
worker.close()
"""


def test_kill_of_its_own_process_group_ends_only_the_isolated_worker() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _KILLS_ITS_GROUP], capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert "worker died: -15" in done.stdout and "harness alive: 7" in done.stdout


@pytest.mark.parametrize("isolate", [False, True])
def test_a_worker_that_kills_its_forkserver_is_not_silently_replaced(isolate: bool) -> None:
    """The forkserver's death makes multiprocessing think the worker dead: the next request went to a
    fresh process that had loaded nothing ("'NoneType' object has no attribute 'inputs'", reported as
    the candidate's error). The worker lives on (read from /proc) and keeps serving; once it is really
    gone, that is WorkerDied; and the next evaluation's worker comes from a fresh forkserver."""
    worker = Worker(HANDLER, isolate=isolate)
    try:
        worker.call("load", [1, 2], timeout_s=60)
        pid = worker.call("pid", timeout_s=60)
        worker.call("kill_parent", timeout_s=60)
        assert worker.call("inputs", timeout_s=60) == [1, 2]
        os.kill(pid, signal.SIGKILL)  # between requests
        assert _gone(pid)
        with pytest.raises(WorkerDied):
            worker.call("inputs", timeout_s=60)
        worker.renew()
        worker.call("load", [3], timeout_s=60)
        assert worker.call("inputs", timeout_s=60) == [3], "a fresh forkserver serves the next worker"
        assert worker.call("pid", timeout_s=60) != pid
    finally:
        worker.close()
    assert _state(pid) is None or _parent(pid) != os.getpid(), "this process collected its zombie"


def test_a_forkserver_that_refuses_connections_while_still_uncollected_is_replaced() -> None:
    """A killed forkserver takes a while to exit: its socket is closed but ``waitpid`` does not yet report
    it, so multiprocessing connected to it and the next worker's start failed (ConnectionRefusedError,
    seen in CI). Here a living stand-in holds the dead server's place; the start must go through a fresh
    server, and the stand-in be killed and collected, while a worker forked earlier lives on."""
    import subprocess
    from multiprocessing import forkserver

    server = forkserver._forkserver  # noqa: SLF001
    bystander = Worker(HANDLER)
    worker = Worker(HANDLER)
    stand_in = subprocess.Popen(["sleep", "120"])
    try:
        assert bystander.call("load", [1], timeout_s=60) is None
        dead = server._forkserver_pid  # noqa: SLF001
        os.kill(dead, signal.SIGKILL)
        os.waitpid(dead, 0)
        server._forkserver_pid = stand_in.pid  # noqa: SLF001 - what a dying server looks like to waitpid
        worker.call("load", [3], timeout_s=60)
        assert worker.call("inputs", timeout_s=60) == [3]
        assert server._forkserver_pid not in (dead, stand_in.pid)  # noqa: SLF001
        assert _state(stand_in.pid) is None, "the stand-in was killed and collected"
        assert bystander.call("inputs", timeout_s=60) == [1], "workers of the old server are their owners' to end"
    finally:
        worker.close()
        bystander.close()
        if stand_in.poll() is None:
            stand_in.kill()
            stand_in.wait()


def test_a_forkserver_whose_socket_is_gone_is_replaced() -> None:
    """The server's socket file removed (FileNotFoundError on connect): the server is stopped and collected and
    the start goes through a fresh one; a worker forked earlier lives on."""
    from multiprocessing import forkserver, util

    server = forkserver._forkserver  # noqa: SLF001
    bystander = Worker(HANDLER)
    worker = Worker(HANDLER)
    try:
        assert bystander.call("load", [1], timeout_s=60) is None
        old = server._forkserver_pid  # noqa: SLF001
        if util.is_abstract_socket_namespace(server._forkserver_address):  # noqa: SLF001
            pytest.skip("this Python's forkserver listens in the abstract namespace: no file to remove")
        os.unlink(server._forkserver_address)  # noqa: SLF001
        worker.call("load", [3], timeout_s=60)
        assert worker.call("inputs", timeout_s=60) == [3]
        assert server._forkserver_pid != old, "a fresh server"  # noqa: SLF001
        assert _state(old) is None, "the old server was stopped and collected"
        assert bystander.call("inputs", timeout_s=60) == [1]
    finally:
        worker.close()
        bystander.close()


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rpartition(")")[2].split()[1])
    except OSError:
        return None


def test_an_isolated_worker_inherits_no_descriptor_and_its_garbage_breaks_nothing() -> None:
    from multiprocessing import resource_tracker

    with Worker(HANDLER) as plain:
        assert len(plain.call("open_descriptors", timeout_s=60)) > 4, "a plain worker inherits descriptors"
    worker = Worker(HANDLER, isolate=True, spares=1)
    try:
        connection = worker.call("connection_descriptor", timeout_s=60)
        # 0-2, the pipe, and the descriptor that lists them
        assert set(worker.call("open_descriptors", timeout_s=60)) - {0, 1, 2, connection} <= {3, 4, 5}
        assert len(worker.call("open_descriptors", timeout_s=60)) == 5
        worker.call("scribble", [0, 1, 2, connection], timeout_s=60)
        assert worker.call("echo", 7, timeout_s=60) == 7
        worker.renew()
        assert worker.call("echo", 8, timeout_s=60) == 8, "the forkserver and the spares still work"
        resource_tracker.ensure_running()  # the harness's tracker still answers
        with pytest.raises((ForgedReply, WorkerDied, WorkerTimeout)):
            worker.call("scribble", [0, 1, 2], timeout_s=3)  # its own pipe too
        assert worker.call("echo", 9, timeout_s=60) == 9
    finally:
        worker.close()


def test_an_isolated_worker_cannot_write_the_protected_paths(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text("{}")
    monkeypatch.setenv("PTXBENCH_PROTECTED_PATHS", str(run))
    key = tmp_path / "integrity.key"
    key.write_text("the signing key")
    monkeypatch.setenv("PTXBENCH_INTEGRITY_KEY", str(key))
    with Worker(HANDLER, isolate=True) as worker:
        answer = worker.call("write_file", str(run / "result.json"), timeout_s=60)
        if worker.isolation is not None and "not isolated" in worker.isolation:
            pytest.skip(f"no mount namespace on this machine: {worker.isolation}")
        assert answer == "refused: Read-only file system"
        assert str(worker.isolation).startswith("read-only mounts: ") and str(run) in str(worker.isolation)
        assert worker.call("write_file", str(tmp_path / "beside"), timeout_s=60) == "written"
        assert worker.call("read_file", str(key), timeout_s=60) == "", "the signing key is hidden"
    assert (run / "result.json").read_text() == "{}"
    (run / "result.json").write_text("the harness still writes")


def test_a_daemon_that_left_the_session_and_the_subreaper_is_killed_with_the_cgroup(tmp_path) -> None:  # type: ignore[no-untyped-def]
    worker = Worker(HANDLER, isolate=True)
    try:
        worker.call("leave_daemon", str(tmp_path / "daemon.pid"), timeout_s=60)
        daemon = int((tmp_path / "daemon.pid").read_text())
        if "cgroup /" not in str(worker.isolation):
            os.kill(daemon, signal.SIGKILL)
            pytest.skip(f"no cgroup on this machine: {worker.isolation}")
        worker.kill()
        survived = not _gone(daemon)
        if survived:
            os.kill(daemon, signal.SIGKILL)
        assert not survived, "the daemon outlived its worker"
    finally:
        worker.close()


@pytest.mark.parametrize("isolate", [False, True])
def test_paused_stops_everything_the_candidate_started(tmp_path, isolate: bool) -> None:  # type: ignore[no-untyped-def]
    counter = tmp_path / "counter"
    with Worker(HANDLER, isolate=isolate) as worker:
        worker.call("start_counter", str(counter), timeout_s=60)
        with worker.paused():
            assert _state(worker.pid) == "T", "stopped, as the baseline's process checks"
            time.sleep(0.05)  # a write under way when it stopped
            before = counter.read_text()
            time.sleep(0.3)
            assert counter.read_text() == before, "a child in its own process group kept running"
        time.sleep(0.3)
        assert len(counter.read_text()) > len(before), "resumed"


def test_an_isolated_worker_replies_with_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    with Worker(HANDLER, isolate=True) as worker:
        reply = worker.call("cpu_tensor", timeout_s=60)
        assert torch.equal(reply, torch.arange(6, dtype=torch.float32))
        assert worker.call("cpu_tensor", timeout_s=60).sum().item() == 15


# The harness starts a plain worker whose code leaves a daemon holding the forkserver's "alive" pipe, then
# exits without closing the worker.
_LEAVES_A_SERVER_ALIVE = """
import multiprocessing.forkserver, sys
from ptxbench.evaluate.isolation.worker import Worker
worker = Worker("tests.evaluate.fake_handler:Misbehaving")
worker.call("leave_server_holder", sys.argv[1], timeout_s=60)
print(multiprocessing.forkserver._forkserver._forkserver_pid)
"""


def test_the_forkserver_is_stopped_when_the_harness_exits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LEAVES_A_SERVER_ALIVE, str(tmp_path / "daemon.pid")],
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    daemon = int((tmp_path / "daemon.pid").read_text())
    server = int(done.stdout.split()[-1])
    try:
        assert done.returncode == 0, done.stderr
        assert _gone(server), "the forkserver outlived the harness"
    finally:
        os.kill(daemon, signal.SIGKILL)  # a plain worker's daemon that left its session is out of reach
        if not _gone(server, 1):
            os.kill(server, signal.SIGKILL)


def test_closing_a_worker_ends_what_it_started_before_it_exits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker that exits in order would leave its children to init: they are ended first."""
    counter = tmp_path / "counter"
    worker = Worker(HANDLER)
    worker.call("start_counter", str(counter), timeout_s=60)
    worker.close()
    time.sleep(0.1)
    before = counter.read_text()
    time.sleep(0.3)
    assert counter.read_text() == before, "the child the worker started outlived it"


class _HungUpConnection:
    """A pipe whose other end (the harness) is gone: what a worker sees after a candidate killed its parent."""

    def __init__(self, fail_on: str) -> None:
        self.fail_on = fail_on

    def recv(self) -> object:
        if self.fail_on == "recv":
            raise ConnectionResetError(104, "Connection reset by peer")
        return ("ping", ())

    def send(self, message: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")


class _Pinger:
    def ping(self) -> str:
        return "pong"


@pytest.mark.parametrize("fail_on", ["recv", "send"])
def test_a_worker_whose_harness_hung_up_ends_without_a_traceback(fail_on: str) -> None:
    from ptxbench.evaluate.isolation.worker import _serve_requests

    assert _serve_requests(_HungUpConnection(fail_on), _Pinger()) is None  # type: ignore[arg-type]
