"""Build a candidate with harness-owned flags: a shared object for ctypes, plus its PTX and cubin.

One nvcc call (``--keep``) yields all three, so the static report reads exactly what will run. Builds
run in a subprocess with a time limit, are cached by a content hash of everything that affects the
output, and can run several at once (``build_many``). Each cache entry is sealed with the machine's
key (``build_seal``; see ``_reuse``): an entry changed by anyone else is discarded and built again. An entry
keeps only what is read back (not nvcc's intermediates), and the cache is kept within a size limit
(``build_cache``). The record of a build, ``BuildResult``, is defined in ``records.build``.
"""

from __future__ import annotations

import hashlib
import logging
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
from ptxbench.contract.signature import SOURCE_NAME
from ptxbench.paths import default_cache_dir
from ptxbench.records.build import COMPILE_RESULT_VERSION, BuildResult, CompileFailure, Diagnosis
from ptxbench.toolchain import build_cache, build_seal
from ptxbench.toolchain.diagnose import diagnose
from ptxbench.toolchain.discover import find_toolchain
from ptxbench.toolchain.entry_point import check_entry_point
from ptxbench.toolchain.priority import lower_this_thread

DEFAULT_TIMEOUT_S = 120.0
_log = logging.getLogger(__name__)

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


def build(request: BuildRequest, *, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
          use_cache: bool = True) -> BuildResult:
    """Compile one candidate (or return the cached result of an identical build, once its seal holds). A new
    entry brings the cache back within its size limit (``build_cache.after_build``)."""
    toolchain = find_toolchain()
    nvcc = toolchain.path("nvcc")
    key = request.key(toolchain.fingerprint())
    root = cache_dir or default_cache_dir()
    directory = root / key[:2] / key
    if use_cache and (cached := _reuse(directory, key)) is not None:
        return cached

    directory.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the cache entry with its record inside, then rename the folder into place: an entry
    # is complete the moment it exists, and of two identical builds racing the second keeps the first's.
    staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=directory.parent))
    try:
        result = _run_nvcc(nvcc, request, staging, key, timeout_s)
        if result.diagnosis is not None and result.diagnosis.failure is CompileFailure.TIMEOUT:
            return result.model_copy(update={"directory": ""})  # never cached, no artifacts kept
        _drop_intermediates(staging, request)
        result = result.model_copy(update={"directory": str(directory)})
        write_atomic(staging / build_seal.BUILD_RECORD, result.model_dump_json(indent=1))
        sealed = build_seal.seal(staging)
        if directory.exists() and use_cache and (cached := _reuse(directory, key)) is not None:
            return cached
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
        try:
            os.rename(staging, directory)
        except OSError:
            if (cached := _reuse(directory, key)) is not None:
                return cached
            raise
        build_seal.remember(directory, sealed)  # only now: an entry that another build put in place first is not ours
        _keep_within_limit(root)
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _drop_intermediates(staging: Path, request: BuildRequest) -> None:
    """Keep what a build's reader uses (the source, the header, the shared object, PTX and cubin); nvcc's
    ``--keep`` intermediates (preprocessed sources, objects: most of an entry's ~6 MB) go."""
    kept = {"candidate.cu", request.header_name, *build_seal.REUSED_ARTIFACTS}
    for item in staging.iterdir():
        if item.name not in kept and (item.is_file() or item.is_symlink()):
            item.unlink(missing_ok=True)


def _keep_within_limit(root: Path) -> None:
    try:
        removed = build_cache.after_build(root)
    except build_cache.CacheSizeError as exc:
        _log.warning("build cache not limited: %s", exc)
        return
    if removed is not None:
        _log.info("build cache: %d oldest entries removed to stay within its size limit", removed.removed)


def _reuse(directory: Path, key: str) -> BuildResult | None:
    """The cached result in ``directory`` if its seal holds; a broken entry is logged and removed."""
    if not (directory / build_seal.BUILD_RECORD).is_file():
        return None
    result, problem = build_seal.checked_record(directory, key)
    if result is None:
        _log.warning("build cache entry %s %s: discarded, it is built again", directory, problem)
        shutil.rmtree(directory, ignore_errors=True)
        return None
    build_cache.mark_used(directory)
    return result.model_copy(update={"cached": True})


def _run_nvcc(nvcc: str, request: BuildRequest, work: Path, key: str, timeout_s: float) -> BuildResult:
    source = work / SOURCE_NAME
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
        diagnosis = check_entry_point(work / "candidate.so", request.entry_point, request.header_name)
    return BuildResult(ok=diagnosis is None, arch=request.arch, key=key, command=command, log=log,
                       duration_s=duration, diagnosis=diagnosis, directory=str(work))


def build_many(requests: Iterable[BuildRequest], *, jobs: int | None = None, **kwargs: object) -> list[BuildResult]:
    """Build several candidates in parallel (nvcc is a subprocess, so threads suffice), at the lower priority
    of builds (``priority``): a GPU's timing beside them keeps its CPUs."""
    requests = list(requests)
    workers = jobs or max(1, min(len(requests), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers, initializer=lower_this_thread) as pool:
        return list(pool.map(lambda r: build(r, **kwargs), requests))  # type: ignore[arg-type]
