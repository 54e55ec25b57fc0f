"""What a call launched, read from a trace (the trial's kineto activities, the timed calls' trace) or from
Nsight Compute's launches, in one vocabulary: a launch is its kernel's base name with grid and block, or a
runtime copy. Pure functions: the guards (``guards``) compare these, and records keep them
(``TrialResult.launches``, ``Timing.launches_per_call``).
"""

from __future__ import annotations

import re
from typing import Any

RUNTIME_COPIES = ("Memcpy", "Memset")
TO_HOST = "Memcpy DtoH"  # kineto's name for device-to-host copies ("Memcpy DtoH (Device -> Pageable)")


def base_name(kernel: str) -> str:
    """'void (anonymous namespace)::gemm_kernel<128>(float*, int)' -> 'gemm_kernel': the part a trace,
    c++filt and the cubin's symbol agree on."""
    text = kernel.replace("(anonymous namespace)", "").replace("<unnamed>", "")
    head = text.split("(", 1)[0]
    depth, kept = 0, []
    for char in head:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif depth == 0:
            kept.append(char)
    words = "".join(kept).split()
    return words[-1].split("::")[-1] if words else head.strip()


def launch_signature(name: str, grid: Any = None, block: Any = None) -> str:
    """One launch as the trace, the timed calls' trace and Nsight Compute all describe it: the kernel's base
    name and, where known, its grid and block (``gemm grid=132,1,1 block=384,1,1``)."""
    def dims(value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):  # ncu writes "(132, 1, 1)"
            value = [part for part in re.split(r"[^0-9]+", value) if part]
        return ",".join(str(int(v)) for v in value)

    parts = [base_name(name) if not name.startswith(RUNTIME_COPIES) else name.split(" (")[0]]
    for label, value in (("grid", dims(grid)), ("block", dims(block))):
        if value is not None:
            parts.append(f"{label}={value}")
    return " ".join(parts)


def launches_of(activities: list[dict[str, Any]], launch_stream: Any, ignored: set[str] | None = None
                ) -> dict[str, int]:
    """How often each launch (``launch_signature``) ran on the launch stream, the harness's own kernels
    (``ignored``, by full name) left out."""
    counts: dict[str, int] = {}
    for activity in activities:
        if activity["stream"] != launch_stream or activity["name"] in (ignored or set()):
            continue
        key = launch_signature(activity["name"], activity.get("grid"), activity.get("block"))
        counts[key] = counts.get(key, 0) + 1
    return counts


def timed_activities(timed: dict[str, Any]) -> list[dict[str, Any]]:
    """The timed calls' trace (``CandidateRunner.timed_launches``) without the harness's own timing kernels."""
    harness = set(timed.get("harness_kernels") or [])
    return [a for a in timed.get("activities") or [] if a["name"] not in harness]


def timed_launches_per_call(timed: dict[str, Any]) -> dict[str, float]:
    """What each timed call launched on the stream passed in, on average (``Timing.launches_per_call``)."""
    calls = int(timed.get("rounds") or 0)
    counts = launches_of(timed_activities(timed), timed.get("stream"))
    return {key: count / calls for key, count in counts.items()} if calls > 0 else {}


# A launch the trial did not make may occur this often in all the timed calls together: the one-time work of
# a fresh process (a workspace cleared or a table uploaded on the first call), which the trial judged here,
# not the process's first, no longer shows. Anything the trial made must recur in every timed call.
ONE_TIME_LAUNCHES = 2


# Runtime copies into the device and memsets that the trial made and the timed calls make less often: setup
# that a candidate does once per shape and then caches (a tile schedule or descriptors uploaded on the first
# call of a shape, which the trial of a workload may be). Fewer of them when timed is less work, never a
# shortcut: the kernels must still match, and timed outputs are checked. Copies to the host have their own guard.
_SETUP_COPIES = ("Memcpy HtoD", "Memset")


def launch_difference(expected: dict[str, int], seen: dict[str, int], calls: int,
                      one_time: int = ONE_TIME_LAUNCHES) -> str | None:
    """None when the timed calls' launches (``seen``, totals over ``calls`` calls) are ``expected`` (one trial's
    launches) in every call, give or take ``one_time`` launches the trial did not make and setup copies
    (``_SETUP_COPIES``) made less often; else what differs."""
    differ = []
    for key in sorted(set(expected) | set(seen)):
        want, got = expected.get(key, 0) * calls, seen.get(key, 0)
        if got == want or (want == 0 and got <= one_time) or (key.startswith(_SETUP_COPIES) and got < want):
            continue
        differ.append(f"{key}: {got / calls:g} per call instead of {expected.get(key, 0)}")
    return "; ".join(differ[:4]) + (f" (and {len(differ) - 4} more)" if len(differ) > 4 else "") if differ else None


def kernel_durations_ms(launched: list[Any]) -> list[float]:
    """The durations of one profiled call's kernel launches in ms, in launch order (those ncu gave none left out)."""
    return [launch.duration_ns / 1e6 for launch in launched if launch.duration_ns]
