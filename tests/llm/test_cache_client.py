"""The completion cache and ``complete_all``: reruns cost nothing, failures stay per item."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ptxbench.llm.cache import CompletionCache
from ptxbench.llm.client import complete_all_sync
from ptxbench.llm.providers import get_provider
from ptxbench.llm.types import CompletionRequest
from ptxbench.prompts.conversation import Message
from ptxbench.records.completion import Completion

from .conftest import FakeLLMServer, Reply

MODEL = "openai:gpt-test"


def request(prompt: str, sample: int = 0, **metadata: str | int) -> CompletionRequest:
    return CompletionRequest(
        model=MODEL, messages=[Message(role="user", content=prompt)], sample_index=sample, metadata=metadata
    )


class Scripted:
    """An in-process provider: answers ``text`` after ``delay_s``, or raises for prompts in ``fail``."""

    def __init__(self, delay_s: float = 0.0, fail: tuple[str, ...] = ()) -> None:
        self.delay_s, self.fail, self.calls = delay_s, fail, 0

    async def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        prompt = request.messages[-1].content
        if prompt in self.fail:
            raise RuntimeError(f"boom on {prompt}")
        await asyncio.sleep(self.delay_s)
        return Completion(model=request.model, text=prompt.upper())


def test_metadata_is_not_part_of_the_cache_key() -> None:
    assert request("a", task="t1", turn=0).cache_key() == request("a", task="t2", turn=3).cache_key()
    assert request("a", sample=0).cache_key() != request("a", sample=1).cache_key()


def test_rerun_is_served_from_cache_without_http(server: FakeLLMServer, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    provider = get_provider(MODEL, base_url=server.url + "/v1")
    cache = CompletionCache(tmp_path)
    requests = [request("x", sample=0), request("x", sample=1), request("y")]
    first = complete_all_sync(requests, provider, concurrency=3, cache=cache)
    assert len(server.received) == 3  # each sample of the same prompt is its own draw
    assert len(list(tmp_path.glob("*/*.json"))) == 3
    assert not any(c.cached for c in first)
    again = complete_all_sync(requests, provider, concurrency=3, cache=cache)
    assert len(server.received) == 3  # zero new HTTP requests
    assert all(c.cached for c in again)
    assert [c.text for c in again] == [c.text for c in first]


def test_errors_are_not_cached(server: FakeLLMServer, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    server.script.append(Reply(status=401))
    provider = get_provider(MODEL, base_url=server.url + "/v1", max_retries=0)
    cache = CompletionCache(tmp_path)
    [failed] = complete_all_sync([request("z")], provider, concurrency=1, cache=cache)
    assert failed.error is not None and cache.get(request("z")) is None
    [ok] = complete_all_sync([request("z")], provider, concurrency=1, cache=cache)
    assert ok.error is None and not ok.cached and len(server.received) == 2


def test_cache_ignores_a_corrupt_entry_and_leaves_no_temp_files(tmp_path: Path) -> None:
    cache = CompletionCache(tmp_path)
    r = request("a")
    cache.put(r, Completion(model=MODEL, text="A"))
    assert cache.get(r).text == "A"  # type: ignore[union-attr]
    cache.path(r.cache_key()).write_text("{not json")
    assert cache.get(r) is None
    assert not list(tmp_path.rglob("*.tmp"))


def test_one_failure_loses_no_other_result() -> None:
    provider = Scripted(fail=("b",))
    done = complete_all_sync([request("a"), request("b"), request("c")], provider, concurrency=2, cache=None)
    assert [c.text for c in done] == ["A", "", "C"]
    assert done[1].error == "RuntimeError: boom on b"


def test_wall_clock_timeout_per_request() -> None:
    done = complete_all_sync([request("slow")], Scripted(delay_s=5.0), concurrency=1, cache=None, timeout_s=0.05)
    assert done[0].error == "timed out after 0.05 s"


def test_cache_hits_come_first_and_skip_the_provider(tmp_path: Path) -> None:
    cache = CompletionCache(tmp_path)
    cache.put(request("b"), Completion(model=MODEL, text="cached B"))
    provider = Scripted()
    order: list[int] = []
    done = complete_all_sync(
        [request("a"), request("b")], provider, concurrency=1, cache=cache, on_result=lambda i, c: order.append(i)
    )
    assert [c.text for c in done] == ["A", "cached B"]
    assert order == [1, 0] and provider.calls == 1


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError):
        complete_all_sync([request("a")], Scripted(), concurrency=0, cache=None)
