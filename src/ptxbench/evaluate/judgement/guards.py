"""Every check that can REJECT a candidate, as one table (``GUARDS``) and the functions that make its findings.

A guard finding is evidence that the candidate did not do the task's work honestly on the GPU (another
kernel did it, the host did it, it read old outputs, it wrote outside its buffers, it forged a number), so any
finding makes the evaluation REJECTED (``verdict.decide``). ``GUARDS`` names, for each ``Guard``, the
functions here that make its findings, the stages of the evaluation that apply them and why. Findings are made
in this module alone (``tests/evaluate/test_guards.py`` holds the table to the code), and each function is a
pure judgement of raw data the harness collected, so the stages only gather evidence and call them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

from ptxbench.evaluate.judgement.launches import (
    RUNTIME_COPIES,
    TO_HOST,
    base_name,
    launch_difference,
    launch_signature,
    kernel_durations_ms,
    launches_of,
    timed_activities,
)
from ptxbench.records.evaluation import Guard, GuardFinding, RequirementExecution

if TYPE_CHECKING:
    import torch

    from ptxbench.records.evaluation import KernelProfile
    from ptxbench.static.report import StaticReport


class GuardCheck(NamedTuple):
    """One guard: the functions of this module that make its findings, where they run, and why it rejects."""

    guard: Guard
    checks: tuple[str, ...]
    stages: str
    reason: str


GUARDS: tuple[GuardCheck, ...] = (
    GuardCheck(Guard.LIBRARY_CALL, ("linked_library_guards", "library_guards"), "build; trials",
               "a vendor library (cuBLAS, cuDNN) linked into the binary or loaded by its process did the work"),
    GuardCheck(Guard.FOREIGN_KERNELS, ("provenance_guards", "timed_launch_guards", "profiled_foreign_guards"),
               "trials; timing; profile", "kernels that are not in the candidate's module ran during its call"),
    GuardCheck(Guard.NO_OWN_KERNEL, ("provenance_guards",), "trials",
               "none of the candidate's kernels ran: runtime copies or nothing produced the outputs"),
    GuardCheck(Guard.OTHER_STREAM, ("provenance_guards", "timed_launch_guards"), "trials; timing",
               "work ran on another stream than the one passed in, outside what the timing events bracket"),
    GuardCheck(Guard.INPUT_MUTATION, ("mutation_guards",), "trials",
               "the call changed an input, so a later call (or the reference) sees other data"),
    GuardCheck(Guard.OUT_OF_BOUNDS_WRITE, ("canary_guards",), "trials",
               "bytes beside an output were overwritten: the kernel writes outside its buffers"),
    GuardCheck(Guard.BELOW_PHYSICAL_FLOOR, ("physical_floor_guards",), "timing",
               "the timed call beat the datasheet's bandwidth and tensor-core peak, so the work was not done"),
    GuardCheck(Guard.FEATURE_NOT_EXECUTED, ("feature_guards",), "profile",
               "a required feature (wgmma, TMA) is in the binary but Nsight Compute counted too little of it run"),
    GuardCheck(Guard.FORGED_REPLY, ("forged_reply_guards",), "any worker reply",
               "the candidate's process sent bytes that are not a reply the harness's code makes"),
    GuardCheck(Guard.LAUNCHES_DIFFER, ("timed_launch_guards", "profiled_launch_guards"), "timing; profile",
               "timed or profiled calls launched other work than the correctness trials: it behaves differently"),
    GuardCheck(Guard.HOST_TRANSFER, ("host_transfer_guards",), "trials; timing",
               "task data was copied to the host inside the call: the work may be done on the CPU"),
    GuardCheck(Guard.TIMING_DISAGREES, ("timing_agreement_guards", "wall_clock_guards"), "timing; profile",
               "the event-timed call was faster than its own kernels under Nsight Compute, or than the harness's "
               "wall clock allows: times forged in-process"),
)

BANNED_LIBRARIES = re.compile(r"lib(cublas|cublasLt|cudnn\w*)\.so")

# Datasheet peaks (dense): no kernel can beat them, so a faster time means the work was not done.
PEAKS = {"H200": {"bytes_per_s": 4.8e12, "bf16": 989e12, "fp8": 1979e12},
         "H100": {"bytes_per_s": 3.35e12, "bf16": 989e12, "fp8": 1979e12}}


# -- build --------------------------------------------------------------------------------------------------


def linked_library_guards(static: StaticReport | None) -> list[GuardFinding]:
    """The binary links a vendor library (the static report's policy violation): decided before anything runs."""
    linked = [v for v in static.policy_violations if "links" in v] if static else []
    return [GuardFinding(guard=Guard.LIBRARY_CALL, detail=linked[0])] if linked else []


# -- correctness trials --------------------------------------------------------------------------------------


def provenance_guards(activities: list[dict[str, Any]], launch_stream: int | None,
                      own_kernels: set[str]) -> list[GuardFinding]:
    """Kernels must come from the candidate's own module and run on the launch stream."""
    findings: list[GuardFinding] = []
    kernels = [a for a in activities if not a["name"].startswith(RUNTIME_COPIES)]
    own = [a for a in kernels if base_name(a["name"]) in own_kernels]
    foreign = sorted({a["name"][:120] for a in kernels if base_name(a["name"]) not in own_kernels})
    if foreign:
        findings.append(GuardFinding(guard=Guard.FOREIGN_KERNELS,
                                     detail=f"kernels not in the candidate's module ran during its call: {foreign[:3]}"))
    if not own:
        copies = sorted({a["name"] for a in activities if a["name"].startswith(RUNTIME_COPIES)})
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
    copies = [a for a in activities if a["name"].startswith(TO_HOST)]
    if not copies:
        return []
    return [GuardFinding(guard=Guard.HOST_TRANSFER, detail=(
        f"the call copied device memory to the host {len(copies)} time(s) ({copies[0]['name']}): "
        "a kernel's work may not be done on the CPU"))]


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


# -- timing ----------------------------------------------------------------------------------------------------


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


def datasheet_peaks(device_name: str) -> dict[str, float] | None:
    """The datasheet's peaks of the GPU named ``device_name``, or None for a GPU not in ``PEAKS``."""
    return next((peaks for key, peaks in PEAKS.items() if key in device_name), None)


def physical_floor_guards(workload: str, candidate_ms: float, moved: float, flops: float,
                          datasheet: dict[str, float] | None, fp8: bool) -> list[GuardFinding]:
    """The timed median below what the datasheet allows for the workload's bytes and FLOPs."""
    if datasheet is None:
        return []
    floor_s = max(moved / datasheet["bytes_per_s"], flops / datasheet["fp8" if fp8 else "bf16"])
    if candidate_ms / 1e3 >= floor_s:
        return []
    return [GuardFinding(guard=Guard.BELOW_PHYSICAL_FLOOR, detail=(
        f"{workload}: {candidate_ms:.4f} ms is below the physical floor {floor_s * 1e3:.4f} ms "
        "(datasheet bandwidth and tensor-core peak)"))]


# -- executed instructions (Nsight Compute) ---------------------------------------------------------------------


def feature_guards(features: list[RequirementExecution]) -> list[GuardFinding]:
    """Required features that ncu's counters could judge and found not executed (enough)."""
    return [GuardFinding(guard=Guard.FEATURE_NOT_EXECUTED, detail=f.message)
            for f in features if f.verified and not f.satisfied]


def profiled_foreign_guards(launched: list[KernelProfile], own_kernels: set[str]) -> list[GuardFinding]:
    """Kernels under ncu that are not in the candidate's module."""
    foreign = sorted({launch.name for launch in launched if base_name(launch.name) not in own_kernels})
    if not foreign:
        return []
    return [GuardFinding(guard=Guard.FOREIGN_KERNELS, detail=(
        f"under ncu the call launched kernels that are not in the candidate's module: {', '.join(foreign[:3])}"))]


def profiled_launch_guards(trial_launches: dict[str, int] | None, launched: list[Any]) -> list[GuardFinding]:
    """The call Nsight Compute profiled (a process's second call: its one-time work is behind it) must launch
    the kernels, grids and blocks that a trial of the same workload launched: a candidate that runs other
    code under the profiler than when checked and timed is REJECTED. ncu profiles kernels only, so the
    trial's runtime copies are left out."""
    if trial_launches is None:
        return []
    expected = {key: count for key, count in trial_launches.items() if not key.startswith(RUNTIME_COPIES)}
    # Where the trial's trace gave no launch shapes, kernels are compared by name alone.
    shaped = all(" grid=" in key for key in expected)
    profiled: dict[str, int] = {}
    for launch in launched:
        key = launch_signature(launch.name, launch.grid if shaped else None, launch.block if shaped else None)
        profiled[key] = profiled.get(key, 0) + 1
    differ = launch_difference(expected, profiled, 1, one_time=0)
    return [] if differ is None else [GuardFinding(guard=Guard.LAUNCHES_DIFFER, detail=(
        f"the call under Nsight Compute launched other kernels than the correctness trial of the same workload ({differ})"))]


# The CUDA-event median of the timed workload against the kernel durations Nsight Compute measured for one call
# of it, from outside the candidate's process. For a call of one kernel the two agree within 3 % on the H200
# (event time the longer: it includes the launch; benchmarks/results/evaluator_h200.md), so an event time below
# MIN_TIMED_SHARE_OF_PROFILED of ncu's says the times were forged inside the process (the timing code there runs
# beside the candidate's) or that the timed program is not the profiled one. A call of several kernels is not
# measured alike on the two sides: ncu runs each kernel alone with the caches flushed, the timed call runs them
# back to back, where a kernel reads what the one before left in L2 and the next may start as it drains (a
# model-written split-KV decode and its merge kernel were reported 1.24x faster timed than summed under ncu on an
# H100; the control tests/adversarial/split_kv_decode.cu did not reproduce it). There
# the event time must reach MIN_TIMED_SHARE_OF_PROFILED_KERNELS of the sum, and MIN_TIMED_SHARE_OF_LONGEST of
# the longest kernel (a cold cache slows one kernel too, a neighbour cannot halve it); measured shares:
# benchmarks/results/ncu_vs_events_*.md.
MIN_TIMED_SHARE_OF_PROFILED = 0.9
MIN_TIMED_SHARE_OF_PROFILED_KERNELS = 0.6
MIN_TIMED_SHARE_OF_LONGEST = 0.75


def profiled_floor_ms(durations: list[float]) -> float | None:
    """The least event time one call can take given ncu's durations of its launches in ms (see above), or None."""
    if not durations:
        return None
    if len(durations) == 1:
        return MIN_TIMED_SHARE_OF_PROFILED * durations[0]
    return max(MIN_TIMED_SHARE_OF_LONGEST * max(durations), MIN_TIMED_SHARE_OF_PROFILED_KERNELS * sum(durations))


def timing_agreement_guards(timed_ms: float | None, launched: list[Any], alone: bool) -> list[GuardFinding]:
    """REJECTED when the event-timed median is below what ncu's durations for the same call allow
    (``profiled_floor_ms``). ``alone``: ncu profiled with the GPU held exclusively; a shared GPU slows the
    profiled kernels, so a finding made there is a reason to profile again alone, not a verdict."""
    durations = kernel_durations_ms(launched)
    floor = profiled_floor_ms(durations)
    if timed_ms is None or floor is None or timed_ms >= floor:
        return []
    where = "with the GPU to itself" if alone else "beside other work on the GPU"
    profiled, kernels = sum(durations), len(durations)
    return [GuardFinding(guard=Guard.TIMING_DISAGREES, detail=(
        f"the timed call took {timed_ms:.4g} ms, {profiled / timed_ms:.2f}x less than its own kernels under Nsight "
        f"Compute ({profiled:.4g} ms in {kernels} launch(es), profiled {where}; at least {floor:.4g} ms allowed): the "
        f"times were forged inside the candidate's process, or the timed program is not the profiled one"))]


# Host work inside a call is not in its event times (the launch gate holds the GPU until the call is queued),
# so a call may take this much longer on the wall clock than the baseline's beside its event time before that
# says anything; beyond it, and beyond the event time itself (the call took over twice what its events say),
# the times were forged inside the candidate's process. Measured on honest kernels: -0.18 to +0.19 ms beside
# another run on an H100 (benchmarks/results/concurrent_evals_h100_80gb_hbm3.md), but +0.57 ms for a plain
# 0.08 ms GEMM of an imported task (a 12x faster baseline, 11 calls a chunk), where each call's protocol cost
# about 1.2 ms of host time per side (that run's stage times: 4.8 s beyond the measured time over ~4,000
# calls): the difference of two host times is only as exact as they are long, so the allowance also grows
# with the protocol's own per-call host time (WALL_PROTOCOL_FACTOR of the baseline's).
# Without the executed-instruction proof this is the check that bounds a forged time; with it, ncu's kernel
# durations decide (``wall_findings_confirmed``).
WALL_HOST_ALLOWANCE_MS = 0.5
WALL_PROTOCOL_FACTOR = 1.0
_WALL_CLOCK = "on the harness's wall clock"


def wall_allowance_ms(candidate_ms: float, protocol_ms: float | None) -> float:
    """How much longer per call than its events say a candidate's call may take on the harness's wall clock,
    beyond the baseline's, before its times count as forged."""
    return max(WALL_HOST_ALLOWANCE_MS, candidate_ms, WALL_PROTOCOL_FACTOR * (protocol_ms or 0.0))


def wall_clock_guards(workload: str, candidate_ms: float, unexplained_ms: float | None,
                      protocol_ms: float | None = None, host_ms: float = 0.0) -> list[GuardFinding]:
    """REJECTED when each timed call took longer on the harness's wall clock than its events say, beyond the
    baseline's (``timing.protocol.wall_unexplained``), by more than ``wall_allowance_ms``: more than 0.5 ms,
    more than its own event time and more than the protocol's own host time per call (``protocol_ms``).
    ``host_ms``: the candidate's own host time per call that Nsight Compute showed to be host work on the
    workload it profiled (its kernels confirmed the event times there), which is not held against the others."""
    if unexplained_ms is None or unexplained_ms - host_ms <= wall_allowance_ms(candidate_ms, protocol_ms):
        return []
    shown = (f"; less the {host_ms:.3g} ms of host work per call that ncu's kernel durations showed on the profiled "
             "workload") if host_ms > 0 else ""
    return [GuardFinding(guard=Guard.TIMING_DISAGREES, detail=(
        f"{workload}: {_WALL_CLOCK} each timed call took {unexplained_ms:.3g} ms longer than its event "
        f"time of {candidate_ms:.3g} ms says, beyond what the baseline's calls took beside theirs (the protocol's "
        f"own host time: {protocol_ms or 0.0:.3g} ms a call{shown}): the event times were forged inside the "
        "candidate's process (or the call does that much host work)"))]


def wall_findings_confirmed(guards: list[GuardFinding], timings: list[Any], profiled_workload: str,
                            events_agree_with_ncu: bool) -> list[GuardFinding]:
    """The wall clock's findings judged again once Nsight Compute's kernel durations confirmed the event times
    of the workload it profiled (``timings``: the evaluation's ``Timing`` records). The wall clock cannot tell host
    work inside an honest call (a device query, an attribute set per call) from forged events; ncu can, for the
    workload it profiled: that workload's finding is dropped, and its wall time beyond its events (host work, ncu
    says) is the allowance of the candidate's own host work on every other timed workload, whose findings are
    made again less that. So a candidate that forges its events only where ncu does not look is still caught by
    the wall clock (by the bound it has there). Unchanged when ncu did not confirm the events."""
    if not events_agree_with_ncu:
        return guards
    kept = [g for g in guards if not (g.guard is Guard.TIMING_DISAGREES and _WALL_CLOCK in g.detail)]
    profiled = next((t for t in timings if t.workload == profiled_workload), None)
    host_ms = max(0.0, profiled.wall_unexplained_ms or 0.0) if profiled is not None else 0.0
    for timing in timings:
        if timing.workload != profiled_workload:
            kept += wall_clock_guards(timing.workload, timing.candidate_ms, timing.wall_unexplained_ms,
                                      timing.wall_protocol_ms, host_ms)
    return kept


# -- any reply ---------------------------------------------------------------------------------------------------


def forged_reply_guards(detail: str) -> list[GuardFinding]:
    """The candidate's process wrote a frame the harness's unpickler refused (``ForgedReply``)."""
    return [GuardFinding(guard=Guard.FORGED_REPLY, detail=detail)]
