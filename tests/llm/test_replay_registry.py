"""Replay provider, the provider registry's error messages, and pricing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ptxbench.errors import ApiKeyMissing, ProviderError, ProviderSdkMissing, UnknownProvider
from ptxbench.llm.client import complete_all_sync
from ptxbench.llm.pricing import cost
from ptxbench.llm.providers import get_provider, parse_model
from ptxbench.llm.types import CompletionRequest
from ptxbench.prompts.conversation import Message
from ptxbench.records.completion import Usage


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def replay_request(spec: str, sample_index: int = 0, **metadata: str | int) -> CompletionRequest:
    return CompletionRequest(
        model=spec, messages=[Message(role="user", content="go")], sample_index=sample_index, metadata=metadata
    )


def test_replay_hits_and_misses(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "runs.jsonl",
        [
            {"task": "gemm", "sample": 0, "completion": "turn zero", "model": "openai:gpt-5"},
            {"task": "gemm", "sample": 0, "turn": 1, "completion": "turn one", "extra": "ignored"},
            {"task": "gemm", "sample": 1, "completion": "second sample"},
        ],
    )
    spec = f"replay:{path}"
    provider = get_provider(spec)
    requests = [
        replay_request(spec, task="gemm", sample=0),
        replay_request(spec, task="gemm", sample=0, turn=1),
        replay_request(spec, sample_index=1, task="gemm"),  # sample defaults to sample_index
        replay_request(spec, task="softmax", sample=0),
        replay_request(spec),
    ]
    done = complete_all_sync(requests, provider, concurrency=2, cache=None)
    assert [c.text for c in done[:3]] == ["turn zero", "turn one", "second sample"]
    assert done[0].model == "openai:gpt-5" and done[1].model == spec
    assert "softmax" in (done[3].error or "") and done[3].text == ""
    assert "metadata['task']" in (done[4].error or "")


def test_replay_rejects_bad_files(tmp_path: Path) -> None:
    dup = write_jsonl(
        tmp_path / "dup.jsonl",
        [
            {"task": "t", "sample": 0, "completion": "a", "model": "m1"},
            {"task": "t", "sample": 0, "completion": "b", "model": "m2"},
        ],
    )
    with pytest.raises(ProviderError, match="dup.jsonl:2"):
        get_provider(f"replay:{dup}")
    assert get_provider(f"replay:{dup}", model="m2").entries  # type: ignore[attr-defined]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "t", "sample": 0}\n')
    with pytest.raises(ProviderError, match="bad.jsonl:1: not a replay entry: missing field 'completion'$"):
        get_provider(f"replay:{bad}")
    bad.write_text('{"task": "t", "sample": -1, "completion": "a"}\n')
    with pytest.raises(ProviderError, match="bad.jsonl:1: not a replay entry: field 'sample': Input should be greater"):
        get_provider(f"replay:{bad}")
    with pytest.raises(ProviderError, match="cannot read"):
        get_provider(f"replay:{tmp_path / 'absent.jsonl'}")


def test_model_spec_parsing() -> None:
    assert parse_model("ollama:llama3:8b") == ("ollama", "llama3:8b")
    with pytest.raises(ProviderError, match="'provider:name'"):
        parse_model("gpt-5")


def test_unknown_provider_names_the_known_ones() -> None:
    with pytest.raises(UnknownProvider, match="unknown provider 'gemini'.*openai.*anthropic"):
        get_provider("gemini:pro")


def test_bad_option_is_a_clear_error() -> None:
    with pytest.raises(ProviderError, match="bad option for provider 'replay'"):
        get_provider("replay:x.jsonl", colour="blue")


@pytest.mark.parametrize(("spec", "variable"), [("openai:gpt-5", "OPENAI_API_KEY"), ("anthropic:claude-opus-4-5", "ANTHROPIC_API_KEY")])
def test_missing_api_key_names_the_variable(spec: str, variable: str) -> None:
    pytest.importorskip(spec.split(":")[0])
    with pytest.raises(ApiKeyMissing, match=variable):
        get_provider(spec)


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    with pytest.raises(ProviderSdkMissing, match=r"pip install 'ptxbench\[llm\]'"):
        get_provider("openai:gpt-5", api_key="k")


def test_pricing() -> None:
    usage = Usage(input_tokens=2_000_000, output_tokens=1_000_000)
    assert cost("openai:gpt-5", usage) == pytest.approx(2 * 1.25 + 10.0)
    assert cost("anthropic:claude-sonnet-4-5-20250929", usage) == pytest.approx(2 * 3.0 + 15.0)
    assert cost("openai:gpt-5-mini", usage) == pytest.approx(2 * 0.25 + 2.0)  # not gpt-5's price
    assert cost("openai:some-future-model", usage) is None
    assert cost("vllm:Qwen/Qwen3-8B", usage) == 0.0 and cost("hf:/models/x", usage) == 0.0
    assert cost("replay:runs.jsonl", usage) is None


def test_provider_errors_are_grouped_by_reason_most_common_first() -> None:
    from ptxbench.records.completion import Completion, Extraction, ExtractionStatus
    from ptxbench.records.trajectory import ItemResult, Turn
    from ptxbench.refine.loop import provider_errors

    def item(sample: int, error: str | None) -> ItemResult:
        turn = Turn(turn=0, completion=Completion(model="m", text="", error=error),
                    extraction=Extraction(status=ExtractionStatus.PROVIDER_ERROR))
        return ItemResult(task="softmax", task_hash="h", sample=sample, arch="sm_90a", context="none",
                          prompt_version="v", turns=[turn], passed=False)

    results = [item(0, "timeout after 900 s"), item(1, "no replayed answer for sample=1"),
               item(2, "no replayed answer for sample=2"), item(3, None), item(4, "timeout after 900 s"),
               item(5, "no replayed answer for sample=5"), item(6, "HTTP 401: bad key")]
    assert provider_errors(results) == [("e.g. no replayed answer for sample=1", 3), ("timeout after 900 s", 2),
                                        ("HTTP 401: bad key", 1)]
    assert provider_errors(results, shown=1, width=10) == [("e.g. no r…", 3)]
    assert provider_errors([item(0, None)]) == []
