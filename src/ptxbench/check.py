"""``ptxbench check``: build a candidate for one target and report what its binary contains.

This is the CPU half of evaluation: no GPU is touched. With a task, the candidate is built against
the task's generated header and every requirement is traced through source → PTX → SASS; without
one, every registry feature found is listed per kernel.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ptxbench.arch.registry import Arch
from ptxbench.context.wrappers import inline_wrapper_header
from ptxbench.contract.signature import HEADER_NAME, header
from ptxbench.errors import CandidateError, UnreadableCandidate
from ptxbench.records.build import BuildResult
from ptxbench.records.check import CheckReport
from ptxbench.static.report import static_report
from ptxbench.static.sass import kernel_names
from ptxbench.tasks.model import Task
from ptxbench.toolchain.compile import DEFAULT_TIMEOUT_S, BuildRequest, build, build_many
from ptxbench.toolchain.tools import demangle, disassemble

CANDIDATE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc")


def read_candidate(path: Path | str, *, to_compile: bool = True) -> str:
    """The candidate file's text as the harness compiles it (the wrapper header inlined); with
    ``to_compile=False``, as it is shown (a one-shot example), without the ``#line`` directives."""
    path = Path(path)
    if path.suffix not in CANDIDATE_SUFFIXES:
        raise CandidateError(f"{path}: a candidate is one CUDA C++ file ({', '.join(CANDIDATE_SUFFIXES)})")
    not_text = UnreadableCandidate(f"{path}: not a text file (a candidate is one CUDA C++ source)")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise not_text from None
    except OSError as exc:
        raise UnreadableCandidate(f"cannot read candidate {path}: {exc.strerror or exc}") from None
    if "\0" in source:  # valid UTF-8 but with NUL bytes: still an object file, an archive, an image
        raise not_text
    if not source.strip():
        raise UnreadableCandidate(f"{path}: the file is empty", empty=True)
    return inline_wrapper_header(source, line_directives=to_compile)


def build_request(source: str, arch: Arch, task: Task | None, name: str = "candidate") -> BuildRequest:
    return BuildRequest(source=source, arch=arch, name=name,
                        header=header(task) if task else None, header_name=HEADER_NAME,
                        entry_point=task.entry_point if task else None)


def report_for(path: str, source: str, arch: Arch, task: Task | None, result: BuildResult,
               started: float) -> CheckReport:
    static = None
    cubin, ptx, shared_object = result.artifact(".cubin"), result.artifact(".ptx"), result.artifact(".so")
    if result.ok and cubin is not None and ptx is not None:
        sass = disassemble(cubin)
        static = static_report(source, arch, ptx.read_text(), sass, result.log, demangled=demangle(kernel_names(sass)),
                               shared_object=shared_object.read_bytes() if shared_object else None, task=task)
    if Path(path).suffix in CANDIDATE_SUFFIXES:  # a file of the user's: the compiler's messages name it
        result = result.named(path)
    return CheckReport(candidate=path, source_sha256=hashlib.sha256(source.encode()).hexdigest(), arch=arch,
                       task=task.id if task else None, build=result, static=static,
                       duration_s=time.monotonic() - started)


def check_source(source: str, arch: Arch, task: Task | None = None, name: str = "candidate.cu", *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, cache_dir: Path | None = None,
                 use_cache: bool = True) -> CheckReport:
    """Build ``source`` and read its binary: the static path every evaluator starts from. The wrapper header's
    ``#include`` is pasted in here (idempotent: a file ``read_candidate`` read already has it), so a model's
    answer graded by ``run``, the same answer saved and given to ``eval``, and a server's job build alike."""
    started = time.monotonic()
    source = inline_wrapper_header(source)
    result = build(build_request(source, arch, task), cache_dir=cache_dir, timeout_s=timeout_s, use_cache=use_cache)
    return report_for(name, source, arch, task, result, started)


def check_file(path: Path | str, arch: Arch, task: Task | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               cache_dir: Path | None = None, use_cache: bool = True) -> CheckReport:
    return check_source(read_candidate(path), arch, task, str(path), timeout_s=timeout_s, cache_dir=cache_dir,
                        use_cache=use_cache)


def check_files(items: list[tuple[Path, Task | None]], arch: Arch, *, jobs: int | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S, cache_dir: Path | None = None,
                use_cache: bool = True) -> list[CheckReport]:
    """Check several candidates, building them in parallel."""
    started = time.monotonic()
    sources = [read_candidate(path) for path, _ in items]
    requests = [build_request(src, arch, task) for src, (_, task) in zip(sources, items)]
    results = build_many(requests, jobs=jobs, timeout_s=timeout_s, cache_dir=cache_dir, use_cache=use_cache)
    return [report_for(str(path), src, arch, task, result, started)
            for (path, task), src, result in zip(items, sources, results)]
