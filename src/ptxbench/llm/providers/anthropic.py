"""Anthropic messages API through the official SDK. The API takes the system prompt as a parameter,
not as a message, so system messages are joined and moved there. Retries and timeouts are the SDK's.

SDK 1.0 dropped ``temperature``/``top_p`` from ``messages.create`` (the API deprecates them for newer
models), so they travel in ``extra_body``: the same bytes on the wire with every SDK version. Models
that refuse them need ``send_sampling=False``; ``top_p`` is sent only when set, as Claude 4.5+ refuses
both together.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ptxbench.llm.pricing import cost
from ptxbench.llm.providers.base import PerLoop, check_model, require_sdk, resolve_api_key
from ptxbench.llm.types import CompletionRequest
from ptxbench.records.completion import Completion, Usage


class AnthropicProvider:
    def __init__(
        self,
        name: str,
        *,
        kind: str = "anthropic",
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        timeout_s: float = 600.0,
        send_sampling: bool = True,
    ) -> None:
        anthropic = require_sdk("anthropic", "llm", kind)
        key = resolve_api_key(api_key, "ANTHROPIC_API_KEY", kind)
        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        self.spec = f"{kind}:{name}"
        self.name = name
        self.send_sampling = send_sampling
        # An explicit timeout also stops the SDK refusing large max_tokens without streaming.
        self._client = PerLoop(
            lambda: anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout_s)
        )

    def _arguments(self, request: CompletionRequest) -> dict[str, Any]:
        p = request.params
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        args: dict[str, Any] = {
            "model": self.name,
            "max_tokens": p.max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages if m.role != "system"],
        }
        if system:
            args["system"] = system
        if self.send_sampling:
            sampling = {"temperature": p.temperature, "top_p": p.top_p}
            args["extra_body"] = {k: v for k, v in sampling.items() if v is not None}
        return args

    async def complete(self, request: CompletionRequest) -> Completion:
        check_model(request, self.spec)
        start = time.perf_counter()
        response = await self._client.get().messages.create(**self._arguments(request))
        u = response.usage
        # Prompt-cache reads and writes are input tokens too (we never ask for caching, but count them).
        cached = (getattr(u, field, None) or 0 for field in ("cache_creation_input_tokens", "cache_read_input_tokens"))
        input_tokens = u.input_tokens + sum(cached)
        usage = Usage(input_tokens=input_tokens, output_tokens=u.output_tokens)
        usage.cost_usd = cost(self.spec, usage)
        return Completion(
            model=request.model,
            text="".join(block.text for block in response.content if block.type == "text"),
            finish_reason=response.stop_reason,
            usage=usage,
            latency_s=time.perf_counter() - start,
        )
