"""The guard table is the one index of every check that can REJECT a candidate: each ``Guard`` has exactly one
entry, and the functions an entry names are exactly those that make that guard's findings, all in
``evaluate/judgement/guards.py`` (read from the source, so a finding made anywhere else fails here)."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import ptxbench
from ptxbench.evaluate.judgement import guards
from ptxbench.records.evaluation import Guard

PACKAGE = Path(ptxbench.__file__).resolve().parent
GUARDS_FILE = Path(guards.__file__).resolve()


def _findings_made() -> dict[tuple[Path, str], set[Guard]]:
    """(file, enclosing function) -> the guards of the ``GuardFinding(guard=Guard.X, ...)`` calls written there."""
    made: dict[tuple[Path, str], set[Guard]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "GuardFinding":
                    guard = next(k.value for k in node.keywords if k.arg == "guard")
                    assert isinstance(guard, ast.Attribute), f"{path}:{node.lineno}: name the Guard member"
                    made[(path.resolve(), function.name)].add(Guard[guard.attr])
    return made


def test_every_guard_has_exactly_one_entry_with_a_one_line_reason() -> None:
    entries = [entry.guard for entry in guards.GUARDS]
    assert sorted(entries) == sorted(Guard) and len(entries) == len(set(entries))
    for entry in guards.GUARDS:
        assert entry.reason and "\n" not in entry.reason and entry.stages and entry.checks, entry


def test_the_table_names_exactly_the_functions_that_make_each_finding() -> None:
    made = _findings_made()
    outside = sorted(f"{path.relative_to(PACKAGE)}:{name}" for path, name in made if path != GUARDS_FILE)
    assert not outside, f"guard findings made outside evaluate/judgement/guards.py: {outside}"
    by_guard: dict[Guard, set[str]] = defaultdict(set)
    for (_, name), found in made.items():
        for guard in found:
            by_guard[guard].add(name)
    for entry in guards.GUARDS:
        assert set(entry.checks) == by_guard[entry.guard], entry.guard
        assert all(callable(getattr(guards, name)) for name in entry.checks)


def test_a_finding_outside_the_table_is_caught(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The source scan sees a finding written in another module (the test above cannot pass vacuously)."""
    package = tmp_path / "ptxbench"
    package.mkdir()
    (package / "stage.py").write_text("def judge():\n    return [GuardFinding(guard=Guard.OTHER_STREAM, detail='')]\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert _findings_made() == {((package / "stage.py").resolve(), "judge"): {Guard.OTHER_STREAM}}
