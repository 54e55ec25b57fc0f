"""What runs inside the worker process, next to the candidate: draw inputs, call, time. No verdicts.

Everything returned is raw data for the parent to judge: outputs, the inputs as they are after the
call, the guard bytes around each output, the kernels the call launched and on which stream, and
CUDA-event times. Expected outputs never exist in this process.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# At module level: the forkserver preloads the handler's module, and with it these (a fresh worker then
# starts its first request at once).
from ptxbench.evaluate.child.launch_gate import GateUnavailable, LaunchGate
from ptxbench.evaluate.child.library import CandidateLibrary
from ptxbench.evaluate.timing.samples import median_iqr

CANARY_BYTES = 4096
CANARY_VALUE = 0x5A
L2_FLUSH_BYTES = 256 * 1024 * 1024  # more than 2x the L2 of any current GPU (H200: 60 MiB, B200: ~126 MB)
# The flush reads that buffer rather than writing it: the L2 is left full of clean lines, as after
# Nsight Compute's cache flush, instead of dirty ones that the timed call would first write back
# (a 70 us kernel's event time was 5.9 % above ncu's with a writing flush, 2.85 % with this one).
# Where the launch gate (launch_gate.py) cannot be used: a spin kernel queued just before the start
# event (~50 us at 2 GHz), which hides host delays shorter than that.
LAUNCH_COVER_CYCLES = 100_000
GATE_TIMEOUTS_TO_DROP = 2  # one may be a one-time wait (a module loaded lazily on the first launch)


def _tolerance_miss(verdicts: list[Any]) -> str | None:
    """Why a baseline's outputs are not the task's answer (the outputs outside its tolerance), or None."""
    missed = [f"{v.output} error/bound {v.max_error_ratio:.2f}" for v in verdicts if not v.passed]
    return f"outputs outside the task's tolerance: {'; '.join(missed)}" if missed else None


def _checked_sync(torch: Any) -> None:
    torch.cuda.synchronize()


class HarnessOutOfMemory(RuntimeError):
    """The harness's own allocation in this process (inputs, outputs, a baseline's setup) found the GPU's memory
    gone: raised under this name, so the parent tells it from the candidate's own failure (a cudaError returned)."""


@contextmanager
def _harness_allocation(torch: Any, what: str) -> Iterator[None]:
    """Around the harness's own allocations: torch's out-of-memory error becomes ``HarnessOutOfMemory``."""
    out_of_memory = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)  # absent from test stand-ins
    try:
        yield
    except Exception as exc:
        if out_of_memory is None or not isinstance(exc, out_of_memory):
            raise
        raise HarnessOutOfMemory(f"{what}: {str(exc).splitlines()[0]}") from None


# What PyTorch's kernel tracer (torch.profiler over kineto/CUPTI) says of itself as a UserWarning. Tracing GPU
# activity alone, a stop warns (C++ TORCH_WARN, raised from torch.autograd.profiler) when its events were not
# all matched to kineto's: "N vs. M reassociated", a new text each time, so Python's default filter shows every
# one; a tracer started again notes that it clears its events. Neither says anything about the candidate.
TRACER_NOTES = (r"Failed to recover relationship between all profiler and kineto events",
                r"(Warning: )?Profiler clears events at the end of each cycle")


@contextmanager
def quiet_tracer() -> Iterator[None]:
    """Around a start or stop of the kernel tracer: its own notes (``TRACER_NOTES``) are not shown; every other
    warning is, and the process's filters are as they were afterwards."""
    with warnings.catch_warnings():
        for note in TRACER_NOTES:
            warnings.filterwarnings("ignore", message=note, category=UserWarning)
        yield


def traced_activities(trace: Any) -> list[dict[str, Any]]:
    """Every GPU activity a finished ``torch.profiler.profile`` recorded, in start order: name, stream, and
    for kernels the launch's grid and block (the kineto events carry no launch shape; the trace's export
    does). Raw data: the parent judges it."""
    import json
    import os
    import tempfile

    kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        trace.export_chrome_trace(path)
        with open(path) as exported:
            events = json.load(exported).get("traceEvents", [])
    finally:
        os.unlink(path)
    found = []
    for event in events:
        kind = kinds.get(event.get("cat"))
        if kind is None or event.get("ph") != "X":
            continue
        args = event.get("args") or {}
        found.append({"name": str(event.get("name", "")), "stream": args.get("stream"), "kind": kind,
                      "grid": args.get("grid"), "block": args.get("block"), "ts": float(event.get("ts", 0.0))})
    found.sort(key=lambda activity: activity["ts"])
    for activity in found:
        del activity["ts"]
    return found


class CandidateRunner:
    """Handler for ``Worker``: one loaded candidate at a time."""

    def __init__(self) -> None:
        import torch
        import torch.multiprocessing  # noqa: F401 - registers tensor sharing for replies

        from ptxbench.evaluate.isolation.gpu_lock import shared_if_known

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is visible to the worker")
        self.torch = torch
        self.library = None
        self.task = None
        self._timing: dict[str, Any] | None = None  # one workload's measurement (prepare_timing)
        # Every timed call is traced (see time_rounds): the trace, the measurement it belongs to, its stream
        # and the calls it covers.
        self._timing_trace: dict[str, Any] | None = None
        self.harness_kernels: list[str] = []
        # Opening the GPU (context, memory) and starting the kernel tracer run no kernel, so they need no
        # lock and a spare gets through most of its start-up while another lane times; the warm-up's
        # kernels must not overlap a timing.
        self._flush = torch.empty(L2_FLUSH_BYTES // 8, dtype=torch.int64, device="cuda")  # contents never matter
        # Where each timed round's input set is freshened (``fresh_inputs``): a stream of the harness's own, whose
        # work the timed calls' trace leaves out, finished before the round's calls are queued. torch hands out
        # its streams from a pool of 32 per priority in turn, so a pooled stream would sooner or later be the very
        # stream a workload is timed on (seen on an H100: the attention tasks' timed kernels were left out with the
        # fresh stream's work); it is a stream of its own, made through the driver, which no pool hands out.
        self._fresh_stream = _own_stream(torch)
        self._loaded_gate, self.gate_note = self._open_gate()
        self._gate = self._loaded_gate  # None once dropped
        self._gate_timeouts = 0  # consecutive
        self._start_tracer()
        with shared_if_known("worker start-up"):
            self._warm_up()

    def _open_gate(self) -> tuple[Any, str | None]:
        """The launch gate, or None and why not (timing then falls back to the spin-kernel cover)."""
        try:
            return LaunchGate(self.torch), None
        except GateUnavailable as exc:
            return None, f"launch gate unavailable: {exc}"

    def launch_gate(self) -> dict[str, Any]:
        """Whether this process's timed calls started only once the host had queued them all."""
        return {"gated": self._gate is not None, "note": self.gate_note}

    def use_launch_gate(self, enabled: bool) -> None:
        """Time with the gate (when it could be opened) or with the spin cover alone: for benchmarks and
        tests that compare the two."""
        if not enabled:
            self._gate, self.gate_note = None, "the launch gate was turned off"
        elif self._gate is None and self._loaded_gate is not None:
            self._gate, self.gate_note, self._gate_timeouts = self._loaded_gate, None, 0

    def _start_tracer(self) -> None:
        """Start and stop the kernel tracer (CUPTI) once with nothing to trace: its one-time start-up."""
        from torch.profiler import ProfilerActivity, profile

        with quiet_tracer(), profile(activities=[ProfilerActivity.CUDA]):
            pass

    def _warm_up(self) -> None:
        """Pay one-time costs here, while the process is a spare and no candidate waits: loading the
        kernels that draw inputs (traced, as in a trial), the first event-timed launch."""
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        generator = torch.Generator(device="cuda")
        generator.manual_seed(0)
        with quiet_tracer(), profile(activities=[ProfilerActivity.CUDA]):
            for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn):
                values = torch.randn(4096, generator=generator, device="cuda")
                mask = torch.rand(4096, generator=generator, device="cuda") < 0.01
                torch.where(mask, values * 8, values).to(dtype)
            torch.cuda.synchronize()
        # The kernels the timing itself launches (L2 flush, launch gate, spin cover), named here, before any
        # candidate code is loaded, so the timed calls' trace can be told apart from the harness's own work.
        stream = torch.cuda.Stream()
        with quiet_tracer(), profile(activities=[ProfilerActivity.CUDA]) as trace:
            self._time(lambda s: None, stream, 1)
            gate, self._gate = self._gate, None
            try:
                self._time(lambda s: None, stream, 1)
            finally:
                self._gate = gate
            torch.cuda.synchronize()
        self.harness_kernels = sorted({a["name"] for a in traced_activities(trace)})

    def device_info(self) -> dict[str, Any]:
        torch = self.torch
        properties = torch.cuda.get_device_properties(0)
        uuid = getattr(properties, "uuid", None)  # names the GPU's lock: GPUs of one model must not share it
        return {"name": properties.name, "uuid": str(uuid) if uuid is not None else None,
                "capability": f"{properties.major}.{properties.minor}",
                "sms": properties.multi_processor_count, "memory_bytes": properties.total_memory,
                "l2_bytes": getattr(properties, "L2_cache_size", None), "torch": str(torch.__version__),
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}

    def health_check(self) -> dict[str, Any]:
        """A known-good computation in this fresh process: a seeded fp32 matmul on the GPU, synchronized,
        against the same product on the CPU. Raw numbers only; the parent decides whether the GPU is sound
        (``gpu_host.health_problem``), so a GPU is retired on the harness's evidence, never a candidate's."""
        torch = self.torch
        size = 256
        generator = torch.Generator().manual_seed(20240601)
        a = torch.randn(size, size, generator=generator)
        b = torch.randn(size, size, generator=generator)
        started = time.perf_counter()
        on_gpu = torch.matmul(a.cuda(), b.cuda())
        _checked_sync(torch)
        got = on_gpu.cpu()
        seconds = time.perf_counter() - started
        want = torch.matmul(a, b)
        return {"max_abs_error": float((got - want).abs().max()), "reference_max_abs": float(want.abs().max()),
                "elements": want.numel(), "seconds": seconds, "name": torch.cuda.get_device_properties(0).name}

    def peaks(self) -> dict[str, float]:
        """Ceilings measured here: copy bandwidth, and the best library matmul rates (bf16, fp8)."""
        torch = self.torch
        stream = torch.cuda.current_stream()
        size = 8192
        a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
        bf16_ms = statistics.median(self._time(lambda s: torch.matmul(a, a.T), stream, 10))
        a8 = a.to(torch.float8_e4m3fn)
        one = torch.ones(1, device="cuda")
        fp8_ms = statistics.median(self._time(
            lambda s: torch._scaled_mm(a8, a8.T, one, one, out_dtype=torch.bfloat16), stream, 10))
        flops = 2 * size**3
        return {"bytes_per_s": self.copy_bandwidth(), "bf16_flops": flops / (bf16_ms / 1e3),
                "fp8_flops": flops / (fp8_ms / 1e3)}

    def set_task(self, task_json: str) -> None:
        """The task whose inputs and baselines later requests use (no candidate loaded)."""
        from ptxbench.tasks.model import Task

        self.task = Task.model_validate_json(task_json)

    def load(self, shared_object: str, task_json: str) -> list[str]:
        self.set_task(task_json)
        self.library = CandidateLibrary(shared_object, self.task)
        return []

    # -- one correctness trial ----------------------------------------------------------------------

    def _outputs_with_canaries(self, sizes: dict[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
        torch = self.torch
        outputs, buffers = {}, {}
        for spec in self.task.outputs:
            dtype = getattr(torch, spec.dtype.value)
            numel = spec.numel(sizes)
            body = numel * spec.dtype.size
            raw = torch.full((body + 2 * CANARY_BYTES,), CANARY_VALUE, dtype=torch.uint8, device="cuda")
            view = raw[CANARY_BYTES: CANARY_BYTES + body].view(dtype).view(spec.concrete_shape(sizes))
            view.fill_(float("nan"))
            outputs[spec.name], buffers[spec.name] = view, raw
        return outputs, buffers

    def trial(self, sizes: dict[str, int], seed: int) -> dict[str, Any]:
        """Fresh inputs from ``seed``, NaN outputs inside guard bytes, one call on a fresh stream."""
        from torch.profiler import ProfilerActivity, profile

        from ptxbench.tasks.reference import make_inputs

        torch = self.torch
        clock = time.perf_counter
        phases = {"start": clock()}
        torch.cuda.ipc_collect()  # frees what the parent has released of earlier replies
        with _harness_allocation(torch, "drawing the trial's inputs and outputs"):
            inputs = make_inputs(self.task, sizes, seed, device="cuda")
            outputs, buffers = self._outputs_with_canaries(sizes)
        stream = torch.cuda.Stream()
        marker = torch.zeros(1, device="cuda")
        _checked_sync(torch)
        phases["inputs"] = clock()
        with quiet_tracer(), profile(activities=[ProfilerActivity.CUDA]) as trace:
            phases["trace_start"] = clock()
            with torch.cuda.stream(stream):
                marker.add_(1)  # the first activity: names the launch stream in the trace's numbering
            code = self.library(inputs, outputs, sizes, stream)
            stream.synchronize()
            _checked_sync(torch)
            phases["call"] = clock()
        phases["trace_stop"] = clock()
        activities = traced_activities(trace)
        launch_stream = activities[0]["stream"] if activities else None
        phases["trace_read"] = clock()
        marks = list(phases.items())
        # Tensors stay on the GPU: the parent maps them through CUDA IPC instead of copying them through
        # host memory (hundreds of MB per trial on the large GEMMs). Only this process's memory is shared.
        return {
            "code": code,
            "stream": launch_stream,
            "activities": activities[1:],
            "outputs": dict(outputs),
            "canaries": {k: torch.cat([b[:CANARY_BYTES], b[-CANARY_BYTES:]]).cpu() for k, b in buffers.items()},
            "inputs_after": dict(inputs),
            # where this process's time went (diagnostics only: nothing is judged on it)
            "phases_s": {name: at - marks[i - 1][1] for i, (name, at) in enumerate(marks) if i},
        }

    # -- timing -------------------------------------------------------------------------------------

    def _time(self, call: Any, stream: Any, repeats: int) -> list[float]:
        torch = self.torch
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # on the timed stream: all the harness's timing work is on one stream
                self._flush.amax()  # reads all of it: see L2_FLUSH_BYTES
            gate = self._gate
            if gate is not None:
                gate.close(stream)
            else:
                with torch.cuda.stream(stream):
                    torch.cuda._sleep(LAUNCH_COVER_CYCLES)
            start.record(stream)
            try:
                call(stream)
                end.record(stream)
            finally:
                if gate is not None:
                    gate.open()
            end.synchronize()
            times.append(start.elapsed_time(end))
            if gate is not None:
                self._gate_timeouts = self._gate_timeouts + 1 if gate.timed_out() else 0
                if self._gate_timeouts >= GATE_TIMEOUTS_TO_DROP:
                    # the call waits for the GPU while the gate holds it (a synchronize inside the call):
                    # later calls of this process are timed with the spin cover instead
                    self._gate = None
                    self.gate_note = "the launch gate timed out in consecutive calls: the call waits for the GPU"
        return times

    def prepare_timing(self, sizes: dict[str, int], seeds: list[int], baselines: list[str],
                       candidate: bool = True) -> None:
        """Set up one workload's measurement for ``time_rounds``: input sets drawn from ``seeds`` (rotated
        over the calls), NaN-filled outputs, a launch stream, and the calls to time: the candidate (unless
        ``candidate`` is False) and the named vendor baselines. Each baseline's setup (auxiliary tensors,
        compilation, warm-up) runs here, once per input set and finished before anything is timed, so
        its timed call launches only the task's work."""
        from ptxbench.tasks.reference import make_inputs

        from ptxbench.evaluate.timing.fresh_inputs import CheckedCalls, checked_slots, freshened_inputs

        torch = self.torch
        if candidate and self.library is None:
            raise RuntimeError("no candidate is loaded to time")
        self._timing = None  # the previous workload's buffers go before this one's are drawn
        torch.cuda.empty_cache()  # and back to the driver: this process is long-lived, other processes need it
        chosen = self._loaded_variants(baselines)
        with _harness_allocation(torch, "drawing the timed input sets and the baselines' setup"):
            input_sets = [make_inputs(self.task, sizes, seed, device="cuda") for seed in seeds]
            outputs, _ = self._outputs_with_canaries(sizes)
            prepared = {name: [variant.setup(inputs, sizes) for inputs in input_sets]
                        for name, variant in chosen.items()}
        _checked_sync(torch)  # no setup work may still run when the first timed call starts
        turn = {"i": 0}

        def run_candidate(s: Any) -> None:
            code = self.library(input_sets[turn["i"] % len(input_sets)], outputs, sizes, s)
            if code != 0:
                raise RuntimeError(f"the entry point returned cudaError {code} during timing")

        calls = {**({"candidate": run_candidate} if candidate else {}),
                 **{name: _timed_baseline(torch, per_set, turn) for name, per_set in prepared.items()}}
        self._timing = {"calls": calls, "turn": turn, "seeds": seeds, "outputs": outputs,
                        "stream": torch.cuda.Stream(), "input_sets": input_sets,
                        "fresh": freshened_inputs(self.task), "fresh_keys": [[] for _ in seeds]}
        if candidate:
            slots = checked_slots(sum(t.numel() * t.element_size() for t in outputs.values()))
            self._timing["checks"] = CheckedCalls(slots, secret=sum(seeds) ^ 0x5BD1E995)
            self._timing["kept"] = [None] * slots

    def release_timing(self) -> None:
        """Drop the last measurement's input sets, outputs and trace and give the memory back to the driver: this
        process outlives the evaluation, and another lane or run times next on the same GPU."""
        self._stop_timing_trace()
        self._timing = None
        self.torch.cuda.empty_cache()

    def _keep_for_check(self) -> None:
        """After the candidate's call of a round past the warm-up: its outputs kept, on the harness's own stream,
        where the draw of ``CheckedCalls`` says, with what the parent needs to compute what they should be."""
        from ptxbench.evaluate.timing.fresh_inputs import WARM_UP_ROUNDS

        timing = self._timing
        assert timing is not None
        turn = timing["turn"]["i"]
        if turn <= WARM_UP_ROUNDS:
            return
        slot = timing["checks"].offer()
        if slot is None:
            return
        index = turn % len(timing["seeds"])
        with self.torch.cuda.stream(self._fresh_stream):
            self._fresh_stream.wait_stream(timing["stream"])
            kept = {name: tensor.clone() for name, tensor in timing["outputs"].items()}
        self._fresh_stream.synchronize()
        timing["kept"][slot] = {"seed": timing["seeds"][index], "fresh_keys": list(timing["fresh_keys"][index]),
                                "outputs": kept}

    def _freshen_round(self) -> None:
        """The input set of this round (``turn``) given fresh contents (``fresh_inputs.freshen``), on the harness's
        own stream, finished before the round's calls are queued; the round's key is kept for the parent's replay."""
        from ptxbench.evaluate.timing.fresh_inputs import freshen, round_key

        timing = self._timing
        assert timing is not None
        turn = timing["turn"]["i"]
        index = turn % len(timing["seeds"])
        key = round_key(timing["seeds"][index], turn)
        with self.torch.cuda.stream(self._fresh_stream):
            freshen(timing["input_sets"][index], timing["fresh"], key)
        self._fresh_stream.synchronize()
        timing["fresh_keys"][index].append(key)

    def _loaded_variants(self, names: list[str]) -> dict[str, Any]:
        """The named baseline variants of the current task; an error naming the reason for one that
        cannot load (the evaluator times only those ``check_baselines`` passed)."""
        from ptxbench.evaluate.baselines.variants import variant_specs

        variants = variant_specs(self.task, audit=True)  # the benchmark may name audited ones
        chosen = {name: variants[name] for name in names}
        for name, variant in chosen.items():
            reason = variant.load()
            if reason is not None:
                raise RuntimeError(f"baseline variant {name} cannot run here: {reason}")
        return chosen

    def check_baselines(self, sizes: dict[str, int], names: list[str], seed: int = 0,
                        verify: bool = False) -> dict[str, str | None]:
        """Per named variant, None when it loads, sets up and runs on one input set of ``sizes``, else
        why not. Run before a workload's baselines are timed: it also builds what setup caches in this
        process (compiled graphs, autotuning), under the caller's generous setup timeout. ``verify`` (the
        baseline process only, which never holds candidate code: the expected outputs are computed here):
        a variant whose outputs miss the task's tolerance is skipped too, so no candidate is timed against
        a library that does less exact work than the task asks of the candidate."""
        from ptxbench.evaluate.baselines.variants import variant_specs
        from ptxbench.evaluate.judgement.compare import compare_outputs
        from ptxbench.tasks.reference import make_inputs, run_reference

        variants = variant_specs(self.task, audit=True)  # the benchmark may name audited ones
        with _harness_allocation(self.torch, "drawing the inputs to check the baselines on"):
            inputs = make_inputs(self.task, sizes, seed, device="cuda")
        expected = None
        if verify and names:  # before any variant runs: one that writes into its inputs cannot change the answer
            with _harness_allocation(self.torch, "computing the reference to check the baselines against"):
                expected = run_reference(self.task, dict(inputs), sizes)
        reasons: dict[str, str | None] = {}
        for name in names:
            reasons[name] = variants[name].load()
            if reasons[name] is None:
                try:
                    with _harness_allocation(self.torch, f"setting up baseline variant {name}"):
                        outputs = variants[name].setup(inputs, sizes)()
                        _checked_sync(self.torch)
                        if expected is not None:
                            reasons[name] = _tolerance_miss(compare_outputs(self.task, outputs, expected))
                except HarnessOutOfMemory:
                    raise  # the GPU's memory, not the variant: never a reason to skip it
                except Exception as exc:  # noqa: BLE001 - the variant is skipped with this reason
                    reasons[name] = f"setup failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
        return reasons

    def time_rounds(self, rounds: int) -> dict[str, list[float]]:
        """``rounds`` rounds of the prepared calls, each call once per round with the next input set; the
        event time of every call in ms. Returns with this process's GPU work finished, so none of it can
        run into a measurement that another process makes next."""
        if self._timing is None:
            raise RuntimeError("prepare_timing comes first")
        calls, turn, stream = self._timing["calls"], self._timing["turn"], self._timing["stream"]
        self._trace_timing(stream)
        assert self._timing_trace is not None
        self._timing_trace["rounds"] += rounds
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(rounds):
            turn["i"] += 1
            self._freshen_round()
            for name, call in calls.items():
                times[name] += self._time(call, stream, 1)
                if name == "candidate":
                    self._keep_for_check()
        _checked_sync(self.torch)
        return times

    def _trace_timing(self, stream: Any) -> None:
        """Trace every timed call of the current measurement. A candidate that behaves differently when timed
        (another stream, other kernels) is seen in the same calls that are timed, not in a sample it could
        tell apart. Both sides of a measurement are traced alike, so neither pays for it alone."""
        from torch.profiler import ProfilerActivity, profile

        if self._timing_trace is not None and self._timing_trace["owner"] is self._timing:
            return
        self._stop_timing_trace()
        marker = self.torch.zeros(1, device="cuda")  # made before the trace: its fill is on another stream
        self.torch.cuda.synchronize()
        trace = profile(activities=[ProfilerActivity.CUDA])
        with quiet_tracer():
            trace.start()
        with self.torch.cuda.stream(stream):
            marker.add_(1)  # the trace's first activity names the timed stream
        self.torch.cuda.synchronize()
        with self.torch.cuda.stream(self._fresh_stream):
            marker.add_(1)  # its second names the stream where the harness freshens the inputs
        self.torch.cuda.synchronize()
        self._timing_trace = {"trace": trace, "owner": self._timing, "rounds": 0}

    def _stop_timing_trace(self) -> dict[str, Any] | None:
        record, self._timing_trace = self._timing_trace, None
        if record is None:
            return None
        self.torch.cuda.synchronize()
        with quiet_tracer():
            record["trace"].stop()
        return record

    def timed_launches(self) -> dict[str, Any]:
        """Ends the trace of the current measurement: every GPU activity of its timed calls (raw), the timed
        stream, the rounds it covers, and the harness's own timing kernels (named before any candidate
        code was loaded)."""
        record = self._stop_timing_trace()
        if record is None:
            return {"stream": None, "rounds": 0, "activities": [], "harness_kernels": self.harness_kernels}
        activities = traced_activities(record["trace"])
        stream = activities[0]["stream"] if activities else None
        fresh = activities[1]["stream"] if len(activities) > 1 else None
        return {"stream": stream, "rounds": record["rounds"],
                "activities": [a for a in activities[2:] if a["stream"] != fresh],
                "harness_kernels": self.harness_kernels}

    def timed_outputs(self) -> dict[str, Any]:
        """The outputs of the last timed call and the seed of its inputs, for the parent's re-check."""
        if self._timing is None:
            raise RuntimeError("prepare_timing comes first")
        seeds, turn = self._timing["seeds"], self._timing["turn"]
        index = turn["i"] % len(seeds)
        return {"last_seed": seeds[index], "last_outputs": dict(self._timing["outputs"]),
                "fresh_keys": list(self._timing["fresh_keys"][index]),
                "checked": [kept for kept in self._timing.get("kept", []) if kept is not None]}

    def time(self, sizes: dict[str, int], seeds: list[int], baselines: list[str], budget_ms: float,
             warmup: int = 3, candidate: bool = True) -> dict[str, Any]:
        """The prepared calls timed in one stretch, in this process alone (``budget_ms`` of measured time,
        at least 5 rounds): the benchmarks' measure of one process's repeatability. The evaluator times
        with ``time_rounds`` instead, alternating call by call between the candidate's process and the
        baseline's.

        The statistic is the median (and inter-quartile range) of per-call event times on the launch
        stream, the L2 flushed before each call.
        """
        self.prepare_timing(sizes, seeds, baselines, candidate)
        self.time_rounds(warmup)
        results: dict[str, list[float]] = {name: [] for name in self._timing["calls"]}
        spent, rounds = 0.0, 0
        while (spent < budget_ms or rounds < 5) and rounds < 1000:
            rounds += 1
            for name, values in self.time_rounds(1).items():
                results[name] += values
                spent += values[-1]
        return {"stats": {name: median_iqr(values) for name, values in results.items()}, "samples": rounds,
                **(self.timed_outputs() if candidate else {"last_seed": None, "last_outputs": {}})}

    def copy_bandwidth(self) -> float:
        """Device-to-device copy bandwidth in bytes/s (read + write), the memory roofline here."""
        torch = self.torch
        source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        target = torch.empty_like(source)
        stream = torch.cuda.current_stream()
        times = self._time(lambda s: target.copy_(source), stream, 10)
        return 2 * source.numel() / (statistics.median(times) / 1e3)


def _own_stream(torch: Any) -> Any:
    """A CUDA stream that is this process's alone (``cuStreamCreate``, non-blocking), as a torch stream: never
    one of the pooled streams ``torch.cuda.Stream()`` hands out, which are reused in turn. Where the driver
    cannot be reached, a stream of torch's high-priority pool, which the harness takes nothing else from."""
    import ctypes

    from ptxbench.evaluate.child.cuda_driver import Driver, DriverError

    torch.cuda.init()
    try:
        driver = Driver()
        driver.use_primary_context(torch.cuda.current_device())
        handle = ctypes.c_void_p()
        driver.call("cuStreamCreate", ctypes.byref(handle), 1)  # CU_STREAM_NON_BLOCKING
    except DriverError:
        return torch.cuda.Stream(priority=-1)
    return torch.cuda.ExternalStream(handle.value)


def _timed_baseline(torch: Any, per_set: list[Any], turn: dict[str, int]) -> Any:
    """The timed call of one baseline variant: the call prepared for the current input set, on the launch
    stream, and nothing else."""
    def call(s: Any) -> None:
        with torch.cuda.stream(s):
            per_set[turn["i"] % len(per_set)]()
    return call
