"""Judging one correctness trial from the worker's raw reply, and the status that follows from the
evidence. Pure functions of their inputs, so ``--regrade`` can recompute verdicts without a GPU.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ptxbench.evaluate.status import Evaluation, Guard, GuardFinding, Status

if TYPE_CHECKING:
    import torch

BANNED_LIBRARIES = re.compile(r"lib(cublas|cublasLt|cudnn\w*)\.so")
_RUNTIME_COPIES = ("Memcpy", "Memset")


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
