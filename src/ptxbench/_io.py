"""Atomic file writes: a reader sees the whole old file or the whole new one, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

M = TypeVar("M")


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_jsonl(path: Path, records: "list[Any]") -> None:
    """Pydantic records, one JSON object a line (atomically)."""
    write_atomic(path, "".join(record.model_dump_json() + "\n" for record in records))


def read_jsonl(path: Path, model: "type[M]") -> "list[M]":
    return [model.model_validate_json(line) for line in Path(path).read_text().splitlines() if line.strip()]
