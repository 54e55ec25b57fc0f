"""`ptxbench run` end to end on the CPU: a local OpenAI-compatible server plays the model, the static
evaluator grades, feedback flows back over turns, and everything lands in the run directory."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ptxbench.cli import app
from ptxbench.records.trajectory import ItemResult

from ..conftest import EXAMPLES
from .conftest import FakeLLMServer, Reply

runner = CliRunner()

BROKEN = '''```cuda
#include <cuda_bf16.h>
extern "C" int transpose(const __nv_bfloat16* __restrict__ X, __nv_bfloat16* __restrict__ Y, int64_t R,
                         int64_t C, cudaStream_t stream) {
    return undeclared_status
}
```'''


def _run(server: FakeLLMServer, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["run", "--model", "openai:test-model", "--base-url", f"{server.url}/v1",
                               "--tasks", "transpose", "--turns", "3", "--out", str(out), *extra])


def test_multi_turn_run_with_feedback_resume_and_cache(server: FakeLLMServer, tmp_path: Path) -> None:
    plain_kernel = (EXAMPLES / "transpose.cu").read_text()
    server.script.extend([Reply(text=BROKEN), Reply(text=f"Fixed:\n```cuda\n{plain_kernel}\n```"),
                          Reply(text="I am not sure how to use TMA.")])
    out = tmp_path / "run"
    result = _run(server, out)
    assert result.exit_code == 0, result.output
    assert "static stage only" in result.output and "0/1 passed" in result.output

    header = json.loads((out / "run.json").read_text())
    assert header["kind"] == "run" and header["config"]["turns"] == 3 and header["toolchain"]["nvcc"]
    item = out / "items" / "transpose" / "sample_000"
    record = ItemResult.model_validate_json((item / "result.json").read_text())
    assert [t.feedback.stage for t in record.turns] == ["compile", "static", "extraction"]
    assert not record.passed and not record.verified_on_gpu
    assert "cpp error" in record.turns[0].feedback.text and "undeclared_status" in record.turns[0].feedback.text
    assert "tma.load" in record.turns[1].feedback.text
    assert (item / "turn_1" / "candidate.cu").read_text().strip() == plain_kernel.strip()
    assert record.usage.input_tokens == 3 * 11 and record.usage.output_tokens == 3 * 7

    # The model saw its own answer and the harness's findings before each retry.
    second = server.received[1].body["messages"]
    assert second[-2]["role"] == "assistant" and "undeclared_status" in second[-2]["content"]
    assert second[-1]["role"] == "user" and "Compilation failed" in second[-1]["content"]
    assert "2 attempts left" in second[-1]["content"]
    assert server.received[0].body["model"] == "test-model"

    # A rerun resumes: nothing is sent again.
    sent = len(server.received)
    again = _run(server, out)
    assert again.exit_code == 0, again.output
    assert len(server.received) == sent

    # Deleting the result re-runs the item, but every completion comes from the cache.
    (item / "result.json").unlink()
    cached = _run(server, out)
    assert cached.exit_code == 0 and len(server.received) == sent
    replayed = ItemResult.model_validate_json((item / "result.json").read_text())
    assert all(t.completion.cached for t in replayed.turns)

    # Another configuration in the same directory is refused, not mixed in.
    other = _run(server, out, "--context", "arch")
    assert other.exit_code != 0
    assert "another configuration" in str(other.exception) + other.output


def test_generate_samples_without_evaluating(server: FakeLLMServer, tmp_path: Path) -> None:
    server.script.extend([Reply(text=BROKEN), Reply(text=BROKEN)])
    out = tmp_path / "gen"
    result = runner.invoke(app, ["generate", "--model", "openai:m", "--base-url", f"{server.url}/v1",
                                 "--tasks", "transpose", "--samples", "2", "--temperature", "0.2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(server.received) == 2 and server.received[0].body["temperature"] == 0.2
    for sample in ("sample_000", "sample_001"):
        record = ItemResult.model_validate_json((out / "items" / "transpose" / sample / "result.json").read_text())
        assert len(record.turns) == 1 and record.turns[0].feedback is None and record.turns[0].extraction.ok
    refused = runner.invoke(app, ["generate", "--model", "openai:m", "--turns", "2"])
    assert refused.exit_code != 0


def test_dry_run_sends_nothing_and_never_shows_held_out_shapes(server: FakeLLMServer, tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--model", "openai:gpt-4o", "--base-url", f"{server.url}/v1",
                                 "--tasks", "gemm_bf16,softmax", "--samples", "3", "--turns", "2", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert server.received == []
    assert "6 items, at most 12 requests" in result.output
    assert 'extern "C" int gemm_bf16(' in result.output and "single-token" not in result.output


def test_gpu_evaluation_feedback_names_the_failure() -> None:
    from ptxbench.arch.registry import Arch
    from ptxbench.records.evaluation import Comparison, Evaluation, Guard, GuardFinding, Status, TrialResult
    from ptxbench.refine.graders import render_evaluation_feedback

    wrong = Comparison(output="Y", passed=False, elements=100, mismatched=3, nonfinite=1, max_abs_error=2.5,
                       max_rel_error=1.0, worst_index=[0, 7], worst_value=float("nan"), worst_expected=0.25)
    evaluation = Evaluation(candidate="c.cu", task="softmax", task_hash="h", arch=Arch.SM_90A, status=Status.INCORRECT,
                            message="wrong on r300", trials=[TrialResult(workload="r300-c128256", role="heldout",
                                                                         seed=1, comparisons=[wrong], passed=False)])
    passed, stage, text = render_evaluation_feedback(evaluation)
    assert not passed and stage == "gpu"
    # a held-out workload is checked, never shown: not its name, element count or index
    assert "a held-out workload (heldout), output Y: out of tolerance (1 NaN/Inf), max abs error 2.5" in text
    assert "r300-c128256" not in text and "of 100" not in text and "[0, 7]" not in text
    shown = evaluation.model_copy(update={"trials": [TrialResult(workload="r512-c151936-qwen-vocab", role="visible",
                                                                 seed=1, comparisons=[wrong], passed=False)]})
    text = render_evaluation_feedback(shown)[2]
    assert "r512-c151936-qwen-vocab (visible), output Y: 3 of 100" in text and "index [0, 7]" in text
    rejected = evaluation.model_copy(update={"status": Status.REJECTED, "guards": [
        GuardFinding(guard=Guard.OTHER_STREAM, detail="work ran on stream 9")]})
    assert "rejected: other_stream: work ran on stream 9" in render_evaluation_feedback(rejected)[2]
