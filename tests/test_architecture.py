"""The architecture's one rule, enforced: the package is a building of rooms on floors, and every import
goes down.

A room is a subpackage or a top-level module of ``ptxbench``. Its floor is declared once, in ``FLOORS``
below; docs/ARCHITECTURE.md shows the same table and is checked against it. Imports are read with ``ast``
from every module, at module level, inside functions and under ``TYPE_CHECKING`` alike (a lazy or
type-only import is still a dependency), together with module paths written as strings (the worker's
handler names, ``importlib.resources`` packages), which are imports made later."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "src" / "ptxbench"
DOC = REPO / "docs" / "ARCHITECTURE.md"
FACADE = "__init__"  # the root __init__: the public names, each imported lazily on first use; no floor

FLOORS: dict[str, int] = {
    "_compat": 0, "errors": 0, "kernels": 0, "paths": 0,
    "_io": 1, "arch": 1, "integrity": 1,
    "tasks": 2,
    "contract": 3, "static": 3,
    "context": 4,
    "prompts": 5,
    "records": 6,
    "llm": 7, "toolchain": 7,
    "check": 8, "doctor": 8,
    "evaluate": 9,
    "refine": 10, "results": 10, "serve": 10,
    "client": 11, "fixit": 11,
    "cli": 12,
    "__main__": 13,
}

_MODULE_STRING = re.compile(r"ptxbench(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module, dotted (a name imported from a module resolves to that module)
    line: int


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(module: str, package: Path) -> bool:
    return (package.parent.joinpath(*module.split(".")) / "__init__.py").is_file()


def exists(module: str, package: Path) -> bool:
    path = package.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(source: str, module: str, is_pkg: bool, package: Path) -> list[Import]:
    """Every ``ptxbench`` module that ``source`` (the text of ``module``) imports, wherever the import is."""
    found: list[Import] = []
    root = package.name
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing module's package
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # `from ptxbench.x import y` imports the submodule ptxbench.x.y where there is one
            targets = [f"{origin}.{a.name}" if exists(f"{origin}.{a.name}", package) else origin for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.fullmatch(node.value):
            targets = [node.value.split(":")[0]]
        found += [Import(module, t, node.lineno) for t in dict.fromkeys(targets) if t == root or t.startswith(root + ".")]
    return found


def all_imports(package: Path) -> list[Import]:
    found: list[Import] = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        found += imports_of(path.read_text(), module, path.name == "__init__.py", package)
    return found


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else FACADE


def facade_names(package: Path) -> dict[str, str]:
    """The facade's public names and the module each comes from, read from its ``_PUBLIC`` literal."""
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id == "_PUBLIC" and node.value is not None:
                return dict(ast.literal_eval(node.value))
    raise AssertionError("ptxbench/__init__.py has no _PUBLIC table")


def upward_imports(imports: list[Import], floors: dict[str, int], package: Path) -> list[str]:
    """Each import that does not go to a lower floor (same room excepted), said as a reader needs it."""
    wrong = []
    for imported in imports:
        source = room_of(imported.source)
        if source == FACADE:
            continue
        if imported.target == package.name:  # `import ptxbench` / `from ptxbench import X`: see facade rule
            continue
        target = room_of(imported.target)
        if target != source and floors.get(target, 10**6) >= floors.get(source, -1):
            wrong.append(f"{imported.source}:{imported.line} imports {imported.target} "
                         f"({source} on floor {floors.get(source)} → {target} on floor {floors.get(target)})")
    return wrong


def facade_imports(package: Path, floors: dict[str, int], public: dict[str, str]) -> list[str]:
    """``from ptxbench import NAME`` outside the facade: NAME must be a room below, or a public name whose
    module is below (the facade is a door to other rooms, not a way around the floors), or ``__version__``."""
    wrong = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(path, package)
        source = room_of(module)
        if source == FACADE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == package.name:
                for alias in node.names:
                    if alias.name == "__version__":
                        continue
                    submodule = exists(f"{package.name}.{alias.name}", package)
                    origin = alias.name if submodule else room_of(public.get(alias.name, f"?.{alias.name}"))
                    if origin != source and floors.get(origin, 10**6) >= floors[source]:
                        wrong.append(f"{module}:{node.lineno} takes {alias.name} from the facade ({origin})")
    return wrong


def package_cycles(imports: list[Import], package: Path) -> list[list[str]]:
    """Cycles between packages, subpackages included (evaluate.child ↔ evaluate.fleet would be one). A
    subpackage is a part of the package around it, whose own modules may sit below it and above it
    (llm.types ← llm.providers ← llm.client), so an import between a package and one nested in it is no edge
    here; between rooms the floors already forbid any cycle."""
    def package_of(module: str) -> str:
        return module if is_package(module, package) else module.rsplit(".", 1)[0]

    edges: dict[str, set[str]] = {}
    for imported in imports:
        if not exists(imported.target, package):
            continue
        a, b = package_of(imported.source), package_of(imported.target)
        nested = a.startswith(b + ".") or b.startswith(a + ".")
        if a != b and not nested and package.name not in (a, b):  # the facade imports nothing eagerly
            edges.setdefault(a, set()).add(b)
    return cycles(edges)


def module_cycles(imports: list[Import], package: Path) -> list[list[str]]:
    """Cycles between modules, wherever they are (toolchain.compile ↔ toolchain.build_cache was one, each
    importing the other inside a function): two modules that need each other are one module in two files, or
    share a third that should hold what both need. A package's ``__init__`` is a module here like any other;
    the facade is left out (it names every public module and is imported for ``__version__``)."""
    edges: dict[str, set[str]] = {}
    for imported in imports:
        a, b = imported.source, imported.target
        if a != b and exists(b, package) and package.name not in (a, b):
            edges.setdefault(a, set()).add(b)
    return cycles(edges)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def rooms(package: Path) -> set[str]:
    return {p.stem for p in package.glob("*.py") if p.stem != FACADE} | \
        {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def documented_floors(text: str) -> dict[str, int]:
    """The rooms table of docs/ARCHITECTURE.md: rows ``| floor | `room` | owns |``."""
    table: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for room in re.findall(r"`([\w]+)`", cells[1]):
                assert room not in table, f"docs/ARCHITECTURE.md lists {room} twice"
                table[room] = int(cells[0])
    return table


@pytest.fixture(scope="module")
def imports() -> list[Import]:
    return all_imports(PACKAGE)


def test_every_room_is_on_a_declared_floor() -> None:
    found = rooms(PACKAGE)
    assert found - FLOORS.keys() == set(), "a new room: give it a floor in FLOORS and docs/ARCHITECTURE.md"
    assert FLOORS.keys() - found == set(), "a room in FLOORS that no longer exists"


def test_every_import_goes_to_a_lower_floor(imports: list[Import]) -> None:
    assert len(imports) > 300  # the reader sees the package's imports (there are ~450)
    assert upward_imports(imports, FLOORS, PACKAGE) == []
    assert facade_imports(PACKAGE, FLOORS, facade_names(PACKAGE)) == []


def test_the_facade_imports_nothing_eagerly() -> None:
    """``import ptxbench`` stays light and can sit above every room only because it imports none of them."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    eager = [n.lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
             and any(name.startswith("ptxbench") for name in
                     ([a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]))]
    assert eager == []
    assert all(room_of(m) in FLOORS for m in facade_names(PACKAGE).values())


def test_no_package_imports_itself_round_a_cycle(imports: list[Import]) -> None:
    assert package_cycles(imports, PACKAGE) == []


def test_no_module_imports_itself_round_a_cycle(imports: list[Import]) -> None:
    assert module_cycles(imports, PACKAGE) == []


def test_the_architecture_doc_shows_the_same_floors() -> None:
    assert documented_floors(DOC.read_text()) == FLOORS


EVALUATE_TOP = {"__init__", "evaluator"}  # evaluate/'s top level: the package's facade and the stage pipeline


def evaluate_layout(package: Path) -> tuple[set[str], set[str]]:
    """The modules at the top level of ``evaluate/`` and its subrooms (subpackages)."""
    folder = package / "evaluate"
    return ({p.stem for p in folder.glob("*.py")},
            {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()})


def documented_subrooms(text: str) -> set[str]:
    """The subrooms the table of docs/ARCHITECTURE.md's "Inside `evaluate/`" lists: rows ``| `name/` | owns |``."""
    section = text.split("## Inside `evaluate/`", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for line in section.splitlines() if (m := re.match(r"\|\s*`(\w+)/`\s*\|", line))}


def test_evaluate_keeps_only_its_pipeline_at_the_top_and_each_subroom_says_what_it_owns() -> None:
    """A new part of the evaluation goes into the subroom of its role (or a new one, with its row in the doc),
    never back beside the pipeline."""
    top, subrooms = evaluate_layout(PACKAGE)
    assert top == EVALUATE_TOP, f"evaluate/ top level: {sorted(top - EVALUATE_TOP)} belong in a subroom"
    assert documented_subrooms(DOC.read_text()) == subrooms
    for room in subrooms:
        docstring = ast.get_docstring(ast.parse((PACKAGE / "evaluate" / room / "__init__.py").read_text()))
        assert docstring and len(docstring) > 80, f"evaluate/{room}/__init__.py: say what the room owns"


def test_the_evaluate_layout_rules_see_a_stray_module_and_an_undocumented_subroom(tmp_path: Path) -> None:
    folder = tmp_path / "ptxbench" / "evaluate"
    (folder / "timing").mkdir(parents=True)
    for name in ("__init__.py", "evaluator.py", "stray.py", "timing/__init__.py"):
        (folder / name).write_text("")
    assert evaluate_layout(tmp_path / "ptxbench") == ({"__init__", "evaluator", "stray"}, {"timing"})
    doc = "## Inside `evaluate/`\n| subroom | owns |\n|---|---|\n| `proof/` | x |\n| `evaluator.py` | y |\n## Next\n| `z/` | w |\n"
    assert documented_subrooms(doc) == {"proof"}


def test_the_rules_catch_what_they_are_for(tmp_path: Path) -> None:
    """The checks above pass on the real code; here each rule is shown failing on a small fake package."""
    fake = tmp_path / "ptxbench"
    for folder in ("low", "high", "high/sub", "high/sub2"):
        (fake / folder).mkdir(parents=True)
        (fake / folder / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("_PUBLIC = {'thing': 'ptxbench.high.mod'}\n")
    (fake / "high" / "mod.py").write_text("from ptxbench.low import base\n")
    (fake / "high" / "sub" / "part.py").write_text("from ptxbench.high import mod\nfrom ..sub2 import y\n")
    (fake / "high" / "sub2" / "y.py").write_text("import ptxbench.high.sub.part\n")
    (fake / "high" / "other.py").write_text("from .sub import part\n")
    (fake / "low" / "base.py").write_text(
        "def late():\n    from ptxbench.high.mod import x\n"  # upward, inside a function
        "from . import sibling\n"  # relative, same room: fine
        "HANDLER = 'ptxbench.high.mod:Runner'\n"  # a handler named by string: upward
        "from ptxbench import thing\n")  # through the facade: upward
    (fake / "low" / "sibling.py").write_text("from ..high import other\n")  # relative, upward
    floors = {"low": 0, "high": 1}
    public = facade_names(fake)
    found = all_imports(fake)
    wrong = upward_imports(found, floors, fake)
    assert [w.split(" ")[0] for w in wrong] == ["ptxbench.low.base:2", "ptxbench.low.base:4", "ptxbench.low.sibling:1"]
    assert facade_imports(fake, floors, public) == ["ptxbench.low.base:5 takes thing from the facade (high)"]
    assert sorted(package_cycles(found, fake)) == [["ptxbench.high", "ptxbench.low"],
                                                   ["ptxbench.high.sub", "ptxbench.high.sub2"]]
    assert module_cycles(found, fake) == [["ptxbench.high.mod", "ptxbench.high.other", "ptxbench.high.sub.part",
                                           "ptxbench.high.sub2.y", "ptxbench.low.base", "ptxbench.low.sibling"]]
    assert rooms(fake) == {"low", "high"}
    assert documented_floors("| floor | room | owns |\n|---|---|---|\n| 0 | `low` | x |\n| 1 | `high` | y |\n") \
        == floors


def test_a_cycle_of_two_modules_in_one_room_is_caught_and_a_third_module_breaks_it(tmp_path: Path) -> None:
    """The shape toolchain had: the build calls the cache's size limit, the cache's removal calls back into
    the build's memory of seals, both inside functions. Moving what both need into a third module ends it."""
    room = tmp_path / "ptxbench" / "tool"
    room.mkdir(parents=True)
    for init in (room.parent / "__init__.py", room / "__init__.py"):
        init.write_text("")
    (room / "build.py").write_text("def keep_within_limit():\n    from ptxbench.tool.cache import after_build\n"
                                   "def forget(entry): ...\n")
    (room / "cache.py").write_text("def remove(entry):\n    from ptxbench.tool.build import forget\n")
    assert module_cycles(all_imports(room.parent), room.parent) == [["ptxbench.tool.build", "ptxbench.tool.cache"]]
    assert package_cycles(all_imports(room.parent), room.parent) == [], "one package: no package cycle to see"

    (room / "seal.py").write_text("def forget(entry): ...\n")
    (room / "build.py").write_text("from ptxbench.tool import cache, seal\n")
    (room / "cache.py").write_text("from ptxbench.tool.seal import forget\n")
    assert module_cycles(all_imports(room.parent), room.parent) == []
