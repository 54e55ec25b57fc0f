"""``python -I profile_one.py PLAN_JSON``: the program ncu profiles, in the standard library alone.

It opens the GPU through the CUDA driver API (``libcuda``, present wherever a GPU is), copies the
inputs the harness drew into device memory, calls the candidate once to warm up, then once more
between cuProfilerStart and cuProfilerStop, so only the candidate's own launches are measured.
Neither torch nor ptxbench is imported: starting Python with torch took ~6 s of the ~7 s stage on
an H200, and nothing of that is needed to launch one call.

The plan (written by ``profiling.profiled_program``) lists the entry point's arguments in order: inputs
(a file of raw bytes each), outputs (a byte count), sizes (an integer) and the stream, and the folders
(``protect``: ncu's report folder, the plan's, and what a worker protects) made read-only for this
process, and the files (``hide``: the caches' signing key) made unreadable, before the candidate's
library is loaded, where the machine allows. A plan with ``probe`` runs no candidate: it profiles the
harness's own one-warp kernel, so the harness learns whether ncu may read the counters here from code
that is its own, never from a candidate's output.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import json
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import ModuleType
from typing import Any


# Printed when the GPU's memory ran out (a device buffer here, or the candidate's cudaMalloc): the harness
# then profiles again with the GPU to itself, since another evaluation beside this one may hold the memory.
OUT_OF_MEMORY_MARK = "ptxbench-profile: out of GPU memory"
PROTECTION_MARK = "ptxbench-profile: protection:"  # the line that says which folders were made read-only

PROBE_KERNEL = "ptxbench_counter_probe"
# One warp, each thread storing its index plus one: a kernel of known instructions (a global store, an
# add) for the counter-permission probe. Written in PTX so this program needs no compiler.
PROBE_PTX = f"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry {PROBE_KERNEL}(
    .param .u64 out
)
{{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    add.u32 %r2, %r1, 1;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}}
"""


def _device_buffer(driver: Any, size: int) -> ctypes.c_uint64:
    pointer = ctypes.c_uint64()
    driver.call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(max(size, 1)))
    return pointer


# The harness's modules this program uses, each on the standard library alone: their folders under
# ``ptxbench/evaluate``, beside this program's own (``child``).
_STANDALONE = {"cuda_driver": "child", "confinement": "isolation", "gpu_lock": "isolation", "processes": "isolation"}


@functools.cache
def _standalone(name: str) -> ModuleType:
    """A module of ``_STANDALONE``, loaded by its path (this program imports nothing of ptxbench), once."""
    path = Path(__file__).parent.parent / _STANDALONE[name] / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"ptxbench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alone(plan: dict) -> bool:
    return bool(plan.get("gpu_lock") and plan["gpu_lock"].get("alone"))


def _gpu_lock(plan: dict) -> AbstractContextManager:
    """The GPU's lock when the plan names it: shared, or exclusive when the plan asks to run alone. The
    evaluator does not hold it for ncu's start-up, nor does this program (shared) for opening the GPU and
    allocating, which run no kernel (as in a worker's start-up). Copying the inputs in, the candidate's
    code and the profiled calls run under it."""
    if not plan.get("gpu_lock"):
        return nullcontext()
    lock = _standalone("gpu_lock").GpuLock(plan["gpu_lock"]["key"], Path(plan["gpu_lock"]["folder"]))
    return lock.exclusive("ncu alone") if _alone(plan) else lock.shared("ncu")


def _protect(plan: dict) -> str:
    """Make the plan's ``protect`` folders read-only for this process and what it starts (through
    ``confinement.protect_paths``), before any candidate code is loaded; the mode achieved, in one line.
    Where the machine refuses it (or the module is missing), the profile still runs, unprotected: the
    report is read by the harness afterwards and a candidate cannot reach it before ncu writes it."""
    paths = [str(path) for path in plan.get("protect", [])]
    hidden = [str(path) for path in plan.get("hide", [])]
    if not paths and not hidden:
        return "nothing to protect"
    try:
        protect_paths = _standalone("confinement").protect_paths
        return str(protect_paths(paths, hidden=hidden) if hidden else protect_paths(paths))
    except (AttributeError, ImportError, OSError) as exc:
        return f"not isolated: {type(exc).__name__}: {exc}"


def main(plan_path: str) -> int:
    plan = json.loads(open(plan_path).read())
    print(PROTECTION_MARK, _protect(plan), file=sys.stderr, flush=True)
    if plan.get("probe"):
        return _probe(plan)
    processes = _standalone("processes")
    processes.become_subreaper()  # what the candidate starts and abandons ends with this program
    try:
        # Alone, the allocations wait for the lock too, so that no other evaluation holds memory meanwhile.
        opened = None if _alone(plan) else _open(plan)
        with _gpu_lock(plan):
            try:
                return _profile(plan, *(opened or _open(plan)))
            finally:  # still under the lock
                processes.kill_descendants(os.getpid())
    except _standalone("cuda_driver").DriverError as exc:
        if exc.code == _standalone("cuda_driver").CUDA_ERROR_OUT_OF_MEMORY:
            print(f"{OUT_OF_MEMORY_MARK} ({exc})", file=sys.stderr)
            return 3
        raise


def _probe(plan: dict) -> int:
    """Launch the probe kernel once between cuProfilerStart and cuProfilerStop, under the GPU's lock."""
    driver = _standalone("cuda_driver").Driver()
    driver.use_primary_context(0)
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    driver.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(PROBE_PTX.encode()))
    driver.call("cuModuleGetFunction", ctypes.byref(function), module, PROBE_KERNEL.encode())
    out = _device_buffer(driver, 32 * 4)
    parameters = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p))
    with _gpu_lock(plan):
        driver.call("cuProfilerStart")
        driver.call("cuLaunchKernel", function, 1, 1, 1, 32, 1, 1, 0, None, parameters, None)
        driver.call("cuCtxSynchronize")
        driver.call("cuProfilerStop")
    return 0


def _open(plan: dict) -> tuple[Any, ctypes.c_void_p, list[tuple[ctypes.c_uint64, bytearray | None]]]:
    """The CUDA driver (``cuda_driver.Driver``) with the GPU opened (the primary context, which the
    runtime uses), a stream, and a device buffer for each pointer argument with the bytes to copy into
    it (None for outputs). No kernel runs here."""
    driver = _standalone("cuda_driver").Driver()
    driver.use_primary_context(0)
    stream = ctypes.c_void_p()
    driver.call("cuStreamCreate", ctypes.byref(stream), 0)
    buffers: list[tuple[ctypes.c_uint64, bytearray | None]] = []
    for argument in plan["arguments"]:
        if argument["kind"] == "input":
            with open(argument["file"], "rb") as source:
                data = bytearray(source.read())
            buffers.append((_device_buffer(driver, len(data)), data))
        elif argument["kind"] == "output":
            buffers.append((_device_buffer(driver, argument["bytes"]), None))
    return driver, stream, buffers


def _profile(plan: dict, driver: Any, stream: ctypes.c_void_p,
             buffers: list[tuple[ctypes.c_uint64, bytearray | None]]) -> int:
    arguments: list[object] = []
    types: list[object] = []
    pointers = iter(buffers)
    for argument in plan["arguments"]:
        kind = argument["kind"]
        if kind in ("input", "output"):
            pointer, data = next(pointers)
            if data:
                host = (ctypes.c_char * len(data)).from_buffer(data)
                driver.call("cuMemcpyHtoD_v2", pointer, host, ctypes.c_size_t(len(data)))
            arguments.append(pointer.value)
            types.append(ctypes.c_void_p)
        elif kind == "size":
            arguments.append(int(argument["value"]))
            types.append(ctypes.c_int64)
        else:
            arguments.append(stream.value)
            types.append(ctypes.c_void_p)
    for dependency in plan.get("preload", []):  # the CUDA runtime the candidate links, as the worker has it
        ctypes.CDLL(dependency, mode=ctypes.RTLD_GLOBAL)
    library = ctypes.CDLL(plan["library"], mode=ctypes.RTLD_LOCAL)
    entry = getattr(library, plan["entry_point"])
    entry.argtypes = types
    entry.restype = ctypes.c_int
    for profiled in (False, True):
        if profiled:
            driver.call("cuProfilerStart")
        code = entry(*arguments)
        driver.call("cuCtxSynchronize")
        if profiled:
            driver.call("cuProfilerStop")
        if code != 0:
            print(f"the entry point returned cudaError {code}", file=sys.stderr)
            if code == _standalone("cuda_driver").CUDA_ERROR_MEMORY_ALLOCATION:
                print(OUT_OF_MEMORY_MARK, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
