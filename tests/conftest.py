"""Shared fixtures. GPU tests (``-m gpu``) are skipped where no CUDA device is visible, as in CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLES = REPO / "kernels" / "examples"


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
