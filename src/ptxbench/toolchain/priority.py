"""Builds yield the CPU to the GPU's work: a thread that builds runs (and starts nvcc) at a lower priority.

While candidates are built ahead (``eval``'s prebuild, a server's builders, which work throughout a batch),
the GPUs' lanes time kernels in a loop of short calls between three processes (the candidate's, the
baseline's, the lane's), and every hand-over waits for a CPU: compilers busy on the same cores can only
lengthen the exclusive timing stage that every other lane waits for (on the H200 a GEMM candidate's timing
spends more wall time in these hand-overs than in measured calls, benchmarks/results/serve_h200.md). On
Linux a thread's nice value is its own and passes to the processes it starts, so a build thread lowered once
lowers its nvcc, ptxas and disassemblers, and nothing else.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

log = logging.getLogger(__name__)
BUILD_NICENESS = 10  # CFS gives a nice-10 task about a tenth of a contended CPU beside a nice-0 one


def lower_this_thread(niceness: int = BUILD_NICENESS) -> int | None:
    """Give the calling thread at least ``niceness`` (where the platform allows); the value it has then, or
    None when it could not be read or changed (the build then runs at the usual priority)."""
    if not sys.platform.startswith("linux"):  # elsewhere a thread id is not a PRIO_PROCESS target
        return None
    thread = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread)
        target = min(19, max(current, niceness))
        if target != current:
            os.setpriority(os.PRIO_PROCESS, thread, target)
        return os.getpriority(os.PRIO_PROCESS, thread)
    except OSError as exc:
        log.debug("could not lower the build thread's priority: %s", exc)
        return None
