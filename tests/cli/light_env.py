"""The light install's view of the packages, for ``test_light_install``: which top-level modules it provides,
derived from pyproject.toml and the installed metadata, and a script that runs PTXBench where the package's own
code can import nothing else.

Why an allow-list and not a list of heavy packages to hide: a dependency that the package imports but does not
declare (click, once typer stopped bringing it) is installed here by some other extra's package, so only a rule
that admits exactly what the light install declares sees it missing. Only imports made by PTXBench's own modules
are judged; what an admitted package imports in turn is that package's declared business (pip installs it).

Run as a script (``python light_env.py ALLOWED -- ARGS`` or ``python light_env.py ALLOWED --import-all``), with
ALLOWED the comma-separated top-level module names besides the standard library and ``ptxbench``."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import re
import sys
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import FrameType, ModuleType

LIGHT_EXTRAS = ("gpu", "cuda-tools")  # README: `pip install -e '.[gpu,cuda-tools]'`, the light install


def normalized(distribution: str) -> str:
    """A distribution's name as PEP 503 compares them (``Liger_Kernel`` and ``liger-kernel`` are one)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def requirement_name(requirement: str) -> str:
    """The distribution a requirement string names (``'tomli>=2; python_version < "3.11"'`` → ``tomli``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalized(match.group(1))


def declared(pyproject: Path) -> dict[str, set[str]]:
    """Each group of pyproject.toml's requirements by name (``""`` for the core ``dependencies``, else the extra),
    as normalised distribution names."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the 3.10 leg
        import tomli as tomllib
    project = tomllib.loads(pyproject.read_text())["project"]
    groups = {"": {requirement_name(r) for r in project.get("dependencies", [])}}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        groups[extra] = {requirement_name(r) for r in requirements}
    return groups


def import_names(distributions: Iterable[str]) -> set[str]:
    """The top-level modules the installed ``distributions`` provide (``pyelftools`` → ``elftools``), from their
    metadata; a distribution that is not installed provides nothing here."""
    wanted = {normalized(d) for d in distributions}
    return {module for module, owners in importlib.metadata.packages_distributions().items()
            if any(normalized(owner) in wanted for owner in owners)}


def light_modules(pyproject: Path) -> set[str]:
    """What PTXBench's own code may import in the light install: the core dependencies' and the light extras'
    top-level modules (the standard library and ``ptxbench`` are admitted by the script itself)."""
    groups = declared(pyproject)
    return import_names(groups[""].union(*(groups[extra] for extra in LIGHT_EXTRAS)))


def _importer(frame: FrameType | None) -> str | None:
    """The module whose code asked for the import being resolved: the first frame, from the finder's caller up,
    outside the import machinery (``importlib._bootstrap``, ``importlib.import_module``)."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (frame.f_code.co_filename.startswith("<frozen importlib") or name == "importlib"):
            return name
        frame = frame.f_back
    return None


class LightOnly(importlib.abc.MetaPathFinder):
    """Refuses, as if it were not installed, any top-level module that PTXBench's code imports unless it is in the
    standard library, PTXBench itself, or ``allowed``. Raised from ``find_spec`` as the import system raises for an
    absent module (``importlib.util.find_spec`` would see the error too; the package does not call it)."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self.allowed = set(allowed) | set(sys.stdlib_module_names) | {"ptxbench"}

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        if top in self.allowed:
            return None
        importer = _importer(sys._getframe(1))
        if importer is not None and importer.partition(".")[0] == "ptxbench":
            raise ModuleNotFoundError(f"No module named {top!r} (not declared by the light install)", name=top)
        return None


def package_modules() -> list[str]:
    """Every module of the ptxbench package, from its files (importing packages to walk them would stop at the
    first that fails)."""
    spec = importlib.util.find_spec("ptxbench")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent
    modules = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def import_all() -> dict[str, dict[str, str | None]]:
    """Imports each module of the package; for each that fails, the module it missed (None for another error)
    and the error's last lines."""
    failed: dict[str, dict[str, str | None]] = {}
    for module in package_modules():
        if module.endswith("__main__"):
            continue  # running the CLI is what the command tests do
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, judged by the test
            missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
            failed[module] = {"missing": missing, "error": "".join(traceback.format_exception(exc)[-3:])}
    return failed


def main(argv: list[str]) -> None:
    allowed, *rest = argv
    sys.meta_path.insert(0, LightOnly(filter(None, allowed.split(","))))
    if rest == ["--import-all"]:
        print(json.dumps(import_all()))
        return
    assert rest[:1] == ["--"], rest
    sys.argv = ["ptxbench", *rest[1:]]
    from ptxbench.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
