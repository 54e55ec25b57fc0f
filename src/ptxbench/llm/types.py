"""What goes to a model: the request every provider and the cache share. The messages themselves are
``ptxbench.prompts.conversation.Message`` (the prompts make them, below every client that sends them); what
comes back (``Completion``) is a persisted record: ``ptxbench.records.completion``."""

from __future__ import annotations

import hashlib
import json

from pydantic import ConfigDict, Field

from ptxbench.prompts.conversation import Message
from ptxbench.records import Record



class SamplingParams(Record):
    """Everything that changes a completion besides the messages (part of the cache key)."""

    model_config = ConfigDict(frozen=True)
    temperature: float = Field(default=0.7, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int = Field(default=16384, ge=1)


class CompletionRequest(Record):
    """One sample of one conversation. ``sample_index`` keeps k samples of the same prompt apart in
    the cache, so a rerun of a k-sample sweep reuses every sample and draws no new ones."""

    model_config = ConfigDict(frozen=True)
    model: str = Field(description="'provider:name', e.g. 'openai:gpt-5', 'anthropic:claude-sonnet-4-5', 'replay:runs.jsonl'")
    messages: list[Message]
    params: SamplingParams = Field(default_factory=SamplingParams)
    sample_index: int = Field(default=0, ge=0)
    metadata: dict[str, str | int] = Field(
        default_factory=dict,
        description="Caller's bookkeeping (task id, sample, turn), not sent to the model and not part of "
        "the cache key; the replay provider looks completions up by it",
    )

    def cache_key(self) -> str:
        payload = self.model_dump(mode="json", exclude={"metadata"})
        return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
