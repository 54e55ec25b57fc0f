"""The run directory against candidate code that writes it: files the driver wrote are restored from its
memory at the end of the run, files it did not write are moved into quarantine/, and both are reported."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ptxbench.arch.registry import Arch
from ptxbench.evaluate.fleet.run import evaluate_candidates
from ptxbench.records.evaluation import Evaluation, Status
from ptxbench.records.rundir import QUARANTINE_DIR, RunDir, RunHeader, RunLedger

from .scaleout import FAKE, OPTIONS, candidates


def _open(path: Path) -> RunDir:
    return RunDir.open(path, RunHeader(kind="eval", config={"arch": "sm_90a"}))


def test_the_ledger_restores_what_it_wrote_and_quarantines_what_it_did_not(tmp_path: Path) -> None:
    rundir = _open(tmp_path / "run")
    ledger = RunLedger(rundir)
    item = rundir.item("softmax", "a")
    ledger.write_text(item / "result.json", '{"status": "INCORRECT"}\n')
    ledger.write_text(item / "build.log", "log\n")
    (item / "result.json").write_text('{"status": "PASSED"}\n')
    (item / "build.log").unlink()
    (item / "placement.json").write_text("{}")
    forged = rundir.item("softmax", "forged")
    forged.mkdir(parents=True)
    (forged / "result.json").write_text('{"status": "PASSED"}\n')
    (rundir.path / "run.json").write_text("{}")
    (rundir.path / "FORGED_BY_CANDIDATE.json").write_text("{}")
    audit = ledger.audit()
    assert (item / "result.json").read_text() == '{"status": "INCORRECT"}\n' and (item / "build.log").is_file()
    assert sorted(audit.restored) == ["items/softmax/a/build.log", "items/softmax/a/result.json", "run.json"]
    assert sorted(audit.quarantined) == ["FORGED_BY_CANDIDATE.json", "items/softmax/a/placement.json",
                                         "items/softmax/forged/result.json"]
    assert (rundir.path / QUARANTINE_DIR / "items/softmax/forged/result.json").is_file()
    assert rundir.results() == [item / "result.json"], "metrics and reports never see the planted result"
    assert "items/softmax/forged/result.json" in audit.summary()
    assert ledger.audit().clean, "a second look finds everything as the driver left it"


def test_a_link_or_a_folder_in_place_of_a_written_file_is_replaced(tmp_path: Path) -> None:
    rundir = _open(tmp_path / "run")
    ledger = RunLedger(rundir)
    item = rundir.item("softmax", "a")
    ledger.write_text(item / "result.json", "mine\n")
    ledger.write_text(item / "build.log", "log\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("mine\n")  # the same text, but a link the candidate can change after the check
    (item / "result.json").unlink()
    os.symlink(elsewhere, item / "result.json")
    (item / "build.log").unlink()
    (item / "build.log").mkdir()
    audit = ledger.audit()
    assert not (item / "result.json").is_symlink() and (item / "result.json").read_text() == "mine\n"
    assert (item / "build.log").read_text() == "log\n"
    assert sorted(audit.restored) == ["items/softmax/a/build.log", "items/softmax/a/result.json"]


def test_a_link_planted_as_the_quarantine_folder_is_removed_first(tmp_path: Path) -> None:
    rundir = _open(tmp_path / "run")
    ledger = RunLedger(rundir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, rundir.path / QUARANTINE_DIR)
    (rundir.path / "items").mkdir()
    (rundir.path / "items" / "planted.json").write_text("{}")
    audit = ledger.audit()
    assert audit.quarantined == [f"{QUARANTINE_DIR} (not a folder: removed)", "items/planted.json"]
    assert (rundir.path / QUARANTINE_DIR).is_dir() and not (rundir.path / QUARANTINE_DIR).is_symlink()
    assert (rundir.path / QUARANTINE_DIR / "items" / "planted.json").is_file() and not list(elsewhere.iterdir())


def test_an_earlier_runs_files_are_trusted_as_they_were_when_the_run_began(tmp_path: Path) -> None:
    first = _open(tmp_path / "run")
    RunLedger(first).write_text(first.item("softmax", "old") / "result.json", "earlier\n")
    (first.item("softmax", "old") / "notes.txt").write_text("an earlier file nobody reads\n")
    rundir = _open(tmp_path / "run")
    ledger = RunLedger(rundir)
    assert ledger.audit().clean, "a resumed run does not quarantine the earlier run's files"
    (rundir.item("softmax", "old") / "notes.txt").write_text("changed during this run\n")
    (rundir.item("softmax", "old") / "result.json").unlink()
    audit = ledger.audit()
    assert audit.changed_earlier == ["items/softmax/old/notes.txt"]
    assert audit.removed_earlier == ["items/softmax/old/result.json"]


def _tamper_once(out: Path) -> Callable[[Evaluation], None]:
    """An on_done hook that, after the first item is recorded, does what a candidate did on the H200."""
    done: list[Evaluation] = []

    def hook(evaluation: Evaluation) -> None:
        done.append(evaluation)
        if len(done) != 1:
            return
        (first,) = list((out / "items").glob("*/*/result.json"))
        first.write_text(first.read_text().replace(f'"candidate": "{evaluation.candidate}"', '"candidate": "forged"'))
        planted = out / "items" / "softmax" / "planted"
        planted.mkdir(parents=True)
        (planted / "result.json").write_text(first.read_text())

    return hook


def _check_undone(out: Path, results: list[Evaluation], caplog: pytest.LogCaptureFixture) -> None:
    stored = {p.parent.name: Evaluation.model_validate_json(p.read_text()) for p in RunDir.load(out).results()}
    assert sorted(stored) == sorted(r.candidate.replace("copy ", "c0") for r in results)
    assert all(stored[r.candidate.replace("copy ", "c0")] == r for r in results), "result.json is restored"
    assert (out / QUARANTINE_DIR / "items" / "softmax" / "planted" / "result.json").is_file()
    assert "items/softmax/planted/result.json" in caplog.text and "rewritten from memory" in caplog.text


def test_the_driver_undoes_tampering_on_a_machine_without_gpus(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.fleet.run"):
        results = evaluate_candidates(candidates(2), Arch.SM_90A, out, OPTIONS, gpus=[], on_done=_tamper_once(out))
    _check_undone(out, results, caplog)


def test_the_driver_undoes_tampering_during_a_gpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PTXBENCH_FAKE_STATE", str(tmp_path))
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.fleet.run"):
        results = evaluate_candidates(candidates(2), Arch.SM_90A, out, OPTIONS, gpus=[0],
                                      handler=f"{FAKE}:FakeRunner", reference_device="cpu",
                                      on_done=_tamper_once(out))
    assert all(r.status is Status.PASSED for r in results), [r.message for r in results]
    _check_undone(out, results, caplog)


def test_a_run_stopped_midway_is_checked_on_the_way_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Stopped (here: the progress callback raises) after the tampering, the run still leaves its folder
    as the driver wrote it, so a resume reads the genuine result."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PTXBENCH_FAKE_STATE", str(tmp_path))
    out = tmp_path / "run"
    tamper = _tamper_once(out)
    kept: list[Evaluation] = []

    def tamper_then_stop(evaluation: Evaluation) -> None:
        kept.append(evaluation)
        tamper(evaluation)
        raise KeyboardInterrupt

    with caplog.at_level(logging.WARNING, logger="ptxbench.evaluate.fleet.run"), pytest.raises(KeyboardInterrupt):
        evaluate_candidates(candidates(2), Arch.SM_90A, out, OPTIONS, gpus=[0], handler=f"{FAKE}:FakeRunner",
                            reference_device="cpu", on_done=tamper_then_stop)
    (stored,) = RunDir.load(out).results()
    assert Evaluation.model_validate_json(stored.read_text()) == kept[0]
    assert "items/softmax/planted/result.json" in caplog.text
