"""How much GPU memory one workload's evaluation needs, from the task alone, before anything runs.

An evaluation holds a workload's tensors in several processes at once: the candidate's process draws its inputs
and outputs for a trial while the harness draws the same inputs and computes the reference beside it; timing
draws ``TIMING_SETS`` input sets in the candidate's process and again in the baseline process, with the baseline's
setup and the kept outputs of checked calls. The estimate adds those up from the task's tensor shapes, so that

- a workload that cannot fit the card in hand is not run, with that reason, instead of ending as an
  out-of-memory error nobody can act on (``unfit_workloads``);
- an evaluation takes the GPU's memory into account before its untimed stages run beside others'
  (``MemoryLedger`` in ``isolation/memory_ledger.py`` admits them by it).

The reference's own working set is not known from the shapes: it is bounded here by an fp32 copy of the outputs
(references compute in fp32) and scratch as large as the largest tensor in fp32 but never under a floor measured
on the bundled references, which every one of them stays under (``tests/gpu/test_memory_need_gpu.py`` measures
each workload's peak against this estimate).
"""

from __future__ import annotations

from typing import NamedTuple

from ptxbench.tasks.model import Task, TensorSpec, Workload

GIB = 1 << 30
TIMING_SETS = 3  # input sets rotated over the timed calls (timing._seeds)
L2_FLUSH_BYTES = 256 << 20  # each timing process's flush buffer (child/gpu_side.L2_FLUSH_BYTES)
CHECKED_BYTES = 1 << 30  # the most the kept outputs of checked timed calls take (fresh_inputs.CHECKED_BYTES)
# Room the estimate never counts on: every process's CUDA context (~0.5 GiB with torch's kernels loaded: the
# harness, the baseline process, the candidate's process and the spares starting ahead), the allocator's rounding
# and fragmentation, and what other programs hold.
HEADROOM_BYTES = 6 * GIB


def _bytes(specs: list[TensorSpec], sizes: dict[str, int]) -> int:
    return sum(spec.numel(sizes) * spec.dtype.size for spec in specs)


def _fp32_bytes(spec: TensorSpec, sizes: dict[str, int]) -> int:
    return spec.numel(sizes) * max(4, spec.dtype.size)


class WorkloadNeed(NamedTuple):
    """Bytes of GPU memory one workload needs at the two peaks of an evaluation, all processes together."""

    trials: int  # a correctness trial: the candidate's inputs and outputs, the harness's inputs and reference
    timing: int  # zero for a held-out workload, which is never timed

    @property
    def alone(self) -> int:
        """What the workload needs with nothing else on the GPU."""
        return max(self.trials, self.timing)


# The references' working set beyond their tensors (attention's score blocks, the GEMMs' fp32 slabs, chunked
# MoE experts) reached 2.2 GiB on an H100 (attention_bwd's hd128-s4096: 2.63 GiB at its peak, 0.81 GiB of
# tensors; gemm_fp8_blockscale's q-b-prefill 3.05 GiB; tests/gpu/test_memory_need_gpu.py, 2026-12-07):
# every reference is granted at least this much scratch.
REFERENCE_SCRATCH_FLOOR_BYTES = 5 * GIB // 2


def reference_bytes(task: Task, sizes: dict[str, int]) -> int:
    """The harness's reference computation: its inputs, the expected outputs in fp32 and scratch as large as the
    largest of its tensors in fp32, and never less than ``REFERENCE_SCRATCH_FLOOR_BYTES``."""
    tensors = [*task.inputs, *task.outputs]
    expected = sum(_fp32_bytes(spec, sizes) for spec in task.outputs)
    scratch = max(REFERENCE_SCRATCH_FLOOR_BYTES, *(_fp32_bytes(spec, sizes) for spec in tensors))
    return _bytes(task.inputs, sizes) + expected + scratch


def workload_need(task: Task, workload: Workload) -> WorkloadNeed:
    """``WorkloadNeed`` of ``workload`` of ``task``, from its tensor shapes."""
    sizes = workload.sizes
    inputs, outputs = _bytes(task.inputs, sizes), _bytes(task.outputs, sizes)
    candidate_process = inputs + outputs
    trials = candidate_process + reference_bytes(task, sizes)
    if workload.role.value == "heldout":
        return WorkloadNeed(trials=trials, timing=0)
    # Each timing process: the rotated input sets, the outputs, the flush buffer; the candidate's also keeps the
    # outputs of checked calls, the baseline's its setup per input set (taken as large as the outputs).
    timed_candidate = TIMING_SETS * inputs + outputs + L2_FLUSH_BYTES + min(CHECKED_BYTES, 3 * outputs)
    timed_baseline = TIMING_SETS * (inputs + outputs) + outputs + L2_FLUSH_BYTES
    recheck = reference_bytes(task, sizes)  # the harness re-checks the kept outputs after timing
    return WorkloadNeed(trials=trials, timing=max(timed_candidate + timed_baseline, recheck))


def unfit_workloads(task: Task, card_bytes: int, timed: bool = True) -> dict[str, str]:
    """The workloads of ``task`` that cannot be evaluated on a card of ``card_bytes`` even alone, each with why
    (what it needs and what the card has); ``timed`` False: timing is not run, only the trials count."""
    usable = card_bytes - HEADROOM_BYTES
    unfit = {}
    for workload in task.workloads:
        need = workload_need(task, workload)
        peak = need.alone if timed else need.trials
        if peak > usable:
            unfit[workload.name] = (f"needs about {peak / GIB:.1f} GiB of GPU memory with nothing else on the GPU "
                                    f"(its tensors in the candidate's and the harness's processes), more than the "
                                    f"{usable / GIB:.1f} GiB this card ({card_bytes / GIB:.0f} GiB) leaves")
    return unfit


def trials_need(task: Task, workloads: list[Workload]) -> int:
    """The most any one of ``workloads``' trials needs: trials run one workload at a time."""
    return max((workload_need(task, w).trials for w in workloads), default=0)
