"""The one-method provider protocol and the registry that turns 'provider:name' into a provider.

Implementations are imported only when asked for, so ``import ptxbench`` never pulls an SDK, and a
missing SDK surfaces as one line that names the extra to install.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
from types import ModuleType
from typing import Any, Callable, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from ptxbench.errors import ApiKeyMissing, ProviderError, ProviderSdkMissing, UnknownProvider
from ptxbench.llm.types import CompletionRequest
from ptxbench.records.completion import Completion

T = TypeVar("T")


@runtime_checkable
class Provider(Protocol):
    """Answers one request. May raise; ``complete_all`` turns exceptions into error completions."""

    async def complete(self, request: CompletionRequest) -> Completion: ...


class ModelSpec(NamedTuple):
    provider: str
    name: str


class _Entry(NamedTuple):
    module: str
    cls: str


_MODULE = "ptxbench.llm.providers."
_OPENAI = _Entry(_MODULE + "openai_compat", "OpenAICompatProvider")
PROVIDERS: dict[str, _Entry] = {
    "openai": _OPENAI,
    "vllm": _OPENAI,
    "sglang": _OPENAI,
    "ollama": _OPENAI,
    "anthropic": _Entry(_MODULE + "anthropic", "AnthropicProvider"),
    "replay": _Entry(_MODULE + "replay", "ReplayProvider"),
    "hf": _Entry(_MODULE + "hf_local", "HFLocalProvider"),
}


def parse_model(spec: str) -> ModelSpec:
    """Split 'provider:name' at the first colon (names may hold colons: paths, Ollama tags)."""
    provider, sep, name = spec.partition(":")
    if not sep or not provider or not name:
        raise ProviderError(
            f"model {spec!r} must be 'provider:name', e.g. 'openai:gpt-5'; providers: {', '.join(PROVIDERS)}"
        )
    if provider not in PROVIDERS:
        raise UnknownProvider(f"unknown provider {provider!r} in {spec!r}; known: {', '.join(PROVIDERS)}")
    return ModelSpec(provider, name)


def get_provider(spec: str, **options: Any) -> Provider:
    """A provider bound to one model spec; ``options`` are the implementation's keyword arguments
    (e.g. ``base_url``, ``max_retries``, ``adapter``)."""
    kind, name = parse_model(spec)
    entry = PROVIDERS[kind]
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    try:
        inspect.signature(cls).bind(name, kind=kind, **options)
    except TypeError as e:  # an option the implementation does not take
        raise ProviderError(f"bad option for provider {kind!r}: {e}") from e
    return cls(name, kind=kind, **options)


def require_sdk(module: str, extra: str, provider: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ProviderSdkMissing(
            f"provider {provider!r} needs the {module!r} package: pip install 'ptxbench[{extra}]'"
        ) from e


def resolve_api_key(explicit: str | None, env_var: str, provider: str, fallback: str | None = None) -> str:
    """The explicit key, else the environment variable, else ``fallback`` (a dummy for servers that
    ignore keys); none of them is an error naming the variable."""
    key = explicit or os.environ.get(env_var) or fallback
    if not key:
        raise ApiKeyMissing(f"provider {provider!r} needs an API key: set {env_var}")
    return key


def check_model(request: CompletionRequest, spec: str) -> None:
    """A provider is bound to one model; a request for another would be answered (and cached) wrongly."""
    if request.model != spec:
        raise ProviderError(f"request for {request.model!r} sent to the provider for {spec!r}")


class PerLoop(Generic[T]):
    """One SDK client per event loop: an async HTTP client's connections belong to the loop that opened
    them, and each ``complete_all_sync`` call runs a fresh loop."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._loop: asyncio.AbstractEventLoop | None = None
        self._value: T | None = None

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        if self._value is None or self._loop is not loop:
            self._value, self._loop = self._factory(), loop
        return self._value
