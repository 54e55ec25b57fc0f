"""Every package the code imports, at the top of a module or inside a function, is declared in pyproject.toml: in
the core dependencies or in an extra. A package that arrives only through another one's dependencies works until
that one drops it (typer 0.29 and click), so it is refused here, statically, whatever this environment holds.

Not counted: imports for type checkers only (``if TYPE_CHECKING:``) and imports guarded by an ``except`` that
catches ImportError, whose code runs without the package by construction."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from .cli.light_env import declared, import_names
from .conftest import REPO

SOURCE = REPO / "src" / "ptxbench"
# Distributions whose module is not named after them, for where they are not installed here (an installed one
# names its modules itself): flashinfer-python provides ``flashinfer``, fa3-fwd ``fa3_fwd_interface``,
# nvidia-cudnn-frontend ``cudnn``.
MODULE_OF = {"flashinfer-python": "flashinfer", "fa3-fwd": "fa3_fwd_interface", "nvidia-cudnn-frontend": "cudnn"}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = [caught] if not isinstance(caught, ast.Tuple) else list(caught.elts)
    return caught is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError",
                                                                       "Exception", "BaseException") for n in names)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_packages(tree: ast.AST) -> set[str]:
    """The top-level names a module imports absolutely, outside TYPE_CHECKING blocks and ImportError guards."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_the_scan_sees_imports_in_functions_and_leaves_out_guarded_ones() -> None:
    tree = ast.parse("import a.b\nfrom c import d\nfrom . import e\nif TYPE_CHECKING:\n    import f\nelse:\n    import g\n"
                     "def h():\n    import i\n    try:\n        import j\n    except ImportError:\n        import k\n"
                     "try:\n    import l\nexcept OSError:\n    pass\n")
    assert imported_packages(tree) == {"a", "c", "g", "i", "k", "l"}


def test_every_imported_package_is_declared() -> None:
    groups = declared(REPO / "pyproject.toml")
    distributions = set().union(*(dists for group, dists in groups.items() if group != "dev"))
    # an installed distribution names its modules; one that is not installed here, by its name (liger-kernel)
    provided = import_names(distributions) | {MODULE_OF.get(d, d.replace("-", "_")) for d in distributions}
    known = provided | set(sys.stdlib_module_names) | {"ptxbench", "__future__"}
    undeclared = {}
    for path in sorted(SOURCE.rglob("*.py")):
        for package in imported_packages(ast.parse(path.read_text(), str(path))) - known:
            undeclared.setdefault(package, []).append(str(path.relative_to(REPO)))
    assert not undeclared, f"imported but not declared in pyproject.toml (core or an extra): {undeclared}"
