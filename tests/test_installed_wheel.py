"""What a `pip install` user gets: the wheel carries the package data the commands need, and `eval --gold`
finds the reference kernels outside the source tree (no clone beside it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ptxbench.kernels import reference_folder

from .conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(folder), str(REPO)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"the wheel did not build: {done.stderr[-2000:]}")
    return next(folder.glob("ptxbench-*.whl"))


def test_the_wheel_carries_every_reference_kernel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n for n in names if n.startswith("ptxbench/kernels/reference/")}
    expected = {f"ptxbench/kernels/reference/{p.parent.name}/{p.name}" for p in reference_folder("sm_90a").glob("*.cu")}
    assert expected and expected <= shipped
    assert "ptxbench/context/ptx_wrappers.cuh" in names  # the header the reference kernels include


def test_the_wheel_carries_every_file_of_the_package(wheel: Path) -> None:
    """Package data is listed by pattern in pyproject.toml: a new kind of file, or a new folder of tasks or
    reference kernels, that no pattern covers would be missing from an install, and a folder without an
    ``__init__.py`` would lose its modules. Every module and data file of the source tree must ship."""
    names = set(zipfile.ZipFile(wheel).namelist())
    source = REPO / "src"
    files = {p.relative_to(source).as_posix() for p in (source / "ptxbench").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert {f for f in files if not f.endswith(".py")}, "the package has data files"
    assert files - names == set()


def test_eval_gold_from_the_installed_wheel_outside_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-m", "ptxbench", "eval", "--gold", "--no-profile", "--out", "run"],
                          capture_output=True, text=True, timeout=900, cwd=elsewhere, env=environment,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    imported_from = subprocess.run([sys.executable, "-c", "import ptxbench; print(ptxbench.__file__)"],
                                   capture_output=True, text=True, cwd=elsewhere, env=environment, check=True)
    assert imported_from.stdout.strip().startswith(str(site)), "the test must run the installed copy"
    results = sorted((elsewhere / "run" / "items").glob("*/*/result.json"))
    assert sorted(p.parent.parent.name for p in results) == sorted(p.stem for p in reference_folder("sm_90a").glob("*.cu"))
    for path in results:
        record = json.loads(path.read_text())
        assert record["build"]["ok"], f"{path.parent.parent.name}: {record.get('message')}"
