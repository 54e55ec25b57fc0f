"""Say what failed where when a candidate's call ends in a CUDA error.

"timing: unspecified launch failure" names neither the kernel nor the access: the error is sticky, the
worker's context is lost, and nothing more can be learnt in that process. So the candidate is run once more,
on the failing workload's sizes, in the ncu stage's standalone program (``profile_one.py``: fresh inputs
drawn with the trials' distributions, the harness's folders read-only, the signing key hidden) under
``compute-sanitizer --tool memcheck``, bounded in time, and the sanitizer's first finding (kernel, access,
thread and block) is appended to the evaluation's message.

The finding is read only from the log file the sanitizer writes into a folder of the harness's that the
candidate's process sees read-only; the program's own output (the candidate's prints) is discarded, so text
shaped like a sanitizer report cannot reach the message. The step is a diagnosis only: it never changes a
status, and where the tool is missing, fails or runs out of time the message stays as it was.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
from contextlib import suppress
from pathlib import Path

from ptxbench.tasks.model import Task
from ptxbench.toolchain.discover import find_toolchain

SANITIZER = "compute-sanitizer"
TOOL = "memcheck"
# memcheck of one warm-up and one measured call of the largest GEMM workload (8192^3) stays far below this; a
# hang (a deadlocked kernel) must not hold the lane for the full call timeout again.
DIAGNOSIS_TIMEOUT_S = 120.0
LOG_NAME = "sanitizer.log"
FINDING_LINES = 4  # the error's headline, where (kernel), who (thread, block), the address
FINDING_CHARS = 600
# The error texts the CUDA runtime gives for a failed kernel or device call (cudaGetErrorString): a failure
# of another kind (a Python exception of the worker, a lost process) is not diagnosed by a sanitizer.
CUDA_ERROR_TEXTS = (
    "unspecified launch failure", "illegal memory access", "illegal address", "misaligned address",
    "illegal instruction", "invalid program counter", "device-side assert", "hardware stack error",
    "uncorrectable ECC", "launch timed out", "cluster", "CUDA error", "cudaError",
)
_PREFIX = re.compile(r"^=+ ?")
_NOT_A_FINDING = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "Saved host backtrace", "Host Frame")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def is_cuda_error(message: str) -> bool:
    """Whether a failure's message names a CUDA error, the failures a sanitizer can explain."""
    lowered = message.lower()
    return any(text.lower() in lowered for text in CUDA_ERROR_TEXTS)


def with_diagnosis(message: str, task: Task, sizes: dict[str, int], shared_object: Path,
                   timeout_s: float = DIAGNOSIS_TIMEOUT_S) -> str:
    """``message`` with "; compute-sanitizer memcheck: <first finding>" appended when it names a CUDA error
    and the sanitizer is installed and ends in time; ``message`` unchanged otherwise. The caller holds the
    GPU's lock (shared or exclusive) for the duration: the program started here takes none itself."""
    if not is_cuda_error(message) or not find_toolchain().has(SANITIZER):
        return message
    finding = sanitizer_finding(task, sizes, shared_object, timeout_s)
    return message if finding is None else f"{message}; {SANITIZER} {TOOL}: {finding}"


def sanitizer_finding(task: Task, sizes: dict[str, int], shared_object: Path,
                      timeout_s: float = DIAGNOSIS_TIMEOUT_S) -> str | None:
    """The sanitizer's first finding on one call of the candidate at ``sizes`` ("no error found" when it
    found none), or None when the sanitizer could not say (missing, timed out, wrote no log)."""
    from ptxbench.evaluate.proof.profiling import Folders

    toolchain = find_toolchain()
    if not toolchain.has(SANITIZER):
        return None
    sanitizer = toolchain.path(SANITIZER)
    with Folders() as folders:
        program = sanitized_program(task, sizes, shared_object, folders.plan, protect=[folders.plan, folders.report])
        log = folders.report / LOG_NAME
        if not _ran_in_time(_sanitizer_command(sanitizer, log, program), folders.home, timeout_s):
            return None
        if not log.is_file():
            return None
        return first_finding(log.read_text(errors="replace"))


def sanitized_program(task: Task, sizes: dict[str, int], shared_object: Path, folder: Path,
                      protect: list[Path]) -> list[str]:
    """``profile_one.py`` on a plan for ``sizes`` (inputs drawn on the CPU with the trials' distributions),
    written into ``folder``, with no GPU lock named: the evaluator already holds it (exclusively while
    timing), and the program waiting for it would wait forever."""
    from ptxbench.evaluate.proof.profiling import _cuda_runtime, _program, plan_arguments
    from ptxbench.tasks.reference import make_inputs

    inputs = make_inputs(task, sizes, secrets.randbits(62), device="cpu")
    arguments = plan_arguments(task, sizes, inputs, folder)
    program = _program(folder, {"library": str(shared_object), "entry_point": task.entry_point,
                                "preload": _cuda_runtime(), "arguments": arguments}, False, protect)
    plan_path = Path(program[-1])
    plan = json.loads(plan_path.read_text())
    plan_path.write_text(json.dumps({**plan, "gpu_lock": None}))
    return program


def _sanitizer_command(sanitizer: str, log: Path, program: list[str]) -> list[str]:
    return [sanitizer, "--tool", TOOL, "--log-file", str(log), "--print-limit", "8", *program]


def _ran_in_time(command: list[str], home: Path, timeout_s: float) -> bool:
    """Run ``command`` in its own session with the profiled program's environment, its output discarded;
    False when it did not end within ``timeout_s`` (then it and what it started are killed)."""
    from ptxbench.evaluate.proof.profiling import program_environment

    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=program_environment(home), cwd=home,
                                   start_new_session=True)
    except OSError:
        return False
    try:
        process.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        with suppress(ProcessLookupError):  # whatever the candidate's code left running ends too
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def first_finding(log_text: str) -> str:
    """The first error the sanitizer's log reports, its first FINDING_LINES lines joined with " | " (the
    "========= " prefix dropped, printable ASCII only, at most FINDING_CHARS), or "no error found"."""
    block: list[str] = []
    for raw in log_text.splitlines():
        line = _UNPRINTABLE.sub("", _PREFIX.sub("", raw)).strip()
        if not line or line.startswith(_NOT_A_FINDING):
            if block:
                break
            continue
        block.append(line)
        if len(block) == FINDING_LINES:
            break
    if not block:
        return "no error found"
    finding = " | ".join(block)
    return finding if len(finding) <= FINDING_CHARS else finding[:FINDING_CHARS - 3] + "..."
