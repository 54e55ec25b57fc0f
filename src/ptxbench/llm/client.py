"""Run many requests through one provider: cache first, bounded concurrency, a wall-clock limit per
request, and every failure recorded as an error completion, so one bad request never costs the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Callable, cast

from ptxbench.llm.cache import CompletionCache
from ptxbench.llm.providers.base import Provider
from ptxbench.llm.types import CompletionRequest
from ptxbench.records.completion import Completion

OnResult = Callable[[int, Completion], None]
DEFAULT_TIMEOUT_S = 1800.0


async def _one(request: CompletionRequest, provider: Provider, timeout_s: float | None) -> Completion:
    start = time.perf_counter()
    try:
        return await asyncio.wait_for(provider.complete(request), timeout_s)
    except asyncio.TimeoutError:
        error = f"timed out after {timeout_s:g} s"
    except Exception as e:  # noqa: BLE001 - recorded on the item, the run goes on
        error = f"{type(e).__name__}: {e}"
    return Completion(model=request.model, text="", error=error, latency_s=time.perf_counter() - start)


async def complete_all(
    requests: Sequence[CompletionRequest],
    provider: Provider,
    *,
    concurrency: int,
    cache: CompletionCache | None,
    on_result: OnResult | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> list[Completion]:
    """Completions in the order of ``requests``. ``on_result(index, completion)`` is called as each one
    is ready (cache hits first), e.g. to write it to the run directory. ``timeout_s`` bounds one request
    including the SDK's own retries; None waits forever."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    results: list[Completion | None] = [None] * len(requests)

    def done(index: int, completion: Completion) -> None:
        results[index] = completion
        if on_result is not None:
            on_result(index, completion)

    misses = []
    for index, request in enumerate(requests):
        hit = cache.get(request) if cache is not None else None
        if hit is not None:
            done(index, hit)
        else:
            misses.append(index)

    gate = asyncio.Semaphore(concurrency)

    async def run(index: int) -> None:
        async with gate:
            completion = await _one(requests[index], provider, timeout_s)
        if cache is not None:
            cache.put(requests[index], completion)
        done(index, completion)

    await asyncio.gather(*(run(i) for i in misses))
    return cast("list[Completion]", results)  # gather returned, so every slot is filled


def complete_all_sync(
    requests: Sequence[CompletionRequest],
    provider: Provider,
    *,
    concurrency: int,
    cache: CompletionCache | None,
    on_result: OnResult | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> list[Completion]:
    """``complete_all`` for callers without an event loop (the CLI)."""
    return asyncio.run(
        complete_all(requests, provider, concurrency=concurrency, cache=cache, on_result=on_result, timeout_s=timeout_s)
    )
