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


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a machine without the plugin never calls it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the README's test command): a worker per CPU this process may run on, and none where a GPU is
    visible: the GPU tests time kernels and must have the GPU, and the machine, to themselves, one at a time.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides where set, as pytest-xdist documents."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if _gpu_available():
        return 0
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _module_group(item: pytest.Item) -> str | None:
    """The test's module where the test uses a fixture made once per module (a cluster, every build of a folder):
    split over workers, each would make it again. Groups bind with ``--dist loadgroup`` (the README's command)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in item.fixturenames:
        if any(definition.scope in ("module", "package", "class") for definition in info.name2fixturedefs.get(name, ())):
            return item.nodeid.split("::")[0]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = _gpu_available()
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            # one GPU, one test at a time, even where workers were asked for (`-n 4`)
            item.add_marker(pytest.mark.xdist_group("gpu") if gpu else skip)
        elif (group := _module_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # The slow ones first (a stable sort: the same order in every worker, as pytest-xdist requires): started last,
    # one of them would keep its worker busy after the others ran out of work.
    items.sort(key=lambda item: "slow" not in item.keywords)


@pytest.fixture(scope="session", autouse=True)
def _isolated_build_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Builds are cached per test session only, so a stale cache never hides a regression."""
    os.environ["PTXBENCH_CACHE"] = str(tmp_path_factory.mktemp("ptxbench-cache"))
