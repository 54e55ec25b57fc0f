"""Build threads run, and start their compilers, below the GPU lanes' priority; other threads keep theirs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from ptxbench.toolchain.priority import BUILD_NICENESS, lower_this_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is Linux's")

_CHILD_NICENESS = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]


def _own() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_lowered_thread_passes_its_priority_to_what_it_starts_and_only_that_thread_is_lowered() -> None:
    before = _own()
    with ThreadPoolExecutor(max_workers=1, initializer=lower_this_thread) as pool:
        reached = pool.submit(_own).result()
        child = int(pool.submit(lambda: subprocess.run(_CHILD_NICENESS, capture_output=True, text=True,
                                                       check=True).stdout).result())
    assert reached == max(before, BUILD_NICENESS)
    assert child >= BUILD_NICENESS, "nvcc started from a build thread must inherit its priority"
    assert _own() == before, "the calling (lane's) thread keeps its priority"
    here = int(subprocess.run(_CHILD_NICENESS, capture_output=True, text=True, check=True).stdout)
    assert here == before


def test_a_thread_already_lower_is_not_raised() -> None:
    def lowest() -> int | None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 15)
        return lower_this_thread()

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(lowest).result() == 15
