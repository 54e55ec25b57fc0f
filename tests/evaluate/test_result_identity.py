"""A stored result is handed back only for the question it answered: the same source, task, arch and options.

Without a GPU, as CI runs: an edited file, a file of the same name from another folder (the reference kernel, then
the plain example) and a damaged record are each evaluated again, the earlier item kept under ``superseded/``; an
unchanged file's result is reused and said to be; other options are refused naming the option; on the stand-in
GPUs the same rule holds per item."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.arch.registry import Arch
from ptxbench.cli import app
from ptxbench.evaluate.evaluator import EvalOptions
from ptxbench.evaluate.fleet.run import Resumption, _why_again, evaluate_candidates, judged
from ptxbench.kernels import reference_folder
from ptxbench.records.evaluation import Evaluation, InfraFailure, Status

from ..conftest import EXAMPLES

runner = CliRunner()


def _eval(path: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["eval", str(path), "--out", str(out), *extra])
    assert result.exit_code == 0, result.output
    return result


def _stored(out: Path, task: str = "softmax", item: str = "softmax") -> Evaluation:
    return Evaluation.model_validate_json((out / "items" / task / item / "result.json").read_text())


def _superseded(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in (out / "superseded").glob("*/*/*/result.json"))


def test_an_edited_file_is_evaluated_again_and_its_old_result_kept_beside(tmp_path: Path) -> None:
    kernel = tmp_path / "edit" / "softmax.cu"
    kernel.parent.mkdir()
    shutil.copy(EXAMPLES / "softmax.cu", kernel)
    out = tmp_path / "eval"
    _eval(kernel, out)
    first = _stored(out)
    assert first.infra_failure is InfraFailure.NO_GPU and first.judged is not None
    stamp = (out / "items/softmax/softmax/result.json").stat().st_mtime_ns

    same = _eval(kernel, out)
    assert "1 stored result reused" in same.output and "re-evaluated" not in same.output
    assert (out / "items/softmax/softmax/result.json").stat().st_mtime_ns == stamp, "the same file is not redone"

    kernel.write_text(kernel.read_text().replace("{", "{ int broken = ", 1))  # no longer compiles
    again = _eval(kernel, out)
    assert "0 stored results reused, 1 re-evaluated: source changed" in again.output, again.output
    now = _stored(out)
    assert now.status is Status.COMPILE_ERROR, now.verdict
    assert "int broken" in (out / "items/softmax/softmax/candidate.cu").read_text(), "the new source is stored"
    assert _superseded(out) == ["superseded/softmax/softmax/1-source-changed/result.json"]
    kept = Evaluation.model_validate_json((out / _superseded(out)[0]).read_text())
    assert kept.infra_failure is InfraFailure.NO_GPU, "the earlier result is kept, not replaced"
    assert not (out / "quarantine").exists(), "what the harness set aside is not taken for tampering"


def test_the_reference_then_the_example_of_the_same_name_gives_the_examples_own_result(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    _eval(reference_folder("sm_90a") / "softmax.cu", out)
    gold = _stored(out)
    assert any(r.stage.value == "sass" for r in gold.static.requirements), "the reference's TMA is in its SASS"
    example = _eval(EXAMPLES / "softmax.cu", out)
    assert "1 re-evaluated: source changed" in example.output
    plain = _stored(out)
    assert plain.candidate == str(EXAMPLES / "softmax.cu")
    assert plain.judged is not None and gold.judged is not None
    assert plain.judged.source_sha256 != gold.judged.source_sha256
    assert not any(r.stage.value == "sass" for r in plain.static.requirements), \
        "the plain example is not reported with the reference kernel's instructions"


def test_other_options_are_refused_naming_the_option(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    _eval(EXAMPLES / "softmax.cu", out)
    refused = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--no-profile"])
    assert refused.exit_code != 0
    assert "options.profile (true -> false)" in str(refused.exception) + refused.output


def test_a_result_answers_only_its_own_question() -> None:
    """The rule itself, for every part of the question (the server's engine asks it per submission)."""
    from ptxbench.evaluate.fleet.run import Candidate
    from ptxbench.tasks.loader import get_task

    task = get_task("softmax")
    source = (EXAMPLES / "softmax.cu").read_text()
    candidate = Candidate(task=task, item="softmax", source=source, origin="softmax.cu")
    options = EvalOptions()
    stored = Evaluation(candidate="softmax.cu", task="softmax", task_hash=task.content_hash, arch=Arch.SM_90A,
                        infra_failure=InfraFailure.NO_GPU, judged=judged(candidate, options))
    assert _why_again(stored, candidate, Arch.SM_90A, options, None) is None
    assert _why_again(stored, candidate.model_copy(update={"source": source + "\n"}), Arch.SM_90A, options,
                      None) == "source changed"
    assert _why_again(stored, candidate, Arch.SM_90A, EvalOptions(trials=5), None) == "options changed"
    assert _why_again(stored, candidate, Arch.SM_90A, EvalOptions(lanes=4), None) is None, "lanes say how, not what"
    assert _why_again(stored, candidate, Arch.SM_100A, options, None) == "arch changed"
    assert _why_again(stored.model_copy(update={"task_hash": "0" * 16}), candidate, Arch.SM_90A, options,
                      None) == "task changed"
    # a record written before results said what they judged: the item's candidate.cu tells
    older = stored.model_copy(update={"judged": None})
    assert _why_again(older, candidate, Arch.SM_90A, options, source) is None
    assert _why_again(older, candidate, Arch.SM_90A, options, "other") == "source changed"


def test_an_older_record_is_reused_only_where_its_candidate_file_matches(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    _eval(EXAMPLES / "softmax.cu", out)
    record = out / "items/softmax/softmax/result.json"
    data = json.loads(record.read_text())
    data.pop("judged")
    data["version"] = 2
    record.write_text(json.dumps(data))
    assert "1 stored result reused" in _eval(EXAMPLES / "softmax.cu", out).output
    (out / "items/softmax/softmax/candidate.cu").write_text("// something else was judged\n")
    assert "1 re-evaluated: source changed" in _eval(EXAMPLES / "softmax.cu", out).output


def test_a_damaged_record_is_evaluated_again_and_kept_aside(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    _eval(EXAMPLES / "softmax.cu", out)
    record = out / "items/softmax/softmax/result.json"
    record.write_text(record.read_text()[:200])
    again = _eval(EXAMPLES / "softmax.cu", out)
    assert "1 re-evaluated: stored result damaged" in again.output, again.output
    assert _stored(out).infra_failure is InfraFailure.NO_GPU
    assert _superseded(out) == ["superseded/softmax/softmax/1-stored-result-damaged/result.json"]


def test_an_unreadable_file_in_a_folder_is_its_own_failed_item(tmp_path: Path) -> None:
    folder = tmp_path / "mixdir"
    folder.mkdir()
    shutil.copy(EXAMPLES / "softmax.cu", folder / "softmax.cu")
    (folder / "rmsnorm.cu").write_text("  \n")
    (folder / "transpose.cu").write_bytes(b"\x7fELF\x00\x01")
    out = tmp_path / "eval"
    result = _eval(folder, out)
    assert "the file is empty" in result.output
    empty = _stored(out, "rmsnorm", "rmsnorm")
    assert empty.extraction is not None and empty.extraction.value == "empty_completion"
    assert "rmsnorm.cu: the file is empty" in empty.message
    binary = _stored(out, "transpose", "transpose")
    assert binary.extraction is not None and binary.extraction.value == "no_code_block"
    assert "not a text file" in binary.message
    assert _stored(out).infra_failure is InfraFailure.NO_GPU, "the good file beside them is evaluated"
    (folder / "rmsnorm.cu").write_text((EXAMPLES / "rmsnorm.cu").read_text())  # fixed: evaluated again
    assert "1 re-evaluated: source changed" in _eval(folder, out).output


@pytest.fixture()
def _fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PTXBENCH_FAKE_STATE", str(tmp_path))


@pytest.mark.usefixtures("_fake_gpus")
def test_on_gpus_a_changed_candidate_is_evaluated_again_and_the_others_reused(tmp_path: Path) -> None:
    from .scaleout import FAKE, OPTIONS, candidates, stored

    out = tmp_path / "run"

    def run(given):  # type: ignore[no-untyped-def]
        resumption = Resumption()
        results = evaluate_candidates(given, Arch.SM_90A, out, OPTIONS, gpus=[0], handler=f"{FAKE}:FakeRunner",
                                      reference_device="cpu", resumption=resumption)
        return results, resumption

    first, _ = run(candidates(2))
    assert all(r.status is Status.PASSED for r in first), [r.message for r in first]
    before = stored(out)
    changed = candidates(2)
    changed[1] = changed[1].model_copy(update={"source": changed[1].source + "\n// edited\n"})
    second, resumption = run(changed)
    assert resumption.reused == 1 and dict(resumption.again) == {"source changed": 1}
    assert resumption.set_aside == ["superseded/softmax/c01/1-source-changed"]
    after = stored(out)
    assert after["c00"][2] == before["c00"][2], "the unchanged item is not redone"
    assert after["c01"][2] != before["c01"][2]
    assert second[1].judged is not None and second[1].judged.source_sha256 == judged(changed[1], OPTIONS).source_sha256
    assert (out / "items/softmax/c01/candidate.cu").read_text() == changed[1].source
    assert not (out / "quarantine").exists()
