"""Terminal rendering (rich) for the CLI: check reports, task cards and the per-item progress lines of
``eval`` and ``generate``. Kept apart from the logic so the API stays plain data; only the CLI imports it
(evaluate/ and llm/ report progress through callbacks), so it sits with the other result presentation."""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from ptxbench.records.check import CheckReport
from ptxbench.static.report import FeatureEvidence, Stage

if TYPE_CHECKING:
    from rich.progress import Progress
    from typing_extensions import Self

    from ptxbench.arch.registry import Arch
    from ptxbench.records.evaluation import Evaluation
    from ptxbench.records.trajectory import ItemResult
    from ptxbench.tasks.model import Task

# How far a required feature got, in the words of JSON, the serving API and the report (the stage's value).
STAGE_LABEL = {stage: stage.value for stage in Stage}
_STAGE_COLOUR = {Stage.IN_SASS: "green", Stage.NOT_IN_SASS: "yellow", Stage.ELIMINATED_BEFORE_PTX: "yellow",
                 Stage.UNSUPPORTED_ON_TARGET: "red", Stage.NOT_WRITTEN: "red"}
_STAGE_STYLE = {stage: f"[{colour}]{STAGE_LABEL[stage]}[/{colour}]" for stage, colour in _STAGE_COLOUR.items()}


def render_check(console: Console, report: CheckReport) -> None:
    _hanging(console, "", f"{report.candidate} → {report.arch.value}" + (f" (task {report.task})" if report.task else ""),
             bold=True, indent="  ")
    build = report.build
    if not build.ok:
        diagnosis = build.diagnosis
        console.print(f"  [red]build failed[/red]: {diagnosis.failure.value if diagnosis else 'unknown'}")
        if diagnosis:
            console.print(f"  {diagnosis.summary}", highlight=False)
            if diagnosis.first_error:
                console.print(f"  first error: {diagnosis.first_error}", highlight=False, markup=False)
        return
    static = report.static
    if static is None:
        return
    # A cached build keeps the time it took when it was made: said as such, not as this run's time.
    built = f"build cached (it took {build.duration_s:.1f} s)" if build.cached else f"built in {build.duration_s:.1f} s"
    console.print(f"  {built}; checked in {report.duration_s:.1f} s")
    # One block per kernel, not a table: a kernel's name, features and top SASS do not share an 80-column
    # row, and a table squeezed into one wraps every cell mid-word (pipes and CI logs are 80 wide).
    for name, kernel in zip(short_kernel_names([k.demangled for k in static.kernels]), static.kernels):
        resources = kernel.resources
        spills = resources.spill_store_bytes + resources.spill_load_bytes
        top = ", ".join(f"{m}×{c}" for m, c in sorted(kernel.sass.items(), key=lambda kv: -kv[1])[:4])
        console.print(f"  kernel [bold]{escape(name)}[/bold]", highlight=False)
        _hanging(console, "    resources:        ", f"{resources.registers or '?'} registers, "
                 f"{resources.shared_bytes or 0} B shared memory, {spills} B spilled")
        _hanging(console, "    features in SASS: ", ", ".join(kernel.features) or "none")
        _hanging(console, "    top SASS:         ", top or "none")
    if static.requirements:
        funnel = Table("requirement", "source", "PTX", "SASS", "verdict")
        for check in static.requirements:
            evidence = check.evidence
            mark = lambda hit: "[green]✓[/green]" if hit else "·"  # noqa: E731
            funnel.add_row(check.requirement.label, mark(any(e.in_source for e in evidence)),
                           mark(any(e.in_ptx for e in evidence)), mark(any(e.in_sass for e in evidence)),
                           _STAGE_STYLE[check.stage])
        console.print(funnel)
        for check in static.requirements:
            if not check.in_sass:
                _hanging(console, "  • ", check.message)
    elif static.features:  # printed as text: rich would take '[source]' for a style tag and drop it
        _hanging(console, "  features: ", ", ".join(f"{e.feature}[{_furthest(e)}]" for e in static.features))
    for violation in static.policy_violations:
        console.print(f"  [red]policy[/red]: {violation}", highlight=False)
    for note in static.notes:
        console.print(f"  note: {note}", highlight=False)


def _furthest(evidence: FeatureEvidence) -> str:
    """Where a feature found without a task's requirement got: 'SASS', 'PTX', or 'source' (written, compiled away)."""
    return "SASS" if evidence.in_sass else "PTX" if evidence.in_ptx else "source"


def render_task(console: Console, task: Task, warning: str | None = None) -> None:
    """One task for a reader at any width (80 columns in pipes and CI logs): the statement as paragraphs,
    the workloads as a table whose only wrapping cell is the sizes (at spaces), requirements indented."""
    _hanging(console, "", f"{task.id} — {task.title}", bold=True)
    if warning is not None:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
    for paragraph in paragraphs(task.statement):
        console.print()
        _hanging(console, "", paragraph)
    console.print()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("workload", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("sizes")
    table.add_column("GFLOP", justify="right", no_wrap=True)
    table.add_column("MB moved", justify="right", no_wrap=True)
    for w in task.workloads:
        table.add_row(w.name, w.role.value, " ".join(f"{k}={v}" for k, v in w.sizes.items()),
                      f"{task.flops_for(w.sizes) / 1e9:,.1f}", f"{task.bytes_for(w.sizes) / 1e6:,.1f}")
    console.print(table)
    if task.variants:
        console.print()
    for variant in task.variants:  # the rule, then the workloads it holds
        rule = " ".join([*(f"{k}={v}" for k, v in variant.fixes.items()), *([variant.when] if variant.when else [])])
        members = ", ".join(w.name for w in task.workloads if task.variant_of(w) is variant)
        _hanging(console, f"variant {variant.name}{' (held out)' if variant.heldout else ''}: ", f"{rule} — {members}")
    console.print()
    width = max(len(arch.value) for arch in task.requirements) + len(" requires: ")
    for arch, requirements in task.requirements.items():
        _hanging(console, f"{arch.value} requires: ".ljust(width), "; ".join(
            r.label + (f" (≥{r.min_flop_share:.0%} of FLOPs)" if r.min_flop_share else "") for r in requirements))
    console.print(f"content hash: {task.content_hash[:16]}", style="dim", highlight=False)


def paragraphs(text: str) -> list[str]:
    """Text hard-wrapped in its source (a task's TOML) as paragraphs: lines joined, blank lines kept as breaks,
    so the terminal wraps it at its own width instead of breaking every source line a second time."""
    blocks = [" ".join(line.strip() for line in block.splitlines()) for block in text.strip().split("\n\n")]
    return [block for block in blocks if block]


class ItemProgress:
    """Progress of a command, per finished item (an evaluated candidate, a sampled or refined sample): a bar on
    a terminal; in a pipe or a CI log, where a bar shows nothing until the end, one plain line each, never cut
    or wrapped (``progress_line``). ``item_done`` may be called from the threads that collect the GPUs' results."""

    def __init__(self, console: Console, total: int, title: str) -> None:
        self.console, self.total, self.title = console, total, title
        self.finished = 0
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._bar: Progress | None = None

    def __enter__(self) -> Self:
        if self.console.is_terminal:
            from rich.progress import Progress

            self._bar = Progress(console=self.console, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.title, total=self.total)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, error, trace)

    def item_done(self, item: str, verdict: str, reason: str, seconds: float | None = None,
                  resumed: bool = False) -> None:
        """One item finished; ``seconds`` it took (default: since the previous one), or ``resumed``: found done."""
        with self._lock:
            self.finished += 1
            now = time.monotonic()
            taken = "resumed" if resumed else f"{now - self._last if seconds is None else seconds:.1f} s"
            self._last = now
            if self._bar is not None:
                self._bar.advance(self._task)
            else:
                # soft_wrap: rich would otherwise break the line at the console's width (80 in a pipe)
                self.console.print(progress_line(self.finished, self.total, item, verdict, taken, reason),
                                   highlight=False, markup=False, soft_wrap=True)


class EvalProgress(ItemProgress):
    """``ptxbench eval``'s progress: a line per evaluated candidate."""

    def done(self, evaluation: Evaluation) -> None:
        name = Path(evaluation.candidate).name
        # The sequential path (no GPU, --regrade) has no stored total: the time since the previous candidate.
        self.item_done(name if Path(name).stem == evaluation.task else f"{evaluation.task}/{name}",
                       evaluation.verdict, _reason(evaluation), evaluation.durations_s.get("total"))


class GenerationProgress(ItemProgress):
    """``ptxbench generate`` and ``run``'s progress: a line per finished sample, with its last turn's verdict in
    ``eval``'s words ('infra: NO_GPU', 'extraction: no_code_block'), or 'sampled' where nothing judged it."""

    def done(self, result: ItemResult, seconds: float | None) -> None:
        """``seconds`` the sample took; None for one found done in the run directory (resumed)."""
        from ptxbench.records.trajectory import item_name

        turns = len(result.turns)
        verdict, reason = _generation_verdict(result)
        if turns > 1:
            verdict += f" after {turns} turns"
        self.item_done(f"{result.task}/{item_name(result.sample)}", verdict, reason, seconds, resumed=seconds is None)


def _generation_verdict(result: ItemResult) -> tuple[str, str]:
    """(verdict, reason) of a sample's last turn: its extraction failure, its evaluation's verdict (the record
    ``run`` keeps is the evaluation ``eval`` makes of the same file), or 'sampled' where nothing judged it."""
    from ptxbench.records.evaluation import Evaluation

    last = result.turns[-1]
    feedback = last.feedback
    if not last.extraction.ok:
        return f"extraction: {last.extraction.status.value}", "; ".join(last.extraction.notes)
    if feedback is None:
        return "sampled", f"a candidate of {len(last.extraction.source.splitlines())} lines"
    if isinstance(feedback.record, Evaluation):  # as `eval` records it (static or on a GPU)
        return feedback.record.verdict, _reason(feedback.record)
    # a static turn written before its record was an evaluation: what the model was told
    return f"{feedback.stage}: {'passed' if feedback.passed else 'failed'}", (feedback.text.splitlines() or [""])[0]


def progress_line(finished: int, total: int, item: str, verdict: str, taken: str, reason: str) -> str:
    """'[3/7] softmax.cu: REJECTED (12.3 s) mbarrier: not executed', whole, on one line at any length: it is
    the only record a pipe or a CI log keeps of the item (cut at 80 columns, the reason's end was lost), and
    one line per item is what ``grep`` and a reader of the log count on. ``item`` names the task too where
    the candidate's name is not the task's ('gemm_bf16/sample_002'); a reason of several lines is joined."""
    return f"[{finished}/{total}] {item}: {verdict} ({taken}) {' '.join(reason.split())}".rstrip()


def _reason(evaluation: Evaluation) -> str:
    """The one thing to know about a verdict: the first guard that rejected it, the speedup (and SOL score) of a
    pass, or the first clause of its message."""
    from ptxbench.evaluate.judgement.verdict import compared_with

    if evaluation.guards:
        return evaluation.guards[0].detail
    timed = evaluation.timings[0] if evaluation.timings else None
    if evaluation.status is not None and evaluation.status.value == "PASSED" and timed and timed.speedup is not None:
        sol = f", {timed.sol:.2f} of SOL" if timed.sol is not None else ""
        return f"{timed.speedup:.2f}x {compared_with(timed)}{sol}"
    return " ".join(evaluation.message.split("; ", 1)[0].split())


def _timed_honestly(evaluation: Evaluation) -> bool:
    """Its times mean something: correct, and no guard caught it gaming the harness (a kernel that is right but
    skips the required features keeps its times, as the metrics keep it correct)."""
    from ptxbench.records.evaluation import Guard

    return evaluation.correct and all(g.guard is Guard.FEATURE_NOT_EXECUTED for g in evaluation.guards)


def verdict_table(results: list[Evaluation]) -> tuple[Table, list[str]]:
    """``eval``'s table: each candidate's verdict, its speedup over the vendor baseline and its SOL score on the
    timed workload (where it was timed, correct and not caught gaming the harness), then the detail. A task whose
    best baseline is weak has its speedup marked; the returned notes say that its speed verdict is SOL."""
    from ptxbench.results.report.content import weak_baseline_warnings

    weak = weak_baseline_warnings({r.task for r in results})
    table = Table("candidate", "task", "status", Column("speedup", justify="right"), Column("SOL", justify="right"),
                  "detail")
    marked: dict[str, str] = {}
    for result in results:
        timed = result.timings[0] if result.timings and _timed_honestly(result) else None
        speedup = timed.speedup if timed else None
        sol = timed.sol if timed else None
        speed = "—" if speedup is None else f"{speedup:.2f}×"
        if speedup is not None and result.task in weak:
            speed += " ⚠"
            marked[result.task] = weak[result.task]
        detail = result.message
        if result.status is None and result.static is not None:  # no GPU: say what the binary shows
            detail = "static only: " + "; ".join(f"{r.requirement.label} {STAGE_LABEL[r.stage]}"
                                                 for r in result.static.requirements)
        table.add_row(Path(result.candidate).name, result.task, result.verdict, speed,
                      "—" if sol is None else f"{sol:.2f}", detail[:160])
    notes = [f"⚠ {task}: {warning}; its speed verdict is SOL, not the speedup" for task, warning in marked.items()]
    return table, notes


def all_rejected_note(results: list[Evaluation], arch: Arch) -> str | None:
    """One line when every candidate was correct and REJECTED only because its task's required features did
    not execute (the bundled examples, plain CUDA, on a GPU with Nsight Compute): said once, not left for a
    newcomer to infer from a table of REJECTED rows; None otherwise."""
    from ptxbench.records.evaluation import Guard, Status

    if not results or not all(r.status is Status.REJECTED and r.correct and r.guards
                              and all(g.guard is Guard.FEATURE_NOT_EXECUTED for g in r.guards) for r in results):
        return None
    gold = "ptxbench eval --gold" + ("" if arch.value == "sm_90a" else f" --arch {arch.value}")
    return (f"all {len(results)} candidates are correct but REJECTED: none executed the {arch.family.capitalize()} "
            f"({arch.value}) features its task requires (plain CUDA kernels, like the bundled examples, do not); "
            f"`{gold}` evaluates the expert reference kernels, which do")


def _hanging(console: Console, label: str, text: str, *, bold: bool = False, indent: str | None = None) -> None:
    """``label`` then ``text`` wrapped to the console's width at spaces, continuation lines indented under
    the text (or by ``indent``), so a long value reads as one indented paragraph in a pipe as on a terminal."""
    width = max(console.width, len(label) + 20)
    lines = textwrap.wrap(text, width=width, initial_indent=label,
                          subsequent_indent=" " * len(label) if indent is None else indent,
                          break_long_words=False, break_on_hyphens=False) or [label.rstrip()]
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True, style="bold" if bold else None)


_ANONYMOUS = ("(anonymous namespace)::", "<unnamed>::")


def short_kernel_name(demangled: str, *, parameters: bool = False) -> str:
    """A kernel as a reader names it: 'void (anonymous namespace)::ns::k<128, false>(float*, int)' ->
    'ns::k<128, false>' (return type, anonymous namespace and, unless ``parameters``, parameters left out)."""
    text = demangled
    for prefix in _ANONYMOUS:
        text = text.replace(prefix, "")
    head, params = _split_parameters(text)
    short = _without_return_type(head)
    return short + params if parameters else short


def short_kernel_names(demangled: list[str]) -> list[str]:
    """Each kernel's short name, still unique within the list: overloads that differ only in their
    parameters keep them, and names that are still equal are numbered."""
    short = [short_kernel_name(name) for name in demangled]
    named = [short_kernel_name(full, parameters=True) if short.count(name) > 1 else name
             for name, full in zip(short, demangled)]
    seen: dict[str, int] = {}
    unique = []
    for name in named:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if named.count(name) == 1 else f"{name} #{seen[name]}")
    return unique


def _split_parameters(name: str) -> tuple[str, str]:
    """'ns::k<1>(float*, int)' -> ('ns::k<1>', '(float*, int)'): the trailing parameter list, if any."""
    text = name.rstrip()
    if not text.endswith(")"):
        return text, ""
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        if text[index] == ")":
            depth += 1
        elif text[index] == "(":
            depth -= 1
            if depth == 0:
                return text[:index], text[index:]
    return text, ""


def _without_return_type(head: str) -> str:
    """'void ns::k<128, false>' -> 'ns::k<128, false>': what follows the last space outside <> and ()."""
    depth, cut = 0, 0
    for index, char in enumerate(head):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == " " and depth == 0:
            cut = index + 1
    return head[cut:]
