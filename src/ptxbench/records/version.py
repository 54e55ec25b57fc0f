"""The version a persisted record carries, checked whenever the record is read.

A record on disk outlives the code that wrote it. Reading one written by a newer ptxbench with today's
model would drop the fields it does not know, or misread the ones whose meaning changed, and report
numbers that look right; so such a record is refused with one line saying to upgrade. A record of an
older version is brought up to date first, one version at a time, by the functions its model registers
in ``MIGRATIONS``, so every reader sees one shape, the current one.

A record built in code (no ``version`` given) is of the current version; so is one read without a
``version`` key, as records were before their model had the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import model_validator

from ptxbench import __version__
from ptxbench.errors import PtxbenchError
from ptxbench.records import Record

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""Upgrades a record's raw dict from one version to the next; ``migrate`` then sets the new version."""


class RecordVersionError(PtxbenchError):
    """A persisted record this ptxbench cannot read: written by a newer ptxbench, or of an unknown version."""


class Versioned(Record):
    """A record persisted on its own. A subclass sets ``version: int = <current>``, names itself in
    ``RECORD`` (for messages), and registers in ``MIGRATIONS`` a function for each older version it can
    still read (version -> upgrade to version + 1)."""

    RECORD: ClassVar[str] = "record"
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {}

    version: int

    @classmethod
    def current_version(cls) -> int:
        return int(cls.model_fields["version"].default)

    @model_validator(mode="before")
    @classmethod
    def _read_version(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            return migrate(cls, data)
        return data


def migrate(model: type[Versioned], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a raw record of ``model``) upgraded to the current version, or ``RecordVersionError``."""
    current = model.current_version()
    version = data["version"]
    from_here = isinstance(version, int) and not isinstance(version, bool)
    if from_here and version == current:
        return data
    if from_here and version > current:
        written = f" by ptxbench {data['ptxbench']}" if isinstance(data.get("ptxbench"), str) else ""
        raise RecordVersionError(f"written{written} with {model.RECORD} version {version}; this ptxbench "
                                 f"({__version__}) reads version {current}; upgrade ptxbench to read it")
    if not from_here or not all(step in model.MIGRATIONS for step in range(version, current)):
        readable = [v for v in range(1, current) if all(s in model.MIGRATIONS for s in range(v, current))]
        raise RecordVersionError(f"{model.RECORD} version {version!r} is unknown; this ptxbench "
                                 f"({__version__}) reads version {', '.join(map(str, [*readable, current]))}")
    for step in range(version, current):
        data = {**model.MIGRATIONS[step](dict(data)), "version": step + 1}
    return data
