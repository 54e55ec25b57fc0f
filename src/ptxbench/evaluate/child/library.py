"""Load a built candidate with ctypes and call its entry point on PyTorch tensors.

The argument list is the one ``contract.signature.parameters`` defines, so the caller and the
generated header cannot drift apart.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ptxbench.contract.signature import parameters
from ptxbench.tasks.model import Task

if TYPE_CHECKING:
    import torch


class CandidateLibrary:
    """One loaded shared object and its typed entry point."""

    def __init__(self, shared_object: Path, task: Task) -> None:
        self.task = task
        self._handle = ctypes.CDLL(str(shared_object), mode=ctypes.RTLD_LOCAL)
        self._entry = getattr(self._handle, task.entry_point)
        self._params = parameters(task)
        self._entry.argtypes = [ctypes.c_int64 if p.kind == "size" else ctypes.c_void_p for p in self._params]
        self._entry.restype = ctypes.c_int

    def __call__(self, inputs: Mapping[str, "torch.Tensor"], outputs: Mapping[str, "torch.Tensor"],
                 sizes: Mapping[str, int], stream: "torch.cuda.Stream") -> int:
        """Launch on ``stream``; returns the candidate's cudaError_t (0 = success). Does not synchronise."""
        args: list[int | None] = []
        for param in self._params:
            if param.kind == "input":
                args.append(inputs[param.name].data_ptr())
            elif param.kind == "output":
                args.append(outputs[param.name].data_ptr())
            elif param.kind == "size":
                args.append(int(sizes[param.name]))
            else:
                args.append(stream.cuda_stream)
        return int(self._entry(*args))
