"""The light install (`pip install -e '.[gpu,cuda-tools]'`, README): checking, prompting, evaluating and
reporting work without the LLM, training, Ray and plotting stacks that the `dev` extra pulls in.

Shown without a second install: each command, and an import of every module of the package, runs in a real
process in which PTXBench's code can import only the standard library, the core dependencies and the light extras'
packages, as pyproject.toml declares them (``light_env``), as if nothing else were installed. `.ci/run` also
installs the light extras alone into a venv of their own and starts the CLI there."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import EXAMPLES, FIXTURES, REPO
from .light_env import LIGHT_EXTRAS, declared, import_names, light_modules
from .newcomer import COLUMNS, one_line

LIGHT = REPO / "tests" / "cli" / "light_env.py"


@functools.cache
def allowed() -> str:
    """The light install's modules as the script's first argument."""
    return ",".join(sorted(light_modules(REPO / "pyproject.toml")))


def light(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``ptxbench ARGS`` in a process where PTXBench's code imports only what the light install declares."""
    return subprocess.run([sys.executable, str(LIGHT), allowed(), "--", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": str(COLUMNS)})


def test_the_light_install_admits_its_declared_packages_and_nothing_else() -> None:
    modules = set(allowed().split(","))
    assert {"pydantic", "typer", "rich", "elftools", "torch", "numpy"} <= modules, modules
    # installed here by the dev extra, and not the light install's
    assert not modules & {"matplotlib", "ray", "transformers", "openai", "uvicorn", "httpx", "hypothesis"}, modules


_AS_PTXBENCH = """
import sys
sys.path.insert(0, sys.argv[1])
import light_env
sys.meta_path.insert(0, light_env.LightOnly(sys.argv[2].split(",")))
import ptxbench.paths
exec(sys.argv[3], vars(ptxbench.paths) if sys.argv[4] == "ptxbench" else {})
"""


@pytest.mark.parametrize("imported", ["matplotlib", "uvicorn"])
def test_the_blocker_refuses_for_ptxbench_what_the_light_install_does_not_declare(imported: str) -> None:
    """Refused for PTXBench's code though installed (by the dev extra), and only for it: what an admitted package
    imports in turn is not judged (rich.syntax imports pygments, which the package does not declare)."""
    if importlib.util.find_spec(imported) is None:
        pytest.skip(f"{imported} is not installed: nothing to hide")

    def as_(importer: str, statement: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _AS_PTXBENCH, str(LIGHT.parent), allowed(), statement, importer],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    refused = as_("ptxbench", f"import {imported}")
    assert refused.returncode != 0 and f"No module named '{imported}'" in refused.stderr, refused.stderr
    assert as_("ptxbench", "import rich.syntax, pydantic").returncode == 0
    elsewhere = as_("__main__", f"import {imported}")
    assert elsewhere.returncode == 0, elsewhere.stderr


def test_every_module_of_the_package_imports_with_the_light_install_alone() -> None:
    """Any module may need an optional extra (the server needs FastAPI) but none may need what nothing declares,
    and the modules the light install runs need nothing beyond it (the commands below run them)."""
    done = subprocess.run([sys.executable, str(LIGHT), allowed(), "--import-all"], capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    failed = json.loads(done.stdout)
    groups = declared(REPO / "pyproject.toml")
    optional = {extra: import_names(dists) | {d.replace("-", "_") for d in dists} for extra, dists in groups.items()
                if extra and extra not in LIGHT_EXTRAS and extra != "dev"}
    undeclared = {module: why["error"] for module, why in failed.items()
                  if not any(why["missing"] in names for names in optional.values())}
    assert not undeclared, "\n".join(f"{module}: {error}" for module, error in undeclared.items())
    assert not {m for m in failed if m == "ptxbench" or m.startswith("ptxbench.cli")}, failed


@pytest.mark.parametrize("args", [("--version",), ("tasks", "list"), ("tasks", "show", "rmsnorm"), ("prompt", "softmax"),
                                  ("doctor",)], ids=lambda a: " ".join(a))
def test_reading_commands_work_without_the_heavy_extras(args: tuple[str, ...]) -> None:
    done = light(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_check_eval_and_report_work_without_the_heavy_extras(tmp_path: Path) -> None:
    checked = light("check", str(FIXTURES / "wgmma_unguarded.cu"), "--json")
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert json.loads(checked.stdout)["build"]["ok"]

    folder = tmp_path / "kernels"
    folder.mkdir()
    (folder / "softmax.cu").write_text((EXAMPLES / "softmax.cu").read_text())
    evaluated = light("eval", str(folder), "--out", str(tmp_path / "run"))
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert (tmp_path / "run" / "items" / "softmax" / "softmax" / "result.json").is_file()

    reported = light("report", str(tmp_path / "run"), "--out", str(tmp_path / "report"))
    assert reported.returncode == 0, reported.stderr[-2000:]
    assert "Traceback" not in reported.stderr
    assert (tmp_path / "report" / "report.md").is_file()
    # Without matplotlib the plots are left out, the tables are written, and the note names the extra.
    note = one_line(reported.stderr)
    assert "note: the report's plots need matplotlib, which is not installed: pip install 'ptxbench[report]'" in note
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Plots left out." in markdown and "| softmax |" in markdown
    assert "<img" not in (tmp_path / "report" / "report.html").read_text()
