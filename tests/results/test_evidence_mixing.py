"""Figures take runs of one evidence profile: metrics, compare and leaderboard refuse a mix in one line naming the
profiles and their runs, and the report says which profile its GPU evidence was gathered under."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.results.attempts import Attempt, attempts_from_run
from ptxbench.results.compare import compare_runs, leaderboard
from ptxbench.results.metrics import MixedProfiles, one_profile, summarize
from ptxbench.results.report.content import provenance

from ..conftest import EXAMPLES

runner = CliRunner()
MIXED = "these results mix evidence profiles (publish: a; sweep: b): one figure takes runs of one profile"


def _attempt(run: str, evidence: EvidenceProfile, **fields: object) -> Attempt:
    return Attempt(run=run, arch="sm_90a", task="softmax", sample="s", error_class="ok", evidence=evidence,
                   **fields)  # type: ignore[arg-type]


def test_one_profile_is_the_attempts_and_a_mix_is_refused() -> None:
    publish, sweep = _attempt("a", EvidenceProfile.PUBLISH), _attempt("b", EvidenceProfile.SWEEP)
    assert one_profile([publish, publish]) is EvidenceProfile.PUBLISH and one_profile([]) is None
    for figure in (lambda: summarize([publish, sweep], bootstrap=0), lambda: compare_runs([publish], [sweep], "compile"),
                   lambda: leaderboard({"a": [publish], "b": [sweep]}, "compile", bootstrap=0)):
        with pytest.raises(MixedProfiles) as refused:
            figure()
        assert str(refused.value) == MIXED


def test_the_report_names_the_profile_of_its_gpu_evidence() -> None:
    shown = dict(provenance([_attempt("b", EvidenceProfile.SWEEP, verified_on_gpu=True)], None))
    assert shown["evidence"] == "sweep"
    assert "evidence" not in dict(provenance([_attempt("b", EvidenceProfile.SWEEP)], None)), "nothing ran on a GPU"


def _eval_run(tmp_path: Path, name: str, *options: str) -> Path:
    out = tmp_path / name
    result = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), *options])
    assert result.exit_code == 0, result.output
    return out


def test_the_commands_refuse_runs_of_two_profiles_in_one_line(tmp_path: Path) -> None:
    publish = _eval_run(tmp_path, "a")  # eval's default
    sweep = _eval_run(tmp_path, "b", "--evidence", "sweep")
    assert {x.evidence for x in attempts_from_run(publish)} == {EvidenceProfile.PUBLISH}
    assert {x.evidence for x in attempts_from_run(sweep)} == {EvidenceProfile.SWEEP}
    for command in (["metrics", str(publish), str(sweep)], ["compare", str(publish), str(sweep), "--metric", "compile"],
                    ["leaderboard", str(publish), str(sweep), "--metric", "compile"]):
        refused = runner.invoke(app, command)  # `ptxbench` prints a PtxbenchError as its one line, exit code 2
        assert isinstance(refused.exception, MixedProfiles) and str(refused.exception) == MIXED, refused.output
    alone = runner.invoke(app, ["metrics", str(sweep), "--by", "evidence", "--bootstrap", "0"])
    assert alone.exit_code == 0 and "sweep" in alone.output, alone.output


def test_an_unknown_profile_is_refused_before_anything_runs(tmp_path: Path) -> None:
    refused = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(tmp_path / "x"),
                                  "--evidence", "quick"])
    assert refused.exit_code != 0 and "--evidence is publish or sweep, not 'quick'" in refused.output
    assert not (tmp_path / "x").exists()
