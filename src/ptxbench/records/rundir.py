"""A run directory: a versioned header, then one folder per item whose result file marks it done.

Every artifact is written atomically (temp file + rename), so an interrupted run leaves either a
whole file or none, and a rerun with the same configuration resumes: items with a result are skipped.
A rerun with a different configuration is refused rather than mixed into the same directory.
An item's result is one typed record, chosen by the header's kind (``load_result``): an ``Evaluation``
for an ``eval`` run, an ``ItemResult`` (the sample's trajectory) for the others.
``RunLedger`` keeps what a run's driver wrote in memory and checks the folder against it at the end.

Damage stays local: a damaged header (cut short, not JSON, not a header) is rebuilt from the items' own
records (``rebuilt_header``), with a warning when a run is read and written back when a run is resumed with a
configuration the items agree with or by ``ptxbench eval --repair RUN`` (``repair_header``); the damaged file
is kept beside it. A stored item that no longer answers (another source under the same name, a damaged
record) is set aside under ``superseded/``, never silently replaced.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
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
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.trajectory import ItemResult
from ptxbench.records.version import RecordVersionError, Versioned

RUN_SCHEMA_VERSION = 2  # 2: ``evidence``; a version 1 header reads as ``publish``, what every run then was
HEADER_FILE = "run.json"
RESULT_FILE = "result.json"
# Options that say how a run is carried out, not what it measures: left out of the configuration, so a
# run resumes with other values (as with the backend and the GPUs, which were never part of it).
RUN_LOCAL_OPTIONS = frozenset({"lanes"})


RunKind = Literal["generate", "run", "eval", "repair"]


def _header_from_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had no ``evidence``: every run then gathered the ``publish`` profile's evidence."""
    return {**record, "evidence": EvidenceProfile.PUBLISH.value}


class RunHeader(Versioned):
    """Who made the run, with what, and how (every option, resolved)."""

    RECORD = "run header"
    MIGRATIONS = {1: _header_from_v1}

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
    evidence: EvidenceProfile = Field(default=EvidenceProfile.PUBLISH, description=(
        "The evidence profile its evaluations gather (``records.evidence``); a resume must match it"))


class RunDirError(PtxbenchError):
    pass


class DamagedHeader(RunDirError):
    """The header file is there but is no readable run header (cut short, not JSON, not a header): what the
    items hold can rebuild it (``rebuilt_header``)."""


log = logging.getLogger(__name__)


def read_header(file: Path) -> RunHeader:
    """A run's header, or one line naming the file and what is wrong with it: unreadable, not JSON, not a
    run header (a foreign or damaged file), or a version this ptxbench cannot read (a newer one wrote it)."""
    try:
        text = file.read_bytes().decode()
    except OSError as exc:
        raise RunDirError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise DamagedHeader(f"{file}: not a run header: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DamagedHeader(f"{file}: not a run header: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DamagedHeader(f"{file}: not a run header: a JSON {type(data).__name__}, not an object")
    try:
        return RunHeader.model_validate(data)
    except RecordVersionError as exc:
        raise RecordVersionError(f"{file}: {exc}") from None
    except ValidationError as exc:
        raise DamagedHeader(f"{file}: not a run header ({field_problems(exc)})") from None


R = TypeVar("R", bound=BaseModel)


def read_result(file: Path, model: type[R], what: str, read: Callable[[Path], str] = Path.read_text, *,
                fix: str = "") -> R:
    """An item's record (``what``: 'an evaluation'), or one line naming the file, what is wrong with it and
    the ``fix``. ``read`` reads the text (a ``RunLedger``'s, to keep what was read)."""
    try:
        text = read(file)
        kind = _kind_of(text)
        if kind is not None and kind != _kind_of_model(model):  # another record altogether, whatever its version
            problem = f"a record of kind {kind!r}"
        else:
            return model.model_validate_json(text)
    except RecordVersionError as exc:
        raise RecordVersionError(f"{file}: {exc}") from None
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except ValidationError as exc:
        problem = field_problems(exc)
    raise RunDirError(f"{file}: not {what} ({problem})" + (f"; {fix}" if fix else ""))


def _kind_of(text: str) -> str | None:
    """The ``kind`` a record's text says it is (an evaluation, a check report), or None (no kind, not JSON)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def _kind_of_model(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("kind")
    return field.default if field is not None and isinstance(field.default, str) else None


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


def _differences(before: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """Where two configurations differ, to the option: ``options.trials (3 -> 5)``."""
    found = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key), now.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            found += _differences(old, new, f"{prefix}{key}.")
        else:
            found.append(f"{prefix}{key} ({_short(old)} -> {_short(new)})")
    return found


def _short(value: Any, width: int = 40) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[:width - 1] + "…"


class RunDir:
    """A run's folder. ``open`` creates it or resumes it; items live under ``items/<task>/<item>``."""

    def __init__(self, path: Path, header: RunHeader) -> None:
        self.path = path
        self.header = header

    @classmethod
    def open(cls, path: Path | str, header: RunHeader) -> "RunDir":
        """Create the run, or resume it when its configuration is ``header``'s. A damaged header is written anew
        (the damaged file kept beside it) when the items' records agree with ``header``, else refused."""
        path = Path(path)
        existing = path / HEADER_FILE
        if existing.is_file():
            try:
                previous = read_header(existing)
            except DamagedHeader as damage:
                _resume_with_damaged_header(path, header, damage)
                return cls(path, header)
            before, now = _identity(previous.config), _identity(header.config)
            if previous.evidence is not header.evidence:
                raise RunDirError(f"{path} holds a run of evidence profile {previous.evidence.value}, not "
                                  f"{header.evidence.value}; resume it with --evidence {previous.evidence.value}, "
                                  "or choose a new --out directory")
            if previous.kind != header.kind or before != now:
                raise RunDirError(f"{path} holds a run with another configuration (differs in: "
                                  f"{', '.join(_differences(before, now)) or 'kind'}); choose a new --out directory")
            return cls(path, previous)
        path.mkdir(parents=True, exist_ok=True)
        write_model(existing, header)
        return cls(path, header)

    @classmethod
    def load(cls, path: Path | str) -> "RunDir":
        """An existing run, to read; a damaged header is rebuilt from the items in memory, with a warning."""
        path = Path(path)
        if not (path / HEADER_FILE).is_file():
            raise RunDirError(f"{path} is not a run directory (no {HEADER_FILE})")
        try:
            return cls(path, read_header(path / HEADER_FILE))
        except DamagedHeader as damage:
            rebuilt = rebuilt_header(path, damage)
            log.warning("warning: %s; read with a header rebuilt from its %s item(s) (a %s run); `ptxbench eval "
                        "--repair %s` writes it back", damage, rebuilt.environment["rebuilt_from_items"], rebuilt.kind,
                        path)
            return cls(path, rebuilt)

    def item(self, task_id: str, item: str) -> Path:
        return self.path / "items" / task_id / item

    def is_done(self, task_id: str, item: str) -> bool:
        return (self.item(task_id, item) / RESULT_FILE).is_file()

    def results(self) -> list[Path]:
        return sorted(self.path.glob(f"items/*/*/{RESULT_FILE}"))


DAMAGED_SUFFIX = ".damaged"


def _readable_items(path: Path) -> list[Result]:
    """Every item record of the run at ``path`` that can be read without its header (damaged ones left out)."""
    found: list[Result] = []
    for file in sorted(path.glob(f"items/*/*/{RESULT_FILE}")):
        for model in (Evaluation, ItemResult):
            try:
                found.append(model.model_validate_json(file.read_text()))
                break
            except (OSError, UnicodeDecodeError, ValidationError, PtxbenchError):
                continue
    return found


def _one(values: list[Any]) -> list[Any]:
    """``[value]`` where every value is the same (and there is one), else ``[]``: a field known for the run."""
    distinct = {json.dumps(v, sort_keys=True) for v in values}
    return [values[0]] if values and len(distinct) == 1 else []


def rebuilt_header(path: Path, damage: DamagedHeader) -> RunHeader:
    """A header for the run at ``path`` from what its items' records say (the kind, the arch, and for an eval run
    the options each evaluation records; for a generation run the model, context and tasks): only what every
    item agrees on is in its configuration. ``environment`` says that it was rebuilt and from how many items."""
    items = _readable_items(path)
    if not items:
        raise RunDirError(f"{damage}; no readable item to rebuild it from: choose a new --out directory")
    environment = {"rebuilt_from_items": len(items), "damaged_header": str(damage)}
    evaluations = [i for i in items if isinstance(i, Evaluation)]
    if evaluations:
        config: dict[str, Any] = {}
        for arch in _one([e.arch.value for e in evaluations]):
            config["arch"] = arch
        if all(e.judged is not None for e in evaluations):
            for options in _one([e.judged.options for e in evaluations if e.judged is not None]):
                config["options"] = options
        profiles = {e.evidence for e in evaluations}
        evidence = profiles.pop() if len(profiles) == 1 else EvidenceProfile.PUBLISH
        return RunHeader(kind="eval", config=config, environment=environment, evidence=evidence)
    trajectories = [i for i in items if isinstance(i, ItemResult)]
    config = {"tasks": sorted({t.task for t in trajectories})}
    for field, values in (("arch", [t.arch.value for t in trajectories]),
                          ("context", [t.context.value for t in trajectories]),
                          ("prompt_version", [int(t.prompt_version) if t.prompt_version.isdigit() else t.prompt_version
                                              for t in trajectories]),  # the header's is a number
                          ("model", [turn.completion.model for t in trajectories for turn in t.turns])):
        for value in _one(values):
            config[field] = value
    graded = any(turn.feedback is not None for t in trajectories for turn in t.turns)
    return RunHeader(kind="run" if graded else "generate", config=config, environment=environment)


def _agrees(rebuilt: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The keys of a rebuilt configuration that ``config`` contradicts (its tasks must include the items')."""
    config = _identity(config)
    return sorted(key for key, value in _identity(rebuilt).items()
                  if not (set(value) <= set(config.get(key) or []) if key == "tasks" else config.get(key) == value))


def _resume_with_damaged_header(path: Path, header: RunHeader, damage: DamagedHeader) -> None:
    """Resuming over a damaged header: written anew from ``header`` when the items agree with it."""
    rebuilt = rebuilt_header(path, damage)
    if rebuilt.kind != header.kind or (differ := _agrees(rebuilt.config, header.config)):
        raise RunDirError(f"{damage}; its items were written by a {rebuilt.kind} run that differs from this one in: "
                          f"{', '.join(differ) if rebuilt.kind == header.kind else 'kind'}: choose a new --out "
                          f"directory (`ptxbench eval --repair {path}` rebuilds the header to read the run)")
    kept = _keep_damaged(path / HEADER_FILE)
    write_model(path / HEADER_FILE, header)
    log.warning("warning: %s; its %s item(s) agree with this run: the header is written anew (the damaged one kept "
                "as %s)", damage, rebuilt.environment["rebuilt_from_items"], kept.name)


def _keep_damaged(file: Path) -> Path:
    kept = file.with_name(file.name + DAMAGED_SUFFIX)
    while kept.exists():
        kept = kept.with_name(kept.name + DAMAGED_SUFFIX)
    os.rename(file, kept)
    return kept


class Repair(BaseModel):
    """What ``repair_header`` did: the header now in place, and where the damaged one went (None: intact)."""

    header: RunHeader
    damaged_kept: str | None = None


def repair_header(path: Path | str) -> Repair:
    """Write a damaged header anew from the items (``rebuilt_header``), the damaged file kept beside it as
    ``run.json.damaged``; an intact header is left as it is."""
    path = Path(path)
    file = path / HEADER_FILE
    if not file.is_file():
        raise RunDirError(f"{path} is not a run directory (no {HEADER_FILE})")
    try:
        return Repair(header=read_header(file))
    except DamagedHeader as damage:
        rebuilt = rebuilt_header(path, damage)
        kept = _keep_damaged(file)
        write_model(file, rebuilt)
        return Repair(header=rebuilt, damaged_kept=kept.name)


QUARANTINE_DIR = "quarantine"
SUPERSEDED_DIR = "superseded"


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

    def set_aside(self, folder: Path, why: str) -> str:
        """Move an item's folder, whose result no longer answers (``why``: 'source changed', 'damaged'), to
        ``superseded/<task>/<item>/<n>-<why>/`` with every file in it, and remember its files there (the audit
        then neither restores them at the old place nor takes them for planted). Returns the new place,
        relative to the run."""
        slug = "-".join("".join(c if c.isalnum() else " " for c in why.lower()).split())[:40] or "superseded"
        base = self.rundir.path / SUPERSEDED_DIR / folder.relative_to(self.rundir.path / "items")
        number = 1
        while os.path.lexists(base / f"{number}-{slug}"):
            number += 1
        target = base / f"{number}-{slug}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(folder, target)
        moved = {path: target / path.relative_to(folder) for path in [*self._earlier, *self._kept]
                 if path.is_relative_to(folder)}
        for old, new in moved.items():
            self._earlier[new] = self._earlier.pop(old) if old in self._earlier else _digest(new)
            self._kept.pop(old, None)
        return self._name(target)

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
