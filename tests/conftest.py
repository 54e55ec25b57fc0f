"""Shared fixtures. GPU tests (``-m gpu``) are skipped where no CUDA device is visible, as in CI."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.shares import parse_share, share

REPO = Path(__file__).resolve().parents[1]
SHARED_CACHE_VARIABLE = "PTXBENCH_TEST_CACHE"
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


def published_weak_task() -> str:
    """The bundled task whose best baseline the packaged baseline-quality summary puts furthest under
    WEAK_BASELINE_PCT of its roofline: the weak-baseline marks are tested on what is published, not on a task
    named here that the next measurement may lift above the line (rope did, 2026-12-07)."""
    from ptxbench.tasks.baseline_quality import load_baseline_quality, weak_baseline
    from ptxbench.tasks.loader import bundled_suite

    quality = load_baseline_quality()
    weak = [(found.pct, task.id) for task in bundled_suite() if (found := weak_baseline(task, quality)) is not None]
    assert weak, "the packaged baseline-quality summary calls no bundled task's baseline weak"
    return min(weak)[1]


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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns a bare -n into --dist load
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With workers (``-n``) and no ``--dist`` given, each test file goes whole to one worker (``loadfile``), in the
    order below: a fixture made once per module (a Ray cluster, the build of every adversarial case) is then made
    once, not once per worker its tests were spread over. The scheduler runs here, in the controlling process, so
    setting it here is enough. (``--dist loadgroup`` cannot do it: pytest-xdist 3.8 marks a group in a test's id
    through an attribute that pytest 9.2 no longer reads, so every group is split.)"""
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses") \
            and config.getoption("dist") == "no":
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # keep the order of pytest_collection_modifyitems


def _makes_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module (or class): usually what its file spends most on."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(definition.scope in ("module", "package", "class")
                                    for name in item.fixturenames for definition in info.name2fixturedefs.get(name, ()))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", default=None, metavar="K/N", help=(
        "run the K-th of N interleaved shares of the selected tests (every N-th from the K-th, in the order below): "
        "a GPU section longer than one lent-GPU call runs as N calls"))


def shard_of(items: list, shard: str) -> list:
    """The K-th of N interleaved shares of ``items`` for ``--shard K/N``; a malformed value is a usage error."""
    try:
        return share(items, parse_share(shard, "--shard"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: a shard shares out what was selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _gpu_available():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run `pytest -m gpu` on a GPU machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    # The slow tests first, then the files that make a fixture once per module, then the rest (a stable sort: the
    # same order in every worker, as pytest-xdist requires): a file started last keeps its worker busy after the
    # others have run out of work. No test may depend on the order of others (workers run them apart anyway).
    items.sort(key=lambda item: 0 if "slow" in item.keywords else 1 if _makes_a_module_fixture(item) else 2)
    shard = config.getoption("--shard")
    if shard:
        kept = shard_of(items, shard)
        left = [item for item in items if item not in kept]
        if left:
            config.hook.pytest_deselected(items=left)
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def _isolated_build_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Builds are cached per test session only, so a stale cache never hides a regression. ``PTXBENCH_TEST_CACHE``
    names a folder to keep instead: ``scripts/gpu_checks.sh`` sets it, so the sections of one lent machine measure
    each baseline's clean time and build each case once, not once per pytest session (about 150 s each on an
    H100); nothing outside a GPU check sets it."""
    kept = os.environ.get(SHARED_CACHE_VARIABLE)
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
    os.environ["PTXBENCH_CACHE"] = kept or str(tmp_path_factory.mktemp("ptxbench-cache"))
