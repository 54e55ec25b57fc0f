"""The local Hugging Face provider on a tiny random Llama built offline (and a LoRA adapter for it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.llm.client import complete_all_sync
from ptxbench.llm.providers import get_provider
from ptxbench.llm.types import CompletionRequest, SamplingParams
from ptxbench.prompts.conversation import Message

from ..tiny_model import save_tiny_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = "write a kernel that uses wgmma tma mbarrier for gemm on hopper please system user assistant :".split()


def ask(spec: str, provider, temperature: float = 0.0) -> list:
    request = CompletionRequest(
        model=spec,
        messages=[Message(role="system", content="write a kernel"), Message(role="user", content="gemm on hopper please")],
        params=SamplingParams(temperature=temperature, max_tokens=6),
    )
    return complete_all_sync([request, request], provider, concurrency=2, cache=None)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.mark.parametrize("chat_template", [True, False], ids=["chat-template", "plain"])
def test_generates_and_counts_tokens(tmp_path: Path, chat_template: bool) -> None:
    spec = f"hf:{save_tiny_model(tmp_path / 'tiny', WORDS, chat_template=chat_template)}"
    provider = get_provider(spec, device="cpu")
    first, second = ask(spec, provider)
    assert first.error is None, first.error
    assert first.usage.input_tokens > 5 and 1 <= first.usage.output_tokens <= 6
    assert first.usage.cost_usd == 0.0 and first.finish_reason in ("stop", "length")
    assert first.text == second.text  # temperature 0 is greedy
    sampled = ask(spec, provider, temperature=1.0)
    assert sampled[0].error is None


def test_loads_a_lora_adapter(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    base = save_tiny_model(tmp_path / "tiny", WORDS)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(tmp_path / "adapter")
    spec = f"hf:{base}"
    provider = get_provider(spec, device="cpu", adapter=str(tmp_path / "adapter"))
    assert isinstance(provider.model, peft.PeftModel)  # type: ignore[attr-defined]
    [done, _] = ask(spec, provider)
    assert done.error is None and done.usage.output_tokens >= 1
