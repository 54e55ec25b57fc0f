"""A run directory: a versioned header, then one folder per item whose result file marks it done.

Every artifact is written atomically (temp file + rename), so an interrupted run leaves either a
whole file or none, and a rerun with the same configuration resumes: items with a result are skipped.
A rerun with a different configuration is refused rather than mixed into the same directory.
An item's result is one typed record, chosen by the header's kind (``load_result``): an ``Evaluation``
for an ``eval`` run, an ``ItemResult`` (the sample's trajectory) for the others.
``RunLedger`` keeps what a run's driver wrote in memory and checks the folder against it at the end.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from ptxbench import __version__
from ptxbench._io import write_atomic
from ptxbench.errors import PtxbenchError, field_problems
from ptxbench.records.evaluation import Evaluation
from ptxbench.records.trajectory import ItemResult
from ptxbench.records.version import RecordVersionError, Versioned

RUN_SCHEMA_VERSION = 1
HEADER_FILE = "run.json"
RESULT_FILE = "result.json"
# Options that say how a run is carried out, not what it measures: left out of the configuration, so a
# run resumes with other values (as with the backend and the GPUs, which were never part of it).
RUN_LOCAL_OPTIONS = frozenset({"lanes"})


RunKind = Literal["generate", "run", "eval", "repair"]


class RunHeader(Versioned):
    """Who made the run, with what, and how (every option, resolved)."""

    RECORD = "run header"

    version: int = RUN_SCHEMA_VERSION
    kind: RunKind
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


def read_header(file: Path) -> RunHeader:
    """A run's header, or one line naming the file and what is wrong with it: unreadable, not JSON, not a
    run header (a foreign or damaged file), or a version this ptxbench cannot read (a newer one wrote it)."""
    try:
        text = file.read_bytes().decode()
    except OSError as exc:
        raise RunDirError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise RunDirError(f"{file}: not a run header: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RunDirError(f"{file}: not a run header: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{file}: not a run header: a JSON {type(data).__name__}, not an object")
    try:
        return RunHeader.model_validate(data)
    except RecordVersionError as exc:
        raise RecordVersionError(f"{file}: {exc}") from None
    except ValidationError as exc:
        raise RunDirError(f"{file}: not a run header ({field_problems(exc)})") from None


R = TypeVar("R", bound=BaseModel)


def read_result(file: Path, model: type[R], what: str, read: Callable[[Path], str] = Path.read_text, *,
                fix: str = "") -> R:
    """An item's record (``what``: 'an evaluation'), or one line naming the file, what is wrong with it and
    the ``fix``. ``read`` reads the text (a ``RunLedger``'s, to keep what was read)."""
    try:
        return model.model_validate_json(read(file))
    except RecordVersionError as exc:
        raise RecordVersionError(f"{file}: {exc}") from None
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except ValidationError as exc:
        problem = field_problems(exc)
    raise RunDirError(f"{file}: not {what} ({problem})" + (f"; {fix}" if fix else ""))


Result = Evaluation | ItemResult
"""What an item's ``result.json`` holds: an evaluation in an ``eval`` run, a trajectory in the others."""

RESULTS: dict[str, tuple[type[Evaluation] | type[ItemResult], str]] = {
    "eval": (Evaluation, "an evaluation"),
    "generate": (ItemResult, "the result of a generated item"),
    "run": (ItemResult, "the result of a generated item"),
    "repair": (ItemResult, "the result of a repaired item"),
}


def load_result(path: Path | str, header: RunHeader | None = None, read: Callable[[Path], str] = Path.read_text,
                *, fix: str = "") -> Result:
    """The record in an item's result file (``items/<task>/<item>/result.json``), typed by the kind of run that
    wrote it: ``header``, or else the run's own header, read from beside ``items/``."""
    path = Path(path)
    if header is None:
        header = read_header(path.parents[3] / HEADER_FILE)
    model, what = RESULTS[header.kind]
    return read_result(path, model, what, read, fix=fix)


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
            previous = read_header(existing)
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
        return cls(path, read_header(path / HEADER_FILE))

    def item(self, task_id: str, item: str) -> Path:
        return self.path / "items" / task_id / item

    def is_done(self, task_id: str, item: str) -> bool:
        return (self.item(task_id, item) / RESULT_FILE).is_file()

    def results(self) -> list[Path]:
        return sorted(self.path.glob(f"items/*/*/{RESULT_FILE}"))


QUARANTINE_DIR = "quarantine"


class RunAudit(BaseModel):
    """What the end-of-run check found: run-directory paths, relative to the run's folder."""

    restored: list[str] = Field(default_factory=list, description="written by this run, changed, rewritten")
    quarantined: list[str] = Field(default_factory=list, description="not written by the harness, moved aside")
    changed_earlier: list[str] = Field(default_factory=list,
                                       description="from an earlier run, changed during this one, moved aside")
    removed_earlier: list[str] = Field(default_factory=list, description="from an earlier run, gone")

    @property
    def clean(self) -> bool:
        return not (self.restored or self.quarantined or self.changed_earlier or self.removed_earlier)

    def summary(self) -> str:
        parts = [f"{label}: {', '.join(paths)}" for label, paths in (
            ("rewritten from memory after being changed", self.restored),
            ("not written by the harness, moved to quarantine/", self.quarantined),
            ("from an earlier run, changed during this one, moved to quarantine/", self.changed_earlier),
            ("from an earlier run, removed during this one", self.removed_earlier)) if paths]
        return "run directory tampered with during the run: " + "; ".join(parts)


class RunLedger:
    """The driver's memory of the run directory, so that files changed by candidate code (same user, no
    read-only mount) are noticed and undone before the run's results are reported.

    Every file the driver writes or reads through the ledger is kept in memory with its text. ``audit``,
    called once no candidate code runs any more, rewrites any of them that changed, moves files in the
    run's folder that the harness did not write (``items/`` above all) into ``quarantine/``, where
    metrics and reports never look, and returns what it found. Files of an earlier run that is resumed are taken as they were when the
    ledger was made: that is the in-run guarantee, the one that holds without OS protection; only a
    read-only mount protects the directory between runs.
    """

    def __init__(self, rundir: RunDir) -> None:
        self.rundir = rundir
        self._kept: dict[Path, str] = {}
        self._earlier = {path: _digest(path) for path in self._run_files()}
        self.read_text(rundir.path / HEADER_FILE)

    def write_text(self, path: Path, text: str) -> None:
        self._kept[path] = text
        write_atomic(path, text)

    def write_model(self, path: Path, model: BaseModel) -> None:
        self.write_text(path, model.model_dump_json(indent=1) + "\n")

    def read_text(self, path: Path) -> str:
        """The file's text, kept as it is now: what the run relies on is what is restored."""
        text = path.read_text()
        self._kept[path] = text
        return text

    def audit(self) -> RunAudit:
        planted_root = self._clear_quarantine_root()
        audit = RunAudit(quarantined=planted_root, removed_earlier=sorted(self._name(p) for p in self._earlier
                                                if p not in self._kept and not os.path.lexists(p)))
        for path, text in self._kept.items():
            if _current_text(path) != text:
                if path.is_dir() and not path.is_symlink():  # a folder planted in the file's place
                    self._quarantine(path)
                write_atomic(path, text)
                audit.restored.append(self._name(path))
        for path in self._run_files():
            if path in self._kept:
                continue
            if path not in self._earlier:
                audit.quarantined.append(self._quarantine(path))
            elif _digest(path) != self._earlier[path]:
                audit.changed_earlier.append(self._quarantine(path))
        return audit

    def _run_files(self) -> list[Path]:
        """Everything in the run's folder that is not a folder (links included, never followed), outside
        quarantine/."""
        found = []
        for folder, subfolders, names in os.walk(self.rundir.path):
            base = Path(folder)
            quarantine = base / QUARANTINE_DIR
            if base == self.rundir.path and QUARANTINE_DIR in subfolders and not quarantine.is_symlink():
                subfolders.remove(QUARANTINE_DIR)
            found += [base / name for name in names]
            found += [base / name for name in subfolders if (base / name).is_symlink()]
        return sorted(found)

    def _clear_quarantine_root(self) -> list[str]:
        """A link or a file planted where quarantine/ belongs would take what is moved there: removed."""
        root = self.rundir.path / QUARANTINE_DIR
        if root.is_symlink() or (root.exists() and not root.is_dir()):
            root.unlink()
            return [f"{QUARANTINE_DIR} (not a folder: removed)"]
        return []

    def _quarantine(self, path: Path) -> str:
        name = self._name(path)
        target = self.rundir.path / QUARANTINE_DIR / name
        while os.path.lexists(target):
            target = target.with_name(target.name + ".again")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)
        return name

    def _name(self, path: Path) -> str:
        return path.relative_to(self.rundir.path).as_posix()


def _digest(path: Path) -> str | None:
    """The SHA-256 of a regular file's bytes; None for a missing file or a link (never trusted as content)."""
    if path.is_symlink() or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _current_text(path: Path) -> str | None:
    """The file's text read as the ledger reads it; None for a missing file, a link or undecodable bytes."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
