"""A run directory: a versioned header, then one folder per item whose result file marks it done.

Every artifact is written atomically (temp file + rename), so an interrupted run leaves either a
whole file or none, and a rerun with the same configuration resumes: items with a result are skipped.
A rerun with a different configuration is refused rather than mixed into the same directory.
"""

from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ptxbench import __version__
from ptxbench._io import write_atomic
from ptxbench.errors import PtxbenchError

RUN_SCHEMA_VERSION = 1
HEADER_FILE = "run.json"
RESULT_FILE = "result.json"
# Options that say how a run is carried out, not what it measures: left out of the configuration, so a
# run resumes with other values (as with the backend and the GPUs, which were never part of it).
RUN_LOCAL_OPTIONS = frozenset({"lanes"})


class RunHeader(BaseModel):
    """Who made the run, with what, and how (every option, resolved)."""

    version: int = RUN_SCHEMA_VERSION
    kind: Literal["generate", "run", "eval", "repair"]
    created: str = Field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    ptxbench: str = __version__
    git_revision: str | None = Field(default_factory=lambda: _git_revision())
    python: str = Field(default_factory=platform.python_version)
    host: str = Field(default_factory=platform.node)
    toolchain: dict[str, str | None] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict, description="GPU, driver and library versions")
    config: dict[str, Any] = Field(description="The resolved configuration; a resume must match it")


class RunDirError(PtxbenchError):
    pass


def _git_revision() -> str | None:
    source = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def write_model(path: Path, model: BaseModel) -> None:
    write_atomic(path, model.model_dump_json(indent=1) + "\n")


def _identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a configuration a resume must match: without the options that only say how the run
    is carried out (headers written before they were left out still hold them)."""
    options = config.get("options")
    if not isinstance(options, dict):
        return config
    return {**config, "options": {k: v for k, v in options.items() if k not in RUN_LOCAL_OPTIONS}}


class RunDir:
    """A run's folder. ``open`` creates it or resumes it; items live under ``items/<task>/<item>``."""

    def __init__(self, path: Path, header: RunHeader) -> None:
        self.path = path
        self.header = header

    @classmethod
    def open(cls, path: Path | str, header: RunHeader) -> "RunDir":
        path = Path(path)
        existing = path / HEADER_FILE
        if existing.is_file():
            previous = RunHeader.model_validate_json(existing.read_text())
            if previous.version != RUN_SCHEMA_VERSION:
                raise RunDirError(f"{path} was written by run schema {previous.version}; this is {RUN_SCHEMA_VERSION}")
            before, now = _identity(previous.config), _identity(header.config)
            if previous.kind != header.kind or before != now:
                changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
                raise RunDirError(f"{path} holds a run with another configuration (differs in: "
                                  f"{', '.join(changed) or 'kind'}); choose a new --out directory")
            return cls(path, previous)
        path.mkdir(parents=True, exist_ok=True)
        write_model(existing, header)
        return cls(path, header)

    @classmethod
    def load(cls, path: Path | str) -> "RunDir":
        path = Path(path)
        if not (path / HEADER_FILE).is_file():
            raise RunDirError(f"{path} is not a run directory (no {HEADER_FILE})")
        return cls(path, RunHeader.model_validate_json((path / HEADER_FILE).read_text()))

    def item(self, task_id: str, item: str) -> Path:
        return self.path / "items" / task_id / item

    def is_done(self, task_id: str, item: str) -> bool:
        return (self.item(task_id, item) / RESULT_FILE).is_file()

    def results(self) -> list[Path]:
        return sorted(self.path.glob(f"items/*/*/{RESULT_FILE}"))
