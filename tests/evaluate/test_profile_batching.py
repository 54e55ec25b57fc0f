"""Several candidates in one ncu session (``proof.batching``, issue 40), on the CPU: the launcher runs each
candidate's program in its own process and records which process was which; the report is split by process;
a batch that cannot tell candidates apart sends each back to a session of its own; requests meet by group
commit on the ncu turn, so one session serves every candidate waiting for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ptxbench.evaluate.proof.batching import (
    LAUNCHER, ProfileOutcome, ProfileRequest, Spool, new_request, profiled_together, split)
from ptxbench.evaluate.proof.ncu import profiled_program_command
from ptxbench.records.evaluation import KernelProfile

from .test_profiling import BULK_REPORT, PLAIN_REPORT, _fake_ncu, _small_rmsnorm


def _launch(tmp_path: Path, entries: list[dict]) -> dict:
    batch = tmp_path / "batch.json"
    record = tmp_path / "processes.json"
    batch.write_text(json.dumps({"entries": entries, "record": str(record)}))
    subprocess.run([sys.executable, "-I", str(LAUNCHER), str(batch)], check=True, timeout=60)
    return json.loads(record.read_text())


def _entry(tmp_path: Path, name: str, source: str, timeout_s: float = 30.0) -> dict:
    home = tmp_path / f"home-{name}"
    home.mkdir()
    return {"id": name, "command": [sys.executable, "-c", source], "cwd": str(home), "timeout_s": timeout_s,
            "environment": {"HOME": str(home)}, "output": str(tmp_path / f"{name}.out")}


def test_the_launcher_runs_each_program_in_its_own_process_and_records_which_was_which(tmp_path: Path) -> None:
    report = ("import os, sys; print('home', os.environ['HOME'], 'cwd', os.getcwd(), 'ncu', "
              "os.environ.get('FAKE_INJECTION')); sys.exit({code})")
    os.environ["FAKE_INJECTION"] = "inherited"  # what ncu sets for its session must reach every program
    try:
        record = _launch(tmp_path, [_entry(tmp_path, "a", report.format(code=0)),
                                    _entry(tmp_path, "b", report.format(code=3))])
    finally:
        del os.environ["FAKE_INJECTION"]
    a, b = record["entries"]
    assert (a["id"], a["exit"], a["killed"]) == ("a", 0, False) and (b["id"], b["exit"]) == ("b", 3)
    assert a["pid"] != b["pid"] != record["launcher"]
    said = (tmp_path / "a.out").read_text().split()
    assert said == ["home", str(tmp_path / "home-a"), "cwd", str(tmp_path / "home-a"), "ncu", "inherited"]


def test_the_launcher_kills_a_program_at_its_limit_and_what_it_left_running(tmp_path: Path) -> None:
    leaver = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(60)'], start_new_session=True); print(p.pid, flush=True); time.sleep({s})")
    record = _launch(tmp_path, [_entry(tmp_path, "slow", leaver.format(s=60), timeout_s=2.0),
                                _entry(tmp_path, "leaves", leaver.format(s=0))])
    slow, leaves = record["entries"]
    assert slow["killed"] and slow["seconds"] < 20 and not leaves["killed"]
    for name in ("slow", "leaves"):  # the daemon each started (in a session of its own) did not outlive it
        daemon = int((tmp_path / f"{name}.out").read_text().split()[0])
        deadline = time.monotonic() + 5
        while Path(f"/proc/{daemon}").exists() and "Z" not in _state(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{daemon}").exists() or "Z" in _state(daemon)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"


def _request(tmp_path: Path, name: str, asked: float = 0.0, requester: int | None = None,
             command: list[str] | None = None) -> ProfileRequest:
    plan = tmp_path / f"plan-{name}" / "plan.json"
    plan.parent.mkdir(exist_ok=True)
    plan.write_text(json.dumps({"protect": [str(plan.parent)]}))
    return ProfileRequest(id=name, requester=requester or os.getpid(), command=command or profiled_program_command(plan),
                          plan=str(plan), home=str(tmp_path), timeout_s=30, asked=asked)


def _profile(pid: int | None, name: str) -> tuple[int | None, KernelProfile]:
    return pid, KernelProfile(launch_id=0, name=name)


def test_the_report_is_split_by_the_process_each_candidate_ran_as(tmp_path: Path) -> None:
    batch = [_request(tmp_path, "a"), _request(tmp_path, "b")]
    ran = {"a": {"pid": 11, "exit": 0, "killed": False}, "b": {"pid": 12, "exit": 1, "killed": False}}
    outcomes = split(batch, ran, [_profile(11, "ka"), _profile(12, "kb1"), _profile(12, "kb2")],
                     {"a": "", "b": "failed"})
    assert [[p.name for p in o.profiles] for o in outcomes] == [["ka"], ["kb1", "kb2"]]
    assert all(o.solo is None and o.batch_size == 2 for o in outcomes) and outcomes[1].exit == 1


@pytest.mark.parametrize("rows, ran, why", [
    ([_profile(11, "ka"), _profile(99, "child")], {"a": 11, "b": 12}, "process 99, which ran no candidate"),
    ([_profile(None, "ka")], {"a": 11, "b": 12}, "process None"),
    ([_profile(11, "ka")], {"a": 11, "b": 11}, "one process per candidate"),
    ([_profile(11, "ka")], {"a": 11}, "one process per candidate"),
])
def test_a_batch_that_cannot_tell_candidates_apart_sends_each_to_a_session_of_its_own(
        tmp_path: Path, rows: list, ran: dict, why: str) -> None:
    batch = [_request(tmp_path, "a"), _request(tmp_path, "b")]
    record = {name: {"pid": pid, "exit": 0, "killed": False} for name, pid in ran.items()}
    outcomes = split(batch, record, rows, {"a": "", "b": ""})
    assert all(o.solo and why in o.solo and not o.profiles for o in outcomes)


def test_the_spool_serves_the_oldest_first_and_drops_what_no_one_waits_for_or_it_would_not_run(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    gone = subprocess.Popen(["true"])
    gone.wait()
    for request in (_request(tmp_path, "new", asked=3), _request(tmp_path, "old", asked=1),
                    _request(tmp_path, "dead", asked=0, requester=gone.pid),
                    _request(tmp_path, "other", asked=0, command=["sh", "-c", "echo not the profiled program"])):
        spool.submit(request)
    (spool.requests / "junk.json").write_text("{not json")
    vanished = _request(tmp_path, "vanished", asked=0)
    Path(vanished.plan).unlink()  # its evaluator removed its folders
    spool.submit(vanished)
    own = _request(tmp_path, "own", asked=5)
    spool.submit(own)
    assert [r.id for r in spool.claim(own, limit=2)] == ["own", "old"]
    # the dead requester's, the one without its plan, the one naming another command and the unreadable one
    assert sorted(p.name for p in spool.requests.glob("*.json")) == ["new.json"]
    spool.leave(ProfileOutcome(id="new", batch_size=2, exit=0))
    assert spool.collect("new").exit == 0 and spool.collect("new") is None


def test_waiting_candidates_share_one_session_and_each_gets_its_own_launches(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Group commit: while one holds the ncu turn, the others queue; the next to get it profiles them all."""
    from ptxbench.evaluate.isolation.gpu_lock import profiler_turn

    from .fake_ncu import recordings

    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PTXBENCH_LOCK_TRACE", str(tmp_path / "trace.jsonl"))
    folder = _fake_ncu(tmp_path, monkeypatch, candidate_report=BULK_REPORT)
    spool = Spool(tmp_path / "spool")
    plans = [Path(_request(tmp_path, f"r{i}").plan) for i in range(3)]
    requests = [new_request(profiled_program_command(plan), plan, tmp_path, 30) for plan in plans]
    outcomes: dict[str, ProfileOutcome] = {}

    def ask(request: ProfileRequest) -> None:
        outcomes[request.id] = profiled_together(request, spool)

    with profiler_turn():  # the session before theirs
        threads = [threading.Thread(target=ask, args=(r,)) for r in requests]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(list(spool.requests.glob("*.json"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    for thread in threads:
        thread.join(60)
    sessions = [r for r in recordings(folder) if r["role"] == "batch"]
    assert len(sessions) == 1 and len(sessions[0]["entries"]) == 3
    for request in requests:
        outcome = outcomes[request.id]
        assert outcome.batch_size == 3 and outcome.solo is None and outcome.exit == 0
        assert [p.name for p in outcome.profiles] == ["k(const float *, float *)"]
    assert not list(spool.requests.glob("*.json")) and not list(spool.outcomes.glob("*.json"))
    protected = json.loads(Path(requests[0].plan).read_text())["protect"]
    assert {str(Path(r.plan).parent) for r in requests} <= set(protected)  # each protects the others' inputs
    traced = [json.loads(line)["purpose"] for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert "ncu batch of 3: 3 confirmed" in traced  # how often batches formed is measured, not guessed


def _profile_together(tmp_path: Path, count: int) -> list:
    """``profile_requirements(batched=True)`` of ``count`` candidates from their own threads, released at once from
    behind the ncu turn (so they meet in one session): each one's result."""
    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.isolation.gpu_lock import profiler_turn
    from ptxbench.evaluate.proof.batching import default_spool
    from ptxbench.evaluate.proof.profiling import profile_requirements

    results: list = [None] * count

    def profile(i: int) -> None:
        results[i] = profile_requirements(_small_rmsnorm(), Arch.SM_90A, tmp_path / f"candidate{i}.so", timeout_s=60,
                                          batched=True)

    threads = [threading.Thread(target=profile, args=(i,)) for i in range(count)]
    with profiler_turn():
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while len(list(default_spool().requests.glob("*.json"))) < count and time.monotonic() < deadline:
            time.sleep(0.02)
    for thread in threads:
        thread.join(60)
    return results


@pytest.fixture
def _machine(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))


def test_batched_profiling_judges_each_candidate_on_its_own_process(tmp_path: Path, monkeypatch, _machine) -> None:  # type: ignore[no-untyped-def]
    from .fake_ncu import recordings

    folder = _fake_ncu(tmp_path, monkeypatch, candidate_report=BULK_REPORT)
    for features, launches in _profile_together(tmp_path, 2):
        assert [launch.name for launch in launches] == ["k(const float *, float *)"]
        assert any(f.satisfied for f in features)
    assert [r["role"] for r in recordings(folder)] == ["batch"]


def test_a_candidate_alone_in_the_queue_gets_the_session_publish_runs(tmp_path: Path, monkeypatch, _machine) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.arch.registry import Arch
    from ptxbench.evaluate.proof.profiling import profile_requirements

    from .fake_ncu import recordings

    folder = _fake_ncu(tmp_path, monkeypatch, candidate_report=BULK_REPORT)
    _, launches = profile_requirements(_small_rmsnorm(), Arch.SM_90A, tmp_path / "candidate.so", timeout_s=60,
                                       batched=True)
    assert [launch.name for launch in launches] == ["k(const float *, float *)"]
    assert [r["role"] for r in recordings(folder)] == ["candidate"]


@pytest.mark.parametrize("batch", [{"fail": True}, {"foreign": True}, {"program": "import sys; sys.exit(1)"}])
def test_a_batch_that_says_nothing_of_a_candidate_is_profiled_again_alone(tmp_path: Path, monkeypatch, _machine,
                                                                          batch: dict) -> None:  # type: ignore[no-untyped-def]
    from .fake_ncu import recordings

    from ptxbench.evaluate.proof.batching import default_spool

    folder = _fake_ncu(tmp_path, monkeypatch, candidate_report=PLAIN_REPORT, batch=batch)
    for _, launches in _profile_together(tmp_path, 2):
        assert [launch.name for launch in launches] == ["ptxbench_counter_probe"]  # the solo session's report
    assert sorted(r["role"] for r in recordings(folder)) == ["batch", "candidate", "candidate"]
    # a batch that confirmed no one's launches pauses batching: the next pair is profiled alone at once
    assert "paused until" in (default_spool().paused() or "")
    _profile_together(tmp_path, 2)
    assert sorted(r["role"] for r in recordings(folder)) == ["batch", *["candidate"] * 4]


def test_a_pause_ends_at_its_time(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    assert spool.paused() is None
    spool.pause("paused until {until}: why", seconds=60)
    assert spool.paused() is not None and "{until}" not in spool.paused()
    spool.pause("paused until {until}: why", seconds=-1)
    assert spool.paused() is None
    (spool.root / "paused.json").write_text("not json")
    assert spool.paused() is None


def test_a_batch_that_fails_outright_sends_every_candidate_to_a_session_of_its_own(tmp_path: Path,
                                                                                  monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ptxbench.evaluate.proof import batching

    def broken(batch, spool):  # type: ignore[no-untyped-def]
        raise OSError("No space left on device")

    monkeypatch.setenv("PTXBENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(batching, "run_batch", broken)
    spool = Spool(tmp_path / "spool")
    spool.submit(_request(tmp_path, "b"))  # another candidate waits
    outcome = profiled_together(_request(tmp_path, "a"), spool)
    assert outcome.solo == "the batched session failed: OSError: No space left on device"
    assert spool.collect("b").solo == outcome.solo


def test_a_candidate_without_launches_in_the_batch_is_judged_in_a_session_of_its_own(tmp_path: Path) -> None:
    """Only launches are taken from a batch: a failure (killed, an error, nothing run on the GPU) is confirmed alone."""
    batch = [_request(tmp_path, "a"), _request(tmp_path, "b")]
    ran = {"a": {"pid": 11, "exit": 0, "killed": False}, "b": {"pid": 12, "exit": None, "killed": True}}
    ours, silent = split(batch, ran, [_profile(11, "ka")], {"a": "", "b": ""})
    assert ours.solo is None and silent.solo == "no launch of its process in the batched session"


def test_a_candidate_killed_or_silent_in_a_batch_fails_as_it_would_alone(tmp_path: Path) -> None:
    from ptxbench.evaluate.child.profile_one import OUT_OF_MEMORY_MARK
    from ptxbench.evaluate.proof.profiling import ProfiledRunFailed, outcome_profiles

    with pytest.raises(ProfiledRunFailed, match="no end within 7 s under ncu"):
        outcome_profiles(ProfileOutcome(id="a", batch_size=2, killed=True), timeout_s=7)
    with pytest.raises(ProfiledRunFailed, match="no kernel launch") as failed:
        outcome_profiles(ProfileOutcome(id="a", batch_size=2, exit=3, output=f"{OUT_OF_MEMORY_MARK} (x)"), 7)
    assert failed.value.out_of_memory
