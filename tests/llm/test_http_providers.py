"""The OpenAI-compatible and Anthropic providers against a real local server, through the real SDKs."""

from __future__ import annotations

import pytest

from ptxbench.errors import ProviderError
from ptxbench.llm.client import complete_all_sync
from ptxbench.llm.providers import get_provider
from ptxbench.llm.types import CompletionRequest, SamplingParams
from ptxbench.prompts.conversation import Message

from .conftest import FakeLLMServer, Reply

pytest.importorskip("openai")
pytest.importorskip("anthropic")


def request(model: str, prompt: str = "write a kernel", **params: float) -> CompletionRequest:
    return CompletionRequest(
        model=model,
        messages=[Message(role="system", content="you write PTX"), Message(role="user", content=prompt)],
        params=SamplingParams(**params),
    )


def provider_for(kind: str, server: FakeLLMServer, **options):
    if kind == "openai":
        return get_provider("openai:gpt-test", base_url=server.url + "/v1", **options)
    return get_provider("anthropic:claude-sonnet-4-5", base_url=server.url, api_key="test-key", **options)


def test_openai_text_usage_and_arguments(server: FakeLLMServer) -> None:
    server.script.append(Reply(text="mma.sync", input_tokens=30, output_tokens=5))
    provider = provider_for("openai", server)
    [done] = complete_all_sync([request("openai:gpt-test", temperature=0.2, max_tokens=99)], provider, concurrency=1, cache=None)
    assert done.error is None
    assert (done.text, done.finish_reason) == ("mma.sync", "stop")
    assert (done.usage.input_tokens, done.usage.output_tokens) == (30, 5)
    assert done.usage.cost_usd is None  # unknown model: no guessed price
    [seen] = server.received
    assert seen.path == "/v1/chat/completions"
    assert seen.body["model"] == "gpt-test"
    assert seen.body["temperature"] == 0.2 and seen.body["max_tokens"] == 99
    assert [m["role"] for m in seen.body["messages"]] == ["system", "user"]
    assert seen.headers["authorization"] == "Bearer not-needed"  # a base URL needs no real key


def test_vllm_alias_needs_a_base_url(server: FakeLLMServer) -> None:
    with pytest.raises(ProviderError, match="base-url"):
        get_provider("vllm:qwen")
    provider = get_provider("vllm:Qwen/Qwen3-8B", base_url=server.url + "/v1")
    [done] = complete_all_sync([request("vllm:Qwen/Qwen3-8B", prompt="hi")], provider, concurrency=1, cache=None)
    assert done.text == "hi" and done.usage.cost_usd == 0.0
    assert server.received[0].body["model"] == "Qwen/Qwen3-8B"
    assert get_provider("ollama:llama3:8b") is not None  # defaults to the local Ollama URL


def test_anthropic_system_goes_to_system_parameter(server: FakeLLMServer) -> None:
    server.script.append(Reply(text="wgmma", input_tokens=1000, output_tokens=100))
    provider = provider_for("anthropic", server)
    [done] = complete_all_sync(
        [request("anthropic:claude-sonnet-4-5", temperature=0.0, max_tokens=64)], provider, concurrency=1, cache=None
    )
    assert done.error is None and done.text == "wgmma" and done.finish_reason == "end_turn"
    assert done.usage.cost_usd == pytest.approx((1000 * 3.0 + 100 * 15.0) / 1e6)
    [seen] = server.received
    assert seen.path == "/v1/messages"
    # SDK < 2 sends x-api-key, later ones a bearer token
    assert "test-key" in (seen.headers.get("x-api-key", ""), seen.headers.get("authorization", "").removeprefix("Bearer "))
    assert seen.body["system"] == "you write PTX"
    assert seen.body["messages"] == [{"role": "user", "content": "write a kernel"}]
    assert (seen.body["model"], seen.body["temperature"], seen.body["max_tokens"]) == ("claude-sonnet-4-5", 0.0, 64)
    assert "top_p" not in seen.body  # Claude 4.5+ refuses temperature and top_p together


def test_anthropic_sampling_can_be_left_out(server: FakeLLMServer) -> None:
    provider = provider_for("anthropic", server, send_sampling=False)
    [done] = complete_all_sync([request("anthropic:claude-sonnet-4-5")], provider, concurrency=1, cache=None)
    assert done.error is None
    assert "temperature" not in server.received[0].body


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_sdk_retries_a_server_error(server: FakeLLMServer, kind: str) -> None:
    server.script.extend([Reply(status=500), Reply(text="second try")])
    provider = provider_for(kind, server, max_retries=2)
    model = "openai:gpt-test" if kind == "openai" else "anthropic:claude-sonnet-4-5"
    [done] = complete_all_sync([request(model)], provider, concurrency=1, cache=None)
    assert done.error is None and done.text == "second try"
    assert len(server.received) == 2


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_unauthorized_is_an_error_completion(server: FakeLLMServer, kind: str) -> None:
    server.script.append(Reply(status=401))
    provider = provider_for(kind, server, max_retries=2)
    model = "openai:gpt-test" if kind == "openai" else "anthropic:claude-sonnet-4-5"
    first, second = complete_all_sync([request(model, "a"), request(model, "b")], provider, concurrency=1, cache=None)
    assert first.text == "" and "401" in (first.error or "")
    assert second.error is None and second.text == "b"  # one failure costs no other result
    assert len(server.received) == 2  # 401 is not retried


def test_concurrency_bound_and_order(server: FakeLLMServer) -> None:
    server.script.extend(Reply(delay_s=0.1) for _ in range(6))
    provider = provider_for("openai", server)
    prompts = [f"p{i}" for i in range(6)]
    seen: list[int] = []
    done = complete_all_sync(
        [request("openai:gpt-test", p) for p in prompts],
        provider,
        concurrency=2,
        cache=None,
        on_result=lambda i, c: seen.append(i),
    )
    assert [c.text for c in done] == prompts
    assert sorted(seen) == list(range(6))
    assert server.max_active == 2


def test_provider_survives_several_event_loops(server: FakeLLMServer) -> None:
    provider = provider_for("openai", server)
    for prompt in ("one", "two"):
        [done] = complete_all_sync([request("openai:gpt-test", prompt)], provider, concurrency=1, cache=None)
        assert done.text == prompt


def test_request_for_another_model_is_refused(server: FakeLLMServer) -> None:
    provider = provider_for("openai", server)
    [done] = complete_all_sync([request("openai:other")], provider, concurrency=1, cache=None)
    assert "openai:other" in (done.error or "")
    assert server.received == []


def test_openai_reasoning_models_get_no_sampling_parameters() -> None:
    """o-series and gpt-5 refuse non-default temperature and take max_completion_tokens."""
    args = get_provider("openai:gpt-5", api_key="k")._arguments(request("openai:gpt-5", max_tokens=77))  # type: ignore[attr-defined]
    assert args["max_completion_tokens"] == 77
    assert "temperature" not in args and "max_tokens" not in args
