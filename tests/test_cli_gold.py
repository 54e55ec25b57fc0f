"""`ptxbench eval --gold` takes the bundled reference kernels (no paths), and eval without paths says what
it needs. Without a GPU the gold run is static: every reference kernel is recorded as NO_GPU with its
requirements found in the SASS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ptxbench.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_gold_evaluates_every_reference_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ptxbench.evaluate.fleet.run.gpu_available", lambda: False)
    result = runner.invoke(app, ["eval", "--gold", "--out", str(tmp_path / "gold")])
    assert result.exit_code == 0, result.output
    records = sorted((tmp_path / "gold").rglob("result.json"))
    tasks = {json.loads(r.read_text())["task"] for r in records}
    assert tasks >= {"add_rmsnorm", "attention_bwd", "attention_fp8_fwd", "attention_fwd", "decode_gqa_paged",
                     "gemm_bf16", "gemm_fp8", "gemm_fp8_blockscale", "mla_decode_paged", "moe_grouped_gemm",
                     "prefill_gqa_ragged", "rmsnorm",
                     "rope", "silu_mul", "softmax", "transpose"}
    for record in records:
        evaluation = json.loads(record.read_text())
        assert evaluation["infra_failure"] == "NO_GPU"
        assert all(r["stage"] == "sass" for r in evaluation["static"]["requirements"]), evaluation["task"]
    stored = (records[0].parent / "candidate.cu").read_text()
    assert "inlined by PTXBench" in stored  # the run keeps exactly what was compiled
    from ptxbench.tasks.loader import bundled_suite

    assert tasks == {t.id for t in bundled_suite()}, "every task of the suite has a reference kernel"
    assert "have no reference kernel" not in " ".join(result.output.split())


def test_gold_names_the_tasks_it_does_not_evaluate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that lacks some tasks' references says which, so a gold run never passes over them silently."""
    from ptxbench.arch.registry import Arch
    from ptxbench.cli import eval as eval_cli
    from ptxbench.tasks.loader import bundled_suite

    ids = sorted(t.id for t in bundled_suite())
    for task_id in ids[1:-1]:
        (tmp_path / f"{task_id}.cu").write_text("")
    said: list[str] = []
    monkeypatch.setattr(eval_cli.console, "print", lambda text, **_: said.append(str(text)))
    eval_cli._say_tasks_without_reference(tmp_path, Arch.SM_90A)
    text = " ".join(" ".join(said).split())
    assert "2 of the suite's tasks have no reference kernel for sm_90a" in text
    assert f"{ids[0]}, {ids[-1]}" in text
    said.clear()
    (tmp_path / f"{ids[0]}.cu").write_text("")
    (tmp_path / f"{ids[-1]}.cu").write_text("")
    eval_cli._say_tasks_without_reference(tmp_path, Arch.SM_90A)
    assert not said


def test_eval_needs_paths_or_gold(tmp_path: Path) -> None:
    result = runner.invoke(app, ["eval", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--gold" in result.output
    result = runner.invoke(app, ["eval", "--gold", "kernels/examples", "--out", str(tmp_path / "y")])
    assert result.exit_code == 2 and "no paths" in result.output
