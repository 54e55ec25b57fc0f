"""The error taxonomy: one class per failed attempt, shared by reports, feedback and Fixit.

Classes are ``<stage>.<kind>``: ``extraction.*``; ``compile.*`` (the build classifier's classes);
``runtime.*`` (illegal address, misaligned access, out of memory, crash, timeout, other);
``numerical.*`` (nan, wrong_values); ``instruction.*`` (absent: a required feature not in the SASS;
not_executed: in the SASS but never run; minor_share: run, but doing too little of the work);
``guard.*`` (the guard that rejected it); ``infra.*`` (never the candidate's fault); and ``ok``.
``extraction.provider_error`` keeps its historical name but is no failure of the model's (``PROVIDER_ERROR``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ptxbench.records.evaluation import Guard, Status

if TYPE_CHECKING:
    from ptxbench.records.completion import Extraction
    from ptxbench.records.evaluation import Evaluation
    from ptxbench.records.trajectory import Feedback

CLASSES = (
    "ok", "unevaluated",
    "extraction.empty_completion", "extraction.no_code_block", "extraction.no_entry_point", "extraction.provider_error",
    "compile.cpp_error", "compile.ptx_syntax", "compile.ptx_operand", "compile.unsupported_on_target",
    "compile.resource_limit", "compile.link_error", "compile.missing_entry_point", "compile.timeout",
    "runtime.illegal_address", "runtime.misaligned_address", "runtime.out_of_memory", "runtime.crash",
    "runtime.timeout", "runtime.other",
    "numerical.nan", "numerical.wrong_values",
    "instruction.absent", "instruction.not_executed", "instruction.minor_share",
    # every guard but feature_not_executed, which the instruction.* classes above split by cause
    *(f"guard.{guard.value}" for guard in Guard if guard is not Guard.FEATURE_NOT_EXECUTED),
    "infra.no_gpu", "infra.tool_missing", "infra.harness_error",
)

PROVIDER_ERROR = "extraction.provider_error"
"""The one class that is no verdict: the provider gave no answer (a time-out, a refused request, no replayed line),
so nothing the model wrote was judged. Metrics and the report count such turns apart from the model's failures:
a sample keeps the verdict of its last answered turn, and one never answered is a provider error, in no rate."""


def is_provider_error(error_class: str) -> bool:
    """Whether an attempt of this class is a turn the provider never answered (``PROVIDER_ERROR``)."""
    return error_class == PROVIDER_ERROR


_RUNTIME = [
    ("runtime.illegal_address", re.compile(r"illegal (memory access|address)", re.IGNORECASE)),
    ("runtime.misaligned_address", re.compile(r"misaligned", re.IGNORECASE)),
    ("runtime.out_of_memory", re.compile(r"out of memory|cudaErrorMemoryAllocation|cudaError 2\b", re.IGNORECASE)),
    ("runtime.crash", re.compile(r"process died", re.IGNORECASE)),
]


def classify_extraction(extraction: "Extraction", feedback: "Feedback | None") -> str:
    if extraction.ok and feedback is None:
        return "unevaluated"
    return f"extraction.{extraction.status.value}"


def classify_evaluation(evaluation: "Evaluation") -> str:
    if evaluation.extraction is not None:
        return f"extraction.{evaluation.extraction.value}"
    if evaluation.infra_failure is not None:
        return f"infra.{evaluation.infra_failure.value.lower()}"
    status = evaluation.status
    if status is Status.COMPILE_ERROR:
        failure = evaluation.build.diagnosis.failure.value if evaluation.build and evaluation.build.diagnosis else "cpp_error"
        return f"compile.{failure}"
    if status is Status.TIMEOUT:
        return "runtime.timeout"
    if status is Status.RUNTIME_ERROR:
        return next((name for name, pattern in _RUNTIME if pattern.search(evaluation.message)), "runtime.other")
    if status is Status.INCORRECT:
        failed = [c for t in evaluation.trials if not t.passed for c in t.comparisons if not c.passed]
        return "numerical.nan" if any(c.nonfinite for c in failed) else "numerical.wrong_values"
    if status is Status.REJECTED:
        guards = [g.guard for g in evaluation.guards]
        if Guard.FEATURE_NOT_EXECUTED in guards and len(set(guards)) == 1:
            features = evaluation.features or []
            if any(f.executed and not f.satisfied for f in features):
                return "instruction.minor_share"
            static = evaluation.static
            if static is not None and not static.requirements_in_sass:
                return "instruction.absent"
            return "instruction.not_executed"
        first = next(g for g in guards if g is not Guard.FEATURE_NOT_EXECUTED)
        return f"guard.{first.value}"
    return "ok"
