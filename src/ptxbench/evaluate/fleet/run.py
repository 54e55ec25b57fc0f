"""``ptxbench eval``: evaluate candidate files, a directory of them, or the candidates of a generation
run, into a resumable run directory; ``--regrade`` recomputes verdicts from the stored evidence.

Every chosen GPU evaluates at once from one shared queue (``scheduler``): the GPUs of this machine,
one host process each (``pool``), or every GPU of a Ray cluster (``ray_backend``). Candidates are
built on the CPU cores ahead of the GPUs. This process alone writes the run directory, each file
atomically and ``result.json`` last, so a stopped run resumes under either backend: the backend and
the GPUs are recorded in the header's environment, not in its configuration.

On a machine without a GPU the run still builds and reads the binaries, and records what the build
decides (``static_only``): COMPILE_ERROR, REJECTED for a linked library, else an infrastructure failure
(NO_GPU) with the static report, never a candidate failure. A resumed run that has GPUs re-evaluates items
stored as infrastructure failures; it skips every other result.

Every sample of a generation run is an item, also one whose answer held no code: it is recorded with its
extraction failure (nothing to build), so ``eval`` of a ``generate`` run counts the same samples as ``run``
does, and each item carries the generation run's labels (model, provider, context, sample).

Candidate code may write the run directory (same user, no read-only mount). The driver writes and reads
it through a ``RunLedger`` that keeps every such file's text in memory; once the GPU hosts are closed it
rewrites the files that changed, moves files it did not write (under ``items/`` or beside ``run.json``)
into ``quarantine/``, and logs a warning naming them, before the results are returned. Results of an
earlier run that is resumed are read as they are: this in-run guarantee is what holds without OS
protection.

A stored result is reused only for the question it answered: the same source (its SHA-256, as built), task
(its content hash), arch and options (``Judged``, recorded with every result). Another source under the same
item name (an edited file, a file of the same name from another folder), a changed task or a damaged record is
evaluated again, and the earlier item is set aside under ``superseded/``, never silently replaced; a
``Resumption`` counts what was reused and what was evaluated again, and why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from ptxbench.arch.registry import Arch
from ptxbench.check import build_request, check_source, read_candidate
from ptxbench.errors import CandidateError, PtxbenchError, TaskError, UnreadableCandidate
from ptxbench.evaluate.evaluator import HANDLER, EvalOptions
from ptxbench.evaluate.fleet.gpu_host import HostJob, HostOutcome, HostSpec
from ptxbench.evaluate.fleet.scheduler import Job, SerialSlot, schedule, start_slots
from ptxbench.evaluate.judgement.static_only import static_verdict
from ptxbench.evaluate.judgement.verdict import decide
from ptxbench.records.completion import ExtractionStatus
from ptxbench.records.evaluation import Evaluation, Generation, InfraFailure, Judged
from ptxbench.records.rundir import (
    HEADER_FILE,
    RESULT_FILE,
    RUN_LOCAL_OPTIONS,
    SUPERSEDED_DIR,
    Result,
    RunAudit,
    RunDir,
    RunDirError,
    RunHeader,
    RunLedger,
    load_result,
)
from ptxbench.records.trajectory import ItemResult
from ptxbench.tasks.model import Task
from ptxbench.toolchain.compile import build_many
from ptxbench.toolchain.discover import find_toolchain
from ptxbench.toolchain.tools import driver_version


class Candidate(BaseModel):
    """One thing to evaluate: its task, its source, and the item name it is stored under. A sample whose
    answer held no code is a candidate too, with ``extraction`` saying why and no source."""

    task: Task
    item: str
    source: str
    origin: str
    extraction: ExtractionStatus | None = Field(default=None, description="Why there is no source (None: there is)")
    notes: list[str] = Field(default_factory=list, description="What extraction noticed")
    generation: Generation | None = Field(default=None, description="The labels of the run that sampled it")


def candidates_from_run(path: Path) -> list[Candidate]:
    """Every sample of a `generate`/`run` directory: its final candidate (the last turn with code), or,
    where no turn had code, the last turn's extraction failure, so that no sample drops out of a count."""
    from ptxbench.tasks.loader import get_task

    rundir = RunDir.load(path)
    if rundir.header.kind == "eval":
        raise PtxbenchError(f"{path} is an eval run directory: it holds evaluations, not generated candidates. eval "
                            "takes candidate files or folders, a generate or run directory, or a generations .jsonl; "
                            f"to recompute this run's verdicts from its evidence: ptxbench eval {path} --regrade")
    model = rundir.header.config.get("model")
    found = []
    for result_file in rundir.results():
        record = load_result(result_file, rundir.header)
        assert isinstance(record, ItemResult)  # not an eval run: refused above
        final = next((t for t in reversed(record.turns) if t.extraction.ok), record.turns[-1])
        labels = Generation(run=rundir.path.name, model=model, provider=_provider(model),
                            condition=record.context.value, sample=record.sample, turn=final.turn)
        found.append(Candidate(task=get_task(record.task), item=result_file.parent.name,
                               source=final.extraction.source, origin=str(result_file.parent),
                               extraction=None if final.extraction.ok else final.extraction.status,
                               notes=final.extraction.notes, generation=labels))
    return found


def _provider(model: str | None) -> str | None:
    return model.partition(":")[0] if model else None


def is_eval_run(path: Path) -> bool:
    """Whether ``path`` is a run directory that ``ptxbench eval`` wrote (its items hold evaluations)."""
    return (path / HEADER_FILE).is_file() and RunDir.load(path).header.kind == "eval"


def candidates_from_eval_run(path: Path, given: list[Task] | None = None) -> list[Candidate]:
    """The candidates an eval run directory stored, each under its own item, with the labels and the
    extraction failure (a sample without code) they were evaluated with: what ``eval RUN --regrade``
    recomputes in place. A damaged item is left out with a warning naming it; the others are regraded.
    A task that is not bundled (an imported task file) is taken from ``given`` (``--task FILE``)."""
    from ptxbench.tasks.loader import get_task

    by_id = {task.id: task for task in given or []}

    def task_of(task_id: str) -> Task:
        if task_id in by_id:
            return by_id[task_id]
        try:
            return get_task(task_id)
        except TaskError as exc:
            raise TaskError(f"the run's items of task {task_id!r} need its task file, which is not bundled: "
                            f"give it with --task FILE.toml") from exc

    found = []
    rundir = RunDir.load(path)
    for result_file in rundir.results():
        try:
            evaluation = _evaluation(load_result(result_file, rundir.header), result_file)
        except RunDirError as exc:
            log.warning("warning: %s: left as it is", exc)
            continue
        folder = result_file.parent
        source_file = folder / "candidate.cu"
        found.append(Candidate(task=task_of(evaluation.task), item=folder.name,
                               source=source_file.read_text() if source_file.is_file() else "",
                               origin=evaluation.candidate, extraction=evaluation.extraction,
                               generation=evaluation.generation))
    return found


def candidate_from_file(path: Path, task: Task) -> Candidate:
    """The file as a candidate. A file whose content holds none (empty, not text, unreadable) is a candidate
    without code, the reason in its notes: its own failed item, beside the other files given with it."""
    try:
        source = read_candidate(path)
    except UnreadableCandidate as exc:
        status = ExtractionStatus.EMPTY if exc.empty else ExtractionStatus.NO_CODE
        return Candidate(task=task, item=path.stem, source="", origin=str(path), extraction=status, notes=[str(exc)])
    return Candidate(task=task, item=path.stem, source=source, origin=str(path))


def gpu_available() -> bool:
    from ptxbench.evaluate.fleet.pool import cuda_driver_present

    if not cuda_driver_present():  # no GPU, known without importing torch
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _static_only(candidate: Candidate, arch: Arch) -> Evaluation:
    """Without a GPU: what the build alone decides, else NO_GPU, the harness's, with the static report."""
    report = check_source(candidate.source, arch, candidate.task, candidate.origin)
    return static_verdict(report, candidate.task.content_hash, candidate.generation)


def _without_code(candidate: Candidate, arch: Arch) -> Evaluation:
    """A sample whose answer held no candidate: the model's extraction failure, with nothing built."""
    kind = candidate.extraction.value.replace("_", " ") if candidate.extraction else "none"
    return Evaluation(candidate=candidate.origin, task=candidate.task.id, task_hash=candidate.task.content_hash,
                      arch=arch, extraction=candidate.extraction, generation=candidate.generation,
                      message="; ".join(candidate.notes) or f"the answer held no candidate: {kind}")


# Options recorded in a field of their own (``Evaluation.evidence``, ``RunHeader.evidence``), not among the options:
# results and headers written before profiles existed then read as the same question under ``publish``.
RECORDED_APART = frozenset({"evidence"})


def _recorded_options(options: EvalOptions) -> dict:
    return options.model_dump(exclude=set(RUN_LOCAL_OPTIONS | RECORDED_APART))


def judged(candidate: Candidate, options: EvalOptions) -> Judged:
    """What evaluating ``candidate`` with ``options`` judges (with its task's hash and the arch): the question
    its stored result answers."""
    return Judged(source_sha256=hashlib.sha256(candidate.source.encode()).hexdigest(),
                  options=_recorded_options(options))


def _attributed(candidate: Candidate, evaluation: Evaluation, options: EvalOptions) -> Evaluation:
    """The evaluation with what the driver knows and a GPU host does not: what was judged, and the labels of
    the run that sampled the candidate."""
    update: dict[str, object] = {"judged": judged(candidate, options), "evidence": options.evidence}
    if candidate.generation is not None and evaluation.generation is None:
        update["generation"] = candidate.generation
    return evaluation.model_copy(update=update)


def _distinct(candidates: list[Candidate]) -> None:
    """Two different candidates stored under one item would leave one out of every count: refused."""
    seen: dict[tuple[str, str], str] = {}
    for candidate in candidates:
        key = (candidate.task.id, candidate.item)
        earlier = seen.setdefault(key, candidate.origin)
        if earlier != candidate.origin:
            raise CandidateError(f"{earlier} and {candidate.origin} would both be stored as items/{key[0]}/{key[1]}: "
                                 "evaluate them into separate --out directories")


Backend = Literal["local", "ray"]
PLACEMENT_FILE = "placement.json"


class GpusRetired(PtxbenchError):
    """Every GPU was retired before the run finished. Every result computed is in the run directory, and
    ``results`` holds them all, the unfinished items as infrastructure failures."""

    def __init__(self, message: str, results: list[Evaluation]) -> None:
        super().__init__(message)
        self.results = results


def evaluate_candidates(candidates: list[Candidate], arch: Arch, out: Path | str, options: EvalOptions | None = None,
                        *, regrade: bool = False, device: int | None = None,
                        on_done: Callable[[Evaluation], None] | None = None, gpus: Sequence[int] | None = None,
                        backend: Backend = "local", address: str | None = None, handler: str = HANDLER,
                        reference_device: str = "cuda", resumption: Resumption | None = None) -> list[Evaluation]:
    """Evaluate ``candidates`` into the run directory ``out`` and return their evaluations in order.

    ``gpus``: the local GPUs to use, as CUDA numbers them here (default: every visible one; ``device``
    is the older one-GPU form). ``backend="ray"`` uses every GPU of the Ray cluster at ``address``
    (None starts one on this machine). ``handler`` and ``reference_device`` are the GPU side's
    stand-ins for tests, as in ``GpuEvaluator``. ``resumption`` hears what was done with the results already
    stored (reused, or evaluated again and why). Raises ``GpusRetired`` once everything is recorded if every GPU
    was retired.
    """
    options = options or EvalOptions()
    _distinct(candidates)
    spec = HostSpec(options=options, handler=handler, reference_device=reference_device)
    if regrade:
        return _regrade(candidates, RunDir.load(out), on_done)
    connected = False
    from ptxbench.evaluate.isolation.confinement import name_protected_paths
    from ptxbench.paths import cache_root

    restore_protected = name_protected_paths([Path(out), cache_root()])  # read-only to candidates
    try:
        if backend == "ray":
            from ptxbench.evaluate.fleet.ray_backend import connect, ray_slots

            connected = connect(address)
            slots: list[SerialSlot] = list(ray_slots(spec))
        else:
            from ptxbench.evaluate.fleet.pool import local_slots, visible_gpu_count

            chosen = list(gpus) if gpus is not None else [device] if device is not None else list(range(visible_gpu_count()))
            slots = list(local_slots(chosen, spec))
        if not slots:
            _prebuild(candidates, arch)
            return _build_only(candidates, arch, RunDir.open(out, _header(arch, options, {"gpu": None})), options,
                               on_done, resumption)
        return _on_gpus(candidates, arch, out, options, slots, backend, on_done, resumption)
    finally:
        restore_protected()
        if connected:
            from ptxbench.evaluate.fleet.ray_backend import disconnect

            disconnect()


def _header(arch: Arch, options: EvalOptions, environment: dict) -> RunHeader:
    toolchain = {name: tool.version for name, tool in find_toolchain().tools.items()}
    return RunHeader(kind="eval", toolchain=toolchain, environment=environment,
                     config={"arch": arch.value, "options": _recorded_options(options)}, evidence=options.evidence)


def _prebuild(candidates: list[Candidate], arch: Arch) -> None:
    """Every core compiles ahead in the background; the evaluator then finds its build in the cache."""
    requests = [build_request(c.source, arch, c.task) for c in candidates if c.extraction is None]
    threading.Thread(target=build_many, args=(requests,), daemon=True).start()


log = logging.getLogger(__name__)


def _evaluation(result: Result, file: Path) -> Evaluation:
    """An eval run's result is an evaluation; another run's (a trajectory) is refused, naming its run."""
    if not isinstance(result, Evaluation):
        raise RunDirError(f"{file} is a generated item's trajectory, not an evaluation: {file.parents[3]} is not an "
                          "eval run directory; evaluate into another --out")
    return result


INFRA_AGAIN = "infrastructure failure"
"""Why a stored result of the same question is evaluated again where GPUs are: the harness could not judge it."""
DAMAGED = "stored result damaged"


class Stored(NamedTuple):
    """What an item's stored result is worth to a candidate now: the answer (``evaluation``), or why it is
    evaluated again (``again``); both None where nothing is stored."""

    evaluation: Evaluation | None
    again: str | None


def _why_again(stored: Evaluation, candidate: Candidate, arch: Arch, options: EvalOptions,
               stored_source: str | None) -> str | None:
    """Why ``stored`` does not answer ``candidate``'s question (None: it does). A record written before results
    said what they judged (``judged`` None) is told by the item's ``candidate.cu`` (``stored_source``)."""
    if stored.task_hash != candidate.task.content_hash:
        return "task changed"
    if stored.arch is not arch:
        return "arch changed"
    if stored.extraction != candidate.extraction:
        return "source changed"
    if stored.evidence is not options.evidence:
        return "evidence profile changed"
    if stored.judged is None:
        return "source changed" if candidate.extraction is None and stored_source != candidate.source else None
    now = judged(candidate, options)
    if stored.judged.source_sha256 != now.source_sha256:
        return "source changed"
    return "options changed" if stored.judged.options != now.options else None


def _stored_answer(rundir: RunDir, candidate: Candidate, arch: Arch, options: EvalOptions,
                   ledger: RunLedger | None, *, on_gpus: bool) -> Stored:
    """The item's stored result where it stands as the answer (a resumed run, a repeated submission): one of the
    same question, always without GPUs, on GPUs unless it is an infrastructure failure. Read through ``ledger``,
    the texts read are the ones kept for this run."""
    folder = rundir.item(candidate.task.id, candidate.item)
    record = folder / RESULT_FILE
    if not record.is_file():
        return Stored(None, None)
    read = ledger.read_text if ledger else Path.read_text
    try:
        stored = _evaluation(load_result(record, rundir.header, read), record)
    except RunDirError as exc:
        log.warning("warning: %s: the item is evaluated again", exc)
        return Stored(None, DAMAGED)
    source_file = folder / "candidate.cu"
    stored_source = read(source_file) if stored.judged is None and source_file.is_file() else None
    again = _why_again(stored, candidate, arch, options, stored_source)
    if again is None and on_gpus and stored.infra_failure is not None:
        again = INFRA_AGAIN
    return Stored(None, again) if again else Stored(stored, None)


@dataclass
class Resumption:
    """What a run did with the results stored under its candidates' names: how many it reused, how many it
    evaluated again and why, and where the earlier items it set aside went (relative to the run)."""

    reused: int = 0
    again: Counter[str] = field(default_factory=Counter)
    set_aside: list[str] = field(default_factory=list)

    def summary(self) -> str | None:
        """``3 stored results reused, 1 re-evaluated: source changed``; None where nothing was stored."""
        if not self.reused and not self.again:
            return None
        parts = [f"{self.reused} stored result{'' if self.reused == 1 else 's'} reused"]
        parts += [f"{count} re-evaluated: {why}" for why, count in sorted(self.again.items())]
        kept = f" (the earlier items kept under {SUPERSEDED_DIR}/)" if self.set_aside else ""
        return ", ".join(parts) + kept


def _reusable(rundir: RunDir, candidate: Candidate, arch: Arch, options: EvalOptions, ledger: RunLedger, *,
              on_gpus: bool, resumption: Resumption | None) -> Evaluation | None:
    """The stored answer to ``candidate`` (``_stored_answer``), else None with the stored item, if it answered
    another question or is damaged, set aside; counted in ``resumption``."""
    stored = _stored_answer(rundir, candidate, arch, options, ledger, on_gpus=on_gpus)
    if stored.again is not None and stored.again != INFRA_AGAIN:
        place = ledger.set_aside(rundir.item(candidate.task.id, candidate.item), stored.again)
        if resumption is not None:
            resumption.set_aside.append(place)
    if resumption is not None:
        if stored.evaluation is not None:
            resumption.reused += 1
        elif stored.again is not None:
            resumption.again[stored.again] += 1
    return stored.evaluation


def _record(ledger: RunLedger, candidate: Candidate, evaluation: Evaluation, placement: dict | None = None) -> None:
    """The item's files, ``result.json`` last: its presence marks the item done."""
    folder = ledger.rundir.item(candidate.task.id, candidate.item)
    if candidate.extraction is None:
        ledger.write_text(folder / "candidate.cu", candidate.source)
    if evaluation.build is not None:
        ledger.write_text(folder / "build.log", evaluation.build.log)
    if placement is not None:
        ledger.write_text(folder / PLACEMENT_FILE, json.dumps(placement, indent=1) + "\n")
    ledger.write_model(folder / RESULT_FILE, evaluation)


def _audit(ledger: RunLedger) -> RunAudit:
    """Undo and report what was changed in the run directory behind the driver's back."""
    audit = ledger.audit()
    if not audit.clean:
        log.warning("%s (in %s)", audit.summary(), ledger.rundir.path)
    return audit


def _regrade(candidates: list[Candidate], rundir: RunDir,
             on_done: Callable[[Evaluation], None] | None) -> list[Evaluation]:
    """``--regrade``: every stored verdict recomputed from its stored evidence, in place; nothing runs."""
    results: list[Evaluation] = []
    ledger = RunLedger(rundir)
    for candidate in candidates:
        record = rundir.item(candidate.task.id, candidate.item) / RESULT_FILE
        evaluation = _evaluation(load_result(record, rundir.header, ledger.read_text), record)
        if evaluation.status is not None:
            evaluation = Evaluation.model_validate({**evaluation.model_dump(), "status": decide(evaluation)})
            ledger.write_model(record, evaluation)
        results.append(evaluation)
        if on_done:
            on_done(evaluation)
    _audit(ledger)
    return results


def _build_only(candidates: list[Candidate], arch: Arch, rundir: RunDir, options: EvalOptions,
                on_done: Callable[[Evaluation], None] | None, resumption: Resumption | None) -> list[Evaluation]:
    """No GPU: each candidate built and read, recorded with what the build decides (``static_only``)."""
    ledger = RunLedger(rundir)
    results = _Results(candidates, ledger, on_done, arch, options, resumption)
    try:
        for index in results.to_evaluate(on_gpus=False, without_code_placement=None):
            results.finish(index, _static_only(candidates[index], arch), None)
    finally:
        _audit(ledger)
    return results.ordered()


Elsewhere = Callable[[list[Candidate]], Iterator[tuple[int, Evaluation, dict]]]
"""Evaluates candidates somewhere else (a ``ptxbench serve``), yielding (position in the list given, evaluation,
placement) for each as it finishes."""


def evaluate_elsewhere(candidates: list[Candidate], arch: Arch, out: Path | str, options: EvalOptions,
                       evaluate: Elsewhere, environment: dict, *, on_gpus: bool = True,
                       on_done: Callable[[Evaluation], None] | None = None,
                       resumption: Resumption | None = None) -> list[Evaluation]:
    """Evaluate ``candidates`` through ``evaluate`` into the run directory ``out``, recorded as this module
    records a local evaluation: the items already done are not sent again (nor, where the other side has no
    GPU, ``on_gpus`` False, those stored as infrastructure failures), an answer without code is recorded here,
    and each result is written as it comes (``result.json`` last), so a stopped run resumes. ``environment``
    (where they were evaluated) goes into a new run's header."""
    _distinct(candidates)
    ledger = RunLedger(RunDir.open(out, _header(arch, options, environment)))
    results = _Results(candidates, ledger, on_done, arch, options, resumption)
    try:
        sent = results.to_evaluate(on_gpus=on_gpus, without_code_placement=None)
        for position, evaluation, placement in evaluate([candidates[i] for i in sent]):
            results.finish(sent[position], evaluation, placement)
    finally:
        _audit(ledger)
    return results.ordered()


class _Results:
    """One run's results by position, recorded as they come (an item's files, ``result.json`` last) and heard by
    ``on_done``; the same candidate given twice is one item (``_distinct``), evaluated once."""

    def __init__(self, candidates: list[Candidate], ledger: RunLedger, on_done: Callable[[Evaluation], None] | None,
                 arch: Arch, options: EvalOptions, resumption: Resumption | None) -> None:
        self.candidates, self.ledger, self.on_done = candidates, ledger, on_done
        self.arch, self.options, self.resumption = arch, options, resumption
        self.by_index: dict[int, Evaluation] = {}
        self.first_of: dict[Path, int] = {}

    def to_evaluate(self, *, on_gpus: bool, without_code_placement: dict | None) -> list[int]:
        """The positions still to evaluate, each item once: a stored answer to the same question is kept (one of
        the harness's infrastructure failures only where the other side has no GPU, ``on_gpus`` False), an
        answer without code is recorded here."""
        rundir = self.ledger.rundir
        pending: list[int] = []
        for index, candidate in enumerate(self.candidates):
            folder = rundir.item(candidate.task.id, candidate.item)
            if folder in self.first_of:
                continue
            self.first_of[folder] = index
            stored = _reusable(rundir, candidate, self.arch, self.options, self.ledger, on_gpus=on_gpus,
                               resumption=self.resumption)
            if stored is not None:
                self._keep(index, stored)
            elif candidate.extraction is not None:  # nothing to build or run
                self.finish(index, _without_code(candidate, self.arch), without_code_placement)
            else:
                pending.append(index)
        return pending

    def finish(self, index: int, evaluation: Evaluation, placement: dict | None) -> None:
        evaluation = _attributed(self.candidates[index], evaluation, self.options)
        _record(self.ledger, self.candidates[index], evaluation, placement)
        self._keep(index, evaluation)

    def _keep(self, index: int, evaluation: Evaluation) -> None:
        self.by_index[index] = evaluation
        if self.on_done:
            self.on_done(evaluation)

    def ordered(self) -> list[Evaluation]:
        """Every candidate's result, in the order given (a repeated one shares its first's)."""
        rundir = self.ledger.rundir
        return [self.by_index[self.first_of[rundir.item(c.task.id, c.item)]] for c in self.candidates]


def gpu_environment(devices: dict[str, dict], retired: dict[str, str], backend: str) -> dict:
    """A run header's environment for runs on GPUs: the first GPU's description, the driver, every GPU, and
    those retired as they started."""
    described = list(devices.values())
    return {**(described[0] if described else {"gpu": None}), "driver": driver_version(), "backend": backend,
            "gpus": described, "retired_at_start": dict(retired)}


def _on_gpus(candidates: list[Candidate], arch: Arch, out: Path | str, options: EvalOptions, slots: list[SerialSlot],
             backend: Backend, on_done: Callable[[Evaluation], None] | None,
             resumption: Resumption | None) -> list[Evaluation]:
    if backend == "local":  # builds run while the GPUs open; a Ray node builds for itself
        find_toolchain().path("nvcc")  # a missing compiler is said once, not found as a fault on every GPU
        previous = RunDir.load(out) if (Path(out) / HEADER_FILE).is_file() else None
        _prebuild([c for c in candidates if previous is None
                   or _stored_answer(previous, c, arch, options, None, on_gpus=True).evaluation is None], arch)
    ledger: RunLedger | None = None
    try:
        started = start_slots(slots)
        rundir = RunDir.open(out, _header(arch, options, gpu_environment(started.devices, started.retired, backend)))
        ledger = RunLedger(rundir)
        results = _Results(candidates, ledger, on_done, arch, options, resumption)
        jobs = [Job(index, HostJob(task=candidates[index].task, arch=arch, source=candidates[index].source,
                                   origin=candidates[index].origin))
                for index in results.to_evaluate(on_gpus=True,
                                                 without_code_placement={"backend": backend, "slot": None})]
        no_gpu_left: list[int] = []

        def on_result(job: Job, outcome: HostOutcome, slot: str) -> None:
            assert outcome.evaluation is not None
            results.finish(job.index, outcome.evaluation, {"backend": backend, "slot": slot,
                                                           "seconds": outcome.seconds, "where": outcome.where,
                                                           "interrupted_by": job.faults})

        def on_give_up(job: Job, failure: InfraFailure, reason: str) -> None:
            candidate = candidates[job.index]
            if failure is InfraFailure.NO_GPU:
                no_gpu_left.append(job.index)
            results.finish(job.index, Evaluation(candidate=candidate.origin, task=candidate.task.id,
                                                 task_hash=candidate.task.content_hash, arch=arch,
                                                 infra_failure=failure, message=reason),
                           {"backend": backend, "slot": None, "interrupted_by": job.faults})

        retired = schedule(jobs, started, on_result=on_result, on_give_up=on_give_up)
    finally:
        for slot in slots:
            slot.close()
        if ledger is not None:  # every host is closed: no candidate code runs any more (also when stopped)
            _audit(ledger)
    ordered = results.ordered()
    if no_gpu_left:
        reasons = "; ".join(f"GPU {name}: {why}" for name, why in retired.items())
        raise GpusRetired(f"every GPU was retired ({reasons}); {len(no_gpu_left)} candidate(s) not evaluated are "
                          f"recorded as infrastructure failures (NO_GPU) in {out}, and every result computed before "
                          "is kept; rerun the same command once the GPUs work to evaluate only those", ordered)
    return ordered
