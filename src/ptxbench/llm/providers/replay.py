"""Completions read back from a JSONL file, so the rest of the pipeline (extraction, evaluation,
refinement) can be rerun or tested without calling a model.

Each line is one answer: ``{"task": ..., "sample": 0, "turn": 0, "completion": "...", "model": ...}``.
Requests are matched by ``metadata["task"]``, ``metadata.get("sample", request.sample_index)`` and
``metadata.get("turn", 0)``. Use it without a completion cache: the file already is one, and the
cache key does not include the metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ptxbench.errors import ProviderError, field_problems
from ptxbench.llm.providers.base import check_model
from ptxbench.llm.types import CompletionRequest
from ptxbench.records.completion import Completion, Usage


class ReplayEntry(BaseModel):
    """One recorded answer; unknown fields are ignored so richer run records replay as they are."""

    model_config = ConfigDict(extra="ignore")
    task: str
    sample: int = Field(ge=0)
    turn: int = Field(default=0, ge=0)
    completion: str
    model: str | None = Field(default=None, description="who wrote it; becomes Completion.model when set")
    usage: Usage = Field(default_factory=Usage)


class ReplayKey(NamedTuple):
    task: str
    sample: int
    turn: int


def load_entries(path: Path, model: str | None = None) -> dict[ReplayKey, ReplayEntry]:
    """Entries by key; ``model`` keeps only one model's lines from a file that holds several."""
    entries: dict[ReplayKey, ReplayEntry] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ProviderError(f"cannot read replay file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ProviderError(f"replay file {path}: not a text file (one JSON object a line)") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = ReplayEntry.model_validate_json(line)
        except ValidationError as e:
            raise ProviderError(f"{path}:{number}: not a replay entry: {field_problems(e)}") from e
        if model is not None and entry.model != model:
            continue
        key = ReplayKey(entry.task, entry.sample, entry.turn)
        if key in entries:
            raise ProviderError(f"{path}:{number}: second answer for {key}; pass model=... to pick one model's lines")
        entries[key] = entry
    return entries


class ReplayProvider:
    def __init__(self, name: str, *, kind: str = "replay", model: str | None = None) -> None:
        self.spec = f"{kind}:{name}"
        self.entries = load_entries(Path(name), model)

    async def complete(self, request: CompletionRequest) -> Completion:
        check_model(request, self.spec)
        meta = request.metadata
        if "task" not in meta:
            return Completion(model=request.model, text="", error="replay needs metadata['task'] on the request")
        key = ReplayKey(str(meta["task"]), int(meta.get("sample", request.sample_index)), int(meta.get("turn", 0)))
        entry = self.entries.get(key)
        if entry is None:
            return Completion(model=request.model, text="", error=f"no replayed answer for {key} in {self.spec}")
        return Completion(model=entry.model or request.model, text=entry.completion, usage=entry.usage)
