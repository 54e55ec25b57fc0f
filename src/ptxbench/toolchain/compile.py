"""Build a candidate with harness-owned flags: a shared object for ctypes, plus its PTX and cubin.

One nvcc call (``--keep``) yields all three, so the static report reads exactly what will run. Builds
run in a subprocess with a time limit, are cached by a content hash of everything that affects the
output, and can run several at once (``compile_many``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from ptxbench._io import write_atomic
from ptxbench.arch.registry import Arch
from ptxbench.toolchain.diagnose import CompileFailure, Diagnosis, diagnose
from ptxbench.toolchain.discover import find_toolchain

COMPILE_RESULT_VERSION = 1
DEFAULT_TIMEOUT_S = 120.0

# Harness-owned flags. The candidate chooses none of them: no libraries, no -arch shorthand.
BASE_FLAGS = ("-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo", "-cudart", "shared",
              "-Xptxas", "-v", "-Xptxas", "-warn-spills", "-Xptxas", "-warn-lmem-usage")


class BuildRequest(BaseModel):
    """What to build: the candidate's source text, the target, and an optional force-included header."""

    source: str
    arch: Arch
    header: str | None = None
    header_name: str = "ptxbench_task.h"
    entry_point: str | None = Field(default=None, description="Symbol the shared object must export.")
    name: str = "candidate"

    def key(self, toolchain_fingerprint: str) -> str:
        digest = hashlib.sha256()
        for part in (self.source, self.arch.value, self.header or "", self.header_name, self.entry_point or "",
                     " ".join(BASE_FLAGS), toolchain_fingerprint, str(COMPILE_RESULT_VERSION)):
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()


class BuildResult(BaseModel):
    """The outcome of one build; persisted as ``build.json`` beside its artifacts."""

    version: int = COMPILE_RESULT_VERSION
    ok: bool
    arch: Arch
    key: str
    command: list[str]
    log: str = Field(description="Everything nvcc, ptxas and the linker printed.")
    duration_s: float
    diagnosis: Diagnosis | None = None
    directory: str
    cached: bool = False

    def artifact(self, suffix: str) -> Path | None:
        """The kept artifact ending in ``suffix`` ('.so', '.ptx', '.cubin'), if the build made it."""
        path = Path(self.directory) / f"candidate{suffix}"
        return path if path.is_file() else None


def default_cache_dir() -> Path:
    root = os.environ.get("PTXBENCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ptxbench")
    return Path(root) / "builds"


def build(request: BuildRequest, *, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
          use_cache: bool = True) -> BuildResult:
    """Compile one candidate (or return the cached result of an identical build)."""
    toolchain = find_toolchain()
    nvcc = toolchain.path("nvcc")
    key = request.key(toolchain.fingerprint())
    directory = (cache_dir or default_cache_dir()) / key[:2] / key
    record = directory / "build.json"
    if use_cache and record.is_file():
        cached = BuildResult.model_validate_json(record.read_text())
        return cached.model_copy(update={"cached": True})

    directory.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the cache entry with its record inside, then rename the folder into place: an entry
    # is complete the moment it exists, and of two identical builds racing the second keeps the first's.
    staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=directory.parent))
    try:
        result = _run_nvcc(nvcc, request, staging, key, timeout_s)
        if result.diagnosis is not None and result.diagnosis.failure is CompileFailure.TIMEOUT:
            return result.model_copy(update={"directory": ""})  # never cached, no artifacts kept
        result = result.model_copy(update={"directory": str(directory)})
        write_atomic(staging / "build.json", result.model_dump_json(indent=1))
        if directory.exists() and use_cache and record.is_file():
            return BuildResult.model_validate_json(record.read_text()).model_copy(update={"cached": True})
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
        try:
            os.rename(staging, directory)
        except OSError:
            if record.is_file():
                return BuildResult.model_validate_json(record.read_text()).model_copy(update={"cached": True})
            raise
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run_nvcc(nvcc: str, request: BuildRequest, work: Path, key: str, timeout_s: float) -> BuildResult:
    source = work / "candidate.cu"
    source.write_text(request.source)
    command = [nvcc, *BASE_FLAGS, *request.arch.gencode, "--keep", "--keep-dir", str(work),
               "-o", str(work / "candidate.so")]
    if request.header is not None:
        (work / request.header_name).write_text(request.header)
        command += ["-I", str(work), "-include", request.header_name]
    command.append(str(source))
    started = time.monotonic()
    # nvcc runs cicc, ptxas and the host compiler as children: a new session lets a timeout end them all.
    proc = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout_s)
        returncode = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        partial, _ = proc.communicate()
        log = (partial or "") + f"\n[ptxbench] build stopped after {timeout_s:g} s"
        return BuildResult(ok=False, arch=request.arch, key=key, command=command, log=log,
                           duration_s=time.monotonic() - started, directory=str(work),
                           diagnosis=Diagnosis(failure=CompileFailure.TIMEOUT,
                                               summary=f"the build took longer than {timeout_s:g} s"))
    duration = time.monotonic() - started
    log = log.replace(f"{work}/", "")  # name files as the candidate knows them, not by the staging folder
    command = [part.replace(str(work), "<build>") for part in command]
    ptx = work / "candidate.ptx"
    diagnosis = diagnose(log, request.arch, ptx.read_text() if ptx.is_file() else None) if returncode != 0 else None
    if diagnosis is None and request.entry_point:
        diagnosis = _check_entry_point(work / "candidate.so", request.entry_point)
    return BuildResult(ok=diagnosis is None, arch=request.arch, key=key, command=command, log=log,
                       duration_s=duration, diagnosis=diagnosis, directory=str(work))


def _check_entry_point(shared_object: Path, entry_point: str) -> Diagnosis | None:
    """The entry point must be exported with C linkage (a mismatched signature yields a C++ overload)."""
    from ptxbench.static.elf import dynamic_symbols

    symbols = dynamic_symbols(shared_object)
    if entry_point in symbols:
        return None
    near = sorted(s for s in symbols if entry_point in s)
    detail = f" (found C++-mangled {near[0]}: the definition's parameters differ from the header's prototype)" if near else ""
    return Diagnosis(failure=CompileFailure.MISSING_ENTRY_POINT,
                     summary=f'no extern "C" function {entry_point!r} is exported{detail}; define it exactly as '
                     "declared in ptxbench_task.h",
                     first_error=f"missing entry point {entry_point}")


def build_many(requests: Iterable[BuildRequest], *, jobs: int | None = None, **kwargs: object) -> list[BuildResult]:
    """Build several candidates in parallel (nvcc is a subprocess, so threads suffice)."""
    requests = list(requests)
    workers = jobs or max(1, min(len(requests), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda r: build(r, **kwargs), requests))  # type: ignore[arg-type]
