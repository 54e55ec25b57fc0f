"""``ptxbench eval``: evaluate candidate files, a directory of them, or the candidates of a generation
run, into a resumable run directory; ``--regrade`` recomputes verdicts from the stored evidence.

Candidates are built on every CPU core in the background while the GPU evaluates, one at a time, in
a fresh worker process each. On a machine without a GPU the run still builds and reads the binaries,
and records an infrastructure failure (NO_GPU) with the static report, never a candidate failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from ptxbench._io import write_atomic
from ptxbench.arch.registry import Arch
from ptxbench.check import build_request, check_source, read_candidate
from ptxbench.evaluate.evaluator import EvalOptions, GpuEvaluator
from ptxbench.evaluate.status import Evaluation, InfraFailure
from ptxbench.evaluate.verdict import decide
from ptxbench.results.rundir import RESULT_FILE, RunDir, RunHeader, write_model
from ptxbench.tasks.model import Task
from ptxbench.toolchain.compile import build_many
from ptxbench.toolchain.discover import find_toolchain


class Candidate(BaseModel):
    """One thing to evaluate: its task, its source, and the item name it is stored under."""

    task: Task
    item: str
    source: str
    origin: str


def candidates_from_run(path: Path) -> list[Candidate]:
    """The final candidate of every item of a `generate`/`run` directory."""
    from ptxbench.llm.run import ItemResult
    from ptxbench.tasks.loader import get_task

    found = []
    for result_file in RunDir.load(path).results():
        record = ItemResult.model_validate_json(result_file.read_text())
        source = record.final_source
        if source is not None:
            found.append(Candidate(task=get_task(record.task), item=f"sample_{record.sample:03d}", source=source,
                                   origin=str(result_file.parent)))
    return found


def candidates_from_generations(path: Path) -> list[Candidate]:
    """Completions made elsewhere, one JSON object per line with ``task``, ``completion`` and optionally
    ``sample`` (the replay provider's format); a line with no usable code is skipped with its reason."""
    import json

    from ptxbench.errors import CandidateError
    from ptxbench.llm.extract import extract_candidate
    from ptxbench.tasks.loader import get_task

    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            task = get_task(record["task"])
            text = record["completion"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise CandidateError(f"{path}:{number}: not a generation record ({exc})") from None
        extraction = extract_candidate(text, task.entry_point)
        if extraction.ok:
            found.append(Candidate(task=task, item=f"sample_{int(record.get('sample', number - 1)):03d}",
                                   source=extraction.source, origin=f"{path}:{number}"))
    return found


def candidate_from_file(path: Path, task: Task) -> Candidate:
    return Candidate(task=task, item=path.stem, source=read_candidate(path), origin=str(path))


def gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _driver_version() -> str | None:
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=30).stdout.strip()
    return out.splitlines()[0] if out else None


def _static_only(candidate: Candidate, arch: Arch) -> Evaluation:
    report = check_source(candidate.source, arch, candidate.task, candidate.origin)
    return Evaluation(candidate=candidate.origin, task=candidate.task.id, task_hash=candidate.task.content_hash,
                      arch=arch, infra_failure=InfraFailure.NO_GPU, build=report.build, static=report.static,
                      message="no CUDA GPU visible: built and read statically only; not run")


def evaluate_candidates(candidates: list[Candidate], arch: Arch, out: Path | str, options: EvalOptions | None = None,
                        *, regrade: bool = False, device: int | None = None,
                        on_done: Callable[[Evaluation], None] | None = None) -> list[Evaluation]:
    options = options or EvalOptions()
    prebuild = threading.Thread(target=build_many, args=([build_request(c.source, arch, c.task) for c in candidates],),
                                daemon=True)
    prebuild.start()  # every core compiles ahead while the GPU works through the list
    evaluator = GpuEvaluator(options, device) if gpu_available() and not regrade else None
    toolchain = {name: tool.version for name, tool in find_toolchain().tools.items()}
    environment = {**evaluator.device(), "driver": _driver_version()} if evaluator is not None else {"gpu": None}
    header = RunHeader(kind="eval", toolchain=toolchain, environment=environment,
                       config={"arch": arch.value, "options": options.model_dump()})
    rundir = RunDir.open(out, header) if not regrade else RunDir.load(out)
    results: list[Evaluation] = []
    try:
        for candidate in candidates:
            folder = rundir.item(candidate.task.id, candidate.item)
            record = folder / RESULT_FILE
            if record.is_file():
                evaluation = Evaluation.model_validate_json(record.read_text())
                if regrade and evaluation.status is not None:
                    evaluation = Evaluation.model_validate(
                        {**evaluation.model_dump(), "status": decide(evaluation)})
                    write_model(record, evaluation)
            else:
                write_atomic(folder / "candidate.cu", candidate.source)
                evaluation = evaluator.evaluate(candidate.task, arch, candidate.source, candidate.origin) \
                    if evaluator is not None else _static_only(candidate, arch)
                if evaluation.build is not None:
                    write_atomic(folder / "build.log", evaluation.build.log)
                write_model(record, evaluation)
            results.append(evaluation)
            if on_done:
                on_done(evaluation)
    finally:
        if evaluator is not None:
            evaluator.close()
    return results
