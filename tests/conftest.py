"""Shared fixtures. GPU tests (``-m gpu``) are skipped where no CUDA device is visible, as in CI."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLES = REPO / "kernels" / "examples"


def repo_script(relative: str, name: str | None = None) -> ModuleType:
    """A script of the repository outside the package (``benchmarks/``, ``scripts/``), loaded as a module for
    its tests; ``name``: the module's name (default: the file's stem)."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _isolated_build_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Builds are cached per test session only, so a stale cache never hides a regression."""
    os.environ["PTXBENCH_CACHE"] = str(tmp_path_factory.mktemp("ptxbench-cache"))
