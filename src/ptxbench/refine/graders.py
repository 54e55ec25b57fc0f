"""Graders: what refinement sends back to a model after each turn, from the check or the GPU evaluator.

A grader is one method: task, target and source in, ``Feedback`` out. ``StaticGrader`` builds the candidate
and reads its PTX/SASS (no GPU); ``GpuGrader`` runs the full GPU evaluation; ``client.ServerGrader`` has a
running ``ptxbench serve`` do what it can of the two, told back in the same words (``static_feedback``,
``gpu_feedback``). The feedback text is what a kernel engineer would want: the first compiler error with its
context, the class of failure, and for each required feature where it got lost; its record is the grader's
evaluation, the one ``eval`` makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ptxbench.arch.registry import Arch
from ptxbench.check import check_source
from ptxbench.errors import TaskError
from ptxbench.evaluate.judgement.static_only import static_verdict
from ptxbench.records.check import CheckReport
from ptxbench.records.completion import Extraction
from ptxbench.records.evaluation import Evaluation, Status
from ptxbench.records.evidence import EvidenceProfile
from ptxbench.records.trajectory import Feedback, Stage
from ptxbench.tasks.loader import get_task
from ptxbench.tasks.model import Task
from ptxbench.tasks.visibility import HIDDEN_WORKLOAD, redact

if TYPE_CHECKING:
    from ptxbench.evaluate.evaluator import GpuEvaluator

LOG_LINES_SHOWN = 30


class Grader(Protocol):
    def grade(self, task: Task, arch: Arch, source: str) -> Feedback: ...


def grader_evidence(grader: object) -> EvidenceProfile:
    """The evidence profile a grader's evaluations gather: publish for one that does not say (the static grader
    gathers no GPU evidence at all)."""
    evidence = getattr(grader, "evidence", None)
    return evidence if isinstance(evidence, EvidenceProfile) else EvidenceProfile.PUBLISH


def extraction_feedback(extraction: Extraction, entry_point: str) -> Feedback:
    """What a model is told when its answer held no candidate (the turn's extraction keeps the details)."""
    reasons = {
        "empty_completion": "Your answer was empty.",
        "no_code_block": "Your answer contains no code block.",
        "no_entry_point": f"No code block in your answer defines the entry point {entry_point}().",
        "provider_error": "The model could not be reached: " + "; ".join(extraction.notes),
    }
    return Feedback(passed=False, stage="extraction", text=reasons[extraction.status.value])


def _log_excerpt(log: str, first_error: str) -> str:
    lines = [line for line in log.splitlines() if line.strip() and not line.startswith("ptxas info")]
    start = next((i for i, line in enumerate(lines) if first_error and first_error in line), 0)
    excerpt = lines[max(0, start - 2): start + LOG_LINES_SHOWN]
    return "\n".join(excerpt)


def render_check_feedback(report: CheckReport) -> tuple[bool, Stage, str]:
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


class StaticGrader:
    """Build and read the binary; never runs the candidate. Its verdicts are marked as not GPU-verified.

    The model is told what the binary shows (the compiler's error, the features missing from the SASS);
    the record is the evaluation ``eval`` makes of the same file without a GPU (``static_only``), so a
    turn and an evaluated file get the same verdict and error class."""

    def __init__(self, timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s

    def grade(self, task: Task, arch: Arch, source: str) -> Feedback:
        report = check_source(source, arch, task, timeout_s=self.timeout_s)
        return static_feedback(static_verdict(report, task.content_hash))

    def close(self) -> None:
        """Nothing to release (the GPU grader's workers are)."""


def _bundled_task(task_id: str) -> Task | None:
    try:
        return get_task(task_id)
    except TaskError:
        return None


def render_evaluation_feedback(evaluation: Evaluation, task: Task | None = None) -> tuple[bool, Stage, str]:
    """(passed, stage, text) for a GPU evaluation: where it failed, by how much, and what to fix.

    A held-out workload is checked but never shown: a failure on one is reported without its name, sizes,
    element counts or indices, and the text is redacted against the task (``task``, else the bundled task
    of that id), so refinement and Fixit never learn a held-out shape or variant from the feedback."""
    task = task if task is not None else _bundled_task(evaluation.task)
    passed, stage, text = _evaluation_text(evaluation)
    return passed, stage, redact(text, task) if task is not None else text


def _evaluation_text(evaluation: Evaluation) -> tuple[bool, Stage, str]:
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
        message = f"wrong on {HIDDEN_WORKLOAD} (its sizes are not shown)" + (
            f": output {worst.output} out of tolerance, max abs error {worst.max_abs_error:.3g}" if worst else "")
    lines = [f"Status: {status.value}. {message}"]
    for trial in evaluation.trials:
        for comparison in trial.comparisons:
            if not comparison.passed and trial.role == "heldout":
                lines.append(f"- {HIDDEN_WORKLOAD} (heldout), output {comparison.output}: out of tolerance "
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


def static_feedback(evaluation: Evaluation) -> Feedback:
    """What the static grader tells the model, from an evaluation made without running the candidate (its build
    and static report): one text whether the check ran here or on a server without GPUs."""
    report = CheckReport(candidate=evaluation.candidate, source_sha256="", arch=evaluation.arch, task=evaluation.task,
                         build=evaluation.build, static=evaluation.static, duration_s=0.0)
    passed, stage, text = render_check_feedback(report)
    return Feedback(passed=passed, stage=stage, text=text, record=evaluation)


def gpu_feedback(evaluation: Evaluation, task: Task) -> Feedback:
    """What the GPU grader tells the model, from a GPU evaluation made here or by a server."""
    passed, stage, text = render_evaluation_feedback(evaluation, task)
    return Feedback(passed=passed, stage=stage, text=text, verified_on_gpu=evaluation.status is not None,
                    record=evaluation)


class GpuGrader:
    """Refinement's grader on a GPU machine: the full evaluation, told back to the model."""

    def __init__(self, evaluator: "GpuEvaluator") -> None:
        self.evaluator = evaluator

    @property
    def evidence(self) -> EvidenceProfile:
        """The evidence profile its evaluations gather (recorded in the run header)."""
        return self.evaluator.options.evidence

    def grade(self, task: Task, arch: Arch, source: str) -> Feedback:
        return gpu_feedback(self.evaluator.evaluate(task, arch, source), task)

    def close(self) -> None:
        """Stop the GPU evaluator's worker processes."""
        self.evaluator.close()


def grader_for_this_machine(evidence: EvidenceProfile = EvidenceProfile.PUBLISH) -> StaticGrader | GpuGrader:
    """The GPU grader (gathering ``evidence``) where a GPU is visible, else the static grader (whose verdicts say
    they are not GPU-verified)."""
    from ptxbench.evaluate.fleet.run import gpu_available

    if gpu_available():
        from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator

        return GpuGrader(GpuEvaluator(EvalOptions(evidence=evidence)))
    return StaticGrader()
