"""Fixit end to end on the CPU: mine → repair (scripted teacher; the evaluator is a stand-in for the GPU
one, so "verified" here means verified by that stand-in) → explain → build → train a few LoRA steps on a
tiny offline model → evaluate base and adapter through the local provider → compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.fixit.dataset import build_dataset, export
from ptxbench.fixit.evaluate import evaluate_adapter
from ptxbench.fixit.mine import mine_failures
from ptxbench.fixit.repair import explain, repair
from ptxbench.fixit.train import TrainConfig, train
from ptxbench.results.attempts import attempts_from_run

from ..llm.conftest import FakeLLMServer, Reply
from ..tiny_model import save_tiny_model
from .test_mine_and_dataset import FIXED, _run
from .test_repair import FixedWhenTiled

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")


def _tiny_model(path: Path) -> Path:
    """The tiny model with a vocabulary long enough for real prompts."""
    words = sorted(set((Path(__file__).read_text() + FIXED).split()))[:2000]
    return save_tiny_model(path, words, max_positions=16384)


def test_fixit_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeLLMServer() as teacher:
        failures = mine_failures([_run(tmp_path)], per_task=1)
        assert len(failures) == 1
        teacher.script.extend([
            Reply(text=f"```cuda\n{FIXED}\n```"),
            Reply(text="The launcher returned undeclared_value, a name declared nowhere, so the build stopped; the "
                       "fix launches the tiled transpose kernel and returns cudaGetLastError()."),
        ])
        pairs = repair(failures, "openai:teacher", tmp_path / "repairs", FixedWhenTiled(), turns=2,
                       base_url=f"{teacher.url}/v1")
        explained, rejected = explain(pairs, "openai:teacher", base_url=f"{teacher.url}/v1")
    assert len(explained) == 1 and not rejected
    records, card = build_dataset(explained)
    export(records, card, tmp_path / "data")
    assert card.records == 1 and card.by_split == {"train": 1}

    base = _tiny_model(tmp_path / "tiny")
    config = TrainConfig.model_validate(dict(
        base_model=str(base), dataset=tmp_path / "data" / "train.jsonl", output_dir=tmp_path / "adapter",
        lora_r=4, lora_alpha=8, lora_dropout=0.0, learning_rate=1e-2, max_steps=2, batch_size=1,
        gradient_accumulation_steps=1, max_seq_length=16384, device="cpu", seed=1))
    result = train(config)
    assert result.steps == 2 and result.records == 1

    base_run, adapter_run, table = evaluate_adapter(str(base), tmp_path / "adapter", ["transpose"],
                                                    tmp_path / "eval", max_tokens=8, grader=FixedWhenTiled())
    for run in (base_run, adapter_run):
        (attempt,) = attempts_from_run(run)
        assert attempt.task == "transpose"
    assert "transpose" in table
