"""Where PTXBench keeps what outlives a process: one cache root (``PTXBENCH_CACHE``, else the user's cache
folder) holding the builds, baselines and completions, with the integrity key beside them.

A module of its own at the bottom of the package, so the integrity key, the build cache and the evaluator
agree on the folders without importing one another.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The folder every PTXBench cache lives under."""
    return Path(os.environ.get("PTXBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ptxbench"))


def default_cache_dir() -> Path:
    """The build cache (``toolchain.compile``)."""
    return cache_root() / "builds"
