"""Judging one correctness trial from the worker's raw reply, and the status that follows from the
evidence. Pure functions of their inputs, so ``--regrade`` can recompute verdicts without a GPU.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ptxbench.records.evaluation import Evaluation, Guard, GuardFinding, Status

if TYPE_CHECKING:
    import torch

BANNED_LIBRARIES = re.compile(r"lib(cublas|cublasLt|cudnn\w*)\.so")
_RUNTIME_COPIES = ("Memcpy", "Memset")
_TO_HOST = "Memcpy DtoH"  # kineto's name for device-to-host copies ("Memcpy DtoH (Device -> Pageable)")


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


def provenance_guards(activities: list[dict[str, Any]], launch_stream: int | None,
                      own_kernels: set[str]) -> list[GuardFinding]:
    """Kernels must come from the candidate's own module and run on the launch stream."""
    findings: list[GuardFinding] = []
    kernels = [a for a in activities if not a["name"].startswith(_RUNTIME_COPIES)]
    own = [a for a in kernels if base_name(a["name"]) in own_kernels]
    foreign = sorted({a["name"][:120] for a in kernels if base_name(a["name"]) not in own_kernels})
    if foreign:
        findings.append(GuardFinding(guard=Guard.FOREIGN_KERNELS,
                                     detail=f"kernels not in the candidate's module ran during its call: {foreign[:3]}"))
    if not own:
        copies = sorted({a["name"] for a in activities if a["name"].startswith(_RUNTIME_COPIES)})
        findings.append(GuardFinding(guard=Guard.NO_OWN_KERNEL, detail="none of the candidate's kernels ran"
                                     + (f"; the work was done by runtime copies {copies[:3]}" if copies else "")))
    elsewhere = sorted({str(a["stream"]) for a in activities if launch_stream is not None and a["stream"] != launch_stream})
    if elsewhere:
        findings.append(GuardFinding(guard=Guard.OTHER_STREAM,
                                     detail=f"work ran on stream(s) {', '.join(elsewhere)}, not on the stream passed in"))
    return findings + host_transfer_guards(activities)


def host_transfer_guards(activities: list[dict[str, Any]]) -> list[GuardFinding]:
    """Task data copied to the host inside the call: the work may be done on the CPU, whatever kernels ran
    beside it (a token kernel of the candidate's own does not make it a GPU kernel)."""
    copies = [a for a in activities if a["name"].startswith(_TO_HOST)]
    if not copies:
        return []
    return [GuardFinding(guard=Guard.HOST_TRANSFER, detail=(
        f"the call copied device memory to the host {len(copies)} time(s) ({copies[0]['name']}): "
        "a kernel's work may not be done on the CPU"))]


def launch_signature(name: str, grid: Any = None, block: Any = None) -> str:
    """One launch as the trace, the timed calls' trace and Nsight Compute all describe it: the kernel's base
    name and, where known, its grid and block (``gemm grid=132,1,1 block=384,1,1``)."""
    def dims(value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):  # ncu writes "(132, 1, 1)"
            value = [part for part in re.split(r"[^0-9]+", value) if part]
        return ",".join(str(int(v)) for v in value)

    parts = [base_name(name) if not name.startswith(_RUNTIME_COPIES) else name.split(" (")[0]]
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


def timed_launch_guards(workload: str, trial_launches: dict[str, int] | None, timed: dict[str, Any],
                        own_kernels: set[str]) -> list[GuardFinding]:
    """The timed calls' trace (``CandidateRunner.timed_launches``) judged against one correctness trial of
    the same workload (its last: past a fresh process's one-time work): every timed call must launch what the
    trial launched, on the stream passed in, and copy nothing to the host. A candidate that behaves
    differently when timed is REJECTED."""
    findings: list[GuardFinding] = []
    activities = timed_activities(timed)
    stream = timed.get("stream")
    elsewhere = sorted({str(a["stream"]) for a in activities if a["stream"] != stream})
    if elsewhere:
        findings.append(GuardFinding(guard=Guard.OTHER_STREAM, detail=(
            f"{workload}: during timed calls work ran on stream(s) {', '.join(elsewhere)}, not on the stream passed in")))
    findings += host_transfer_guards(activities)
    foreign = sorted({a["name"][:120] for a in activities if a.get("kind", "kernel") == "kernel" and a["stream"] == stream
                      and base_name(a["name"]) not in own_kernels})
    if foreign:
        findings.append(GuardFinding(guard=Guard.FOREIGN_KERNELS, detail=(
            f"{workload}: kernels not in the candidate's module ran during timed calls: {foreign[:3]}")))
    calls = int(timed.get("rounds") or 0)
    if trial_launches is not None and calls > 0:
        differ = launch_difference(trial_launches, launches_of(activities, stream), calls)
        if differ:
            findings.append(GuardFinding(guard=Guard.LAUNCHES_DIFFER, detail=(
                f"{workload}: timed calls launched other work per call than the correctness trials ({differ})")))
    return findings


def canary_guards(canaries: dict[str, "torch.Tensor"], value: int) -> list[GuardFinding]:
    damaged = [name for name, guard_bytes in canaries.items() if bool((guard_bytes != value).any())]
    return [GuardFinding(guard=Guard.OUT_OF_BOUNDS_WRITE, detail=f"bytes next to output {name} were overwritten")
            for name in damaged]


def mutation_guards(before: dict[str, "torch.Tensor"], after: dict[str, "torch.Tensor"]) -> list[GuardFinding]:
    import torch

    changed = [name for name, tensor in before.items()
               if not torch.equal(tensor.view(torch.uint8), after[name].to(tensor.device).view(torch.uint8))]
    return [GuardFinding(guard=Guard.INPUT_MUTATION, detail=f"input {name} was modified") for name in changed]


def library_guards(loaded: set[str]) -> list[GuardFinding]:
    banned = sorted(path for path in loaded if BANNED_LIBRARIES.search(path))
    return [GuardFinding(guard=Guard.LIBRARY_CALL, detail=f"the candidate's process loaded {path}") for path in banned]


def unique(findings: list[GuardFinding]) -> list[GuardFinding]:
    seen, kept = set(), []
    for finding in findings:
        if (finding.guard, finding.detail) not in seen:
            seen.add((finding.guard, finding.detail))
            kept.append(finding)
    return kept


def decide(evaluation: Evaluation) -> Status:
    """The status the evidence supports (used when evaluating and when regrading)."""
    if evaluation.build is not None and not evaluation.build.ok:
        return Status.COMPILE_ERROR
    if evaluation.status in (Status.RUNTIME_ERROR, Status.TIMEOUT):
        return evaluation.status
    if evaluation.guards:
        return Status.REJECTED
    if not evaluation.correct:
        return Status.INCORRECT
    return Status.PASSED


def profiled_launch_guards(trial_launches: dict[str, int] | None, launched: list[Any]) -> list[GuardFinding]:
    """The call Nsight Compute profiled (a process's second call: its one-time work is behind it) must launch
    the kernels, grids and blocks that a trial of the same workload launched: a candidate that runs other
    code under the profiler than when checked and timed is REJECTED. ncu profiles kernels only, so the
    trial's runtime copies are left out."""
    if trial_launches is None:
        return []
    expected = {key: count for key, count in trial_launches.items() if not key.startswith(_RUNTIME_COPIES)}
    # Where the trial's trace gave no launch shapes, kernels are compared by name alone.
    shaped = all(" grid=" in key for key in expected)
    profiled: dict[str, int] = {}
    for launch in launched:
        key = launch_signature(launch.name, launch.grid if shaped else None, launch.block if shaped else None)
        profiled[key] = profiled.get(key, 0) + 1
    differ = launch_difference(expected, profiled, 1, one_time=0)
    return [] if differ is None else [GuardFinding(guard=Guard.LAUNCHES_DIFFER, detail=(
        f"the call under Nsight Compute launched other kernels than the correctness trial of the same workload ({differ})"))]


# The CUDA-event median of the timed workload against the summed kernel durations Nsight Compute measured for
# one call of it, from outside the candidate's process. On the H200 the two agree within 3 % (event time the
# longer: it includes the launch; benchmarks/results/evaluator_h200.md), so an event time below this share of
# ncu's says the times were forged inside the process (the timing code there runs beside the candidate's) or
# that the timed program is not the profiled one.
MIN_TIMED_SHARE_OF_PROFILED = 0.9


def profiled_ms(launched: list[Any]) -> float | None:
    """The summed durations of one profiled call's kernels in ms, or None when ncu reported none."""
    durations = [launch.duration_ns for launch in launched if launch.duration_ns]
    return sum(durations) / 1e6 if durations else None


def timing_agreement_guards(timed_ms: float | None, launched: list[Any], alone: bool) -> list[GuardFinding]:
    """REJECTED when the event-timed median is below ``MIN_TIMED_SHARE_OF_PROFILED`` of ncu's durations for the
    same call. ``alone``: ncu profiled with the GPU held exclusively; a shared GPU slows the profiled kernels,
    so a finding made there is a reason to profile again alone, not a verdict."""
    profiled = profiled_ms(launched)
    if timed_ms is None or profiled is None or timed_ms >= MIN_TIMED_SHARE_OF_PROFILED * profiled:
        return []
    where = "with the GPU to itself" if alone else "beside other work on the GPU"
    return [GuardFinding(guard=Guard.TIMING_DISAGREES, detail=(
        f"the timed call took {timed_ms:.4g} ms, {profiled / timed_ms:.2f}x less than its own kernels under Nsight "
        f"Compute ({profiled:.4g} ms, profiled {where}): the times were forged inside the candidate's process, or "
        f"the timed program is not the profiled one"))]
