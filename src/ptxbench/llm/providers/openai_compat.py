"""OpenAI chat completions through the official SDK, for OpenAI itself and for any server that speaks
the same protocol (vLLM, SGLang, Ollama, hosted gateways). Retries and timeouts are the SDK's."""

from __future__ import annotations

import os
import re
import time
from typing import Any

from ptxbench.errors import ProviderError
from ptxbench.llm.pricing import cost
from ptxbench.llm.providers.base import PerLoop, check_model, require_sdk, resolve_api_key
from ptxbench.llm.types import CompletionRequest
from ptxbench.records.completion import Completion, Usage

DEFAULT_BASE_URLS = {"ollama": "http://localhost:11434/v1"}
NEEDS_BASE_URL = frozenset({"vllm", "sglang", "ollama"})
# Local servers ignore the key, but the SDK insists on one.
DUMMY_KEY = "not-needed"
# OpenAI's reasoning models refuse temperature/top_p other than the default and take
# max_completion_tokens instead of max_tokens.
_REASONING = re.compile(r"^(o\d|gpt-5)")


class OpenAICompatProvider:
    def __init__(
        self,
        name: str,
        *,
        kind: str = "openai",
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        timeout_s: float = 600.0,
    ) -> None:
        openai = require_sdk("openai", "llm", kind)
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URLS.get(kind)
        if kind in NEEDS_BASE_URL and not base_url:
            raise ProviderError(f"provider {kind!r} needs a server: pass --base-url (e.g. http://localhost:8000/v1) or set OPENAI_BASE_URL")
        key = resolve_api_key(api_key, "OPENAI_API_KEY", kind, fallback=DUMMY_KEY if base_url else None)
        self.spec = f"{kind}:{name}"
        self.name = name
        self.official = base_url is None or "api.openai.com" in base_url
        self._client = PerLoop(
            lambda: openai.AsyncOpenAI(api_key=key, base_url=base_url, max_retries=max_retries, timeout=timeout_s)
        )

    def _arguments(self, request: CompletionRequest) -> dict[str, Any]:
        p = request.params
        args: dict[str, Any] = {
            "model": self.name,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        }
        if self.official and _REASONING.match(self.name):
            args["max_completion_tokens"] = p.max_tokens
            return args
        args["max_tokens"] = p.max_tokens
        args["temperature"] = p.temperature
        if p.top_p is not None:
            args["top_p"] = p.top_p
        return args

    async def complete(self, request: CompletionRequest) -> Completion:
        check_model(request, self.spec)
        start = time.perf_counter()
        response = await self._client.get().chat.completions.create(**self._arguments(request))
        choice = response.choices[0]
        u = response.usage
        usage = Usage(input_tokens=(u and u.prompt_tokens) or 0, output_tokens=(u and u.completion_tokens) or 0)
        usage.cost_usd = cost(self.spec, usage)
        return Completion(
            model=request.model,
            text=choice.message.content or "",
            finish_reason=choice.finish_reason,
            usage=usage,
            latency_s=time.perf_counter() - start,
        )
