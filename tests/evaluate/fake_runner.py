"""A CPU stand-in for the GPU worker's handler: answers like CandidateRunner, computing the outputs with
the task's reference (or a scripted misbehaviour), so the evaluator's orchestration runs without a GPU."""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from ptxbench.evaluate.child.gpu_side import CANARY_BYTES, CANARY_VALUE, HarnessOutOfMemory
from ptxbench.tasks.model import Task
from ptxbench.tasks.reference import make_inputs, run_reference

BEHAVIOUR = "PTXBENCH_FAKE_BEHAVIOUR"
SPANS = "PTXBENCH_FAKE_SPANS"  # a file: each trial and timing call then takes 0.2 s and logs its span
PIDS = "PTXBENCH_FAKE_PIDS"  # a file: the loaded candidate's process writes its pid there
LAST = "PTXBENCH_FAKE_LAST"  # a file: the pid of the process that timed last ("power-capped" behaviour)
GPU_BYTES = "PTXBENCH_FAKE_GPU_BYTES"  # the memory the fake device says it has (none said without it)
RELEASES = "PTXBENCH_FAKE_RELEASES"  # a file: each release_timing appends this process's pid


def _span(kind: str) -> None:
    log = os.environ.get(SPANS)
    if log:
        started = time.time()
        time.sleep(0.2)
        with open(log, "a") as out:
            out.write(f"{kind} {os.getpid()} {started} {time.time()}\n")


def cubin_functions(cubin: bytes) -> list[str]:
    """The mangled name of each function in the cubin, in the order of cuobjdump's SASS listing (one
    ``.text.<name>`` section each), read from its ELF: the names the launch records of this stand-in carry.
    Not cuobjdump, which costs about 0.4 s of CPU a call: each of the many items evaluated with this stand-in
    loads its build in a fresh process, and the harness has already read the same cubin's SASS."""
    from io import BytesIO

    from elftools.elf.elffile import ELFFile

    prefix = ".text."
    return [section.name[len(prefix):] for section in ELFFile(BytesIO(cubin)).iter_sections()
            if section.name.startswith(prefix)]


DAEMON = "PTXBENCH_FAKE_DAEMON"  # a file: the "daemon" behaviour's abandoned process writes its pid there


def _abandon_a_daemon() -> None:
    """Fork twice in a new session and let the middle process exit, as a daemon does: the grandchild
    would be re-parented to init, outliving the worker, were the worker not a subreaper."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            part = f"{os.environ[DAEMON]}.{os.getpid()}"
            with open(part, "w") as out:
                out.write(str(os.getpid()))
            os.rename(part, os.environ[DAEMON])  # never seen half-written
            time.sleep(600)
        os._exit(0)
    deadline = time.time() + 10
    while not os.path.exists(os.environ[DAEMON]) and time.time() < deadline:
        time.sleep(0.01)


OOM_MARK = "PTXBENCH_FAKE_OOM_MARK"  # a file: "-once" behaviours run out of memory until it exists


def _runs_out_of_memory(behaviour: str) -> bool:
    """"oom", "oom-torch", "oom-sticky": always; with "-once": in the first process only, as a candidate
    does whose memory was taken by another one beside it."""
    if not behaviour.endswith("-once"):
        return True
    mark = os.environ[OOM_MARK]
    if os.path.exists(mark):
        return False
    open(mark, "w").close()
    return True


class FakeRunner:
    def __init__(self) -> None:
        self.behaviour = os.environ.get(BEHAVIOUR, "correct")
        self.task: Task | None = None

    def device_info(self) -> dict[str, Any]:
        memory = os.environ.get(GPU_BYTES)
        return {"name": "Fake H200", "torch": str(torch.__version__), "cuda": None, "cudnn": None,
                **({"memory_bytes": int(memory)} if memory else {})}

    def health_check(self) -> dict[str, Any]:
        """The known-good matmul, on the CPU."""
        generator = torch.Generator().manual_seed(1)
        a = torch.randn(64, 64, generator=generator)
        want = a @ a
        got = self._healthy_product(want)
        return {"max_abs_error": float((got - want).abs().max()), "reference_max_abs": float(want.abs().max()),
                "elements": want.numel(), "seconds": 0.0, "name": "Fake H200"}

    def _healthy_product(self, want: torch.Tensor) -> torch.Tensor:
        return want.clone()

    def peaks(self) -> dict[str, float]:
        return {"bytes_per_s": 4.0e12, "bf16_flops": 7.5e14, "fp8_flops": 1.2e15}

    def set_task(self, task_json: str) -> None:
        self.task = Task.model_validate_json(task_json)

    def load(self, shared_object: str, task_json: str) -> list[str]:
        from pathlib import Path

        from ptxbench.evaluate.judgement.launches import base_name
        from ptxbench.toolchain.tools import demangle

        self.task = Task.model_validate_json(task_json)
        if os.environ.get(PIDS):
            with open(os.environ[PIDS], "w") as out:
                out.write(str(os.getpid()))
        mangled = cubin_functions(Path(shared_object).with_suffix(".cubin").read_bytes())
        self.kernels = [base_name(name) for name in demangle(mangled).values()]
        return []

    def _outputs(self, sizes: dict[str, int], seed: int) -> dict[str, torch.Tensor]:
        inputs = dict(make_inputs(self.task, sizes, seed))
        expected = run_reference(self.task, inputs, sizes)
        outputs = {o.name: expected[o.name].to(getattr(torch, o.dtype.value)) for o in self.task.outputs}
        if self.behaviour == "wrong":
            outputs = {k: v * 2 for k, v in outputs.items()}
        if self.behaviour == "partial":  # the second half left unwritten: the NaN prefill stays
            for value in outputs.values():
                value.view(-1)[value.numel() // 2:] = float("nan")
        return outputs

    def trial(self, sizes: dict[str, int], seed: int) -> dict[str, Any]:
        _span("trial")
        if self.behaviour == "daemon":
            _abandon_a_daemon()
        if self.behaviour == "hang":
            time.sleep(3600)
        if self.behaviour == "crash":
            os.abort()
        if self.behaviour.startswith("oom") and _runs_out_of_memory(self.behaviour):
            if self.behaviour.startswith("oom-harness"):  # the harness's own drawing in this process
                raise HarnessOutOfMemory("drawing the trial's inputs and outputs: CUDA out of memory.")
            if self.behaviour.startswith("oom-torch"):
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
            if self.behaviour.startswith("oom-sticky"):  # a CUDA call after the candidate's failed cudaMalloc
                raise RuntimeError("CUDA error: out of memory")
            return {"code": 2}  # cudaErrorMemoryAllocation
        inputs = dict(make_inputs(self.task, sizes, seed))
        if self.behaviour == "mutate":
            first = next(iter(inputs))
            inputs[first] = inputs[first].clone()
            inputs[first].view(-1)[0] += 1
        kernels = [{"name": f"void {name}(float*)", "stream": 7, "kind": "kernel"} for name in self.kernels]
        if self.behaviour == "foreign":
            kernels.append({"name": "nvjet_sm90_tst_gemm", "stream": 7, "kind": "kernel"})
        if self.behaviour == "host-copy":  # computes on the host beside a token kernel of its own
            kernels.append({"name": "Memcpy DtoH (Device -> Pageable)", "stream": 7, "kind": "memcpy"})
        canary = torch.full((2 * CANARY_BYTES,), CANARY_VALUE, dtype=torch.uint8)
        if self.behaviour == "overflow":
            canary[CANARY_BYTES] = 0
        return {"code": 0, "stream": 7, "activities": kernels,
                "outputs": self._outputs(sizes, seed),
                "canaries": {o.name: canary for o in self.task.outputs},
                "inputs_after": inputs}

    def _check_timing(self, baselines: list[str], candidate: bool) -> None:
        if candidate and not hasattr(self, "kernels"):
            raise RuntimeError("no candidate is loaded to time")
        if baselines and hasattr(self, "kernels"):  # the cheat a candidate could use: slowing its own baseline
            raise RuntimeError("a baseline was timed in a process holding the candidate's code")

    def check_baselines(self, sizes: dict[str, int], names: list[str], seed: int = 0, verify: bool = False) -> dict:
        """As the GPU runner's check, without the setup run: a variant whose library does not import here
        (Liger-Kernel, Triton for torch.compile) is skipped with its reason, the others are timed.
        "cudnn-too-old": the cuDNN variant's setup refuses head dim 256, as cuDNN before 9.10 does."""
        from ptxbench.evaluate.baselines.variants import cudnn_attention_refusal, variant_specs

        assert self.task is not None
        variants = variant_specs(self.task)
        reasons = {n: variants[n].load() for n in names}
        if self.behaviour == "cudnn-too-old" and "cudnn" in reasons:
            refusal = cudnn_attention_refusal(90100, sizes)
            reasons["cudnn"] = refusal and f"setup failed: RuntimeError: {refusal}"
        return reasons

    def release_timing(self) -> None:
        if os.environ.get(RELEASES):
            with open(os.environ[RELEASES], "a") as out:
                out.write(f"{os.getpid()}\n")

    def prepare_timing(self, sizes: dict[str, int], seeds: list[int], baselines: list[str],
                       candidate: bool = True) -> None:
        self._check_timing(baselines, candidate)
        if self.behaviour.startswith("timing-oom") and candidate and _runs_out_of_memory(self.behaviour):
            raise HarnessOutOfMemory("drawing the timed input sets and the baselines' setup: CUDA out of memory.")
        _span("time")
        self._timing = (sizes, seeds, baselines, candidate)
        self._sessions = getattr(self, "_sessions", {})
        key = tuple(sorted(sizes.items()))
        self._sessions[key] = self._sessions.get(key, 0) + 1

    def time_rounds(self, rounds: int) -> dict[str, list[float]]:
        """2 ms a call for the candidate (5 ms when "slow-when-timed"; "forged-when-timed": said, while each call takes 20 ms of wall time, as
        with event times forged in its process; "forged-off-timed": so on every workload but one with C = 64), 1 ms for a baseline (1.5 ms when "slowed-baseline" and a candidate
        is loaded: as if its process disturbed the baseline; 3 ms in the first measurement of each shape
        when "outlier-baseline": a slow outlier; 1.3 ms when "power-capped" and this process also timed
        the calls before: back to back, the GPU runs into its power cap). A baseline is timed only while the
        candidate's process is stopped, which this checks when PTXBENCH_FAKE_PIDS names the file the
        candidate writes its pid to when loaded."""
        from ptxbench.evaluate.isolation.processes import process_state

        sizes, seeds, baselines, candidate = self._timing
        pids = os.environ.get(PIDS)
        candidate_pid = int(open(pids).read()) if pids and os.path.exists(pids) else None
        beside_candidate = candidate_pid is not None and process_state(candidate_pid) is not None
        if baselines and beside_candidate:
            if process_state(candidate_pid) not in ("T", "t"):
                raise RuntimeError(f"the candidate's process {candidate_pid} ran while the baseline was timed")
        baseline_ms = 1.5 if self.behaviour == "slowed-baseline" and beside_candidate else 1.0
        if self.behaviour == "outlier-baseline" and self._sessions[tuple(sorted(sizes.items()))] == 1:
            baseline_ms = 3.0
        if self.behaviour == "power-capped":
            last = os.environ[LAST]
            if os.path.exists(last) and open(last).read() == str(os.getpid()):
                baseline_ms = 1.3
            with open(last, "w") as out:
                out.write(str(os.getpid()))
        self._rounds = getattr(self, "_rounds", 0) + rounds
        if self.behaviour == "forged-when-timed" and candidate:  # 20 ms of work per call, 2 ms said
            time.sleep(0.02 * rounds)
        if self.behaviour == "forged-off-timed" and candidate and sizes.get("C") != 64:  # the same, where ncu
            time.sleep(0.02 * rounds)  # does not look: on every workload but the small softmax's timed one (C = 64)
        candidate_ms = 5.0 if self.behaviour == "slow-when-timed" else 2.0  # slow: 5 times the baseline's 1 ms
        return {**({"candidate": [candidate_ms] * rounds} if candidate else {}),
                **{name: [baseline_ms] * rounds for name in baselines}}

    def timed_launches(self) -> dict[str, Any]:
        """The trace of the timed calls since the last one: the candidate's kernels once per call on stream 9
        beside the harness's own flush kernel ("other-stream-when-timed": on stream 11 instead;
        "extra-kernel-when-timed": one more kernel of its own per call; "host-copy-when-timed": a copy to the
        host per call)."""
        rounds, self._rounds = getattr(self, "_rounds", 0), 0
        candidate = self._timing[3] and hasattr(self, "kernels")
        stream = 11 if self.behaviour == "other-stream-when-timed" else 9
        per_call = [{"name": "reduce_kernel<amax>", "stream": 9, "kind": "kernel"}]
        if candidate:
            per_call += [{"name": f"void {name}(float*)", "stream": stream, "kind": "kernel"} for name in self.kernels]
            if self.behaviour == "extra-kernel-when-timed":
                per_call.append({"name": f"void {self.kernels[0]}(float*)", "stream": 9, "kind": "kernel"})
            if self.behaviour == "host-copy-when-timed":
                per_call.append({"name": "Memcpy DtoH (Device -> Pageable)", "stream": 9, "kind": "memcpy"})
        return {"stream": 9, "rounds": rounds, "activities": per_call * rounds,
                "harness_kernels": ["reduce_kernel<amax>"]}

    def launch_gate(self) -> dict[str, Any]:
        """Gated, except a loaded candidate's process when "ungated" (its calls wait for the GPU)."""
        ungated = self.behaviour == "ungated" and hasattr(self, "kernels")
        return {"gated": not ungated, "note": "the launch gate timed out" if ungated else None}

    def timed_outputs(self) -> dict[str, Any]:
        sizes, seeds, _, _ = self._timing
        return {"last_seed": seeds[-1], "last_outputs": self._outputs(sizes, seeds[-1])}


STATE = "PTXBENCH_FAKE_STATE"


class BreaksGpu1(FakeRunner):
    """A GPU that breaks for good while a candidate runs on it: the worker dies at ``load``, and from then
    on no process can open that GPU (as after an uncorrectable ECC error). Which GPU this is comes from
    CUDA_VISIBLE_DEVICES, as pinned by the pool or by Ray; the breakage is kept in PTXBENCH_FAKE_STATE."""

    broken: set[str] | None = {"1"}  # None: every GPU

    def _marker(self) -> "Path":
        import tempfile
        from pathlib import Path

        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return Path(os.environ.get(STATE) or tempfile.gettempdir()) / f"{type(self).__name__}-broken-{gpu}"

    def _is_broken(self) -> bool:
        return self.broken is None or os.environ.get("CUDA_VISIBLE_DEVICES") in self.broken

    def device_info(self) -> dict[str, Any]:
        if self._marker().exists():
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
        return {**super().device_info(), "name": f"Fake H200 {os.environ.get('CUDA_VISIBLE_DEVICES')}"}

    def health_check(self) -> dict[str, Any]:
        if self._marker().exists():
            raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
        return super().health_check()

    def load(self, shared_object: str, task_json: str) -> list[str]:
        if self._is_broken():
            self._marker().touch()
            os._exit(1)
        return super().load(shared_object, task_json)


class BreaksEveryGpu(BreaksGpu1):
    broken = None


class DeadGpu1(FakeRunner):
    """GPU 1 never opens."""

    def device_info(self) -> dict[str, Any]:
        if os.environ.get("CUDA_VISIBLE_DEVICES") == "1":
            raise RuntimeError("CUDA error: unrecoverable error (GPU has fallen off the bus)")
        return super().device_info()


class PartlyUnwritten(FakeRunner):
    """A candidate that leaves the second half of every output unwritten (as a handler name, so no
    environment variable has to reach the worker)."""

    def __init__(self) -> None:
        super().__init__()
        self.behaviour = "partial"


class SickGpu(FakeRunner):
    """A crashing candidate on a GPU that opens but computes the health check's known-good matmul wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.behaviour = "crash"

    def _healthy_product(self, want: torch.Tensor) -> torch.Tensor:
        return want + 1.0
