"""`ptxbench eval` without a GPU: builds, reads, records NO_GPU (never a candidate failure), resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.records.evaluation import Evaluation, InfraFailure, Status

from ..conftest import EXAMPLES, FIXTURES

runner = CliRunner()


def test_eval_on_cpu_records_infrastructure_failures_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "no CUDA GPU is visible" in result.output
    record = out / "items" / "softmax" / "softmax" / "result.json"
    evaluation = Evaluation.model_validate_json(record.read_text())
    assert evaluation.infra_failure is InfraFailure.NO_GPU and evaluation.status is None
    assert evaluation.build is not None and evaluation.build.ok and evaluation.static is not None
    assert (record.parent / "candidate.cu").read_text() == (EXAMPLES / "softmax.cu").read_text()
    stamp = record.stat().st_mtime_ns
    again = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out)])
    assert again.exit_code == 0 and record.stat().st_mtime_ns == stamp, "a finished item is not redone"
    regraded = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--regrade"])
    assert regraded.exit_code == 0, regraded.output


def test_a_run_resumes_with_other_lanes_but_not_with_other_trials(tmp_path: Path) -> None:
    import json

    out = tmp_path / "eval"
    first = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--lanes", "1"])
    assert first.exit_code == 0, first.output
    assert "lanes" not in json.loads((out / "run.json").read_text())["config"]["options"]
    lanes = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--lanes", "3"])
    assert lanes.exit_code == 0, lanes.output
    # a header written before lanes were left out of the configuration resumes too
    header = json.loads((out / "run.json").read_text())
    header["config"]["options"]["lanes"] = 1
    (out / "run.json").write_text(json.dumps(header))
    old = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out)])
    assert old.exit_code == 0, old.output
    trials = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(out), "--trials", "5"])
    assert trials.exit_code != 0 and "another configuration" in str(trials.exception) + trials.output


def test_eval_reports_compile_errors_as_the_candidates(tmp_path: Path) -> None:
    broken = tmp_path / "transpose.cu"
    broken.write_text((FIXTURES / "cpp_syntax_error.cu").read_text())
    result = runner.invoke(app, ["eval", str(broken), "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    evaluation = Evaluation.model_validate_json(
        (tmp_path / "eval" / "items" / "transpose" / "transpose" / "result.json").read_text())
    assert evaluation.build is not None and not evaluation.build.ok


def test_eval_takes_a_generations_file(tmp_path: Path) -> None:
    import json

    kernel = (EXAMPLES / "transpose.cu").read_text()
    lines = [{"task": "transpose", "sample": 0, "completion": f"Here:\n```cuda\n{kernel}\n```"},
             {"task": "transpose", "sample": 1, "completion": "I cannot do this."}]
    generations = tmp_path / "gen.jsonl"
    generations.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = runner.invoke(app, ["eval", str(generations), "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    done = sorted(p.parent.name for p in (tmp_path / "eval" / "items" / "transpose").glob("*/result.json"))
    assert done == ["sample_000", "sample_001"], "the answer without code is an item too"
    without_code = Evaluation.model_validate_json(
        (tmp_path / "eval" / "items" / "transpose" / "sample_001" / "result.json").read_text())
    assert without_code.extraction == "no_code_block" and without_code.build is None
    assert without_code.generation is not None and without_code.generation.sample == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"completion": "x"}\n')
    refused = runner.invoke(app, ["eval", str(bad), "--out", str(tmp_path / "eval2")])
    assert refused.exit_code != 0


def test_eval_refuses_gpu_choices_it_cannot_honour(tmp_path: Path) -> None:
    candidate = str(EXAMPLES / "softmax.cu")
    for arguments, message in [(["--gpus", "0"], "GPU 0 is not visible"),
                               (["--gpus", "zero"], "GPU indices separated by commas"),
                               (["--backend", "ray", "--gpus", "0"], "every GPU of the cluster is used"),
                               (["--address", "auto"], "use it with --backend ray"),
                               (["--backend", "slurm"], "local or ray")]:
        result = runner.invoke(app, ["eval", candidate, "--out", str(tmp_path / "eval"), *arguments])
        assert result.exit_code == 2 and message in result.output, (arguments, result.output)
        assert not (tmp_path / "eval").exists(), "nothing is written before the choice is valid"


def test_eval_on_a_ray_cluster_without_gpus_says_so_and_disconnects(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    result = runner.invoke(app, ["eval", str(EXAMPLES / "softmax.cu"), "--out", str(tmp_path / "eval"),
                                 "--backend", "ray"])
    assert result.exit_code != 0
    assert "the Ray cluster has no GPU" in str(result.exception)
    assert not ray.is_initialized(), "the Ray instance the command started is shut down"


def test_the_cli_states_the_evaluators_default_lanes() -> None:
    from ptxbench.evaluate.evaluator import DEFAULT_LANES, EvalOptions

    result = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "200"})
    assert EvalOptions().lanes == DEFAULT_LANES and f"(default {DEFAULT_LANES})" in result.output


@pytest.mark.parametrize(("fixture", "task"), [("cpp_syntax_error.cu", "softmax"),
                                               ("rmsnorm_wrong_signature.cu", "rmsnorm")])
def test_a_build_failure_is_the_candidates_also_without_a_gpu(tmp_path: Path, fixture: str, task: str) -> None:
    """A file that does not build is COMPILE_ERROR, as on a GPU machine, never the harness's NO_GPU."""
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", str(FIXTURES / fixture), "--task", task, "--out", str(out)])
    assert result.exit_code == 0, result.output
    (record,) = out.glob("items/*/*/result.json")
    evaluation = Evaluation.model_validate_json(record.read_text())
    assert evaluation.status is Status.COMPILE_ERROR and evaluation.infra_failure is None, evaluation
    assert evaluation.build is not None and not evaluation.build.ok and evaluation.message
