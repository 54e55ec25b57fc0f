"""What refinement sends back to a model after each turn, from whichever evaluator is available.

An evaluator is one method: source in, ``Feedback`` out. ``StaticEvaluator`` builds the candidate and
reads its PTX/SASS (no GPU); the GPU evaluator plugs in through the same protocol. The feedback text is
what a kernel engineer would want: the first compiler error with its context, the class of failure,
and for each required feature where it got lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field

from ptxbench.arch.registry import Arch
from ptxbench.check import CheckReport, check_source
from ptxbench.llm.extract import Extraction
from ptxbench.records import Record
from ptxbench.tasks.model import Task

if TYPE_CHECKING:
    from ptxbench.evaluate.evaluator import GpuEvaluator
    from ptxbench.evaluate.status import Evaluation

LOG_LINES_SHOWN = 30


class Feedback(Record):
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
    """Build and read the binary; never runs the candidate. Its verdicts are marked as not GPU-verified.

    The model is told what the binary shows (the compiler's error, the features missing from the SASS);
    the record is the evaluation ``eval`` makes of the same file without a GPU (``static_only``), so a
    turn and an evaluated file get the same verdict and error class."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s

    def evaluate(self, task: Task, arch: Arch, source: str) -> Feedback:
        from ptxbench.evaluate.static_only import static_verdict

        report = check_source(source, arch, task, timeout_s=self.timeout_s)
        passed, stage, text = render_check_feedback(report)
        evaluation = static_verdict(report, task.content_hash)
        return Feedback(passed=passed, stage=stage, text=text, record=evaluation.model_dump(mode="json"))


def _bundled_task(task_id: str) -> Task | None:
    from ptxbench.errors import TaskError
    from ptxbench.tasks.loader import get_task

    try:
        return get_task(task_id)
    except TaskError:
        return None


def render_evaluation_feedback(evaluation: "Evaluation", task: Task | None = None) -> tuple[bool, str, str]:
    """(passed, stage, text) for a GPU evaluation: where it failed, by how much, and what to fix.

    A held-out workload is checked but never shown: a failure on one is reported without its name, sizes,
    element counts or indices, and the text is redacted against the task (``task``, else the bundled task
    of that id), so refinement and Fixit never learn a held-out shape or variant from the feedback."""
    from ptxbench.tasks.visibility import redact

    task = task if task is not None else _bundled_task(evaluation.task)
    passed, stage, text = _evaluation_text(evaluation)
    return passed, stage, redact(text, task) if task is not None else text


def _evaluation_text(evaluation: "Evaluation") -> tuple[bool, str, str]:
    from ptxbench.check import CheckReport
    from ptxbench.evaluate.status import Status
    from ptxbench.tasks.visibility import HIDDEN_WORKLOAD as hidden

    status = evaluation.status
    if status is Status.COMPILE_ERROR and evaluation.build is not None:
        report = CheckReport(candidate=evaluation.candidate, source_sha256="", arch=evaluation.arch, task=evaluation.task,
                             build=evaluation.build, static=None, duration_s=0.0)
        return render_check_feedback(report)
    if evaluation.extraction is not None:
        return False, "extraction", f"The answer held no candidate ({evaluation.extraction.value}): {evaluation.message}"
    if status is None:
        return False, "gpu", f"The harness could not evaluate the file ({evaluation.infra_failure}): {evaluation.message}"
    message = evaluation.message
    failed = next((t for t in evaluation.trials if not t.passed), None)
    if status is Status.INCORRECT and failed is not None and failed.role == "heldout":
        worst = next((c for c in failed.comparisons if not c.passed), None)
        message = f"wrong on {hidden} (its sizes are not shown)" + (
            f": output {worst.output} out of tolerance, max abs error {worst.max_abs_error:.3g}" if worst else "")
    lines = [f"Status: {status.value}. {message}"]
    for trial in evaluation.trials:
        for comparison in trial.comparisons:
            if not comparison.passed and trial.role == "heldout":
                lines.append(f"- {hidden} (heldout), output {comparison.output}: out of tolerance "
                             f"({comparison.nonfinite} NaN/Inf), max abs error {comparison.max_abs_error:.3g}")
            elif not comparison.passed:
                lines.append(f"- {trial.workload} ({trial.role}), output {comparison.output}: {comparison.mismatched} of "
                             f"{comparison.elements} elements out of tolerance ({comparison.nonfinite} NaN/Inf), max abs "
                             f"error {comparison.max_abs_error:.3g}, worst at index {comparison.worst_index}: got "
                             f"{comparison.worst_value}, expected {comparison.worst_expected}")
    lines += [f"- rejected: {g.guard.value}: {g.detail}" for g in evaluation.guards]
    for requirement in evaluation.features or []:
        lines.append(f"- feature {requirement.message}")
    for timing in evaluation.timings:
        speed = f", {timing.speedup:.2f}x {timing.baseline}" if timing.speedup else ""
        rate = f", {timing.tflops:.1f} TFLOP/s" if timing.tflops else f", {timing.gbps:.0f} GB/s" if timing.gbps else ""
        lines.append(f"- time on {timing.workload}: {timing.candidate_ms:.4f} ms{rate}{speed}")
    if status is Status.PASSED and evaluation.features is None:
        lines.append("- (executed instructions were not verified: no profiler on this machine)")
    return status is Status.PASSED, "gpu", "\n".join(lines)


class GpuFeedbackEvaluator:
    """Refinement's evaluator on a GPU machine: the full evaluation, told back to the model."""

    def __init__(self, evaluator: "GpuEvaluator") -> None:
        self.evaluator = evaluator

    def evaluate(self, task: Task, arch: Arch, source: str) -> Feedback:
        evaluation = self.evaluator.evaluate(task, arch, source)
        passed, stage, text = render_evaluation_feedback(evaluation, task)
        return Feedback(passed=passed, stage=stage, text=text, verified_on_gpu=evaluation.status is not None,
                        record=evaluation.model_dump(mode="json"))
