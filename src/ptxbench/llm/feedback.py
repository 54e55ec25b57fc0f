"""What refinement sends back to a model after each turn, from whichever evaluator is available.

An evaluator is one method: source in, ``Feedback`` out. ``StaticEvaluator`` builds the candidate and
reads its PTX/SASS (no GPU); the GPU evaluator plugs in through the same protocol. The feedback text is
what a kernel engineer would want: the first compiler error with its context, the class of failure,
and for each required feature where it got lost.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field

from ptxbench.arch.registry import Arch
from ptxbench.check import CheckReport, build_request, report_for
from ptxbench.llm.extract import Extraction
from ptxbench.tasks.model import Task
from ptxbench.toolchain.compile import build

LOG_LINES_SHOWN = 30


class Feedback(BaseModel):
    """One evaluation as refinement sees it. ``passed`` means nothing is left to fix at this stage."""

    passed: bool
    stage: str = Field(description="'extraction', 'compile', 'static' or 'gpu': how far the candidate got")
    text: str = Field(description="What the model is told")
    verified_on_gpu: bool = False
    record: dict[str, Any] = Field(default_factory=dict, description="The evaluator's full record")


class Evaluator(Protocol):
    def evaluate(self, task: Task, arch: Arch, source: str) -> Feedback: ...


def extraction_feedback(extraction: Extraction, entry_point: str) -> Feedback:
    reasons = {
        "empty_completion": "Your answer was empty.",
        "no_code_block": "Your answer contains no code block.",
        "no_entry_point": f"No code block in your answer defines the entry point {entry_point}().",
        "provider_error": "The model could not be reached: " + "; ".join(extraction.notes),
    }
    return Feedback(passed=False, stage="extraction", text=reasons[extraction.status.value],
                    record=extraction.model_dump(mode="json"))


def _log_excerpt(log: str, first_error: str) -> str:
    lines = [line for line in log.splitlines() if line.strip() and not line.startswith("ptxas info")]
    start = next((i for i, line in enumerate(lines) if first_error and first_error in line), 0)
    excerpt = lines[max(0, start - 2): start + LOG_LINES_SHOWN]
    return "\n".join(excerpt)


def render_check_feedback(report: CheckReport) -> tuple[bool, str, str]:
    """(passed, stage, text) for a static check report."""
    build_result = report.build
    if not build_result.ok:
        diagnosis = build_result.diagnosis
        kind = diagnosis.failure.value.replace("_", " ") if diagnosis else "build failure"
        summary = diagnosis.summary if diagnosis else ""
        excerpt = _log_excerpt(build_result.log, diagnosis.first_error if diagnosis else "")
        return False, "compile", f"Compilation failed ({kind}). {summary}\n\nCompiler output:\n```\n{excerpt}\n```"
    static = report.static
    assert static is not None
    problems = [check.message for check in static.requirements if not check.in_sass]
    problems += [f"Policy: {violation}" for violation in static.policy_violations]
    problems += [f"Compiler: {note}" for note in static.notes if note.startswith("ptxas")]
    if problems:
        return False, "static", "The file compiles, but:\n" + "\n".join(f"- {p}" for p in problems)
    return True, "static", ("The file compiles and every required feature is in the SASS. (Correctness and speed "
                            "were not measured: no GPU evaluation in this run.)")


class StaticEvaluator:
    """Build and read the binary; never runs the candidate. Its verdicts are marked as not GPU-verified."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s

    def evaluate(self, task: Task, arch: Arch, source: str) -> Feedback:
        import time

        started = time.monotonic()
        result = build(build_request(source, arch, task), timeout_s=self.timeout_s)
        report = report_for("candidate.cu", source, arch, task, result, started)
        passed, stage, text = render_check_feedback(report)
        return Feedback(passed=passed, stage=stage, text=text, record=report.model_dump(mode="json"))
