"""The CUDA driver API through ctypes, for the two places the harness needs it directly: the launch
gate (a PTX kernel torch cannot load) and ncu's profiled program (which must not start torch).

Standard library only: the profiled program (``profile_one.py``) loads this file by its path.
"""

from __future__ import annotations

import ctypes


CUDA_ERROR_OUT_OF_MEMORY = 2  # CUresult, as the driver reports it
CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaError (runtime API), as an entry point returns it


class DriverError(RuntimeError):
    """A driver call returned an error (its CUresult is ``code`` and in the message), or there is no
    driver library (``code`` None)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class Driver:
    """``libcuda``, with every call checked."""

    def __init__(self) -> None:
        try:
            self._library = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise DriverError(f"no CUDA driver library: {exc}") from exc

    def call(self, name: str, *args: object) -> None:
        code = getattr(self._library, name)(*args)
        if code != 0:
            raise DriverError(f"{name} failed with CUresult {code}", code)

    def use_primary_context(self, ordinal: int) -> None:
        """Make device ``ordinal``'s primary context (the one the CUDA runtime, and so torch, uses)
        current on this thread, initialising the driver if nothing has yet."""
        self.call("cuInit", 0)
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self.call("cuDeviceGet", ctypes.byref(device), ordinal)
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        self.call("cuCtxSetCurrent", context)
