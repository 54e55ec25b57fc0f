"""``ptxbench doctor``: what this machine can do, what is missing, and how to get it."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess

from pydantic import BaseModel, computed_field

from ptxbench.toolchain.discover import INSTALL_HINTS, Tool, cuda_include_dir, find_toolchain
from ptxbench.toolchain.tools import query_gpus


class Check(BaseModel):
    name: str
    ok: bool
    detail: str
    fix: str | None = None


class DoctorReport(BaseModel):
    python: str
    ptxbench: str
    tools: list[Tool]
    checks: list[Check]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def can_check(self) -> bool:
        """The static path (ptxbench check) works."""
        return all(c.ok for c in self.checks if c.name in ("nvcc", "ptxas", "cuobjdump", "cuda headers"))


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu() -> Check:
    try:
        rows = query_gpus(["name", "driver_version", "compute_cap"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name="gpu", ok=False, detail=f"nvidia-smi failed: {exc}")
    if rows is None:
        return Check(name="gpu", ok=False, detail="no nvidia-smi: no GPU visible",
                     fix="static checks work without a GPU; evaluation needs an NVIDIA GPU and driver")
    return Check(name="gpu", ok=bool(rows), detail="\n".join(rows) or "nvidia-smi lists no GPU")


def run_doctor() -> DoctorReport:
    toolchain = find_toolchain()
    checks = [
        Check(name=name, ok=tool.path is not None,
              detail=f"{tool.path} ({tool.version or 'version unknown'}, via {tool.found_via})" if tool.path else "not found",
              fix=None if tool.path else INSTALL_HINTS[name])
        for name, tool in toolchain.tools.items()
    ]
    include = cuda_include_dir(toolchain.tools["nvcc"].path) if toolchain.tools["nvcc"].path else None
    has_headers = include is not None and (include / "cuda_runtime.h").is_file() and (include / "cuda.h").is_file()
    checks.append(Check(name="cuda headers", ok=has_headers, detail=str(include) if include else "not found",
                        fix=None if has_headers else "install the CUDA toolkit headers (cuda.h, cuda_runtime.h)"))
    host = shutil.which("g++") or shutil.which("c++")
    checks.append(Check(name="host compiler", ok=host is not None, detail=host or "not found",
                        fix=None if host else "install g++ (nvcc needs a host C++ compiler)"))
    torch_version = _package_version("torch")
    checks.append(Check(name="torch", ok=torch_version is not None, detail=torch_version or "not installed",
                        fix=None if torch_version else "pip install torch (references and evaluation)"))
    checks.append(_gpu())
    return DoctorReport(python=platform.python_version(), ptxbench=_package_version("ptxbench") or "source tree",
                        tools=list(toolchain.tools.values()), checks=checks)
