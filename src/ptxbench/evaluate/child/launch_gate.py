"""A gate that holds a timed stream until the host has enqueued the whole timed call.

A CUDA-event interval measures GPU work only if the GPU never waits for the host between the start
and end events. Launching is asynchronous, but when the host thread is slowed down while it enqueues
the call (a busy CPU, the driver's locks held by another process opening a context, a Python thread
switch) the GPU sits idle inside the interval and the call reads slower. A fixed spin kernel before the
start event hides only the delays shorter than its spin.

The gate is a one-thread kernel, written in PTX and loaded through the CUDA driver, that spins on a flag
in pinned host memory. It is queued before the start event; the host enqueues the start event, the call
and the end event, and only then sets the flag. Whatever the host's delays, the GPU starts the timed
interval only when all of it is queued. The kernel gives up after a deadline (a call that waits for the
GPU itself, e.g. a synchronize inside the candidate's entry point, would otherwise wait for the gate
forever) and says so; the caller then stops using the gate for that process.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ptxbench.evaluate.child.cuda_driver import Driver, DriverError

KERNEL_NAME = "ptxbench_launch_gate"
# Spins on flags[0] until it is non-zero; past the deadline it sets flags[1] and returns. Generic loads
# and stores, so the pinned host page is reached through the unified address space; %globaltimer in ns.
GATE_PTX = f"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry {KERNEL_NAME}(
    .param .u64 flags_address,
    .param .u64 deadline_ns
)
{{
    .reg .pred %p<3>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<6>;

    ld.param.u64 %rd1, [flags_address];
    ld.param.u64 %rd2, [deadline_ns];
    mov.u64 %rd3, %globaltimer;
    add.u64 %rd4, %rd3, %rd2;
WAIT:
    ld.volatile.u32 %r1, [%rd1];
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p2, %rd5, %rd4;
    @%p2 bra WAIT;
    mov.u32 %r2, 1;
    st.volatile.u32 [%rd1+4], %r2;
DONE:
    ret;
}}
"""
DEADLINE_NS = 50_000_000  # far above any host enqueue (microseconds), far below a call's time limit


class GateUnavailable(RuntimeError):
    """The gate's kernel could not be loaded (no driver entry point, a JIT failure)."""


class LaunchGate:
    """``close(stream)`` before the start event, ``open()`` after the end event, ``timed_out()`` after
    the end event has completed. Needs the CUDA primary context that torch uses, current on this thread."""

    def __init__(self, torch: Any) -> None:
        torch.cuda.init()
        try:
            self._driver = Driver()
            self._driver.use_primary_context(torch.cuda.current_device())  # torch's context
        except DriverError as exc:
            raise GateUnavailable(str(exc)) from exc
        self._module, self._function = ctypes.c_void_p(), ctypes.c_void_p()
        self._check("cuModuleLoadData", ctypes.byref(self._module), ctypes.c_char_p(GATE_PTX.encode()))
        self._check("cuModuleGetFunction", ctypes.byref(self._function), self._module, KERNEL_NAME.encode())
        # [release, timed out]; pinned, so mapped into the GPU's address space at the same address
        self._flags = torch.zeros(2, dtype=torch.int32, pin_memory=True)
        base = self._flags.data_ptr()
        self._release = ctypes.c_int32.from_address(base)
        self._timed_out = ctypes.c_int32.from_address(base + 4)
        self._arguments = (ctypes.c_uint64(base), ctypes.c_uint64(DEADLINE_NS))
        self._parameters = (ctypes.c_void_p * 2)(*(ctypes.cast(ctypes.byref(a), ctypes.c_void_p)
                                                   for a in self._arguments))

    def _check(self, name: str, *args: object) -> None:
        """A driver call whose failure means the gate cannot be used."""
        try:
            self._driver.call(name, *args)
        except DriverError as exc:
            raise GateUnavailable(str(exc)) from exc

    def close(self, stream: Any) -> None:
        """Queue the gate on ``stream`` (the previous gate on it must have passed)."""
        self._release.value = 0
        self._timed_out.value = 0
        self._check("cuLaunchKernel", self._function, 1, 1, 1, 1, 1, 1, 0,
                    ctypes.c_void_p(stream.cuda_stream), self._parameters, None)

    def open(self) -> None:
        self._release.value = 1

    def timed_out(self) -> bool:
        """Whether the last gate gave up waiting (read once its stream has passed it)."""
        return self._timed_out.value != 0
