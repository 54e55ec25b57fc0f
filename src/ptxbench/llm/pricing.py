"""What a completion cost, from list prices per million tokens, so a run can report its spend.

Self-hosted providers (vLLM, SGLang, Ollama, local Hugging Face) cost 0.0: nothing is billed per
token (the GPU hours are another ledger). Replay costs None: the answers were paid for when they were
recorded, and 0.0 would understate them. An unknown hosted model is None, never a guess.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ptxbench.records.completion import Usage


class Price(NamedTuple):
    input_per_m: float
    output_per_m: float


# Snapshot of public list prices (USD per 1M tokens, standard tier, no batch/cache discounts),
# dated 2026-12. Prices change: check the vendor's pricing page before quoting a cost.
PRICES: dict[str, Price] = {
    "openai:gpt-5": Price(1.25, 10.0),
    "openai:gpt-5-mini": Price(0.25, 2.0),
    "openai:gpt-5-nano": Price(0.05, 0.40),
    "openai:gpt-4.1": Price(2.0, 8.0),
    "openai:gpt-4.1-mini": Price(0.40, 1.60),
    "openai:gpt-4o": Price(2.50, 10.0),
    "openai:gpt-4o-mini": Price(0.15, 0.60),
    "openai:o3": Price(2.0, 8.0),
    "openai:o4-mini": Price(1.10, 4.40),
    "anthropic:claude-opus-4-6": Price(5.0, 25.0),
    "anthropic:claude-opus-4-5": Price(5.0, 25.0),
    "anthropic:claude-opus-4-1": Price(15.0, 75.0),
    "anthropic:claude-opus-4-0": Price(15.0, 75.0),
    "anthropic:claude-opus-4": Price(15.0, 75.0),
    "anthropic:claude-sonnet-4-6": Price(3.0, 15.0),
    "anthropic:claude-sonnet-4-5": Price(3.0, 15.0),
    "anthropic:claude-sonnet-4-0": Price(3.0, 15.0),
    "anthropic:claude-sonnet-4": Price(3.0, 15.0),
    "anthropic:claude-haiku-4-5": Price(1.0, 5.0),
    "anthropic:claude-3-5-haiku": Price(0.80, 4.0),
}

FREE_PROVIDERS = frozenset({"vllm", "sglang", "ollama", "hf"})

# Dated snapshots and aliases of a listed model: 'claude-sonnet-4-5-20250929', 'gpt-4o-2024-08-06', '-latest'.
_SUFFIX = re.compile(r"-(\d{4}-?\d{2}-?\d{2}|latest)$")


def price(model: str) -> Price | None:
    """The list price of 'provider:name', looking through a date or '-latest' suffix."""
    return PRICES.get(model) or PRICES.get(_SUFFIX.sub("", model))


def cost(model: str, usage: Usage) -> float | None:
    provider = model.partition(":")[0]
    if provider in FREE_PROVIDERS:
        return 0.0
    p = price(model)
    if p is None:
        return None
    return (usage.input_tokens * p.input_per_m + usage.output_tokens * p.output_per_m) / 1e6
