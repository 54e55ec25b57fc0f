"""What a model answered, as the run directory and the completion cache keep it: the completion with its
accounting, and the candidate source found in it (or why there is none)."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

from ptxbench.records import Record
from ptxbench.records.version import Versioned

COMPLETION_VERSION = 1


class Usage(Record):
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = Field(default=None, description="None when the model's price is unknown")


class Completion(Versioned):
    """A model's answer with its accounting. ``error`` is set (and ``text`` empty) when the provider
    failed after its retries: the run goes on and the item records the failure."""

    RECORD = "completion"

    version: int = COMPLETION_VERSION
    model: str
    text: str
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    cached: bool = False
    error: str | None = None


class ExtractionStatus(str, Enum):
    OK = "ok"
    EMPTY = "empty_completion"
    NO_CODE = "no_code_block"
    NO_ENTRY_POINT = "no_entry_point"
    PROVIDER_ERROR = "provider_error"


class Extraction(BaseModel):
    status: ExtractionStatus
    source: str = ""
    blocks_found: int = 0
    notes: list[str] = []

    @property
    def ok(self) -> bool:
        return self.status is ExtractionStatus.OK
