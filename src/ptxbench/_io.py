"""Atomic file writes: a reader sees the whole old file or the whole new one, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

M = TypeVar("M")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as an ordinary file (mode 0666 less the umask, 0644 typically, where the
    temporary file alone would leave it 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, 0o666 & ~_umask())
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (setting it to read it would race
    with files other threads create meanwhile)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_jsonl(path: Path, records: "list[Any]") -> None:
    """Pydantic records, one JSON object a line (atomically)."""
    write_atomic(path, "".join(record.model_dump_json() + "\n" for record in records))


def read_jsonl(path: Path, model: "type[M]") -> "list[M]":
    """Pydantic records, one a line; a file that cannot be read or a line that is not such a record (another
    step's file given by mistake) is one error naming the file, the line and what is wrong."""
    from pydantic import ValidationError

    from ptxbench.errors import PtxbenchError, field_problems

    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PtxbenchError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PtxbenchError(f"{path}: not a text file (expected one JSON record a line)") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(model.model_validate_json(line))  # type: ignore[attr-defined]
        except ValidationError as exc:
            raise PtxbenchError(f"{path}:{number}: not a {_words(model.__name__)} record "
                                f"({field_problems(exc)})") from None
        except PtxbenchError as exc:  # a record version this ptxbench cannot read
            raise type(exc)(f"{path}:{number}: {exc}") from None
    return records


def _words(name: str) -> str:
    """'RepairPair' -> 'repair pair'."""
    return "".join(f" {c.lower()}" if c.isupper() else c for c in name).strip()
