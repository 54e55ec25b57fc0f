"""The integer tensors of a workload that live in ``safetensors`` blobs (page tables, offsets, routing).

Only index inputs are read: they fix a workload's layout (each sequence's length, each expert's load),
which the task keeps. Floating tensors in blobs are activations whose values do not change the work; the
evaluator draws its own. The ``safetensors`` and ``numpy`` packages are imported only here, on first use
(the ``traces`` extra), so importing definitions without blobs needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptxbench.tasks.flashinfer.schema import ImportProblem, InputSpec

INSTALL_HINT = "pip install 'ptxbench[traces]'"


class BlobMissing(ImportProblem):
    """A blob a workload names is not in the dataset folder (a download without blob/, or one cut short)."""


def _numpy_loader() -> Any:
    try:
        from safetensors.numpy import load_file
    except ImportError:
        raise ImportProblem(f"reading a workload's safetensors blobs needs the safetensors and numpy packages: "
                            f"{INSTALL_HINT}") from None
    return load_file


def blob_path(root: Path, spec: InputSpec) -> Path:
    """Where a ``safetensors`` input's file is: its path is relative to the dataset root (absolute kept)."""
    path = Path(spec.path or "")
    return path if path.is_absolute() else root / path


class BlobReader:
    """Reads each blob file once (a workload's inputs usually share one file)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[Path, dict[str, Any]] = {}

    def integers(self, where: str, spec: InputSpec) -> list[int]:
        """The flattened values of one integer tensor of a blob, as Python ints."""
        if not spec.path or not spec.tensor_key:
            raise ImportProblem(f"{where}: a safetensors input needs both path and tensor_key")
        path = blob_path(self.root, spec)
        if path not in self._files:
            if not path.is_file():
                raise BlobMissing(f"{where}: blob {spec.path} is not there (looked at {path}); download the "
                                    "dataset's blob/ folder beside definitions/ and workloads/")
            load_file = _numpy_loader()
            try:
                self._files[path] = load_file(str(path))
            except Exception as exc:  # noqa: BLE001 - a damaged blob is the dataset's problem, named
                raise ImportProblem(f"{where}: blob {spec.path} cannot be read: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0][:200]}") from None
        tensors = self._files[path]
        if spec.tensor_key not in tensors:
            raise ImportProblem(f"{where}: blob {spec.path} has no tensor {spec.tensor_key!r} "
                                f"(it has {', '.join(sorted(tensors)) or 'none'})")
        array = tensors[spec.tensor_key]
        if array.dtype.kind not in "iu":
            raise ImportProblem(f"{where}: tensor {spec.tensor_key!r} of {spec.path} is {array.dtype}, not an "
                                "integer tensor")
        return [int(v) for v in array.reshape(-1).tolist()]
