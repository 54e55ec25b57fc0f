"""The timing protocol: how a candidate and its vendor baseline are measured so that their ratio repeats.

The candidate's calls (in its worker, loaded) alternate with its baseline's (in the evaluator's baseline
process, which never holds candidate code), a chunk of at most CHUNK_MS each, on the same input seeds, and the
candidate's process is stopped while the baseline runs (``interleaved``). Timed in one stretch, a GEMM near
peak runs at the GPU's power cap, where its median moves by several percent within seconds and between
processes; alternating in chunks of at most a millisecond, both sides repeat within about a percent. Each
baseline also has a clean time, measured the same way before any candidate code is loaded, with the fresh
worker running the baseline in the candidate's place (the median of CLEAN_SESSIONS measurements:
``clean_times``): an interleaved baseline slower than that allows is not trusted (the candidate's process
may have slowed it, or it is an outlier), and the clean time plus the allowance is compared
(``compared_baseline``).

The stage that runs this protocol (which processes exist, the GPU's lock, the cache, what a failure means
for the candidate) is the pipeline's, in ``evaluator.GpuEvaluator._timing``.
"""

from __future__ import annotations

import math
import secrets
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, NamedTuple

from ptxbench.errors import PtxbenchError
from ptxbench.evaluate.timing.fresh_inputs import WARM_UP_ROUNDS
from ptxbench.evaluate.isolation.worker import RequestFailed, Worker, WorkerDied, WorkerTimeout
from ptxbench.evaluate.judgement.launches import timed_launches_per_call
from ptxbench.evaluate.timing.samples import median_iqr
from ptxbench.records.evaluation import Timing
from ptxbench.tasks.model import Task, Workload

if TYPE_CHECKING:
    import torch

# Measured time per side between switches, the rounds of the first chunk (a warm-up, dropped), the bounds on
# a chunk and on a workload's calls.
# Alternating often is what makes the numbers repeat: six repeats of the timed workload gave
# candidate/baseline ratios within 0.14 % (bf16 GEMM) and 0.38 % (rmsnorm) alternating after every call,
# against 6-13 % and 0.4-1.2 % with 20 ms chunks (timing_interleaving_*_h200.json). The short pause
# between switches keeps the GPU under its power cap, where back-to-back GEMMs make the clock swing
# (1.57-1.94 GHz, timing_stability_gemm_bf16_h200.json): both sides are measured at the clock they reach
# unthrottled. Chunks of at most 1 ms (a call of 0.5 ms or more still alternates after every call) kept
# the candidate's times within 1.1 % across evaluations (kernels under 10 us aside) and cut the timing
# stage of a bf16 GEMM candidate from 3.4 to 2.3 s, of an rmsnorm one from 2.0 to 0.8 s
# (timing_evaluations_*_h200.json).
CHUNK_MS = 1.0
MAX_CHUNK_ROUNDS = 64
MIN_SAMPLES = 5
MAX_SAMPLES = 500  # per side: bounds the time of kernels of a few microseconds
# The baseline process's clean time is the median of this many measurements, each with the workload's
# buffers allocated afresh: one measurement of cuBLAS sometimes reads 2-12 % slow while its next is not,
# with the clock at its maximum and the candidate beside it steady (timing_evaluations_gemm_bf16_h200.json).
CLEAN_SESSIONS = 3
# An interleaved baseline may be this much slower than its clean time before it is distrusted: repeats
# agree within 1 % (kernels under 10 us aside), and a slow outlier as above is not the candidate's merit.
BASELINE_DISTURBANCE = 0.02

Ms = tuple[float, float]  # (median, IQR) in ms


class BaselineFailed(PtxbenchError):
    """The vendor-baseline process failed: the harness's failure, not the candidate's."""


class Interleaved(NamedTuple):
    """One workload timed by ``interleaved``. The candidate's fields are None where ``candidate`` was False
    (a clean baseline time)."""

    variant: str  # the baseline variant timed
    baseline: Ms
    samples: int  # calls per side after the warm-up
    candidate: Ms | None = None
    launches: dict[str, Any] | None = None  # the candidate's timed calls' trace (``CandidateRunner.timed_launches``)
    launch_gated: bool | None = None  # every timed call of both sides ran behind the launch gate
    checked: tuple["CheckedCall", ...] = ()  # the candidate's last timed call, then more chosen at random, to check
    unexplained_ms: float | None = None  # per call, the candidate's wall time beyond its event times, less the
    # baseline's (``wall_unexplained``): the median over the measured chunks
    protocol_ms: float | None = None  # per call, the baseline's wall time beyond its event times (``wall_beyond``):
    # what the protocol itself costs on the host, the scale of the noise in ``unexplained_ms``; the chunks' median
    spent: dict[str, float] | None = None  # wall seconds by part of the protocol (``Spent``), for diagnosis


class CheckedCall(NamedTuple):
    """One timed call of the candidate kept for the parent's check: the seed of its input set, the changes that
    set had had (``fresh_inputs``), and the outputs the call left."""

    seed: int
    fresh_keys: tuple[int, ...]
    outputs: dict[str, torch.Tensor]


class Spent:
    """Where a measurement's wall time went: each side's chunks of calls (their measured time and the calls'
    round trips), stopping and resuming the candidate around the baseline's chunks, and the set-up and
    read-back around the loop. What the chunks cost beyond their measured time is the protocol's price."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.perf_counter()

    def lap(self, part: str) -> None:
        """Charge the time since the last lap to ``part``."""
        now = time.perf_counter()
        self.seconds[part] = self.seconds.get(part, 0.0) + now - self._mark
        self._mark = now


def call_limit_s(call_timeout_s: float, budget_ms: float) -> float:
    """The time limit on one request of the timing protocol (a chunk of calls, a workload's set-up)."""
    return call_timeout_s + 10 * budget_ms / 1e3 + 120


@contextmanager
def baseline_call(baselines: Worker) -> Iterator[None]:
    """Failures of the baseline process are the harness's, never the candidate's."""
    try:
        yield
    except (WorkerDied, WorkerTimeout, RequestFailed) as exc:
        baselines.kill()
        raise BaselineFailed(str(exc)) from exc


def in_both(worker: Worker, baselines: Worker, method: str, limit_s: float) -> tuple[Any, Any]:
    """``method`` run by the candidate's process and the baseline's at once (after a measurement, when neither
    has GPU work left, so they may overlap): both replies. Reading back the traces of a workload's timed calls
    took ~0.15 s a side. The baseline's reply is always read, so its next request never gets this one's
    answer; when the candidate's call fails, its failure is what is raised."""
    with baseline_call(baselines):
        baselines.send(method)
    try:
        reply = worker.call(method, timeout_s=limit_s)
    except BaseException:
        with suppress(BaselineFailed), baseline_call(baselines):
            baselines.receive(limit_s)
        raise
    with baseline_call(baselines):
        return reply, baselines.receive(limit_s)


def _seeds() -> list[int]:
    """Three fresh input sets, rotated over the timed calls."""
    return [secrets.randbits(62) for _ in range(3)]


def interleaved(worker: Worker, baselines: Worker, workload: Workload, variant: str, budget_ms: float,
                limit_s: float, candidate: bool = True) -> Interleaved:
    """The candidate (in ``worker``, loaded) and the baseline ``variant`` (in ``baselines``) on the same input
    seeds, in turn, a chunk of calls each (at most CHUNK_MS of measured time, at least one call), until each
    side has ``budget_ms`` of measured time and MIN_SAMPLES calls or MAX_SAMPLES; the first WARM_UP_ROUNDS
    calls of each are dropped.

    ``candidate`` False: the baseline's clean time. ``worker``, which holds no candidate code yet, runs the
    same baseline in the candidate's place, so the GPU goes through the same rhythm as beside a candidate:
    timed back to back in one process instead, a GEMM runs into the power cap and read 13 % slower on an H200."""
    spent = Spent()
    seeds = _seeds()
    with baseline_call(baselines):
        baselines.call("prepare_timing", workload.sizes, seeds, [variant], False, timeout_s=limit_s)
    partner = "candidate" if candidate else variant
    worker.call("prepare_timing", workload.sizes, seeds, [] if candidate else [variant], candidate, timeout_s=limit_s)
    samples: dict[str, list[float]] = {"candidate": [], "baseline": []}
    unexplained: list[float] = []
    protocol: list[float] = []
    rounds, warm_up = WARM_UP_ROUNDS, True
    measured_ms = 0.0
    spent.lap("setup")
    while True:
        started = time.perf_counter()
        times = {"candidate": worker.call("time_rounds", rounds, timeout_s=limit_s)[partner]}
        walls = {"candidate": time.perf_counter() - started}
        spent.lap("candidate_chunks")
        with worker.paused(), baseline_call(baselines):
            spent.lap("pause")
            started = time.perf_counter()
            times["baseline"] = baselines.call("time_rounds", rounds, timeout_s=limit_s)[variant]
            walls["baseline"] = time.perf_counter() - started
            spent.lap("baseline_chunks")
        spent.lap("pause")
        measured_ms += sum(times["candidate"]) + sum(times["baseline"])
        if not warm_up:
            for side, values in samples.items():
                values += times[side]
            unexplained.append(wall_unexplained(walls, times))
            protocol.append(wall_beyond(walls, times, "baseline"))
        warm_up = False
        if all(len(v) >= MIN_SAMPLES and sum(v) >= budget_ms for v in samples.values()) \
                or len(samples["baseline"]) >= MAX_SAMPLES:
            break
        per_call = max([statistics.median(v) for v in times.values()] + [1e-3])
        rounds = max(1, min(MAX_CHUNK_ROUNDS, math.floor(CHUNK_MS / per_call)))
    baseline = median_iqr(samples["baseline"])
    # ends both processes' traces of their timed calls (the baseline's is dropped)
    launches, _ = in_both(worker, baselines, "timed_launches", limit_s)
    if not candidate:
        return Interleaved(variant, baseline, len(samples["baseline"]))
    gate, baseline_gate = in_both(worker, baselines, "launch_gate", limit_s)
    launch_gated = bool(baseline_gate["gated"] and gate["gated"])
    spent.lap("read_back")
    reply = worker.call("timed_outputs", timeout_s=limit_s)
    # the candidate's process ends with the lock: its outputs are copied out first
    last = {"seed": reply["last_seed"], "fresh_keys": reply.get("fresh_keys") or (), "outputs": reply["last_outputs"]}
    checked = tuple(CheckedCall(kept["seed"], tuple(kept["fresh_keys"]), {k: v.clone() for k, v in kept["outputs"].items()})
                    for kept in (last, *(reply.get("checked") or ())))
    spent.lap("outputs")
    chunks = spent.seconds["candidate_chunks"] + spent.seconds["baseline_chunks"]
    spent.seconds["chunks_beyond_measured"] = max(0.0, chunks - measured_ms / 1e3)
    return Interleaved(variant, baseline, len(samples["baseline"]), candidate=median_iqr(samples["candidate"]),
                       launches=launches, launch_gated=launch_gated, checked=checked,
                       unexplained_ms=statistics.median(unexplained) if unexplained else None,
                       protocol_ms=statistics.median(protocol) if protocol else None, spent=spent.seconds)


def wall_beyond(walls_s: dict[str, float], times_ms: dict[str, list[float]], side: str) -> float:
    """Per call of one chunk of ``side``, how much longer the chunk took on this process's wall clock than its event
    times say: the protocol's host work (rounds, fresh inputs, L2 flush, gate, round trip) and the call's own."""
    return (walls_s[side] * 1e3 - sum(times_ms[side])) / max(1, len(times_ms[side]))


def wall_unexplained(walls_s: dict[str, float], times_ms: dict[str, list[float]]) -> float:
    """Per call of one chunk, how much longer the candidate's chunk took on this process's wall clock than its
    event times say, less the same for the baseline's chunk (``walls_s`` and ``times_ms`` by side). Both chunks
    run the same protocol, so its cost cancels, up to the noise of two host times of its size (``wall_beyond``
    of the baseline: about 1.2 ms per call on an H100 for a 0.08 ms kernel, from that run's stage times, where
    the candidate's side read 0.57 ms more with nothing forged, cause not established); what remains beyond
    that is host work inside the candidate's call, or event times forged in its process, where the candidate's
    code runs beside the timing code and the wall clock here is out of its reach."""
    return wall_beyond(walls_s, times_ms, "candidate") - wall_beyond(walls_s, times_ms, "baseline")


def clean_times(worker: Worker, baselines: Worker, missing: list[tuple[Workload, str]], budget_ms: float,
                limit_s: float) -> dict[tuple[str, str], Ms]:
    """The clean time of each (workload, variant) of ``missing``: the median of CLEAN_SESSIONS ``interleaved``
    measurements with ``worker`` (holding no candidate code) in the candidate's place."""
    sessions: dict[tuple[str, str], list[Ms]] = {}
    for _ in range(CLEAN_SESSIONS):  # each pass over the workloads allocates their buffers anew
        for workload, variant in missing:
            sessions.setdefault((workload.name, variant), []).append(
                interleaved(worker, baselines, workload, variant, budget_ms, limit_s, candidate=False).baseline)
    return {key: sorted(measured)[len(measured) // 2] for key, measured in sessions.items()}


def compared_baseline(interleaved_ms: Ms, clean: Ms) -> tuple[Ms, bool]:
    """The baseline time the candidate is compared with, and whether it is the interleaved one: slowed beside
    the candidate beyond BASELINE_DISTURBANCE, the clean time with that allowance instead."""
    if interleaved_ms[0] <= clean[0] * (1 + BASELINE_DISTURBANCE):
        return interleaved_ms, True
    return (clean[0] * (1 + BASELINE_DISTURBANCE), clean[1]), False


def timing_of(task: Task, workload: Workload, measured: Interleaved, clean: Ms, peaks: dict[str, float]) -> Timing:
    """The workload's ``Timing``: both sides' times, throughput and the share of the roofline of this GPU's
    measured ``peaks`` (none when they are empty); ``clean``: the measured variant's clean time."""
    assert measured.candidate is not None and measured.launches is not None, "a candidate's measurement"
    candidate_ms, candidate_iqr = measured.candidate
    (baseline_ms, baseline_iqr), trusted = compared_baseline(measured.baseline, clean)
    fp8 = any(i.dtype.value.startswith("float8") for i in task.inputs)
    flops = task.flops_for(workload.sizes)
    moved = task.bytes_for(workload.sizes)
    seconds = candidate_ms / 1e3
    attainable = None
    if peaks:
        attainable = moved / peaks["bytes_per_s"]
        if flops:
            attainable = max(attainable, flops / peaks["fp8_flops" if fp8 else "bf16_flops"])
    return Timing(workload=workload.name, candidate_ms=candidate_ms, candidate_iqr_ms=candidate_iqr,
                  baseline=measured.variant, baseline_ms=baseline_ms, baseline_iqr_ms=baseline_iqr,
                  baseline_clean_ms=clean[0], baseline_source="interleaved" if trusted else "clean",
                  samples=measured.samples, launch_gated=measured.launch_gated,
                  wall_unexplained_ms=measured.unexplained_ms, wall_protocol_ms=measured.protocol_ms,
                  launches_per_call=timed_launches_per_call(measured.launches),
                  tflops=flops / seconds / 1e12 if flops else None, gbps=moved / seconds / 1e9,
                  roofline_pct=100 * attainable / seconds if attainable else None)
